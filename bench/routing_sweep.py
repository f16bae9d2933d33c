"""Where does load matter? Every baseline on a workload family over rate scales.

    .venv/bin/python bench/routing_sweep.py --target targets/routing/global \
        --family '{ name = "chat", seed = 1 }' --scales 0.5 0.75 1 1.5 2

For each rate scale: the best baseline's value of the compared metric (p99 TTFT by
default), which baseline it is, and the spread between the best and the worst baseline.
A training sweep takes the scales around where the best baseline's p99 TTFT crosses the
SLO: below it there is no queue to route around (every policy ties), far above it every
policy drowns alike.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators.routing.baselines import best_baseline, runner  # noqa: E402
from evaluators.routing.config import (  # noqa: E402
    baselines_dir,
    build_sim_config,
    build_slo,
    build_workload,
    case_fleet,
    mode_of,
    router_path,
    sweep_cases,
)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", type=Path, default=ROOT / "targets/routing/global")
    ap.add_argument("--family", required=True, help="a sweep entry as an inline TOML table")
    ap.add_argument("--scales", type=float, nargs="+", required=True)
    ap.add_argument("--metric", default="ttft_p99_s")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    settings = tomllib.loads((args.target / "target.toml").read_text())["evaluator"]
    entry = tomllib.loads(f"x = {args.family}")["x"]
    entry["rate_scales"] = args.scales
    settings = {**settings, "sweep": [entry]}
    mode = mode_of(settings)
    router = router_path(settings) if mode == "scheduler" else None
    folder = baselines_dir(settings)
    assert folder is not None
    slo, cfg = build_slo(settings), build_sim_config(settings)
    minimize = args.metric not in ("slo_attainment", "goodput_rps")
    rows = []
    for case in sweep_cases(settings, "sweep"):
        if case.missing():
            print(f"{case.label}: skipped, {case.missing()}")
            continue
        start = time.perf_counter()
        w = build_workload(case.workload)
        rep = best_baseline(folder, runner(mode, w, case_fleet(settings, case), cfg, router),
                            slo, args.metric, minimize)
        assert rep is not None
        values = [m[args.metric] for m in rep.metrics.values()]
        spread = max(values) / max(min(values), 1e-12) - 1
        rows.append({"workload": case.label, "requests": len(w),
                     "best": rep.best, "best_value": rep.best_metrics[args.metric],
                     "spread": spread, "s": time.perf_counter() - start})
        print(f"{case.label}: {len(w)} requests, best {rep.best} {args.metric} "
              f"{rep.best_metrics[args.metric]:.3f} (SLO ttft {slo.ttft_s:g} s), spread "
              f"{spread:.1%}, {time.perf_counter() - start:.1f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
