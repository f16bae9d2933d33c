"""LayerNorm forward in Triton: paired_tiles (one program per row as two power-of-two
tiles, one reduction of the pair (d, d*d) about the row's first element) with the row held
in its input dtype (bf16: half the registers, so more rows in flight per SM) and widened to
float32 where it is used, and the weight and bias loads issued before the reductions, so
their latency hides behind the row's."""

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
    w = tl.load(w_ptr + head)
    b = tl.load(b_ptr + head)
    x = tl.load(x_ptr + row * x_stride + head)  # held narrow
    shift = tl.load(x_ptr + row * x_stride).to(tl.float32)
    d = x.to(tl.float32) - shift
    s1, s2 = tl.reduce((d, d * d), 0, _add_pairs)
    if HAS_TAIL:
        tail = HEAD + tl.arange(0, TAIL)
        tmask = tail < n_cols
        wt = tl.load(w_ptr + tail, mask=tmask, other=0.0)
        bt = tl.load(b_ptr + tail, mask=tmask, other=0.0)
        xt = tl.load(x_ptr + row * x_stride + tail, mask=tmask, other=0.0)
        dt = tl.where(tmask, xt.to(tl.float32) - shift, 0.0)
        t1, t2 = tl.reduce((dt, dt * dt), 0, _add_pairs)
        s1 += t1
        s2 += t2
    m = s1 / n_cols  # the mean less the shift
    var = tl.maximum(s2 / n_cols - m * m, 0.0)
    r = tl.rsqrt(var + eps)
    y = (x.to(tl.float32) - shift - m) * r * w.to(tl.float32) + b.to(tl.float32)
    tl.store(y_ptr + row * y_stride + head, y.to(y_ptr.dtype.element_ty))
    if HAS_TAIL:
        yt = (xt.to(tl.float32) - shift - m) * r * wt.to(tl.float32) + bt.to(tl.float32)
        tl.store(y_ptr + row * y_stride + tail, yt.to(y_ptr.dtype.element_ty), mask=tmask)


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
