"""LayerNorm forward in Triton: each program normalises ROWS rows at once as a 2-D block, so
the weight and bias are read once per program and a program has ROWS rows of loads in
flight. A row is one power-of-two tile, or two (5120 = 4096 + 1024) when one tile would
leave more than MAX_WASTE percent of its lanes masked. Mean and variance come from one
reduction of the pair (d, d*d), d the row less its first element (no cancellation at an
offset of 300)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
ROWS = 2  # knob: choices=[1, 2, 4]
NUM_WARPS = 8  # knob: choices=[4, 8, 16]
MAX_WASTE = 30  # knob: choices=[0, 20, 30, 40, 100]


@triton.jit
def _add_pairs(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, eps,
                      ROWS: tl.constexpr, HEAD: tl.constexpr, TAIL: tl.constexpr,
                      HAS_TAIL: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = rows < n_rows
    head = tl.arange(0, HEAD)
    hmask = head < n_cols  # all true when the row is split in two tiles
    w = tl.load(w_ptr + head, mask=hmask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + head, mask=hmask, other=0.0).to(tl.float32)
    m2 = rmask[:, None] & hmask[None, :]
    xrow = x_ptr + rows[:, None].to(tl.int64) * x_stride
    x = tl.load(xrow + head[None, :], mask=m2, other=0.0).to(tl.float32)
    shift = tl.load(x_ptr + rows.to(tl.int64) * x_stride, mask=rmask, other=0.0).to(tl.float32)
    d = tl.where(m2, x - shift[:, None], 0.0)
    s1, s2 = tl.reduce((d, d * d), 1, _add_pairs)
    if HAS_TAIL:
        tail = HEAD + tl.arange(0, TAIL)
        tmask = tail < n_cols
        wt = tl.load(w_ptr + tail, mask=tmask, other=0.0).to(tl.float32)
        bt = tl.load(b_ptr + tail, mask=tmask, other=0.0).to(tl.float32)
        t2m = rmask[:, None] & tmask[None, :]
        xt = tl.load(xrow + tail[None, :], mask=t2m, other=0.0).to(tl.float32)
        dt = tl.where(t2m, xt - shift[:, None], 0.0)
        t1, t2 = tl.reduce((dt, dt * dt), 1, _add_pairs)
        s1 += t1
        s2 += t2
    m = s1 / n_cols  # the mean less the shift
    r = tl.rsqrt(tl.maximum(s2 / n_cols - m * m, 0.0) + eps)
    yrow = y_ptr + rows[:, None].to(tl.int64) * y_stride
    y = (d - m[:, None]) * r[:, None] * w[None, :] + b[None, :]
    tl.store(yrow + head[None, :], y.to(y_ptr.dtype.element_ty), mask=m2)
    if HAS_TAIL:
        yt = (dt - m[:, None]) * r[:, None] * wt[None, :] + bt[None, :]
        tl.store(yrow + tail[None, :], yt.to(y_ptr.dtype.element_ty), mask=t2m)


def _tiles(n_cols: int) -> tuple[int, int]:
    one = triton.next_power_of_2(n_cols)
    if 100 * (one - n_cols) <= MAX_WASTE * one:
        return one, 1  # one tile, masked
    head = one // 2  # the largest power of two below n_cols
    return head, triton.next_power_of_2(n_cols - head)


def layernorm(x, weight, bias, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    head, tail = _tiles(n_cols)
    _layernorm_kernel[(triton.cdiv(n_rows, ROWS),)](
        x2, weight, bias, y, n_rows, n_cols, x2.stride(0), y.stride(0), eps,
        ROWS=ROWS, HEAD=head, TAIL=tail, HAS_TAIL=head < n_cols, num_warps=NUM_WARPS)
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
