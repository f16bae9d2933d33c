"""Hostile program: Ignores SIGTERM and SIGINT, then sleeps forever.

Expected through the sandbox: TIMEOUT (reason contains "wall-clock limit").
"""
# expected: TIMEOUT | wall-clock limit

import signal
import time

import numpy as np

_DONE = False

def _attack():
    global _DONE
    if _DONE:
        return
    _DONE = True
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        time.sleep(1)


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
