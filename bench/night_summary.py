"""Per-target figures of a night from its Optuna study: candidates, states, the seed's and
the candidates' wall time (trial start to finish, evaluation and engine work together).

    python bench/night_summary.py experiments/kernels.toml [--out FILE.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optuna  # noqa: E402

from optimizer.config import load_experiment  # noqa: E402


def summarise(experiment: Path) -> dict:
    start = experiment.resolve().parent
    workspace = next((d for d in (start, *start.parents) if (d / ".git").exists()), Path.cwd())
    cfg = load_experiment(experiment, workspace=workspace)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = {}
    for entry in cfg.targets:
        name = f"{cfg.name}/{entry.spec.name}"
        try:
            study = optuna.load_study(study_name=name, storage=cfg.optuna_storage)
        except KeyError:
            continue
        rows = []
        for t in study.trials:
            a = t.user_attrs
            if not a.get("candidate") or t.duration is None:
                continue
            metrics = a.get("metrics") or {}
            eval_s = sum(v for k, v in metrics.items() if k.startswith("stage_s/"))
            rows.append({"candidate": a["candidate"], "proposer": a.get("proposer", ""),
                         "state": a.get("state", ""), "s": t.duration.total_seconds(),
                         "reason": str(a.get("reason", ""))[:160],
                         "objective": (a.get("objectives") or [None])[0],
                         # the evaluation itself: its stages (the trial's duration adds the
                         # queues, the branch and the records)
                         "eval_s": round(eval_s, 3),
                         # less the wait for the device while another slot timed its own
                         "own_s": round(eval_s - metrics.get("cost_s/device_wait", 0.0), 3),
                         "cost": {k: round(v, 2) for k, v in metrics.items()
                                  if k.startswith(("stage_s/", "cost_s/"))},
                         # what the evaluation measured (speedups, acceptance, cost ratios)
                         "metrics": {k: round(v, 4) for k, v in metrics.items()
                                     if not k.startswith(("stage_s/", "cost_s/"))
                                     and isinstance(v, (int, float))}})
        seed = [r for r in rows if r["proposer"] == "seed"]
        rest = [r for r in rows if r["proposer"] != "seed" and r["state"] != "DUPLICATE"]
        out[entry.spec.name] = {
            "candidates": len(rows),
            "states": dict(collections.Counter(r["state"] for r in rows)),
            "seed_s": seed[0]["s"] if seed else None,
            "candidate_median_s": statistics.median(r["s"] for r in rest) if rest else None,
            "seed_eval_s": seed[0]["eval_s"] if seed else None,
            "candidate_median_eval_s": (statistics.median(r["eval_s"] for r in rest)
                                        if rest else None),
            "seed_own_s": seed[0]["own_s"] if seed else None,
            "candidate_median_own_s": (statistics.median(r["own_s"] for r in rest)
                                       if rest else None),
            "seed_cost": seed[0]["cost"] if seed else {},
            "candidate_median_cost": {
                k: statistics.median(r["cost"][k] for r in rest if k in r["cost"])
                for k in sorted({k for r in rest for k in r["cost"]})},
            "failed_share": (sum(r["state"] == "FAILED" for r in rows) / len(rows)
                             if rows else 0.0),
            # knob samples the target's constraints ruled out before any candidate was made
            "constrained": sum(t.user_attrs.get("state") == "CONSTRAINED" for t in study.trials),
            "rows": rows,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("experiment", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    data = summarise(args.experiment)
    if args.out:
        args.out.write_text(json.dumps(data, indent=1))
    nan = float("nan")
    print(f"{'target':<16}{'cands':>6}{'seed s':>8}{'med s':>8}{'seed own':>9}{'med own':>8}"
          f"{'failed':>8}  states")
    for name, d in data.items():
        med, own = d["candidate_median_s"], d["candidate_median_own_s"]
        print(f"{name:<16}{d['candidates']:>6}{d['seed_s'] or 0:>8.1f}"
              f"{med if med is not None else nan:>8.1f}{d['seed_own_s'] or 0:>9.1f}"
              f"{own if own is not None else nan:>8.1f}{d['failed_share']:>8.0%}  "
              f"{d['states']}")
        print(f"{'':<16}seed {d['seed_cost']}; candidates' median {d['candidate_median_cost']}")


if __name__ == "__main__":
    main()
