"""Trusted reference: row-wise softmax over the last dimension (KernelBench form)."""

import torch
import torch.nn as nn

ROWS = 4096
COLS = 4096
DTYPE = "bfloat16"


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs(rows: int = ROWS, cols: int = COLS, dtype: str = DTYPE):
    return [torch.randn(rows, cols, dtype=getattr(torch, dtype))]


def get_init_inputs():
    return []
