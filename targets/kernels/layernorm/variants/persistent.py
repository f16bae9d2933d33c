"""LayerNorm forward as a persistent kernel: a few programs per SM each walk a strided set of
rows with weight and bias kept in registers, and the row loop is software-pipelined so the next
row's load is in flight while the current row is normalised (latency hidden across rows)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
NUM_WARPS = 8  # knob: choices=[4, 8, 16]
NUM_STAGES = 2  # knob: choices=[1, 2, 3, 4]
PROGRAMS_PER_SM = 4  # knob: choices=[1, 2, 4, 8]
CPU_PROGRAMS = 4  # programs under the interpreter, fewer than the rows so each loops


@triton.jit
def _layernorm_persistent(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, eps,
                          BLOCK: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    for row in tl.range(pid, n_rows, n_prog, num_stages=STAGES):
        row64 = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + row64 * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / n_cols
        # variance of (x - mean) from registers: E[x^2] - E[x]^2 cancels at large offsets
        d = tl.where(mask, x - mean, 0.0)
        var = tl.sum(d * d, axis=0) / n_cols
        y = d * tl.rsqrt(var + eps) * w + b
        tl.store(y_ptr + row64 * y_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _n_programs(x: torch.Tensor, n_rows: int) -> int:
    if x.is_cuda:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        return max(1, min(n_rows, PROGRAMS_PER_SM * sms))
    return max(1, min(n_rows, CPU_PROGRAMS))


def layernorm(x, weight, bias, eps):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    grid = (_n_programs(x2, n_rows),)
    _layernorm_persistent[grid](x2, weight, bias, y, n_rows, n_cols, x2.stride(0), y.stride(0),
                                eps, BLOCK=triton.next_power_of_2(n_cols), STAGES=NUM_STAGES,
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
