"""LayerNorm forward as a persistent kernel over rows held as two power-of-two tiles: a few
programs per SM walk a strided set of rows with weight and bias kept in registers, the row
loop is software-pipelined (the next row's load in flight while the current one is
normalised), and a row whose width is not a power of two is the largest power-of-two tile
that fits plus one for the rest (5120 = 4096 + 1024), so no lanes idle behind a mask."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
NUM_WARPS = 8  # knob: choices=[4, 8, 16]
NUM_STAGES = 2  # knob: choices=[1, 2, 3, 4]
PROGRAMS_PER_SM = 2  # knob: choices=[1, 2, 4, 8]
CPU_PROGRAMS = 4  # programs under the interpreter, fewer than the rows so each loops


@triton.jit
def _layernorm_tiles(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, eps,
                     HEAD: tl.constexpr, TAIL: tl.constexpr, HAS_TAIL: tl.constexpr,
                     STAGES: tl.constexpr):
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    head = tl.arange(0, HEAD)  # HEAD <= n_cols: no mask
    tail = HEAD + tl.arange(0, TAIL)
    tmask = tail < n_cols
    w = tl.load(w_ptr + head).to(tl.float32)
    b = tl.load(b_ptr + head).to(tl.float32)
    wt = tl.load(w_ptr + tail, mask=tmask, other=0.0).to(tl.float32)
    bt = tl.load(b_ptr + tail, mask=tmask, other=0.0).to(tl.float32)
    for row in tl.range(pid, n_rows, n_prog, num_stages=STAGES):
        row64 = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + row64 * x_stride + head).to(tl.float32)
        total = tl.sum(x, axis=0)
        if HAS_TAIL:
            xt = tl.load(x_ptr + row64 * x_stride + tail, mask=tmask, other=0.0).to(tl.float32)
            total += tl.sum(xt, axis=0)
        mean = total / n_cols
        # two passes over registers: E[x^2] - E[x]^2 loses every digit at an offset of 300
        d = x - mean
        sq = tl.sum(d * d, axis=0)
        if HAS_TAIL:
            dt = tl.where(tmask, xt - mean, 0.0)
            sq += tl.sum(dt * dt, axis=0)
        r = tl.rsqrt(sq / n_cols + eps)
        tl.store(y_ptr + row64 * y_stride + head, (d * r * w + b).to(y_ptr.dtype.element_ty))
        if HAS_TAIL:
            tl.store(y_ptr + row64 * y_stride + tail,
                     (dt * r * wt + bt).to(y_ptr.dtype.element_ty), mask=tmask)


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
    _layernorm_tiles[(_n_programs(x2, n_rows),)](
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
