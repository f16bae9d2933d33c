"""Engine overhead per candidate: everything but the proposal and the evaluation.

Runs the serial loop on a toy function target (evaluation ~30 ms) in a throwaway git
repository and reports, per candidate of the search:

- ``critical``: the loop's wall time per candidate less the proposer's ``propose`` and the
  evaluation (``evaluate_candidate``): the next job and its parent, knobs, dedup, Optuna
  ask/tell and attributes, the branch, the pending record, waiting for the writer. The
  issue's target is 20 ms or less, at N=100 and at N=1000 candidates in the study, flat in
  N: the figures are medians over the first 100 candidates and over the last 100 of a
  night of ``--candidates`` (1000 gives both).
- ``critical_cpu``: the same in the process's CPU time (the serial loop's proposing,
  evaluating and recording threads and the writer), which other processes on a shared
  machine do not inflate (the sqlite and git waits are not in it).
- ``engine_overhead``: what the night's summary counts (admission and recording only).
- ``writer``: the background writer's time per candidate (MLflow run, diff, folder
  removal), which runs beside the loop and is not on its path unless the queue is full.

``--function-cost`` also measures the fixed cost of a ``function`` candidate beyond its own
``evaluate()``: ``optimizer evaluate`` of the toy target whose ``evaluate`` sleeps 0.5 s
(one repeat), ``cost_s`` less 0.5 s, median of 5. Writes
``bench/results/engine-overhead.json``.

    .venv/bin/python bench/engine_overhead.py [--candidates 1000] [--function-cost]
"""

from __future__ import annotations

import argparse
import inspect
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators.function import toy  # noqa: E402
from optimizer import candidate, loop, night, scheduler  # noqa: E402
from optimizer.config import load_experiment  # noqa: E402
from optimizer.proposers import make_proposer  # noqa: E402


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median_ms": round(statistics.median(ordered), 1),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
            "mean_ms": round(statistics.fmean(ordered), 1), "n": len(ordered)}


def night_overhead(n: int) -> dict[str, Any]:
    """One night of ``n`` candidates, its critical path and writer time per candidate."""
    # per iteration of the search: [started, propose s, evaluate s, evaluations], and the
    # same in the loop thread's CPU time (the wall time counts other processes on a
    # shared machine too)
    iters: list[list[float]] = []
    cpu: list[list[float]] = []
    ended = [0.0, 0.0]
    writer_s: list[float] = []
    searching = [False]

    next_job, evaluate = scheduler.Scheduler.next_job, candidate.evaluate_candidate
    submit = night.Writer.submit

    def timed_next_job(*a: Any, **k: Any) -> Any:
        if searching[0]:
            iters.append([time.perf_counter(), 0.0, 0.0, 0])
            cpu.append([time.process_time(), 0.0, 0.0])
        return next_job(*a, **k)

    def timed_evaluate(*a: Any, **k: Any) -> Any:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return evaluate(*a, **k)
        finally:
            if searching[0] and iters:
                iters[-1][2] += time.perf_counter() - t0
                iters[-1][3] += 1
                cpu[-1][2] += time.process_time() - c0

    def timed_steps(steps: Any) -> Any:
        while True:
            t0 = time.perf_counter()
            try:
                next(steps)
            except StopIteration as stop:
                return stop.value
            finally:
                writer_s.append(time.perf_counter() - t0)
            yield

    def timed_submit(self: night.Writer, job: Any, first: bool = False) -> Any:
        def timed() -> Any:
            t0 = time.perf_counter()
            try:
                value = job()
            finally:
                writer_s.append(time.perf_counter() - t0)
            return timed_steps(value) if inspect.isgenerator(value) else value
        return submit(self, timed, first)

    search = scheduler.Scheduler.run

    def timed_search(*a: Any, **k: Any) -> Any:
        searching[0] = True
        try:
            return search(*a, **k)
        finally:
            searching[0] = False
            ended[:] = [time.perf_counter(), time.process_time()]

    scheduler.Scheduler.next_job = timed_next_job  # type: ignore[method-assign]
    candidate.evaluate_candidate = timed_evaluate  # type: ignore[assignment]
    scheduler.Scheduler.run = timed_search  # type: ignore[method-assign]
    night.Writer.submit = timed_submit  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        repo = toy.make_toy_repo(Path(tmp) / "repo")
        cfg = load_experiment(
            repo / "experiments/toy.toml",
            [f"budget.max_candidates={n}", "budget.minutes=30", "stats.minimize_trials=0"],
            workspace=repo,
        )
        proposer = make_proposer(cfg, 1)
        plain_propose = proposer.propose

        def timed_propose(context: Any) -> Any:
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return plain_propose(context)
            finally:
                if searching[0] and iters:
                    iters[-1][1] += time.perf_counter() - t0
                    cpu[-1][1] += time.process_time() - c0

        proposer.propose = timed_propose  # type: ignore[method-assign]
        start = time.perf_counter()
        summary = loop.run(cfg, proposer=proposer, say=lambda s: None)
        wall = time.perf_counter() - start
    ends = [i[0] for i in iters[1:]] + [ended[0]]
    evaluated = [(end - start - p - e, p, e) for (start, p, e, n), end in
                 zip(iters, ends, strict=True) if n]  # a duplicate is not evaluated
    critical = [1000 * c for c, _, _ in evaluated]
    cpu_ends = [c[0] for c in cpu[1:]] + [ended[1]]
    critical_cpu = [1000 * (end - start - p - e) for (start, p, e), end, it in
                    zip(cpu, cpu_ends, iters, strict=True) if it[3]]
    candidates = len(critical) + 1  # the seed is evaluated before the search
    out: dict[str, Any] = {"candidates": candidates, "run_wall_s": round(wall, 1),
                           "duplicates": len(iters) - len(evaluated)}
    # the first search candidate pays for imports and store creation
    out["critical_n100"] = _stats(critical[1:100])
    out["critical_cpu_n100"] = _stats(critical_cpu[1:100])
    if len(critical) >= 200:
        out[f"critical_n{candidates}"] = _stats(critical[-100:])
        out[f"critical_cpu_n{candidates}"] = _stats(critical_cpu[-100:])
    out["engine_overhead_n100"] = _stats(summary.engine_overhead_ms[2:101])
    if len(critical) >= 200:
        out[f"engine_overhead_n{candidates}"] = _stats(summary.engine_overhead_ms[-100:])
    out["propose_ms_median"] = round(1000 * statistics.median(p for _, p, _ in evaluated), 1)
    out["evaluate_ms_median"] = round(1000 * statistics.median(e for _, _, e in evaluated), 1)
    # the median of every 100 candidates in turn: how the critical path grows with N
    out["critical_median_ms_per_100"] = [round(statistics.median(critical[i:i + 100]), 1)
                                         for i in range(0, len(critical), 100)]
    out["writer_ms_per_candidate"] = round(1000 * sum(writer_s) / max(1, candidates), 1)
    return out


def function_cost(repeats: int = 5, sleep_s: float = 0.5) -> dict[str, Any]:
    """``optimizer evaluate`` cost_s of a target whose evaluate() sleeps ``sleep_s``."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = toy.make_toy_repo(Path(tmp) / "repo", toy.SLOW_EVALUATE)
        env = {**os.environ, "TOY_EVAL_S": str(sleep_s),
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        costs = []
        for _ in range(repeats):
            out = subprocess.run(
                [sys.executable, "-m", "optimizer.cli", "evaluate", "targets/function/toy",
                 "--set", "evaluator.repeats=1", "--json"],
                cwd=repo, env=env, capture_output=True, text=True, check=True).stdout
            costs.append(float(json.loads(out)["cost_s"]))
    return {"evaluate_sleeps_s": sleep_s, "cost_s": [round(c, 3) for c in costs],
            "fixed_s_median": round(statistics.median(costs) - sleep_s, 3),
            "command": "optimizer evaluate targets/function/toy --set evaluator.repeats=1"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidates", type=int, default=100)
    ap.add_argument("--function-cost", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/engine-overhead.json")
    args = ap.parse_args()
    load_before = round(os.getloadavg()[0], 2)
    result: dict[str, Any] = {
        "benchmark": "engine critical path per candidate (ms), toy function target, serial loop",
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "python": platform.python_version(),
        **night_overhead(args.candidates),
    }
    if args.function_cost:
        result["function_candidate_fixed_cost"] = function_cost()
    # other processes on the machine inflate the wall times (not the CPU times)
    result["load_average_1min"] = {"before": load_before, "after": round(os.getloadavg()[0], 2)}
    result["command"] = (f"python bench/engine_overhead.py --candidates {args.candidates}"
                         + (" --function-cost" if args.function_cost else ""))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
