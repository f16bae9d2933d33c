"""How a candidate's outcome is written into Optuna trials and git commit messages."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import TrialState

from optimizer.records import Candidate, CandidateState, EvalResult
from optimizer.targets import TargetSpec


def tell(study: optuna.Study, trial: optuna.trial.Trial, result: EvalResult) -> None:
    if result.ok and result.objectives:
        study.tell(trial, list(result.objectives))
    elif result.state is CandidateState.PRUNED:
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, state=TrialState.FAIL)


def set_result_attrs(trial: Any, result: EvalResult, commit: str, run_id: str) -> None:
    trial.set_user_attr("reason", result.reason[:2000])
    trial.set_user_attr("metrics", {k: float(v) for k, v in result.metrics.items()})
    trial.set_user_attr("objectives", list(result.objectives))
    trial.set_user_attr("commit", commit)
    trial.set_user_attr("mlflow_run_id", run_id)
    trial.set_user_attr("state", result.state.value)  # last: marks the record complete


def commit_message(target: TargetSpec, cand: Candidate, result: EvalResult) -> str:
    lines = [
        f"{target.name} {cand.id}: {cand.summary or 'candidate'}"[:200],
        "",
        f"state: {result.state.value}",
    ]
    if result.reason:
        lines.append(f"reason: {result.reason[:1500]}")
    lines.append(f"proposer: {cand.proposer}")
    lines.append(f"parent: {cand.parent_id or '-'}")
    if cand.knobs:
        lines.append("knobs: " + ", ".join(f"{k}={v!r}" for k, v in sorted(cand.knobs.items())))
    for name, value in sorted(result.metrics.items()):
        lines.append(f"metric {name}: {value:.6g}")
    lines.append(f"evaluation: {result.cost_s:.2f} s")
    return "\n".join(lines) + "\n"
