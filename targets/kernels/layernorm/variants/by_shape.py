"""LayerNorm forward in Triton, the structure chosen by the row's shape. A row whose width is
a power of two is one tile: one program per row, the sums (d, d*d) of the row less its first
element in one reduction (variants/paired_tiles.py; 0.94-0.95 of copy bandwidth at
32768x4096 on an NVIDIA H200, 2026-12-04). Any other width is two power-of-two tiles
(5120 = 4096 + 1024), where re-reading the float32 weight and bias for every row kept L1 at
75% and a one-row program at 0.83: those rows go to a persistent grid of PROGRAMS_PER_SM
programs an SM that hold the weight and bias in registers and issue the next row's loads
before this row's reduction (alone, as variants/prefetch_rows.py of commit 5933b52: 0.90
at 16381x5120, but 0.87 at 32768x4096, where one row ahead is too shallow), when the grid
gets at least MIN_ROWS_PER_PROGRAM rows a program (fewer rows go one a program: a night
of 2026-12-04 kept RAGGED_PERSISTENT = 0 because the grid lost 15% at fp32 2048x3000).
RAGGED_PERSISTENT = 0 sends every width to the one-row kernel."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
ROW_WARPS = 4  # knob: choices=[2, 4, 8, 16]
PERSISTENT_WARPS = 4  # knob: choices=[4, 8, 16]
PROGRAMS_PER_SM = 3  # knob: choices=[1, 2, 3, 4]
RAGGED_PERSISTENT = 1  # knob: choices=[0, 1]
MIN_ROWS_PER_PROGRAM = 16  # knob: choices=[1, 4, 8, 16, 32, 64]
CPU_PROGRAMS = 4  # programs under the interpreter, fewer than the rows so each loops


@triton.jit
def _add_pairs(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def _row_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, x_stride, y_stride, eps,
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


@triton.jit
def _persistent_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride,
                       eps, HEAD: tl.constexpr, TAIL: tl.constexpr, HAS_TAIL: tl.constexpr,
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
    programs = _n_programs(x2, n_rows)
    # on a GPU, a grid with few rows a program pays for holding the weight and bias without
    # getting it back (fp32 2048x3000 on an NVIDIA H200: 0.0234 ms against the one-row
    # kernel's 0.0204, 5 rows a program; 16381x5120 gains 8%, 41 rows a program)
    few_rows = x2.is_cuda and n_rows < MIN_ROWS_PER_PROGRAM * programs
    if head < n_cols and RAGGED_PERSISTENT and not few_rows:
        _persistent_kernel[(programs,)](
            x2, weight, bias, y, n_rows, n_cols, x2.stride(0), y.stride(0), eps,
            HEAD=head, TAIL=tail, HAS_TAIL=True, HOLD=1, num_warps=PERSISTENT_WARPS)
    else:
        _row_kernel[(n_rows,)](x2, weight, bias, y, n_cols, x2.stride(0), y.stride(0), eps,
                               HEAD=head, TAIL=tail, HAS_TAIL=head < n_cols,
                               num_warps=ROW_WARPS)
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
