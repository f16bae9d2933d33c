"""RMSNorm in Triton: each program normalises ROWS rows at once as a 2-D block, so the
weight is read once per program and a program has ROWS rows of loads in flight. A row is
one power-of-two tile, or two (5120 = 4096 + 1024) when one tile would leave more than
MAX_WASTE percent of its lanes masked."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
ROWS = 2  # knob: choices=[1, 2, 4]
NUM_WARPS = 8  # knob: choices=[4, 8, 16]
MAX_WASTE = 30  # knob: choices=[0, 20, 30, 40, 100]


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, eps,
                    ROWS: tl.constexpr, HEAD: tl.constexpr, TAIL: tl.constexpr,
                    HAS_TAIL: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = rows < n_rows
    head = tl.arange(0, HEAD)
    hmask = head < n_cols  # all true when the row is split in two tiles
    w = tl.load(w_ptr + head, mask=hmask, other=0.0).to(tl.float32)
    m2 = rmask[:, None] & hmask[None, :]
    xrow = x_ptr + rows[:, None].to(tl.int64) * x_stride
    x = tl.load(xrow + head[None, :], mask=m2, other=0.0).to(tl.float32)
    ss = tl.sum(x * x, axis=1)
    if HAS_TAIL:
        tail = HEAD + tl.arange(0, TAIL)
        tmask = tail < n_cols
        wt = tl.load(w_ptr + tail, mask=tmask, other=0.0).to(tl.float32)
        t2m = rmask[:, None] & tmask[None, :]
        xt = tl.load(xrow + tail[None, :], mask=t2m, other=0.0).to(tl.float32)
        ss += tl.sum(xt * xt, axis=1)
    r = tl.rsqrt(ss / n_cols + eps)
    yrow = y_ptr + rows[:, None].to(tl.int64) * y_stride
    tl.store(yrow + head[None, :], (x * r[:, None] * w[None, :]).to(y_ptr.dtype.element_ty),
             mask=m2)
    if HAS_TAIL:
        tl.store(yrow + tail[None, :],
                 (xt * r[:, None] * wt[None, :]).to(y_ptr.dtype.element_ty), mask=t2m)


def _tiles(n_cols: int) -> tuple[int, int]:
    one = triton.next_power_of_2(n_cols)
    if 100 * (one - n_cols) <= MAX_WASTE * one:
        return one, 1  # one tile, masked
    head = one // 2  # the largest power of two below n_cols
    return head, triton.next_power_of_2(n_cols - head)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    head, tail = _tiles(n_cols)
    _rmsnorm_kernel[(triton.cdiv(n_rows, ROWS),)](
        x2, weight, y, n_rows, n_cols, x2.stride(0), y.stride(0), eps,
        ROWS=ROWS, HEAD=head, TAIL=tail, HAS_TAIL=head < n_cols, num_warps=NUM_WARPS)
    return y.view(x.shape)
# EVOLVE-BLOCK-END


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 4096, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rmsnorm(x, self.weight, self.eps)
