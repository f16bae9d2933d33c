"""Simulation speed: the Mooncake conversation hour (12,031 requests) on 8 H200 replicas.

    .venv/bin/python bench/routing_speed.py [--json bench/results/routing-speed.json]

CPU time of one simulation per baseline policy (best of --repeats), on one core; and the
wall time of one full sandboxed evaluation (correctness + performance) of the nightly
target's seed policy.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators import get  # noqa: E402
from evaluators._base import EvalContext  # noqa: E402
from evaluators.routing.child import load_policy  # noqa: E402
from evaluators.routing.fleet import build_fleet  # noqa: E402
from evaluators.routing.sim import simulate  # noqa: E402
from evaluators.routing.workload import load_mooncake  # noqa: E402
from optimizer.sandbox import Sandbox, SandboxSettings  # noqa: E402
from optimizer.targets import load_target  # noqa: E402

MOONCAKE = ROOT.parent / "shared" / "data" / "traces" / "mooncake_conversation.jsonl"


def nightly_eval_s() -> float:
    spec = load_target(ROOT / "targets/routing/global", ROOT)
    ev = get("routing")(spec)
    with tempfile.TemporaryDirectory() as tmp, Sandbox(
        SandboxSettings(timeout_s=60, isolation="rlimits")
    ) as sb:
        io = Path(tmp) / "io"
        io.mkdir()
        ctx = EvalContext(sandbox=sb, seed=0, scratch=Path(tmp), io_dir=io, timeout_s=60)
        ev.evaluate(spec.path, ctx)  # warm the trusted side's workload cache
        start = time.perf_counter()
        res = ev.evaluate(spec.path, ctx)
        assert res.ok, res.reason
        return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not MOONCAKE.is_file():
        print(f"skipped: trace {MOONCAKE} not found (traces are not part of the project)")
        return 0
    workload = load_mooncake(MOONCAKE)
    fleet = build_fleet([{"accelerator": "H200", "count": 8}])
    out: dict[str, float] = {}
    for path in sorted((ROOT / "targets/routing/baselines").glob("*.py")):
        best = float("inf")
        for _ in range(args.repeats):
            route = load_policy(path)
            start = time.process_time()
            simulate(workload, fleet, route)
            best = min(best, time.process_time() - start)
        out[path.stem] = round(best, 3)
        print(f"{path.stem:20s} {best:.3f} s CPU")
    evaluation = nightly_eval_s()
    print(f"nightly routing_global: one evaluation {evaluation:.2f} s wall")
    if args.json:
        args.json.write_text(json.dumps({
            "workload": "mooncake_conversation (12,031 requests, 1 h)", "fleet": "8 x H200",
            "cpu_s_per_simulation": out, "nightly_evaluation_wall_s": round(evaluation, 2),
            "machine": f"{platform.machine()} {platform.processor()}, 2 cores shared, "
                       f"Python {platform.python_version()}, one core per simulation",
            "date": time.strftime("%Y-%m-%d"),
        }, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
