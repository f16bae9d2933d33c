"""Engine overhead per candidate: everything but the evaluation itself.

Runs the loop on a toy function target (evaluation ~30 ms) in a throwaway git repository
and reports the time the engine spends per candidate on proposing, knob substitution,
dedup, Optuna ask/tell and attributes, the git branch (worktree, commit, annotate, diff),
the MLflow child run with its artifacts, and cleanup. Writes
``bench/results/engine-overhead.json``.

    .venv/bin/python bench/engine_overhead.py [--candidates 60]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "optimizer"))

import conftest  # noqa: E402  (the toy target lives with the tests)

from optimizer.config import load_experiment  # noqa: E402
from optimizer.loop import run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidates", type=int, default=60)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/engine-overhead.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        target = repo / "targets/function/toy"
        target.mkdir(parents=True)
        (target / "target.toml").write_text(conftest.TOY_TARGET)
        (target / "program.py").write_text(conftest.TOY_PROGRAM)
        (target / "evaluate.py").write_text(conftest.TOY_EVALUATE)
        conftest.write_experiment(repo)
        (repo / ".gitignore").write_text(".optimizer/\n")
        subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
        conftest.git(repo, "add", "-A")
        conftest.git(repo, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "init")
        cfg = load_experiment(
            repo / "experiments/toy.toml",
            [f"budget.max_candidates={args.candidates}", "budget.minutes=30"],
            workspace=repo,
        )
        start = time.perf_counter()
        summary = run(cfg, say=lambda s: None)
        wall = time.perf_counter() - start
    oh = summary.engine_overhead_ms[1:]  # the first candidate pays for imports and store creation
    oh_sorted = sorted(oh)
    result = {
        "benchmark": "engine overhead per candidate (ms), toy function target",
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "python": platform.python_version(),
        "candidates": len(oh) + 1,
        "median_ms": round(statistics.median(oh), 1),
        "p90_ms": round(oh_sorted[int(0.9 * (len(oh) - 1))], 1),
        "mean_ms": round(statistics.fmean(oh), 1),
        "first_candidate_ms": round(summary.engine_overhead_ms[0], 1),
        "run_wall_s": round(wall, 1),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "command": f"python bench/engine_overhead.py --candidates {args.candidates}",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
