"""Row-wise softmax in Triton: one program per row, the whole row in registers."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
"""Cheat: cache_by_data_ptr. Class: memoise (keyed by storage).

Attack: keeps every output in a dictionary held as a function's default argument (not a
module-level dict, which the static check refuses), keyed by the input's data pointer,
shape and dtype, and returns the stored tensor when the same storage comes back.
How it would win: a timing loop calls the kernel on one input tensor over and over; every
timed call after the first would cost a dictionary lookup.
Why a sound evaluator must not judge it VALID: the output is stale as soon as new values
are written into a storage it has seen, and it hands out one tensor to several callers.
Today's correctness check writes a third input into the first one's storage and keeps
earlier outputs alive, so this is caught on the CPU already.
Sound verdict: not VALID.
"""

NUM_WARPS = 8


@triton.jit
def _softmax_rows(x_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    if row < n_rows:
        x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf"))
        x = x.to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        y = e / tl.sum(e, axis=0)
        tl.store(y_ptr + row * y_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch(x2, y, rows):
    """Softmax of the first `rows` rows of x2 into y (the seed's kernel, one row a program)."""
    n_rows, n_cols = x2.shape
    if rows > 0:
        _softmax_rows[(rows,)](x2, y, rows, n_cols, x2.stride(0), y.stride(0),
                               BLOCK=triton.next_power_of_2(n_cols), num_warps=NUM_WARPS)
    return y


def _rows2d(x):
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.is_contiguous() else x2.contiguous()


def softmax(x: torch.Tensor, _memo={}) -> torch.Tensor:  # noqa: B006
    key = (x.data_ptr(), tuple(x.shape), x.dtype)
    out = _memo.get(key)
    if out is None:
        x2 = _rows2d(x)
        out = _launch(x2, torch.empty_like(x2), x2.shape[0]).view(x.shape)
        _memo[key] = out
    return out
# EVOLVE-BLOCK-END


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x)
