import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
"""The honest rewrite: log-softmax of each row with its maximum subtracted first."""


@triton.jit
def _log_softmax_rows(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=float("-inf"))
    shifted = x - tl.max(x, axis=0)
    total = tl.sum(tl.where(mask, tl.exp(shifted), 0.0), axis=0)
    tl.store(y_ptr + row * cols + offs, shifted - tl.log(total), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        _log_softmax_rows[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
        return y
# EVOLVE-BLOCK-END
