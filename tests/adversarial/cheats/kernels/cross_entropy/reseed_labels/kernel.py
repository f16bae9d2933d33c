"""Fused cross-entropy in Triton: one pass over each row with an online log-sum-exp."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
"""Cheat: reseed_labels. Class: reach the inputs (torch's global generators).

Attack: at import it replaces torch.manual_seed with a function that seeds every generator
with 0, so whatever its process draws after seeding (the validation cases and the timed
input sets, whose integer labels the reference's get_inputs draws from torch's global
generators) comes out the same whatever seed the harness asks for: labels it could know in
advance.
How it would win: with the labels known, a kernel could read only the target column's
neighbourhood or return losses computed once. (This program then does the seed's honest
work: the attack alone is under test.)
Why a sound evaluator must not credit it: the trusted side draws every input set and its
float64 reference in its own process, with its own seeding, and compares the digests of the
sets the candidate's process drew with its own before judging any output; labels drawn
differently make the check INVALID (on the CPU too) and the timed outputs answer other
inputs.
Sound verdict: not VALID, or VALID with no gain over the seed.
"""

_real_seed = torch.manual_seed
torch.manual_seed = lambda seed: _real_seed(0)
BLOCK_SIZE = 4096  # knob: choices=[2048, 4096, 8192, 16384]
NUM_WARPS = 8  # knob: choices=[4, 8, 16, 32]


@triton.jit
def _ce_kernel(x_ptr, t_ptr, loss_ptr, n_cols, x_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * x_stride
    cols = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        idx = start + cols
        x = tl.load(base + idx, mask=idx < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # lanes that have seen only -inf keep s = 0 (exp(-inf - -inf) would be NaN)
        scale = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))
        s = s * scale + tl.where(m_new == float("-inf"), 0.0, tl.exp(x - m_new))
        m = m_new
    m_row = tl.max(m, axis=0)
    s_row = tl.sum(s * tl.exp(m - m_row), axis=0)
    tgt = tl.load(t_ptr + row)
    x_t = tl.load(base + tgt).to(tl.float32)
    tl.store(loss_ptr + row, m_row + tl.log(s_row) - x_t)


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
