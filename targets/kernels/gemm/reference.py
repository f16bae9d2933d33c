"""Trusted reference: C = relu(A @ B + bias), a GEMM with a fused epilogue (KernelBench form)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.relu(a @ b + bias)


def get_inputs(m: int = 4096, n: int = 4096, k: int = 4096, dtype: str = "bfloat16"):
    dt = getattr(torch, dtype)
    return [torch.randn(m, k, dtype=dt), torch.randn(k, n, dtype=dt), torch.randn(n, dtype=dt)]


def get_init_inputs():
    return []
