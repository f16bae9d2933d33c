"""The one save order of a candidate, and how its outcome reads in git and Optuna.

Every place that finishes a candidate (an evaluated one, a rejected proposal, one a killed
run left behind) calls :func:`save`, which writes the three stores in the documented order:

    annotate the branch -> MLflow child run (and the kind's outputs) -> trial attributes
    (``state`` last) -> tell

so that a run killed between any two steps can be resumed with the stores agreeing: a
trial whose record is complete was logged and only needs its tell; anything else is
marked FAILED ("interrupted") everywhere (:mod:`optimizer.resume`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import optuna
from optuna.trial import TrialState

from optimizer.night import Run
from optimizer.records import Candidate, CandidateRecord, CandidateState, EvalResult
from optimizer.targets import TargetSpec


def save(
    r: Run,
    target: TargetSpec,
    study: optuna.Study,
    trial: optuna.trial.Trial,
    record: CandidateRecord,
    cand: Candidate,
    result: EvalResult,
    *,
    prompt: str = "",
    response: str = "",
    eval_log: str = "",
    outputs: Callable[[str], None] | None = None,
    guard: Callable[[str], AbstractContextManager[Any]] | None = None,
) -> CandidateRecord:
    """Finish ``cand`` in git, MLflow and Optuna, in that order; returns the final record.

    ``outputs(run_id)`` logs what the evaluation left besides metrics (called right after
    the MLflow run exists). A candidate without a branch (a rejected proposal: no code)
    skips the git step. ``guard(store)`` is held around each store's step ("git",
    "mlflow", "optuna"): the concurrent search records one candidate in MLflow while
    another is admitted.
    """
    hold = guard or (lambda store: contextlib.nullcontext())
    commit = diff = ""
    if record.branch:
        with hold("git"):
            commit = r.ws.annotate(target.name, cand.id, commit_message(target, cand, result))
            diff = r.ws.diff(target.name, cand.id)
    with hold("mlflow"):
        run_id = _log(r, trial, cand, result, record, commit, diff, prompt, response, eval_log,
                      outputs)
    final = record.finished(result, commit, run_id)
    with hold("optuna"):
        write_attrs(trial, final)
        tell(study, trial, result)
    return final


def _log(r: Run, trial: Any, cand: Candidate, result: EvalResult, record: CandidateRecord,
         commit: str, diff: str, prompt: str, response: str, eval_log: str,
         outputs: Callable[[str], None] | None) -> str:
    run_id = r.tracker.log_candidate(
        parent_run_id=r.summary.parent_run_id,
        candidate=cand,
        result=result,
        branch=record.branch,
        commit=commit,
        trial_number=trial.number,
        diff=diff,
        prompt=prompt,
        response=response,
        eval_log=eval_log,
    )
    if outputs is not None:
        outputs(run_id)
    return run_id


def write_attrs(trial: Any, record: CandidateRecord) -> None:
    """The record into the trial's user attributes (``state`` last: it marks completion)."""
    for key, value in record.to_attrs().items():
        trial.set_user_attr(key, value)


def tell(study: optuna.Study, trial: Any, result: EvalResult) -> None:
    if result.ok and result.objectives:
        study.tell(trial, list(result.objectives))
    elif result.state is CandidateState.PRUNED:
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, state=TrialState.FAIL)


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


def running_message(target: TargetSpec, cand: Candidate) -> str:
    """The branch's message while its candidate is evaluated."""
    return (
        f"{target.name} {cand.id}: {cand.summary or 'candidate'}"
        f"\n\nstate: RUNNING\nproposer: {cand.proposer}\n"
    )
