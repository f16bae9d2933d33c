"""Candidates per minute with evaluation slots and proposals in flight.

A proposer of fixed latency (the offline proposer, then a sleep: a remote model's round trip)
and a function target whose evaluate() takes a fixed time (a sleep) run through
``optimizer.loop.run`` in a throwaway git repository, once per (slots, concurrency). The
ideal rate the latencies allow is min(concurrency / proposal_s, slots / evaluation_s), and
1 / (proposal_s + evaluation_s) for the serial loop; the measured rate counts candidates
over the search's wall time (seed and winner selection excluded). What separates the two is
the engine's own cost per candidate (sandbox process, git branch, MLflow run, Optuna trial).
Writes ``bench/results/throughput.json``.

    .venv/bin/python bench/throughput.py [--candidates 96] [--proposal-s 2] [--eval-s 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators.function import toy  # noqa: E402
from optimizer.config import load_experiment  # noqa: E402
from optimizer.loop import run  # noqa: E402
from optimizer.proposers.offline import OfflineProposer  # noqa: E402

CONFIGS = ((1, 1), (1, 4), (2, 1), (2, 4), (2, 8))


class FixedLatency(OfflineProposer):
    """The offline proposer, answering after ``latency_s`` like a remote model."""

    def __init__(self, latency_s: float):
        super().__init__(seed=0)
        self.latency_s = latency_s
        self.times: list[float] = []

    def propose(self, context):  # type: ignore[no-untyped-def]
        time.sleep(self.latency_s)
        return super().propose(context)


def measure(repo: Path, slots: int, concurrency: int, n: int, proposal_s: float) -> dict:
    cfg = load_experiment(
        repo / "experiments/toy.toml",
        [f"budget.max_candidates={n + 1}", "budget.minutes=30", "stats.minimize_trials=0",
         "targets.toy.evaluator.repeats=1",  # one evaluate() per candidate: eval_s is its cost
         f"run.slots={slots}", f"proposer.concurrency={concurrency}",
         f"state_dir=.optimizer-{slots}-{concurrency}"],
        workspace=repo,
    )
    stamps: list[float] = []
    summary = run(cfg, proposer=FixedLatency(proposal_s),
                  say=lambda line: stamps.append(time.monotonic()) if "] c0" in line else None)
    (t,) = summary.targets
    # the search: from the seed's line to the last candidate's line
    span = stamps[n] - stamps[0] if len(stamps) > n else float("nan")
    return {"slots": slots, "concurrency": concurrency, "candidates": t.candidates - 1,
            "search_s": round(span, 2), "per_min": round(60 * n / span, 1),
            "eval_cost_s_median": round(sorted(t.eval_s[1:])[len(t.eval_s[1:]) // 2], 3),
            # what an evaluation costs beyond evaluate() itself: validate(), the sandboxed
            # processes, the stand-in's round trips
            "fixed_eval_s_median": round(
                sorted(t.eval_s[1:])[len(t.eval_s[1:]) // 2] - float(os.environ["TOY_EVAL_S"]), 3),
            "engine_overhead_ms_median": round(
                sorted(summary.engine_overhead_ms[1:])[len(summary.engine_overhead_ms[1:]) // 2],
                1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidates", type=int, default=96)
    ap.add_argument("--proposal-s", type=float, default=2.0)
    ap.add_argument("--eval-s", type=float, default=0.5)
    ap.add_argument("--configs", default=",".join(f"{s}x{c}" for s, c in CONFIGS),
                    help="slots x concurrency pairs, e.g. 1x1,2x8")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/throughput.json")
    args = ap.parse_args()
    os.environ["TOY_EVAL_S"] = str(args.eval_s)
    configs = [tuple(int(x) for x in c.split("x")) for c in args.configs.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = toy.make_toy_repo(Path(tmp) / "repo", toy.SLOW_EVALUATE)
        for slots, conc in configs:
            row = measure(repo, slots, conc, args.candidates, args.proposal_s)
            serial = slots == 1 and conc == 1
            ideal = (60 / (args.proposal_s + args.eval_s) if serial
                     else 60 * min(conc / args.proposal_s, slots / args.eval_s))
            row["ideal_per_min"] = round(ideal, 1)
            row["of_ideal"] = round(row["per_min"] / ideal, 2)
            rows.append(row)
            print(f"slots {slots} concurrency {conc}: {row['per_min']:6.1f} candidates/min "
                  f"(ideal {ideal:6.1f}, {row['of_ideal']:.2f}); an evaluation costs "
                  f"{row['eval_cost_s_median']:.2f} s for {args.eval_s} s of evaluate(); "
                  f"engine {row['engine_overhead_ms_median']:.0f} ms per candidate",
                  flush=True)
    result = {
        "benchmark": "candidates per minute by evaluation slots and proposals in flight",
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "python": platform.python_version(),
        "proposal_s": args.proposal_s, "evaluate_s": args.eval_s,
        "candidates_per_config": args.candidates,
        "rows": rows,
        "load_average_1min": round(os.getloadavg()[0], 2),
        "command": (f"python bench/throughput.py --candidates {args.candidates} --proposal-s "
                    f"{args.proposal_s} --eval-s {args.eval_s} --configs {args.configs}"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
