"""Rebuild tables.json from the measured profiles in ``../shared/data/deploy/``.

    python -m evaluators.routing.deploy.derive [DATA_DIR]

Reads Vidur's per-operator tables (``vidur_<gpu>_<model>_mlp.csv``) and collective tables
(``vidur_<gpu>_dgx_{all_reduce,send_recv}.csv``), keeps the median of each measurement on a
small grid, writes them to tables.json, then fits the calibration constants of
parallel.py against Splitwise's measurements (``splitwise_perf_model.csv``, see
calibration.py) and writes those too. Only the derived numbers are shipped.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np

from evaluators.routing.deploy.tables import TABLES_PATH, default_data_dir

# Operators of one decoder layer in Vidur's mlp.csv; "emb" runs once per model, not per layer.
LAYER_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
TOKEN_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3072, 4096, 8192, 16384, 32768)
SIZE_GRID = tuple(2048 * 2**k for k in range(16))  # 2 KiB .. 64 MiB

# (table name, file, model shape the profile was taken on)
MLP_FILES = {
    "h100_llama2-70b": "vidur_h100_llama2-70b_mlp.csv",
    "a100_llama3-8b": "vidur_a100_llama3-8b_mlp.csv",
}
NET_FILES = {"h100": "vidur_h100_dgx", "a100": "vidur_a100_dgx"}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def mlp_table(path: Path) -> dict[str, object]:
    rows = _rows(path)
    first = rows[0]
    shape = {
        k: int(first[k]) for k in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd")
    }
    by_key: dict[tuple[int, int], dict[str, str]] = {}
    for r in rows:
        by_key[(int(r["num_tensor_parallel_workers"]), int(r["num_tokens"]))] = r
    tps = sorted({k[0] for k in by_key})
    layer_ms: dict[str, list[float]] = {}
    emb_ms: dict[str, list[float]] = {}
    tokens_kept: list[int] = []
    for n in TOKEN_GRID:
        if all((tp, n) in by_key for tp in tps):
            tokens_kept.append(n)
    for tp in tps:
        layer_ms[str(tp)] = [
            round(sum(float(by_key[(tp, n)][f"time_stats.{op}.median"]) for op in LAYER_OPS), 5)
            for n in tokens_kept
        ]
        emb_ms[str(tp)] = [
            round(float(by_key[(tp, n)]["time_stats.emb.median"]), 5) for n in tokens_kept
        ]
    return {"shape": shape, "tokens": tokens_kept, "layer_ms": layer_ms, "emb_ms": emb_ms}


def _near_median(sel: list[tuple[int, float]], size: int) -> float:
    near = [t for n, t in sel if size / 1.25 <= n <= size * 1.25]
    if not near:
        near = [min(sel, key=lambda nt: abs(nt[0] - size))[1]]
    return float(np.median(near))


def net_table(path: Path, op: str, placements: list[tuple[int, int]]) -> dict[str, object]:
    """Median time (ms) of ``op`` by message size for each (workers, devices per node)."""
    rows = _rows(path)
    out: dict[str, list[float]] = {}
    for workers, per_node in placements:
        sel = [
            (int(r["size"]), float(r[f"time_stats.{op}.median"]))
            for r in rows
            if int(r["num_workers"]) == workers and int(r["devices_per_node"]) == per_node
        ]
        # single small messages are noisy: the median over measured sizes within 25% of each
        # grid point (the nearest measured size where none is)
        out[f"{workers}x{per_node}"] = [round(_near_median(sel, s), 5) for s in SIZE_GRID]
    return {"bytes": list(SIZE_GRID), "ms": out}


def derive(data: Path) -> dict[str, object]:
    tables: dict[str, object] = {
        "sources": {
            "vidur": "microsoft/vidur data/profiling (MIT): compute/<gpu>/<model>/mlp.csv, "
            "network/<gpu>_dgx/{all_reduce,send_recv}.csv; medians of each measurement",
            "splitwise": "Mutinifni/splitwise-sim data/perf_model.csv (MIT): calibration "
            "constants fitted by calibration.py",
        },
        "mlp": {name: mlp_table(data / f) for name, f in MLP_FILES.items()},
        "all_reduce": {
            gpu: net_table(
                data / f"{stem}_all_reduce.csv", "all_reduce", [(2, 2), (4, 4), (8, 8)]
            )
            for gpu, stem in NET_FILES.items()
        },
        "send_recv": {
            gpu: net_table(data / f"{stem}_send_recv.csv", "send_recv", [(2, 2), (2, 1)])
            for gpu, stem in NET_FILES.items()
        },
    }
    return tables


def main(argv: list[str]) -> int:
    data = Path(argv[0]) if argv else default_data_dir()
    tables = derive(data)
    TABLES_PATH.write_text(json.dumps(tables, indent=1) + "\n")
    from evaluators.routing.deploy import calibration

    calibration.fit_and_store(data)
    print(f"wrote {TABLES_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
