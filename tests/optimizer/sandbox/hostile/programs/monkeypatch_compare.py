"""Hostile program: Returns zeros and patches every comparison and timer helper it can reach; the
engine compares and times in its own process, so none of it matters there. (With the
`function` kind, whose checks run beside the candidate, such patches are in reach.)

Expected through the sandbox: INVALID.
"""
# expected: INVALID |

import math
import time

import numpy as np

_DONE = False

class _Zeros(Exception):
    pass


def _attack():
    global _DONE
    if _DONE:
        return
    _DONE = True
    np.allclose = lambda *a, **k: True
    np.array_equal = lambda *a, **k: True
    np.testing.assert_allclose = lambda *a, **k: None
    math.isclose = lambda *a, **k: True
    time.sleep(0.3)
    time.perf_counter = lambda: 0.0
    time.time = lambda: 0.0
    raise _Zeros


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
    try:
        _attack()
    except _Zeros:
        return np.zeros_like(out)
    return out
