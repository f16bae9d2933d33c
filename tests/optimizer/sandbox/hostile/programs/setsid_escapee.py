"""Hostile program: Double-forks a setsid'ed process that keeps writing escapee.beat in
the worktree; it must be dead once the call is over.

Expected through the sandbox: VALID.
"""
# expected: VALID |

import os
import time

import numpy as np

_DONE = False

def _attack():
    global _DONE
    if _DONE:
        return
    _DONE = True
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            for i in range(10**6):
                with open("escapee.beat", "w") as fh:
                    fh.write(str(i))
                time.sleep(0.02)
        os._exit(0)
    for _ in range(200):  # until the escapee is running
        if os.path.exists("escapee.beat"):
            break
        time.sleep(0.01)


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
