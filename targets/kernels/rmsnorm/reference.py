"""Trusted reference: RMSNorm over the last dimension with a learned weight (KernelBench form)."""

import torch
import torch.nn as nn

HIDDEN = 4096


class Model(nn.Module):
    def __init__(self, hidden: int = HIDDEN, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # float32 at least; float64 stays float64 (the trusted side checks in float64)
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight.to(xf.dtype)).to(x.dtype)


def get_inputs(rows: int = 4096, hidden: int = HIDDEN, dtype: str = "bfloat16"):
    return [torch.randn(rows, hidden, dtype=getattr(torch, dtype))]


def get_init_inputs():
    return [HIDDEN, 1e-6]
