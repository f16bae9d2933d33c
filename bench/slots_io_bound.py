"""Candidates per second of an I/O-bound function target with 4 slots against 1.

The toy target's evaluate() waits ``--eval-s`` seconds and uses no CPU, so 4 slots could
evaluate 4x the candidates of 1; what they lose is the engine's own latency beside three
other slots (sandbox starts, the scheduler's lock, the GIL). Each pair is two nights in a
fresh throwaway repository, 1 slot (``--one`` candidates, 16) then 4 (``--four``, 32),
each counted from the seed's line to the last candidate's (as the slow test
``tests/evaluators/test_function.py -k io_bound`` counts them). 16 and 32 are nights of 9
and 5 s, in which the 4 slots' start and end weigh; ``--one 24 --four 96`` are nights of
about 14 s each. ``--valid-only`` counts the VALID candidates alone: each waited
``--eval-s``, where an INVALID one fails in about 50 ms, and how many fail differs from
night to night (a ratio above 4 says so).
Run it on a quiet machine: a pair's ratio moves by +-5% from one pair to the next.

    .venv/bin/python bench/slots_io_bound.py [--pairs 8] [--one N] [--four N]
        [--valid-only] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators.function import toy  # noqa: E402


def candidates_per_second(repo: Path, slots: int, n: int, valid_only: bool = False) -> float:
    """A night of the toy target with ``slots`` slots: candidates per second of its search,
    from the seed's line to the n-th candidate's (the I/O-bound figure of the slots, with
    ``SLOW_EVALUATE`` and ``TOY_EVAL_S`` set). ``valid_only``: count VALID candidates only
    (an INVALID one fails before the wait, in about 50 ms, and how many there are differs
    from night to night)."""
    import time

    from optimizer.config import load_experiment
    from optimizer.loop import run

    cfg = load_experiment(
        repo / "experiments/toy.toml",
        # with valid_only, room for about 1 INVALID candidate in 4
        [f"budget.max_candidates={n + 1 + (n // 4 + 2 if valid_only else 0)}",
         "budget.minutes=30", "stats.minimize_trials=0",
         "targets.toy.evaluator.repeats=1", f"run.slots={slots}",
         f"proposer.concurrency={slots}", f"state_dir=.optimizer-{slots}"],
        workspace=repo)
    stamps: list[float] = []
    def note(line: str) -> None:
        if "] c0" in line and (not valid_only or " VALID " in line):
            stamps.append(time.monotonic())

    run(cfg, say=note)
    if len(stamps) <= n:
        raise RuntimeError(f"the toy night evaluated {len(stamps)} candidates, not {n + 1}")
    return n / (stamps[n] - stamps[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--eval-s", type=float, default=0.5)
    ap.add_argument("--one", type=int, default=16, help="candidates counted with 1 slot")
    ap.add_argument("--four", type=int, default=32, help="candidates counted with 4 slots")
    ap.add_argument("--valid-only", action="store_true",
                    help="count VALID candidates only (each waited --eval-s)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    os.environ["GIT_CONFIG_NOSYSTEM"] = "1"
    os.environ["TOY_EVAL_S"] = str(args.eval_s)
    pairs = []
    for i in range(args.pairs):
        repo = toy.make_toy_repo(Path(tempfile.mkdtemp()) / "repo", toy.SLOW_EVALUATE)
        one = candidates_per_second(repo, 1, args.one, args.valid_only)
        four = candidates_per_second(repo, 4, args.four, args.valid_only)
        pairs.append({"one_per_s": round(one, 4), "four_per_s": round(four, 4),
                      "ratio": round(four / one, 4)})
        print(f"pair {i + 1}: 1 slot {one:.3f}/s, 4 slots {four:.3f}/s, {four / one:.3f}x",
              flush=True)
    ratios = [p["ratio"] for p in pairs]
    out = {"date": date.today().isoformat(), "machine": f"{os.cpu_count()} cores, "
           f"{platform.machine()}, Python {platform.python_version()}",
           "eval_s": args.eval_s, "candidates": {"one_slot": args.one, "four_slots": args.four,
                                          "valid_only": args.valid_only},
           "pairs": pairs, "median_ratio": statistics.median(ratios),
           "min_ratio": min(ratios), "max_ratio": max(ratios)}
    print(f"median {out['median_ratio']:.3f}x ({out['min_ratio']:.3f}x-{out['max_ratio']:.3f}x)")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
