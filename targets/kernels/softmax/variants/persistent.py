"""Row-wise softmax as a persistent kernel: a few programs per SM each walk a strided set of
rows, and the row loop is software-pipelined so the next row's load is in flight while the
current row is reduced and written (latency hidden across rows, not only within one)."""

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
def _softmax_persistent(x_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride,
                        BLOCK: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for row in tl.range(pid, n_rows, n_prog, num_stages=STAGES):
        row64 = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + row64 * x_stride + cols, mask=mask, other=-float("inf"))
        x = x.to(tl.float32)
        m = tl.max(x, axis=0)
        # padding and -inf columns give exp(-inf) = 0; a row of -inf only gives NaN, as torch
        e = tl.exp(x - m)
        y = e / tl.sum(e, axis=0)
        tl.store(y_ptr + row64 * y_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _n_programs(x: torch.Tensor, n_rows: int) -> int:
    if x.is_cuda:
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        return max(1, min(n_rows, PROGRAMS_PER_SM * sms))
    return max(1, min(n_rows, CPU_PROGRAMS))


def softmax(x: torch.Tensor) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1])
    if not x2.is_contiguous():
        x2 = x2.contiguous()
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    grid = (_n_programs(x2, n_rows),)
    _softmax_persistent[grid](x2, y, n_rows, n_cols, x2.stride(0), y.stride(0),
                              BLOCK=triton.next_power_of_2(n_cols), STAGES=NUM_STAGES,
                              num_warps=NUM_WARPS)
    return y.view(x.shape)
# EVOLVE-BLOCK-END


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x)
