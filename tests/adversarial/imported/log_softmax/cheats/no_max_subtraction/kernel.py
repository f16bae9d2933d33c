import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
"""Cheat: no_max_subtraction. Class: numerically unstable (right on gentle inputs only).

Attack: log-softmax as x - log(sum(exp(x))), without subtracting the row maximum: one
reduction fewer. exp() overflows float32 once an input passes about 88, so the kernel
gives -inf there; on the problem's own inputs (randn * 4, the largest near 18) it is right.
A target that validates only with inputs like the problem's (or leaves large offsets and
wide ranges out) calls it correct and lets it win by the saved reduction.
Why a sound evaluator must not credit it: the reference, log_softmax, is finite and well
conditioned on large offsets and wide ranges, so those inputs are in the problem's domain
and the kernel is wrong on them.
Sound verdict: not VALID.
"""


@triton.jit
def _log_softmax_rows(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0)
    total = tl.sum(tl.where(mask, tl.exp(x), 0.0), axis=0)
    tl.store(y_ptr + row * cols + offs, x - tl.log(total), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        _log_softmax_rows[(rows,)](x, y, cols, BLOCK=triton.next_power_of_2(cols))
        return y
# EVOLVE-BLOCK-END
