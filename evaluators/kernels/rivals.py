"""Production kernels a team would use instead of the night's program: the rivals.

Each rival is a module with its target reference's constructor and ``forward`` (so the
bench and the end-to-end gate use it where they use ``ModelNew``), wrapping a library's
forward kernel: Liger-Kernel (Triton; RMSNorm, LayerNorm, softmax, cross-entropy),
FlashInfer (CUDA, compiled on first use; RMSNorm, LayerNorm, softmax) and QuACK (CuTe DSL;
RMSNorm, softmax, cross-entropy). The libraries are optional (``pip install
'.[rivals]'``): a rival that is not installed, or cannot run on a device, is reported with
the reason (:func:`unavailable`), never silently dropped. GEMM has no rival here: cuBLAS,
which the bench times as ``eager``, is what production runs for ``relu(A @ B + bias)``.

Only forward passes are called, on tensors that do not require gradients (Liger's
cross-entropy writes its gradient into the logits otherwise).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class Rival:
    target: str
    name: str  # "liger", "flashinfer", "quack"
    library: str  # the import name
    package: str  # the package index's name
    devices: tuple[str, ...]  # "cpu" where it runs in the Triton interpreter
    forward: Callable[..., Any]  # (module, *inputs) -> output, the library imported
    cpu_why: str = ""  # why it cannot run in the Triton interpreter, where it cannot
    absent_why: str = ""  # what keeps it off a machine without a package index, if known


def _liger(path: str, name: str) -> Any:
    return getattr(importlib.import_module(f"liger_kernel.ops.{path}"), name)


def _rms_liger(m: Any, x: torch.Tensor) -> torch.Tensor:
    fn = _liger("rms_norm", "LigerRMSNormFunction")
    # "gemma" casting: x and the weight in float32, as the reference (offset 0: y = x * w)
    return fn.apply(x, m.weight, m.eps, 0.0, "gemma", False)


def _rms_flashinfer(m: Any, x: torch.Tensor) -> torch.Tensor:
    norm = importlib.import_module("flashinfer.norm")
    x2 = x.reshape(-1, x.shape[-1])
    return norm.rmsnorm(x2, m.weight, m.eps).view(x.shape)


def _rms_quack(m: Any, x: torch.Tensor) -> torch.Tensor:
    mod = importlib.import_module("quack.rmsnorm")
    return mod.rmsnorm(x, m.weight, eps=m.eps)


def _ln_liger(m: Any, x: torch.Tensor) -> torch.Tensor:
    fn = _liger("layer_norm", "LigerLayerNormFunction")
    return fn.apply(x, m.weight, m.bias, m.eps)


def _ln_flashinfer(m: Any, x: torch.Tensor) -> torch.Tensor:
    norm = importlib.import_module("flashinfer.norm")
    x2 = x.reshape(-1, x.shape[-1])
    # its LayerNorm takes float32 weight and bias (a cast of 2 x hidden elements a call)
    return norm.layernorm(x2, m.weight.float(), m.bias.float(),
                          m.eps).view(x.shape)


def _sm_liger(m: Any, x: torch.Tensor) -> torch.Tensor:
    return _liger("softmax", "LigerSoftmaxFunction").apply(x)


def _sm_flashinfer(m: Any, x: torch.Tensor) -> torch.Tensor:
    sampling = importlib.import_module("flashinfer.sampling")
    return sampling.softmax(x)


def _sm_quack(m: Any, x: torch.Tensor) -> torch.Tensor:
    return importlib.import_module("quack.softmax").softmax(x)


def _ce_liger(m: Any, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    fn = _liger("cross_entropy", "LigerCrossEntropyFunction")
    out = fn.apply(logits, targets, None, -100, 0.0, 0.0, "none", None, False, False, False)
    return out[0]


def _ce_quack(m: Any, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    mod = importlib.import_module("quack.cross_entropy")
    return mod.cross_entropy(logits, targets, reduction="none")


_CPU = ("cpu", "cuda")
# wheel sizes on the package index, 2026-12-05 (CPython 3.12, x86-64 Linux)
_FLASHINFER_ABSENT = ("flashinfer-python 0.7.2.post1 is a 62 MB wheel and needs the CUTLASS "
                      "DSL (nvidia-cutlass-dsl-libs-cu13 4.8.1, 92 MB), cuda-python and "
                      "apache-tvm-ffi: over the 64 MiB a GPU run's working tree carries")
_QUACK_ABSENT = ("quack-kernels 0.6.5 needs the CUTLASS DSL (nvidia-cutlass-dsl-libs-cu13 "
                 "4.8.1, a 92 MB wheel): over the 64 MiB a GPU run's working tree carries")
# measured with liger-kernel 0.8.5 and triton 3.8 (TRITON_INTERPRET=1)
_LIGER_NORM_CPU = ("its norm kernels call .to() on the scalar eps, which the Triton "
                   "interpreter refuses (AttributeError); runs on CUDA only")
RIVALS: tuple[Rival, ...] = (
    Rival("rmsnorm", "liger", "liger_kernel", "liger-kernel", ("cuda",), _rms_liger,
          _LIGER_NORM_CPU),
    Rival("rmsnorm", "flashinfer", "flashinfer", "flashinfer-python", ("cuda",), _rms_flashinfer,
          absent_why=_FLASHINFER_ABSENT),
    Rival("rmsnorm", "quack", "quack", "quack-kernels", ("cuda",), _rms_quack,
          absent_why=_QUACK_ABSENT),
    Rival("layernorm", "liger", "liger_kernel", "liger-kernel", ("cuda",), _ln_liger,
          _LIGER_NORM_CPU),
    Rival("layernorm", "flashinfer", "flashinfer", "flashinfer-python", ("cuda",), _ln_flashinfer,
          absent_why=_FLASHINFER_ABSENT),
    Rival("softmax", "liger", "liger_kernel", "liger-kernel", _CPU, _sm_liger),
    Rival("softmax", "flashinfer", "flashinfer", "flashinfer-python", ("cuda",), _sm_flashinfer,
          absent_why=_FLASHINFER_ABSENT),
    Rival("softmax", "quack", "quack", "quack-kernels", ("cuda",), _sm_quack,
          absent_why=_QUACK_ABSENT),
    Rival("cross_entropy", "liger", "liger_kernel", "liger-kernel", _CPU, _ce_liger),
    Rival("cross_entropy", "quack", "quack", "quack-kernels", ("cuda",), _ce_quack,
          absent_why=_QUACK_ABSENT),
)
# what a library lacks, said in the table instead of a silent gap
NOT_OFFERED = {
    ("layernorm", "quack"): "QuACK has no LayerNorm forward here (RMSNorm only)",
    ("cross_entropy", "flashinfer"): "FlashInfer has no cross-entropy",
    ("gemm", "liger"): "Liger-Kernel has no GEMM; cuBLAS is the eager row",
    ("gemm", "flashinfer"): "FlashInfer's GEMMs have no bias + ReLU epilogue; cuBLAS is the "
                            "eager row",
    ("gemm", "quack"): "not wired: cuBLAS is the eager row",
}
LIBRARIES = ("liger", "flashinfer", "quack")


def rivals_for(target: str) -> list[Rival]:
    return [r for r in RIVALS if r.target == target]


def find(target: str, name: str) -> Rival:
    for r in RIVALS:
        if r.target == target and r.name == name:
            return r
    raise KeyError(f"no rival {name!r} for {target!r}: "
                   f"{[r.name for r in rivals_for(target)] or 'none'}")


def unavailable(rival: Rival, device: str) -> str:
    """Why ``rival`` cannot run on ``device`` ("" when it can: its library imports)."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    if kind not in rival.devices:
        return rival.cpu_why or f"{rival.name} runs on CUDA only"
    if kind == "cuda" and not torch.cuda.is_available():
        return "no CUDA device"
    try:
        importlib.import_module(rival.library)
    except ModuleNotFoundError as exc:
        if exc.name == rival.library and rival.absent_why:
            return f"not installed: {rival.absent_why}"
        return f"{rival.package} does not import: {type(exc).__name__}: {str(exc)[:200]}"
    except Exception as exc:  # noqa: BLE001 - any import failure is the row's reason
        return f"{rival.package} does not import: {type(exc).__name__}: {str(exc)[:200]}"
    return ""


def rival_class(target: str, name: str) -> Callable[..., nn.Module]:
    """A module class with the target's reference constructor whose forward is the rival's
    (its parameters named as the reference's: ``weight``, ``bias``)."""
    rival = find(target, name)
    fwd = rival.forward

    if target == "rmsnorm":
        class RivalRMSNorm(nn.Module):
            def __init__(self, hidden: int = 4096, eps: float = 1e-6):
                super().__init__()
                self.eps = eps
                self.weight = nn.Parameter(torch.ones(hidden))

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return fwd(self, x)
        return RivalRMSNorm
    if target == "layernorm":
        class RivalLayerNorm(nn.Module):
            def __init__(self, hidden: int = 4096, eps: float = 1e-5):
                super().__init__()
                self.eps = eps
                self.weight = nn.Parameter(torch.ones(hidden))
                self.bias = nn.Parameter(torch.zeros(hidden))

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return fwd(self, x)
        return RivalLayerNorm

    class RivalOp(nn.Module):
        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return fwd(self, *inputs)
    return RivalOp


def table(device: str) -> dict[str, dict[str, str]]:
    """For every target and library: "" (usable on ``device``) or why not."""
    out: dict[str, dict[str, str]] = {}
    for target in ("softmax", "rmsnorm", "layernorm", "cross_entropy", "gemm"):
        row = {}
        for lib in LIBRARIES:
            try:
                row[lib] = unavailable(find(target, lib), device)
            except KeyError:
                row[lib] = NOT_OFFERED.get((target, lib), "not offered")
        out[target] = row
    return out
