"""``optimizer status``: what the stores hold for an experiment, and whether they agree.

Counts per target from all three stores: Optuna trials (candidates and duplicates), MLflow
child runs and git candidate branches, plus the best value and the winner. ``consistent``
is true when every candidate with code has a branch and a run, and every run a trial.
"""

from __future__ import annotations

from typing import Any

from optimizer.config import ExperimentConfig


def collect_status(config: ExperimentConfig) -> dict[str, Any]:
    import optuna

    from optimizer.vcs import Workspace

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ws = Workspace(
        config.workspace, experiment=config.name, state_dir=config.state_dir, base=config.base
    )
    runs = _mlflow_candidates(config)
    out: dict[str, Any] = {
        "experiment": config.name,
        "state_dir": str(config.state_dir),
        "targets": {},
        "totals": {},
    }
    storage = config.optuna_storage
    studies = set()
    if config.search.storage or (config.state_dir / "optuna.db").exists():
        try:
            studies = {s.study_name for s in optuna.get_all_study_summaries(storage)}
        except Exception:  # noqa: BLE001 - an empty or missing store reads as no studies
            studies = set()
    totals = {
        "candidates": 0,
        "duplicates": 0,
        "trials": 0,
        "branches": 0,
        "mlflow_runs": 0,
        "winners": 0,
    }
    consistent = True
    from optimizer.shared_stores import remote_candidate_ids, worker_rows, workers_study

    shared = workers_study(config.name) in studies  # workers' branches are on the remote
    remote_ids = remote_candidate_ids(ws, config.vcs.push) if shared and config.vcs.push else None
    for entry in config.targets:
        name = entry.spec.name
        study_name = f"{config.name}/{name}"
        t: dict[str, Any] = {
            "candidates": 0,
            "duplicates": 0,
            "trials": 0,
            "states": {},
            "branches": 0,
            "mlflow_runs": 0,
            "best": None,
            "winner": None,
        }
        cand_ids: set[str] = set()
        with_code: set[str] = set()
        if study_name in studies:
            study = optuna.load_study(study_name=study_name, storage=storage)
            cand_ids, with_code = _count_trials(study, t)
        branch_ids = set(ws.candidate_ids(name) if remote_ids is None
                         else remote_ids.get(name, ()))
        run_ids = runs.get(name, set())
        t["branches"], t["mlflow_runs"] = len(branch_ids), len(run_ids)
        t["consistent"] = with_code <= branch_ids and cand_ids == run_ids and branch_ids <= cand_ids
        consistent &= t["consistent"]
        out["targets"][name] = t
        for k in ("candidates", "duplicates", "trials", "branches", "mlflow_runs"):
            totals[k] += t[k]
        totals["winners"] += 1 if t["winner"] else 0
    out["totals"] = totals
    out["consistent"] = consistent
    out["workers"] = worker_rows(config) if shared else []
    out["pull_branches"] = [b for b in ws.branches(config.name) if "/pr/" in b]
    if remote_ids is not None:
        out["pull_branches"] = sorted(remote_ids.get("/pr/", ()))
    return out


def _count_trials(study: Any, t: dict[str, Any]) -> tuple[set[str], set[str]]:
    """A target's study counted into ``t`` (trials, duplicates, states, best, winner);
    returns its candidate ids and those with a branch."""
    import optuna

    cand_ids: set[str] = set()
    with_code: set[str] = set()
    trials = study.get_trials(deepcopy=False)
    t["trials"] = len(trials)
    for tr in trials:
        state = tr.user_attrs.get("state", "UNKNOWN")
        if state == "DUPLICATE":
            t["duplicates"] += 1
            continue
        if state == "CONSTRAINED":  # knob values the target rules out: not run
            t["constrained"] = t.get("constrained", 0) + 1
            continue
        cid = tr.user_attrs.get("candidate")
        if cid:
            cand_ids.add(cid)
            if tr.user_attrs.get("branch"):
                with_code.add(cid)
        t["states"][state] = t["states"].get(state, 0) + 1
    t["candidates"] = len(cand_ids)
    valid = [tr for tr in trials if tr.user_attrs.get("state") == "VALID" and tr.values]
    if valid:
        sign = 1 if study.directions[0] == optuna.study.StudyDirection.MINIMIZE else -1
        b = min(valid, key=lambda tr: sign * tr.values[0])
        t["best"] = {"candidate": b.user_attrs.get("candidate"), "value": b.values[0]}
    t["winner"] = study.user_attrs.get("winner")
    return cand_ids, with_code


def _mlflow_candidates(config: ExperimentConfig) -> dict[str, set[str]]:
    """Candidate ids with a child run, per target, over every night of the experiment."""
    if not config.tracking.uri and not (config.state_dir / "mlflow.db").exists():
        return {}
    import logging

    logging.getLogger("mlflow").setLevel(logging.ERROR)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=config.tracking_uri)
    exp = client.get_experiment_by_name(config.name)
    if exp is None:
        return {}
    out: dict[str, set[str]] = {}
    token = None
    while True:
        page = client.search_runs(
            [exp.experiment_id],
            "tags.`optimizer.candidate` != ''",
            max_results=1000,
            page_token=token,
        )
        for run in page:
            tags = run.data.tags
            out.setdefault(tags.get("optimizer.target", "?"), set()).add(
                tags.get("optimizer.candidate", "")
            )
        token = page.token
        if not token:
            break
    return out


def format_status(data: dict[str, Any]) -> str:
    lines = [
        f"experiment {data['experiment']} ({data['state_dir']})",
        f"{'target':<22} {'cands':>5} {'dups':>5} {'trials':>6} {'branches':>8} "
        f"{'runs':>5} {'valid':>5}  best / winner",
    ]
    for name, t in data["targets"].items():
        best = f"{t['best']['value']:.6g} ({t['best']['candidate']})" if t["best"] else "-"
        win = f" -> {t['winner']['pull_branch']}" if t["winner"] else ""
        lines.append(
            f"{name:<22} {t['candidates']:>5} {t['duplicates']:>5} {t['trials']:>6} "
            f"{t['branches']:>8} {t['mlflow_runs']:>5} {t['states'].get('VALID', 0):>5}"
            f"  {best}{win}"
        )
    if data.get("workers"):
        lines.append(f"{'worker':<34} {'state':<6} {'heartbeat':>9}  night / phase / holds")
    for w in data.get("workers", []):
        state = "alive" if w["alive"] else ("done" if w.get("phase") == "done" else "lost")
        holds = ", ".join(w.get("holds") or []) or "-"
        lines.append(
            f"{w['worker']:<34} {state:<6} {w['heartbeat_age_s']:>7.1f} s  {w.get('night')} / "
            f"{w.get('phase')} {w.get('target') or ''} / {holds} ({w.get('candidates', 0)} "
            "candidates)")
    lines.append(
        "stores agree"
        if data["consistent"]
        else "stores DISAGREE: run with --resume to repair interrupted candidates"
    )
    return "\n".join(lines)
