"""Does the knob search beat the best baseline? Optuna over the seed policy's knobs.

    .venv/bin/python bench/routing_search.py --trials 40 [--json bench/results/routing-search.json]
    .venv/bin/python bench/routing_search.py --target targets/routing/scheduler --trials 40 \
        --json bench/results/routing-scheduler-search.json

Reads the nightly target's settings (targets/routing/global/target.toml), runs every
baseline on the training and held-out workloads, then a TPE search (seeded) over the
seed policy's knobs on the training workload, in-process (no sandbox: this checks the
design, the nightly run checks candidates), and reports the best trial on both.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402

from evaluators.routing.baselines import runner  # noqa: E402
from evaluators.routing.config import (  # noqa: E402
    baselines_dir,
    build_fleet_from,
    build_sim_config,
    build_slo,
    build_workload,
    held_out_settings,
    mode_of,
    router_path,
)
from evaluators.routing.metrics import compute_metrics  # noqa: E402
from optimizer import knobs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", type=Path, default=ROOT / "targets/routing/global")
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    spec = tomllib.loads((args.target / "target.toml").read_text())
    settings = spec["evaluator"]
    metric = spec["objectives"][0]["metric"]
    minimize = spec["objectives"][0].get("direction", "minimize") == "minimize"
    mode = mode_of(settings)
    router = router_path(settings) if mode == "scheduler" else None
    fleet, cfg, slo = build_fleet_from(settings), build_sim_config(settings), build_slo(settings)
    train = build_workload(settings["workload"])
    held = build_workload(held_out_settings(settings))
    source = (args.target / "policy.py").read_text()
    space = knobs.distributions(knobs.parse_knobs(source))
    tmp = Path(tempfile.mkdtemp())

    def score(path: Path, workload) -> float:
        return compute_metrics(runner(mode, workload, fleet, cfg, router)(path), slo)[metric]

    def policy_file(values) -> Path:
        path = tmp / f"p{len(list(tmp.iterdir()))}.py"
        path.write_text(knobs.substitute(source, values))
        return path

    base = {}
    folder = baselines_dir(settings)
    for path in sorted(folder.glob("*.py")) if folder else []:
        base[path.stem] = {"train": score(path, train), "held_out": score(path, held)}
    pick = min if minimize else max
    best_base = pick(base, key=lambda k: base[k]["train"])
    seed_train = score(args.target / "policy.py", train)
    start = time.perf_counter()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=args.seed),
                                direction="minimize" if minimize else "maximize")
    study.enqueue_trial(knobs.values_of({"policy.py": source}))
    study.optimize(lambda t: score(policy_file(
        {k: t._suggest(k, d) for k, d in space.items()}), train), n_trials=args.trials)
    search_s = time.perf_counter() - start
    best = study.best_trial
    best_held = score(policy_file(best.params), held)
    better = (lambda a, b: a < b) if minimize else (lambda a, b: a > b)
    out = {
        "metric": metric, "trials": args.trials, "search_s": round(search_s, 1),
        "train_requests": len(train), "held_out_requests": len(held),
        "baselines": base, "best_baseline": best_base, "seed_train": seed_train,
        "best_params": best.params, "best_train": best.value, "best_held_out": best_held,
        "seed_held_out": score(args.target / "policy.py", held),
        "first_trial_beating_best_baseline": next(
            (t.number for t in study.trials if t.value is not None
             and better(t.value, base[best_base]["train"])), None),
    }
    print(json.dumps(out, indent=1))
    held_best = pick(v["held_out"] for v in base.values())
    print(f"train: best {best.value:.3f} vs best baseline {base[best_base]['train']:.3f}; "
          f"held-out: {best_held:.3f} vs best baseline there {held_best:.3f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
