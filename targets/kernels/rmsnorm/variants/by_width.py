"""rmsnorm: the seed's one-row-per-program kernel with ``num_warps`` chosen per row width.

Rows padded to at most 4,096 lanes (as a power of two) take the narrow setting, wider
ones (5,120 columns pad to 8,192) the wide one: one ``num_warps`` suits no width alone.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
NARROW_WARPS = 8  # knob: choices=[2, 4, 8, 16]
WIDE_WARPS = 16  # knob: choices=[4, 8, 16, 32]


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, x_stride, y_stride, eps,
                    BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=0) / n_cols
    y = x * tl.rsqrt(ms + eps) * w
    tl.store(y_ptr + row * y_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    block = triton.next_power_of_2(n_cols)
    warps = NARROW_WARPS if block <= 4096 else WIDE_WARPS
    _rmsnorm_kernel[(n_rows,)](x2, weight, y, n_cols, x2.stride(0), y.stride(0), eps,
                               BLOCK=block, num_warps=warps)
    return y.view(x.shape)
# EVOLVE-BLOCK-END


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 4096, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rmsnorm(x, self.weight, self.eps)
