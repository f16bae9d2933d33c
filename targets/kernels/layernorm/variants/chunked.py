"""LayerNorm walking each row in chunks of BLOCK_SIZE: no lanes padded to the next power of
two (a 5120-wide row in the seed occupies 8192 lanes' registers). Three passes over the row
(mean; squared deviations from it, so an offset of 300 keeps its digits; normalise), the
second and third mostly from L2."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
BLOCK_SIZE = 1024  # knob: choices=[512, 1024, 2048]
NUM_WARPS = 4  # knob: choices=[1, 2, 4, 8]


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, x_stride, y_stride, eps,
                      BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    y_row = y_ptr + row * y_stride
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        idx = start + cols
        acc += tl.load(x_row + idx, mask=idx < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        idx = start + cols
        mask = idx < n_cols
        x = tl.load(x_row + idx, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean, 0.0)
        acc += d * d
    r = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        idx = start + cols
        mask = idx < n_cols
        x = tl.load(x_row + idx, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + idx, ((x - mean) * r * w + b).to(y_ptr.dtype.element_ty), mask=mask)


def layernorm(x, weight, bias, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    _layernorm_kernel[(n_rows,)](x2, weight, bias, y, n_cols, x2.stride(0), y.stride(0), eps,
                                 BLOCK=BLOCK_SIZE, num_warps=NUM_WARPS)
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
