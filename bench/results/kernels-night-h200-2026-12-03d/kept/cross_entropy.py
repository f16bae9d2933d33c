"""Fused cross-entropy with one exponential per logit: a block's maximum is reduced first,
so the running sum is rescaled once per block, not once per element.

The seed's per-lane online log-sum-exp computes two exponentials per logit; at 4096 x 128k
bf16 logits that is about 1e9 special-function operations, as long as the 1 GB read itself
on an H200. Here the exponentials are base 2 on logits pre-scaled by log2(e).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
BLOCK_SIZE = 16384  # knob: choices=[2048, 4096, 8192, 16384]
NUM_WARPS = 8  # knob: choices=[4, 8, 16, 32]

# globals a @triton.jit function reads must be constexpr (the interpreter accepts plain
# floats; compiling for a GPU does not)
LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def _ce_kernel(x_ptr, t_ptr, loss_ptr, n_cols, x_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * x_stride
    cols = tl.arange(0, BLOCK)
    m = tl.full([], float("-inf"), tl.float32)  # running max, in log2 units
    s = tl.full([], 0.0, tl.float32)  # running sum of 2^(x - m)
    for start in range(0, n_cols, BLOCK):
        idx = start + cols
        x = tl.load(base + idx, mask=idx < n_cols, other=float("-inf"),
                    eviction_policy="evict_first").to(tl.float32) * LOG2E
        m_new = tl.maximum(m, tl.max(x, axis=0))
        # while every logit seen is -inf, subtract 0 instead (-inf - -inf would be NaN)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp2(m - shift) + tl.sum(tl.exp2(x - shift), axis=0)
        m = m_new
    tgt = tl.load(t_ptr + row)
    x_t = tl.load(base + tgt).to(tl.float32)
    tl.store(loss_ptr + row, (m + tl.log2(s)) * LN2 - x_t)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = logits.contiguous()
    n_rows, n_cols = logits.shape
    loss = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    _ce_kernel[(n_rows,)](logits, targets, loss, n_cols, logits.stride(0),
                          BLOCK=BLOCK_SIZE, num_warps=NUM_WARPS)
    return loss
# EVOLVE-BLOCK-END


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return cross_entropy(logits, targets)
