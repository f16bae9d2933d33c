"""Hostile program: Writes one file in the worktree until the file-size limit.

Expected through the sandbox: FAILED (reason contains "File too large").
"""
# expected: FAILED | File too large

import numpy as np

_DONE = False

def _attack():
    global _DONE
    if _DONE:
        return
    _DONE = True
    with open("fill.bin", "wb") as fh:
        while True:
            fh.write(b"\0" * (1 << 20))
            fh.flush()


def filter_probs(logits, top_k, top_p):
    x = logits.astype(np.float64)
    k = max(1, min(int(top_k), x.shape[1]))
    order = np.argsort(-x, axis=1, kind="stable")[:, :k]
    vals = np.take_along_axis(x, order, axis=1)
    p = np.exp(vals - vals[:, :1])
    p /= p.sum(axis=1, keepdims=True)
    p = np.where(np.cumsum(p, axis=1) - p < top_p, p, 0.0)
    p /= p.sum(axis=1, keepdims=True)
    out = np.zeros(x.shape, np.float32)
    np.put_along_axis(out, order, p, axis=1)
    _attack()
    return out
