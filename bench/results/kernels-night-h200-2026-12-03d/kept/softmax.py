"""Row-wise softmax in Triton: the seed's one-pass kernel with its launch chosen per row width.

One ``num_warps`` suits no row width alone: a 1,000-column row spread over 8 warps leaves
each thread four elements, a 16,384-column row over 8 warps keeps 64 in registers. Rows of
at most 1,024 columns (as a power of two) take the narrow setting (and several rows per
program), rows up to 4,096 the middle one, wider rows the wide one.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
NARROW_WARPS = 4  # knob: choices=[1, 2, 4, 8]
NARROW_ROWS = 1  # knob: choices=[1, 2, 4]
MID_WARPS = 8  # knob: choices=[4, 8, 16]
WIDE_WARPS = 32  # knob: choices=[8, 16, 32]


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride,
                    BLOCK: tl.constexpr, ROWS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for i in range(ROWS):
        row = pid * ROWS + i
        if row < n_rows:
            x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf"))
            x = x.to(tl.float32)
            m = tl.max(x, axis=0)
            # a row of -inf only: exp(-inf - -inf) is NaN in torch too, keep the same answer
            e = tl.exp(x - m)
            y = e / tl.sum(e, axis=0)
            tl.store(y_ptr + row * y_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1])
    if not x2.is_contiguous():
        x2 = x2.contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    block = triton.next_power_of_2(n_cols)
    if block <= 1024:
        warps, rows = NARROW_WARPS, NARROW_ROWS
    elif block <= 4096:
        warps, rows = MID_WARPS, 1
    else:
        warps, rows = WIDE_WARPS, 1
    grid = (triton.cdiv(n_rows, rows),)
    _softmax_kernel[grid](x2, y, n_rows, n_cols, x2.stride(0), y.stride(0),
                          BLOCK=block, ROWS=rows, num_warps=warps)
    return y.view(x.shape)
# EVOLVE-BLOCK-END


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x)
