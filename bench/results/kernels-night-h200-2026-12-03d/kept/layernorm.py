"""LayerNorm forward in Triton: one program per row held in registers as two power-of-two
tiles (5120 = 4096 + 1024, no lane idle behind a mask), the mean and the variance from one
pass of two independent sums over the row shifted by its first element: the second sum
need not wait for the first, and the shift keeps E[d^2] - E[d]^2 from cancelling (an
offset of 300 loses nothing: d is the spread about a point of the row). Each tile's two
sums are one reduction over the pair (d, d*d): one round across the warps, not two."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
NUM_WARPS = 4  # knob: choices=[2, 4, 8, 16]


@triton.jit
def _add_pairs(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, x_stride, y_stride, eps,
                      HEAD: tl.constexpr, TAIL: tl.constexpr, HAS_TAIL: tl.constexpr):
    row = tl.program_id(0)
    head = tl.arange(0, HEAD)  # HEAD <= n_cols: no mask
    x = tl.load(x_ptr + row * x_stride + head).to(tl.float32)
    shift = tl.load(x_ptr + row * x_stride).to(tl.float32)
    d = x - shift
    s1, s2 = tl.reduce((d, d * d), 0, _add_pairs)
    if HAS_TAIL:
        tail = HEAD + tl.arange(0, TAIL)
        tmask = tail < n_cols
        xt = tl.load(x_ptr + row * x_stride + tail, mask=tmask, other=0.0).to(tl.float32)
        dt = tl.where(tmask, xt - shift, 0.0)
        t1, t2 = tl.reduce((dt, dt * dt), 0, _add_pairs)
        s1 += t1
        s2 += t2
    m = s1 / n_cols  # the mean less the shift
    var = tl.maximum(s2 / n_cols - m * m, 0.0)
    r = tl.rsqrt(var + eps)
    w = tl.load(w_ptr + head).to(tl.float32)
    b = tl.load(b_ptr + head).to(tl.float32)
    tl.store(y_ptr + row * y_stride + head, ((d - m) * r * w + b).to(y_ptr.dtype.element_ty))
    if HAS_TAIL:
        wt = tl.load(w_ptr + tail, mask=tmask, other=0.0).to(tl.float32)
        bt = tl.load(b_ptr + tail, mask=tmask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * y_stride + tail,
                 ((dt - m) * r * wt + bt).to(y_ptr.dtype.element_ty), mask=tmask)


def _tiles(n_cols: int) -> tuple[int, int]:
    head = 1 << (n_cols.bit_length() - 1)  # the largest power of two <= n_cols
    rest = n_cols - head
    return head, triton.next_power_of_2(rest) if rest else 1


def layernorm(x, weight, bias, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    head, tail = _tiles(n_cols)
    _layernorm_kernel[(n_rows,)](x2, weight, bias, y, n_cols, x2.stride(0), y.stride(0), eps,
                                 HEAD=head, TAIL=tail, HAS_TAIL=head < n_cols,
                                 num_warps=NUM_WARPS)
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
