"""Small measured tables shipped with the project (tables.json) and lookups into them.

Sources (both MIT-licensed; the raw files are not shipped, derive.py rebuilds tables.json
from copies in ``../shared/data/deploy/``):

- microsoft/vidur ``data/profiling/compute/<gpu>/<model>/mlp.csv``: the non-attention
  operators of one decoder layer (layernorms, QKV and output projections, rope, MLP up,
  activation and down, residual add) by tokens and tensor-parallel degree. tables.json keeps
  the sum of their medians per layer (ms) on a grid of token counts, and the embedding
  separately (it runs once per step). Profiles: H100 / Llama-2-70B and A100 / Llama-3-8B.
- microsoft/vidur ``data/profiling/network/<gpu>_dgx/{all_reduce,send_recv}.csv``: NCCL
  collective times (ms, medians) by message size, for 2, 4 and 8 workers on one DGX node
  (all-reduce) and for a pair on one node or on two nodes (send/recv).
- Mutinifni/splitwise-sim ``data/perf_model.csv``: the calibration constants under
  ``"calibration"`` are fitted to its measured Llama-2-70B prompt and token times
  (calibration.py).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

TABLES_PATH = Path(__file__).with_name("tables.json")
ROOT = Path(__file__).resolve().parents[3]


def default_data_dir() -> Path:
    """Where the measured profiles live when present: ROOT/../shared/data/deploy."""
    return ROOT.parent / "shared" / "data" / "deploy"


@cache
def tables() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TABLES_PATH.read_text())
    return data


# Which measured profile stands for each accelerator. The H200 has the H100's compute die
# and NVLink, so it borrows the H100's operator and collective tables (an assumption; its
# larger bandwidth enters only through the attention term).
GPU_PROFILE = {"H100": "h100", "H200": "h100", "A100": "a100"}
MLP_PROFILE = {"h100": "h100_llama2-70b", "a100": "a100_llama3-8b"}


def profile_of(accelerator: str) -> str:
    if accelerator not in GPU_PROFILE:
        raise KeyError(
            f"no measured TP/PP profile for {accelerator!r}; known: {', '.join(GPU_PROFILE)}"
        )
    return GPU_PROFILE[accelerator]


def _interp_linear(x: float, xs: list[float], ys: list[float]) -> float:
    """Piecewise-linear in x; proportional to x beyond the last point (compute-bound)."""
    if x >= xs[-1]:
        return ys[-1] * x / xs[-1]
    if x <= xs[0]:
        return ys[0]
    return float(np.interp(x, xs, ys))


def _interp_loglog(x: float, xs: list[float], ys: list[float]) -> float:
    """Log-log interpolation in message size; proportional beyond the last point."""
    if x >= xs[-1]:
        return ys[-1] * x / xs[-1]
    if x <= xs[0]:
        return ys[0]
    return float(np.exp(np.interp(np.log(x), np.log(xs), np.log(ys))))


def mlp_layer_ms(profile: str, tokens: float, tp: int) -> float:
    """Measured non-attention time (ms) of one decoder layer of the profiled model."""
    t = tables()["mlp"][MLP_PROFILE[profile]]
    tps = sorted(int(k) for k in t["layer_ms"])
    if tp in tps:
        return _interp_linear(tokens, t["tokens"], t["layer_ms"][str(tp)])
    # Outside the profiled degrees: the nearest profiled one, scaled by the degree ratio.
    near = min(tps, key=lambda k: abs(np.log(k / tp)))
    return _interp_linear(tokens, t["tokens"], t["layer_ms"][str(near)]) * near / tp


def emb_ms(profile: str, tokens: float) -> float:
    t = tables()["mlp"][MLP_PROFILE[profile]]
    return _interp_linear(tokens, t["tokens"], t["emb_ms"]["1"])


def mlp_profile_shape(profile: str) -> dict[str, int]:
    shape: dict[str, int] = tables()["mlp"][MLP_PROFILE[profile]]["shape"]
    return shape


def all_reduce_ms(profile: str, nbytes: float, workers: int) -> float:
    """Measured NCCL all-reduce time (ms) of ``nbytes`` over ``workers`` GPUs of one node."""
    if workers <= 1:
        return 0.0
    t = tables()["all_reduce"][profile]
    keys = {int(k.split("x")[0]): k for k in t["ms"]}
    w = min(keys, key=lambda k: abs(np.log(k / workers)))
    return _interp_loglog(nbytes, t["bytes"], t["ms"][keys[w]])


def all_reduce_bw_ms(profile: str, nbytes: float, workers: int) -> float:
    """The all-reduce time beyond that of the smallest measured message (its latency)."""
    if workers <= 1:
        return 0.0
    smallest = float(tables()["all_reduce"][profile]["bytes"][0])
    latency = all_reduce_ms(profile, smallest, workers)
    return max(0.0, all_reduce_ms(profile, nbytes, workers) - latency)


def send_recv_ms(profile: str, nbytes: float, *, same_node: bool = True) -> float:
    """Measured NCCL send/recv time (ms) of ``nbytes`` between two GPUs."""
    t = tables()["send_recv"][profile]
    return _interp_loglog(nbytes, t["bytes"], t["ms"]["2x2" if same_node else "2x1"])


def calibration(profile: str) -> dict[str, float]:
    cal: dict[str, float] = tables()["calibration"][profile]
    return cal
