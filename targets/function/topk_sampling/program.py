"""Top-k / top-p filtering of next-token logits (NumPy).

A first, straightforward version: one row at a time, full sort of the vocabulary.
"""

import numpy as np

# EVOLVE-BLOCK-START
ROWS_PER_CHUNK = 1  # knob: int 1..64 log
SELECT = "sort"  # knob: choices=["sort", "argpartition"]


def _top_k_indices(chunk, top_k):
    """Indices of each row's top_k logits, largest first."""
    if SELECT == "sort":
        return np.argsort(-chunk, axis=1, kind="stable")[:, :top_k]
    part = np.argpartition(-chunk, top_k - 1, axis=1)[:, :top_k]
    vals = np.take_along_axis(chunk, part, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def filter_probs(logits, top_k, top_p):
    batch, vocab = logits.shape
    top_k = max(1, min(int(top_k), vocab))
    out = np.zeros_like(logits, dtype=np.float32)
    for start in range(0, batch, ROWS_PER_CHUNK):
        chunk = logits[start : start + ROWS_PER_CHUNK].astype(np.float64)
        idx = _top_k_indices(chunk, top_k)
        vals = np.take_along_axis(chunk, idx, axis=1)
        vals = vals - vals[:, :1]
        probs = np.exp(vals)
        probs /= probs.sum(axis=1, keepdims=True)
        cum = np.cumsum(probs, axis=1)
        keep = (cum - probs) < top_p
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum(axis=1, keepdims=True)
        rows = np.arange(chunk.shape[0])[:, None]
        out[start + rows, idx] = probs
    return out


# EVOLVE-BLOCK-END
