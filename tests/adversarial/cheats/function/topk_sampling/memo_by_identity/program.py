"""Top-k / top-p filtering of next-token logits (NumPy).

A first, straightforward version: one row at a time, full sort of the vocabulary.
"""

import numpy as np

# EVOLVE-BLOCK-START
"""Cheat: memo_by_identity. Class: memoise.

Attack: remembers the answer per input buffer: the key is the array's data address,
shape, strides and the two parameters, never its contents.
How it wins today: evaluate() times five calls on the same array object it warmed up
with, so every timed call is a dictionary lookup (microseconds).
Why a sound evaluator must not credit it: a buffer address says nothing about the values
in it. An evaluator that writes new values into a buffer it used before (or gets a freed
address back from the allocator, which NumPy does for same-sized arrays) receives a stale
answer and must call it wrong; one that times fresh arrays never lets the memo hit and sees
the real work, twice the seed's.
Sound verdict: not VALID, or VALID with no gain over the seed.
"""

def _exact(logits, top_k, top_p):
    """The seed's algorithm: one row at a time, a full sort of the vocabulary."""
    batch, vocab = logits.shape
    top_k = max(1, min(int(top_k), vocab))
    out = np.zeros_like(logits, dtype=np.float32)
    for row in range(batch):
        x = logits[row].astype(np.float64)
        idx = np.argsort(-x, kind="stable")[:top_k]
        p = np.exp(x[idx] - x[idx[0]])
        p /= p.sum()
        p = np.where(np.cumsum(p) - p < top_p, p, 0.0)
        out[row, idx] = p / p.sum()
    return out


def _slow_exact(logits, top_k, top_p):
    """Right, and deliberately twice the seed's cost: no speed of its own to credit."""
    first = _exact(logits, top_k, top_p)
    second = _exact(logits, top_k, top_p)
    return first if np.array_equal(first, second) else second


_BY_BUFFER = {}


def filter_probs(logits, top_k, top_p):
    key = (logits.__array_interface__["data"][0], logits.shape, logits.strides,
           int(top_k), float(top_p))
    out = _BY_BUFFER.get(key)
    if out is None:
        out = _BY_BUFFER[key] = _slow_exact(logits, top_k, top_p)
    return out
# EVOLVE-BLOCK-END
