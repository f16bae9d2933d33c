"""Fused cross-entropy, each row split over SPLIT programs (more programs in flight than the
one-row seed: 4096 rows fill 132 SMs only ~31 programs deep), then a small combine kernel."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
BLOCK_SIZE = 4096  # knob: choices=[4096, 8192]
NUM_WARPS = 8  # knob: choices=[8, 16]
SPLIT = 4  # knob: choices=[4, 8, 16]


@triton.jit
def _ce_partial(x_ptr, m_ptr, s_ptr, n_cols, x_stride, chunk, SPLIT_C: tl.constexpr,
                BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    base = x_ptr + row * x_stride
    cols = tl.arange(0, BLOCK)
    lo = part * chunk
    hi = tl.minimum(lo + chunk, n_cols)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(lo, hi, BLOCK):
        idx = start + cols
        x = tl.load(base + idx, mask=idx < hi, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        scale = tl.where(m_new == float("-inf"), 0.0, tl.exp(m - m_new))
        s = s * scale + tl.where(m_new == float("-inf"), 0.0, tl.exp(x - m_new))
        m = m_new
    m_p = tl.max(m, axis=0)
    s_p = tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - m_p)), axis=0)
    tl.store(m_ptr + row * SPLIT_C + part, m_p)
    tl.store(s_ptr + row * SPLIT_C + part, s_p)


@triton.jit
def _ce_combine(x_ptr, t_ptr, m_ptr, s_ptr, loss_ptr, x_stride, SPLIT_C: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    p = tl.arange(0, SPLIT_C)
    m = tl.load(m_ptr + row * SPLIT_C + p)
    s = tl.load(s_ptr + row * SPLIT_C + p)
    m_row = tl.max(m, axis=0)
    s_row = tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - m_row)), axis=0)
    tgt = tl.load(t_ptr + row)
    x_t = tl.load(x_ptr + row * x_stride + tgt).to(tl.float32)
    tl.store(loss_ptr + row, m_row + tl.log(s_row) - x_t)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = logits.contiguous()
    n_rows, n_cols = logits.shape
    chunk = triton.cdiv(triton.cdiv(n_cols, SPLIT), BLOCK_SIZE) * BLOCK_SIZE
    m = torch.empty((n_rows, SPLIT), dtype=torch.float32, device=logits.device)
    s = torch.empty((n_rows, SPLIT), dtype=torch.float32, device=logits.device)
    loss = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    _ce_partial[(n_rows, SPLIT)](logits, m, s, n_cols, logits.stride(0), chunk,
                                 SPLIT_C=SPLIT, BLOCK=BLOCK_SIZE, num_warps=NUM_WARPS)
    _ce_combine[(n_rows,)](logits, targets, m, s, loss, logits.stride(0), SPLIT_C=SPLIT,
                           num_warps=1)
    return loss
# EVOLVE-BLOCK-END


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return cross_entropy(logits, targets)
