"""LayerNorm forward in Triton: a persistent grid (PROGRAMS_PER_SM programs per SM, each
looping over rows, the next row's loads staged while this one is computed) that holds the
weight and bias in registers for all its rows, each row as two power-of-two tiles
(5120 = 4096 + 1024, no lane idle behind a mask), mean and variance from one reduction of
the pair (d, d*d), d the row less its first element (no cancellation at an offset)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
NUM_WARPS = 4  # knob: choices=[2, 4, 8, 16]
NUM_STAGES = 2  # knob: choices=[1, 2, 3, 4]
PROGRAMS_PER_SM = 4  # knob: choices=[1, 2, 4, 8]
CPU_PROGRAMS = 4  # programs under the interpreter, fewer than the rows so each loops


@triton.jit
def _add_pairs(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, eps,
                      HEAD: tl.constexpr, TAIL: tl.constexpr, HAS_TAIL: tl.constexpr,
                      STAGES: tl.constexpr):
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    head = tl.arange(0, HEAD)  # HEAD <= n_cols: no mask
    w = tl.load(w_ptr + head).to(tl.float32)
    b = tl.load(b_ptr + head).to(tl.float32)
    if HAS_TAIL:
        tail = HEAD + tl.arange(0, TAIL)
        tmask = tail < n_cols
        wt = tl.load(w_ptr + tail, mask=tmask, other=0.0).to(tl.float32)
        bt = tl.load(b_ptr + tail, mask=tmask, other=0.0).to(tl.float32)
    for row in tl.range(pid, n_rows, n_prog, num_stages=STAGES):
        xr = x_ptr + tl.cast(row, tl.int64) * x_stride
        yr = y_ptr + tl.cast(row, tl.int64) * y_stride
        x = tl.load(xr + head).to(tl.float32)
        shift = tl.load(xr).to(tl.float32)
        d = x - shift
        s1, s2 = tl.reduce((d, d * d), 0, _add_pairs)
        if HAS_TAIL:
            xt = tl.load(xr + tail, mask=tmask, other=0.0).to(tl.float32)
            dt = tl.where(tmask, xt - shift, 0.0)
            t1, t2 = tl.reduce((dt, dt * dt), 0, _add_pairs)
            s1 += t1
            s2 += t2
        m = s1 / n_cols  # the mean less the shift
        r = tl.rsqrt(tl.maximum(s2 / n_cols - m * m, 0.0) + eps)
        tl.store(yr + head, ((d - m) * r * w + b).to(y_ptr.dtype.element_ty))
        if HAS_TAIL:
            tl.store(yr + tail, ((dt - m) * r * wt + bt).to(y_ptr.dtype.element_ty),
                     mask=tmask)


def _tiles(n_cols: int) -> tuple[int, int]:
    head = 1 << (n_cols.bit_length() - 1)  # the largest power of two <= n_cols
    rest = n_cols - head
    return head, triton.next_power_of_2(rest) if rest else 1


def _n_programs(x: torch.Tensor, n_rows: int) -> int:
    if x.is_cuda:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        return max(1, min(n_rows, PROGRAMS_PER_SM * sms))
    return max(1, min(n_rows, CPU_PROGRAMS))


def layernorm(x, weight, bias, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    head, tail = _tiles(n_cols)
    _layernorm_kernel[(_n_programs(x2, n_rows),)](
        x2, weight, bias, y, n_rows, n_cols, x2.stride(0), y.stride(0), eps,
        HEAD=head, TAIL=tail, HAS_TAIL=head < n_cols, STAGES=NUM_STAGES, num_warps=NUM_WARPS)
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
