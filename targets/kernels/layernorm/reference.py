"""Trusted reference: LayerNorm forward over the last dimension, weight and bias."""

import torch
import torch.nn as nn
import torch.nn.functional as F

HIDDEN = 4096


class Model(nn.Module):
    def __init__(self, hidden: int = HIDDEN, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dt = torch.promote_types(x.dtype, torch.float32)
        y = F.layer_norm(x.to(dt), x.shape[-1:], self.weight.to(dt), self.bias.to(dt), self.eps)
        return y.to(x.dtype)


def get_inputs(rows: int = 4096, hidden: int = HIDDEN, dtype: str = "bfloat16"):
    return [torch.randn(rows, hidden, dtype=getattr(torch, dtype))]


def get_init_inputs():
    return [HIDDEN, 1e-5]
