"""LayerNorm forward in Triton: a persistent grid (PROGRAMS_PER_SM programs an SM, each walking
rows pid, pid + grid, ...) that issues the next row's loads before it reduces and stores this
one, so each program keeps a row's bytes in flight while it computes instead of only while
it waits. The row is two power-of-two tiles (5120 = 4096 + 1024), held as loaded (bf16)
until it is used; mean and variance from one reduction of the pair (d, d*d), d the row less
its first element. x is read through L2 only (`.cg`); the float32 weight and bias are held
in registers for all the program's rows (HOLD_WB = 1) or read again per row from L1 (in a
one-row-per-program LayerNorm they are 40 of the 50 KB a 5120-wide row's loads ask of L1).
At 5120 a 4-warp program holding them takes 168 registers a thread: 3 programs fit an SM,
hence PROGRAMS_PER_SM = 3 (a fourth would wait for a second wave)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
NUM_WARPS = 4  # knob: choices=[4, 8, 16]
PROGRAMS_PER_SM = 3  # knob: choices=[1, 2, 3, 4]
HOLD_WB = 1  # knob: choices=[0, 1]
CPU_PROGRAMS = 4  # programs under the interpreter, fewer than the rows so each loops


@triton.jit
def _add_pairs(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, eps,
                      HEAD: tl.constexpr, TAIL: tl.constexpr, HAS_TAIL: tl.constexpr,
                      HOLD: tl.constexpr):
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    head = tl.arange(0, HEAD)  # HEAD <= n_cols: no mask
    if HAS_TAIL:
        tail = HEAD + tl.arange(0, TAIL)
        tmask = tail < n_cols
    if HOLD:
        w = tl.load(w_ptr + head).to(tl.float32)
        b = tl.load(b_ptr + head).to(tl.float32)
        if HAS_TAIL:
            wt = tl.load(w_ptr + tail, mask=tmask, other=0.0).to(tl.float32)
            bt = tl.load(b_ptr + tail, mask=tmask, other=0.0).to(tl.float32)
    # this program's first row (the grid never exceeds the rows)
    xr = x_ptr + tl.cast(pid, tl.int64) * x_stride
    xh = tl.load(xr + head, cache_modifier=".cg")
    sh = tl.load(xr, cache_modifier=".cg")
    if HAS_TAIL:
        xt = tl.load(xr + tail, mask=tmask, other=0.0, cache_modifier=".cg")
    for row in range(pid, n_rows, n_prog):
        # the next row's loads first (past the end: the last row again, a cache hit)
        nxt = tl.minimum(row + n_prog, n_rows - 1)
        nr = x_ptr + tl.cast(nxt, tl.int64) * x_stride
        xh_next = tl.load(nr + head, cache_modifier=".cg")
        sh_next = tl.load(nr, cache_modifier=".cg")
        if HAS_TAIL:
            xt_next = tl.load(nr + tail, mask=tmask, other=0.0, cache_modifier=".cg")
        shift = sh.to(tl.float32)
        d = xh.to(tl.float32) - shift
        s1, s2 = tl.reduce((d, d * d), 0, _add_pairs)
        if HAS_TAIL:
            dt = tl.where(tmask, xt.to(tl.float32) - shift, 0.0)
            t1, t2 = tl.reduce((dt, dt * dt), 0, _add_pairs)
            s1 += t1
            s2 += t2
        m = s1 / n_cols  # the mean less the shift
        r = tl.rsqrt(tl.maximum(s2 / n_cols - m * m, 0.0) + eps)
        yr = y_ptr + tl.cast(row, tl.int64) * y_stride
        if HOLD:
            tl.store(yr + head, ((d - m) * r * w + b).to(y_ptr.dtype.element_ty))
        else:
            wl = tl.load(w_ptr + head).to(tl.float32)
            bl = tl.load(b_ptr + head).to(tl.float32)
            tl.store(yr + head, ((d - m) * r * wl + bl).to(y_ptr.dtype.element_ty))
        if HAS_TAIL:
            if HOLD:
                yt = (dt - m) * r * wt + bt
            else:
                wtl = tl.load(w_ptr + tail, mask=tmask, other=0.0).to(tl.float32)
                btl = tl.load(b_ptr + tail, mask=tmask, other=0.0).to(tl.float32)
                yt = (dt - m) * r * wtl + btl
            tl.store(yr + tail, yt.to(y_ptr.dtype.element_ty), mask=tmask)
            xt = xt_next
        xh = xh_next
        sh = sh_next


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
        HEAD=head, TAIL=tail, HAS_TAIL=head < n_cols, HOLD=HOLD_WB, num_warps=NUM_WARPS)
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
