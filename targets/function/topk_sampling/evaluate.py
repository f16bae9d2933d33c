"""Trusted checks for the topk_sampling target (runs in the sandbox beside the candidate)."""

from __future__ import annotations

import importlib.util
import os
import time
import uuid

import numpy as np

BATCH, VOCAB = 64, 32000


def _load(program_path: str):
    name = f"_candidate_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, program_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def reference(logits: np.ndarray, top_k: int, top_p: float) -> np.ndarray:
    """Float64 reference: softmax over the top_k logits, nucleus cut at top_p, renormalise."""
    x = logits.astype(np.float64)
    top_k = max(1, min(int(top_k), x.shape[1]))
    order = np.argsort(-x, axis=1, kind="stable")[:, :top_k]
    vals = np.take_along_axis(x, order, axis=1)
    p = np.exp(vals - vals.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    keep = (np.cumsum(p, axis=1) - p) < top_p
    p = np.where(keep, p, 0.0)
    p /= p.sum(axis=1, keepdims=True)
    out = np.zeros_like(x)
    np.put_along_axis(out, order, p, axis=1)
    return out


def _cases(rng: np.random.Generator):
    """Fresh inputs from several distributions (never zeros), shapes incl. ragged ones."""
    yield rng.standard_normal((7, 1000)).astype(np.float32) * 3, 50, 0.9
    yield (rng.standard_normal((16, 4099)) * 0.5 + 1e3).astype(np.float32), 1, 0.5
    yield -np.abs(rng.standard_normal((5, 777)).astype(np.float32)) * 10, 777, 1.0
    peaked = rng.standard_normal((9, 2048)).astype(np.float32)
    peaked[np.arange(9), rng.integers(0, 2048, 9)] += 12.0
    yield peaked, 64, 0.95
    yield rng.gumbel(size=(33, 3001)).astype(np.float32), 200, 0.7


def validate(program_path: str) -> None:
    mod = _load(program_path)
    rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))
    for logits, top_k, top_p in _cases(rng):
        before = logits.copy()
        got = mod.filter_probs(logits, top_k, top_p)
        assert np.array_equal(before, logits), "filter_probs modified its input"
        assert isinstance(got, np.ndarray), f"returned {type(got).__name__}, not ndarray"
        assert got.shape == logits.shape, f"shape {got.shape} != {logits.shape}"
        assert got.dtype == np.float32, f"dtype {got.dtype} != float32"
        assert np.isfinite(got).all(), "non-finite probabilities"
        want = reference(logits, top_k, top_p)
        err = np.abs(got.astype(np.float64) - want).max()
        assert err <= 1e-5, f"max abs error {err:.3g} > 1e-5 (top_k={top_k}, top_p={top_p})"
        assert np.array_equal(got > 0, want > 0), "kept a different set of tokens"


def evaluate(program_path: str) -> dict[str, float]:
    mod = _load(program_path)
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((BATCH, VOCAB)) * 2).astype(np.float32)
    mod.filter_probs(logits, 50, 0.9)  # warm-up
    times = []
    for _ in range(5):
        start = time.perf_counter()
        mod.filter_probs(logits, 50, 0.9)
        times.append(time.perf_counter() - start)
    return {"time_s": float(np.median(times)), "time_min_s": float(min(times))}
