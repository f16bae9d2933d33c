"""Log-softmax over the last dimension of a (16, 3000) float32 tensor."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=self.dim)


batch_size = 16
dim = 3000


def get_inputs():
    return [torch.randn(batch_size, dim) * 4]


def get_init_inputs():
    return [1]
