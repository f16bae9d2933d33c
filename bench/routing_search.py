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
import os
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
    case_fleet,
    held_out_settings,
    mode_of,
    router_path,
    sweep_cases,
)
from evaluators.routing.metrics import compute_metrics  # noqa: E402
from evaluators.routing.sweep import Row, score, spread, table  # noqa: E402
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
    if "sweep" in settings:
        return sweep_search(args, settings, mode, router, cfg, slo, metric, minimize)
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


def sweep_search(args, settings, mode, router, cfg, slo, metric, minimize) -> int:
    """A target with a sweep: the objective over the training set, then the best trial
    against the best baseline on every training and held-out workload."""
    import math

    from evaluators.routing.baselines import best_baseline

    compare = str(settings.get("compare", "ttft_p99_s"))
    cmp_min = compare not in ("slo_attainment", "goodput_rps")
    folder = baselines_dir(settings)
    assert folder is not None
    sets = {"training": sweep_cases(settings, "sweep"),
            "held-out": sweep_cases(settings, "held_out_sweep")
            if "held_out_sweep" in settings else []}
    cases = {}
    start = time.perf_counter()
    for which, todo in sets.items():
        for case in todo:
            if case.missing():
                cases[case.label] = (which, case, None, None, None)
                continue
            w = build_workload(case.workload)
            run = runner(mode, w, case_fleet(settings, case), cfg, router)
            rep = best_baseline(folder, run, slo, compare, cmp_min)
            cases[case.label] = (which, case, w, run, rep)
    base_s = time.perf_counter() - start
    source = (args.target / "policy.py").read_text()
    space = knobs.distributions(knobs.parse_knobs(source))
    tmp = Path(tempfile.mkdtemp())

    def rows(path: Path, which: str) -> list[Row]:
        out = []
        for label, (w_set, case, w, run, rep) in cases.items():
            if w_set != which:
                continue
            if w is None:
                out.append(Row(which, label, case.fleet_label or "target's", 0, compare,
                               cmp_min, math.nan, "-", math.nan, 0.0, case.missing()))
                continue
            value = compute_metrics(run(path), slo)[rep.metric]
            out.append(Row(which, label, case.fleet_label or "target's", len(w), rep.metric,
                           rep.minimize, value, rep.best, rep.best_metrics[rep.metric],
                           spread([m[rep.metric] for m in rep.metrics.values()],
                                  rep.minimize)))
        return out

    def objective(path: Path) -> float:
        return score([r.versus for r in rows(path, "training")])["vs_baselines"]

    def policy_file(values) -> Path:
        path = tmp / f"p{len(list(tmp.iterdir()))}.py"
        path.write_text(knobs.substitute(source, values))
        return path

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=args.seed),
                                direction="maximize")
    study.enqueue_trial(knobs.values_of({"policy.py": source}))
    start = time.perf_counter()
    study.optimize(lambda t: objective(policy_file(
        {k: t._suggest(k, d) for k, d in space.items()})), n_trials=args.trials)
    search_s = time.perf_counter() - start
    best = study.best_trial
    path = policy_file(best.params)
    all_rows = rows(path, "training") + rows(path, "held-out")
    text = table(all_rows)
    print(text)
    print(f"best trial {best.number}: vs_baselines {best.value:.4f} (seed "
          f"{study.trials[0].value:.4f}); baselines {base_s:.0f} s, search {search_s:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({
            "target": str(args.target), "trials": args.trials,
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{os.cpu_count()} CPU cores, no GPU, in-process (no sandbox)",
            "seed_vs_baselines": study.trials[0].value, "best_vs_baselines": best.value,
            "best_params": best.params, "search_s": round(search_s, 1),
            "rows": [{**{k: getattr(r, k) for k in ("set", "workload", "fleet", "requests",
                                                   "best", "best_value", "candidate",
                                                   "spread", "missing")},
                      "versus": r.versus, "verdict": r.verdict} for r in all_rows],
            "table": text}, indent=1, sort_keys=True, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
