"""Trusted entry for the hostile suite: runs ``program.filter_probs`` on the engine's input.

The engine writes ``logits.npy`` into the io dir; this entry (inside the sandbox) calls the
candidate and saves ``probs.npy`` there. The engine loads that file with numpy (no pickles)
and compares it with its own reference, outside the candidate's process.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path

import numpy as np


def run(payload: dict, io_dir: Path) -> dict:
    logits = np.load(io_dir / "logits.npy", allow_pickle=False)
    program = importlib.import_module("program")
    start = time.perf_counter()
    probs = program.filter_probs(logits, payload["top_k"], payload["top_p"])
    elapsed = time.perf_counter() - start
    np.save(io_dir / "probs.npy", np.asarray(probs, dtype=np.float32), allow_pickle=False)
    return {"elapsed_s": elapsed}
