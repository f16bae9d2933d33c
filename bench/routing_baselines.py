"""Every routing baseline on one workload and fleet: the baseline table.

    .venv/bin/python bench/routing_baselines.py                       # Mooncake hour, 8 H200
    .venv/bin/python bench/routing_baselines.py --replicas 4 --rate-scale 2
    .venv/bin/python bench/routing_baselines.py --synthetic 7 --json bench/results/x.json

Writes a Markdown table to stdout and, with --json, the metrics per baseline.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators.routing.baselines import load_policy  # noqa: E402
from evaluators.routing.fleet import build_fleet  # noqa: E402
from evaluators.routing.metrics import compute_metrics  # noqa: E402
from evaluators.routing.sim import simulate  # noqa: E402
from evaluators.routing.workload import SyntheticSpec, load_trace, synthetic  # noqa: E402

BASELINES = ROOT / "targets" / "routing" / "baselines"
MOONCAKE = ROOT.parent / "shared" / "data" / "traces" / "mooncake_conversation.jsonl"
COLUMNS = ("ttft_p50_s", "ttft_p99_s", "tpot_p99_s", "prefix_hit_ratio", "drops",
           "preemptions", "usd_per_mtok")


def run_all(workload, fleet, policies):
    rows = {}
    for path in policies:
        start = time.perf_counter()
        res = simulate(workload, fleet, load_policy(path))
        metrics = compute_metrics(res)
        metrics["sim_s"] = time.perf_counter() - start
        rows[path.stem] = metrics
    return rows


def table(rows) -> str:
    head = "| policy | TTFT p50 (s) | TTFT p99 (s) | TPOT p99 (ms) | prefix hit | drops | " \
           "preempt | USD/Mtok |"
    lines = [head, "|" + "---|" * 8]
    for name, m in sorted(rows.items(), key=lambda kv: kv[1]["ttft_p99_s"]):
        lines.append(
            f"| {name} | {m['ttft_p50_s']:.3f} | {m['ttft_p99_s']:.3f} | "
            f"{m['tpot_p99_s'] * 1e3:.1f} | {m['prefix_hit_ratio']:.1%} | {m['drops']:.0f} | "
            f"{m['preemptions']:.0f} | {m['usd_per_mtok']:.3f} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", type=Path, default=MOONCAKE)
    ap.add_argument("--synthetic", type=int, default=None, help="seed of the synthetic workload")
    ap.add_argument("--accelerator", default="H200")
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--rate-scale", type=float, default=1.0)
    ap.add_argument("--extra", type=Path, nargs="*", default=[], help="more policy files")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.synthetic is not None:
        workload = synthetic(SyntheticSpec(), args.synthetic)
    else:
        if not args.trace.is_file():
            print(f"skipped: trace {args.trace} not found (traces are not part of the project)")
            return 0
        workload = load_trace(args.trace)
    if args.rate_scale != 1.0:
        workload = workload.scale_rate(args.rate_scale)
    fleet = build_fleet([{"accelerator": args.accelerator, "count": args.replicas}])
    policies = sorted(BASELINES.glob("*.py")) + list(args.extra)
    rows = run_all(workload, fleet, policies)
    print(f"{workload.name}: {len(workload)} requests, {args.replicas} x {args.accelerator}")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({
            "workload": workload.name, "requests": len(workload),
            "fleet": f"{args.replicas} x {args.accelerator}", "rate_scale": args.rate_scale,
            "machine": f"{platform.processor() or platform.machine()}, Python "
                       f"{platform.python_version()}, one core",
            "date": time.strftime("%Y-%m-%d"), "results": rows,
        }, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
