"""Imported by the warm sandbox process (the zygote) before it forks a kernel candidate's
process: what every candidate's check would otherwise import on its first call.

Entering a ``TorchDispatchMode`` for the first time makes torch import a large part of
itself and sympy (815 modules, 1.6 s on 2 CPU cores; measured with torch 2.13), and the
runtime audit enters one around each checked call, so every candidate paid it inside its
first call. Done here once per sandbox, with plain modes on a CPU tensor: no CUDA context is
created (the zygote must create none), nothing of the candidate exists yet, and the audit's
trip wires, installed later in the candidate's own process, then cover these modules too.
"""

from __future__ import annotations

import safetensors.torch  # noqa: F401  (the check's file format)
import torch
import triton.runtime.interpreter  # noqa: F401  (the audit collects its launch code)
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import evaluators.kernels.audit  # noqa: F401
import evaluators.kernels.child  # noqa: F401
import evaluators.numerics  # noqa: F401
import evaluators.timing  # noqa: F401


class _Pass(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        return func(*args, **(kwargs or {}))


class _PassFunction(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        return func(*args, **(kwargs or {}))


with torch.no_grad(), _PassFunction(), _Pass():
    torch.empty(4).fill_(1.0).sum()
