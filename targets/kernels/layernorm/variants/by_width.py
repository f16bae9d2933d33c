"""layernorm: the seed's one-row-per-program kernel with ``num_warps`` chosen per row width.

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
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, x_stride, y_stride, eps,
                      BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    # two passes over registers: E[x^2] - E[x]^2 loses every digit at an offset of 300
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = d * tl.rsqrt(var + eps) * w + b
    tl.store(y_ptr + row * y_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def layernorm(x, weight, bias, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    block = triton.next_power_of_2(n_cols)
    warps = NARROW_WARPS if block <= 4096 else WIDE_WARPS
    _layernorm_kernel[(n_rows,)](x2, weight, bias, y, n_cols, x2.stride(0), y.stride(0), eps,
                                 BLOCK=block, num_warps=warps)
    return y.view(x.shape)
# EVOLVE-BLOCK-END


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 4096, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm(x, self.weight, self.bias, self.eps)
