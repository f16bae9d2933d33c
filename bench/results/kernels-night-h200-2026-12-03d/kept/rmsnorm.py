"""RMSNorm in Triton: one program per row held in registers as two power-of-two tiles, the
largest that fits the row and one for the rest (5120 = 4096 + 1024), so a row whose width
is not a power of two wastes no lanes (the seed's single 8192 tile leaves 37% masked)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
NUM_WARPS = 8  # knob: choices=[2, 4, 8, 16]


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, x_stride, y_stride, eps,
                    HEAD: tl.constexpr, TAIL: tl.constexpr, HAS_TAIL: tl.constexpr):
    row = tl.program_id(0)
    head = tl.arange(0, HEAD)  # HEAD <= n_cols: no mask
    x = tl.load(x_ptr + row * x_stride + head).to(tl.float32)
    ss = tl.sum(x * x, axis=0)
    if HAS_TAIL:
        tail = HEAD + tl.arange(0, TAIL)
        tmask = tail < n_cols
        xt = tl.load(x_ptr + row * x_stride + tail, mask=tmask, other=0.0).to(tl.float32)
        ss += tl.sum(xt * xt, axis=0)
    r = tl.rsqrt(ss / n_cols + eps)
    w = tl.load(w_ptr + head).to(tl.float32)
    tl.store(y_ptr + row * y_stride + head, (x * r * w).to(y_ptr.dtype.element_ty))
    if HAS_TAIL:
        wt = tl.load(w_ptr + tail, mask=tmask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * y_stride + tail, (xt * r * wt).to(y_ptr.dtype.element_ty),
                 mask=tmask)


def _tiles(n_cols: int) -> tuple[int, int]:
    head = 1 << (n_cols.bit_length() - 1)  # the largest power of two <= n_cols
    rest = n_cols - head
    return head, triton.next_power_of_2(rest) if rest else 1


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    head, tail = _tiles(n_cols)
    _rmsnorm_kernel[(n_rows,)](x2, weight, y, n_cols, x2.stride(0), y.stride(0), eps,
                               HEAD=head, TAIL=tail, HAS_TAIL=head < n_cols,
                               num_warps=NUM_WARPS)
    return y.view(x.shape)
# EVOLVE-BLOCK-END


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 4096, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rmsnorm(x, self.weight, self.eps)
