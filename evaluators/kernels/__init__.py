"""The ``kernel`` kind: Triton kernels in the KernelBench form, checked against float64.

``evaluator`` (the trusted side), ``child`` (entry functions run in the sandbox next to the
candidate), ``audit`` (the runtime torch audit), ``static_checks`` (AST rules) and
``kernelbench`` (``optimizer import-kernelbench``). docs/kernels.md has the details.

The evaluator's names are loaded on first use: they import torch, and the command line
imports this package to build its parser.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NO_GPU", "NO_GPU_UNCHECKED", "KernelConfig", "KernelEvaluator", "load_reference"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from evaluators.kernels import evaluator

        return getattr(evaluator, name)
    raise AttributeError(f"module 'evaluators.kernels' has no attribute {name!r}")
