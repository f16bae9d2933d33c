"""RMSNorm in Triton, the row's layout chosen by its width. One tile of the next power of two
leaves (BLOCK - n) / BLOCK of its lanes idle behind the mask: 37% at 5120, 27% at 3000. Up to
MAX_IDLE of them idle, the row is that one masked tile (the seed's kernel); beyond, it is two
power-of-two tiles, the largest that fits and one for the rest (variants/two_tiles.py). On an
NVIDIA H200 (2026-12-04, a night's search) two tiles took bf16 16381x5120 from 0.0981 ms to
0.0856 ms, while at float32 2048x3000 one masked tile was the faster (0.0175 ms against
0.0188): with both, neither workload pays for the other."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
NUM_WARPS = 8  # knob: choices=[2, 4, 8, 16]
ONE_TILE_WARPS = 8  # knob: choices=[1, 2, 4, 8, 16]
MAX_IDLE = 0.3  # knob: float 0.0..0.5


@triton.jit
def _one_tile_kernel(x_ptr, w_ptr, y_ptr, n_cols, x_stride, y_stride, eps,
                     BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=0) / n_cols
    y = x * tl.rsqrt(ms + eps) * w
    tl.store(y_ptr + row * y_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _two_tile_kernel(x_ptr, w_ptr, y_ptr, n_cols, x_stride, y_stride, eps,
                     HEAD: tl.constexpr, TAIL: tl.constexpr):
    row = tl.program_id(0)
    head = tl.arange(0, HEAD)  # HEAD <= n_cols: no mask
    x = tl.load(x_ptr + row * x_stride + head).to(tl.float32)
    tail = HEAD + tl.arange(0, TAIL)
    tmask = tail < n_cols
    xt = tl.load(x_ptr + row * x_stride + tail, mask=tmask, other=0.0).to(tl.float32)
    ss = tl.sum(x * x, axis=0) + tl.sum(xt * xt, axis=0)
    r = tl.rsqrt(ss / n_cols + eps)
    w = tl.load(w_ptr + head).to(tl.float32)
    tl.store(y_ptr + row * y_stride + head, (x * r * w).to(y_ptr.dtype.element_ty))
    wt = tl.load(w_ptr + tail, mask=tmask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_stride + tail, (xt * r * wt).to(y_ptr.dtype.element_ty),
             mask=tmask)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    block = triton.next_power_of_2(n_cols)
    if (block - n_cols) / block <= MAX_IDLE:
        _one_tile_kernel[(n_rows,)](x2, weight, y, n_cols, x2.stride(0), y.stride(0), eps,
                                    BLOCK=block, num_warps=ONE_TILE_WARPS)
    else:
        head = block // 2  # the largest power of two below n_cols (n_cols is not one)
        tail = triton.next_power_of_2(n_cols - head)
        _two_tile_kernel[(n_rows,)](x2, weight, y, n_cols, x2.stride(0), y.stride(0), eps,
                                    HEAD=head, TAIL=tail, num_warps=NUM_WARPS)
    return y.view(x.shape)
# EVOLVE-BLOCK-END


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 4096, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rmsnorm(x, self.weight, self.eps)
