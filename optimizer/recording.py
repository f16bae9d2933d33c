"""The one save order of a candidate, and how its outcome reads in git and Optuna.

Every place that finishes a candidate (an evaluated one, a rejected proposal, one a killed
run left behind) calls :func:`save`, which writes the three stores in the documented order:

    annotate the branch -> the MLflow run exists (created while the candidate was
    evaluated) -> the pending record on disk -> trial attributes (one transaction,
    ``state`` last) -> tell -> [the writer thread: the run's params, metrics, artifacts and
    end, the kind's outputs, the folder's removal, the pending record deleted]

The loop goes on after the tell (on the development machine the MLflow part took 27-35 ms
per candidate). What the writer has not done when a run is killed is done by ``--resume``:
a trial whose record is complete only needs its tell; a pending record whose trial was told
is finished from the record and the trial (:func:`finish_pending`); anything else is marked
FAILED ("interrupted") everywhere (:mod:`optimizer.resume`).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from optimizer import search
from optimizer.night import Run
from optimizer.records import Candidate, CandidateRecord, CandidateState, EvalResult, Proposal
from optimizer.targets import TargetSpec

log = logging.getLogger("optimizer.loop")


def start_run(r: Run, cand: Candidate, branch: str, trial_number: int) -> Future[str]:
    """The candidate's MLflow run, created by the writer (its id, when it exists)."""
    return r.writer.submit(lambda: r.tracker.start_candidate(
        parent_run_id=r.summary.parent_run_id, candidate=cand, branch=branch,
        trial_number=trial_number), first=True)


@dataclass
class InFlight:
    """One candidate between its admission and its record: everything :func:`save` needs.

    ``run`` is its MLflow run from :func:`start_run` (one is started by :func:`save`
    without it); ``proposal`` gives the prompt and response logged with it. ``outputs(run_id)``
    logs what the evaluation left besides metrics in ``io_dir``, and ``cleanup()`` removes
    the candidate's folder: both run in the writer after the run's contents. A candidate
    without a branch (a rejected proposal: no code) skips the git step."""

    target: TargetSpec
    study: optuna.Study
    trial: Any
    cand: Candidate
    record: CandidateRecord
    proposal: Proposal | None = None
    run: Future[str] | None = None
    cand_dir: Path | None = None  # its worktree, where it is evaluated
    io_dir: Path | None = None
    outputs: Callable[[str], None] | None = None
    cleanup: Callable[[], None] | None = None
    admitted_s: float = 0.0  # the engine's time to admit it


def save(r: Run, flight: InFlight, result: EvalResult, eval_log: str = "",
         guard: Callable[[str], AbstractContextManager[Any]] | None = None,
         ) -> CandidateRecord:
    """Finish ``flight``'s candidate in git, MLflow and Optuna, in that order; returns the
    final record. ``guard(store)`` is held around each store's step ("git", "optuna"):
    the concurrent search records one candidate while another is admitted."""
    hold = guard or (lambda store: contextlib.nullcontext())
    target, trial, cand, record = flight.target, flight.trial, flight.cand, flight.record
    commit = ""
    if record.branch:
        with hold("git"):
            commit = r.ws.annotate(target.name, cand.id, commit_message(target, cand, result))
    run_id = r.writer.result(flight.run or start_run(r, cand, record.branch, trial.number))
    final = record.finished(result, commit, run_id)
    pending = pending_path(r, target, cand.id)
    pending.parent.mkdir(parents=True, exist_ok=True)
    proposal = flight.proposal
    texts = {"prompt": proposal.prompt if proposal else "",
             "response": proposal.response if proposal else "", "eval_log": eval_log}
    pending.write_text(json.dumps({
        "trial": trial.number, "run_id": run_id, "branch": record.branch, "commit": commit,
        "candidate": {"id": cand.id, "parent": cand.parent_id, "proposer": cand.proposer,
                      "files": dict(cand.files), "knobs": dict(cand.knobs),
                      "content_hash": cand.content_hash, "summary": cand.summary},
        "result": result.to_json(), "io_dir": str(flight.io_dir or ""), **texts,
    }))
    with hold("optuna"):
        write_attrs(trial, final, before_tell=True)  # one transaction with the tell
        tell(flight.study, trial, result)
    outputs, cleanup = flight.outputs, flight.cleanup
    r.writer.submit(lambda: _finish_steps(r, target.rel_path, cand, final, result, texts,
                                          outputs, cleanup, pending))
    return final


def _finish(r: Run, target_rel: str, cand: Candidate, final: CandidateRecord,
            result: EvalResult, texts: dict[str, str], outputs: Callable[[str], None] | None,
            cleanup: Callable[[], None] | None, pending: Path) -> None:
    """The writer's part of :func:`save` (and of :func:`finish_pending`)."""
    for _ in _finish_steps(r, target_rel, cand, final, result, texts, outputs, cleanup,
                           pending):
        pass


def _finish_steps(r: Run, target_rel: str, cand: Candidate, final: CandidateRecord,
                  result: EvalResult, texts: dict[str, str],
                  outputs: Callable[[str], None] | None, cleanup: Callable[[], None] | None,
                  pending: Path) -> Iterator[None]:
    """:func:`_finish` a step at a time: the writer may pause between steps."""
    diff = r.ws.diff(cand.target, cand.id, target_rel) if final.branch else ""
    yield
    yield from r.tracker.finish_candidate_steps(
        final.mlflow_run_id, candidate=cand, result=result, commit=final.commit, diff=diff,
        prompt=texts["prompt"], response=texts["response"], eval_log=texts["eval_log"])
    if outputs is not None:
        outputs(final.mlflow_run_id)
        yield
    if cleanup is not None:
        cleanup()
    pending.unlink(missing_ok=True)


def pending_path(r: Run, target: TargetSpec, cid: str) -> Path:
    """What the writer still has to log of a told candidate (deleted once it has)."""
    return r.config.state_dir / "pending" / r.config.name / target.name / f"{cid}.json"


def finish_pending(
    r: Run, study: optuna.Study, target: TargetSpec,
    outputs: Callable[[str, EvalResult, Path], None] | None = None,
) -> list[str]:
    """``--resume``: finish the MLflow runs of candidates whose trials were told but whose
    writer job a kill lost; returns their ids. A pending record whose trial was not told
    is dropped: :func:`optimizer.resume.recover_interrupted` (called first) logged that
    candidate as interrupted with a run of its own."""
    folder = pending_path(r, target, "c0").parent
    paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not paths:
        return []
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    done = []
    for path in paths:
        data = json.loads(path.read_text())
        frozen = trials.get(int(data["trial"]))
        record = CandidateRecord.from_trial(frozen) if frozen is not None else None
        if (frozen is None or record is None or not frozen.state.is_finished()
                or record.mlflow_run_id != data["run_id"]):
            path.unlink()
            continue
        c = data["candidate"]
        cand = Candidate(id=c["id"], target=target.name, parent_id=c["parent"],
                         proposer=c["proposer"], files=c["files"], knobs=c["knobs"],
                         content_hash=c["content_hash"], summary=c["summary"],
                         structure=record.structure)
        result = EvalResult.from_json(data["result"])
        io_dir = Path(data["io_dir"]) if data.get("io_dir") else None
        out = None
        if outputs is not None and io_dir is not None and io_dir.is_dir():
            out = _bind(outputs, result, io_dir)
        texts = {k: str(data.get(k, "")) for k in ("prompt", "response", "eval_log")}
        _finish(r, target.rel_path, cand, record, result, texts, out, None, path)
        done.append(cand.id)
    return done


def _bind(outputs: Callable[[str, EvalResult, Path], None], result: EvalResult,
          io_dir: Path) -> Callable[[str], None]:
    return lambda run_id: outputs(run_id, result, io_dir)


def write_attrs(trial: Any, record: CandidateRecord, before_tell: bool = False) -> None:
    """The record into the trial's user attributes, in one transaction (``state`` last
    where they are written one by one: it marks completion); ``before_tell``: in the
    tell's transaction (a night's storage)."""
    search.set_user_attrs(trial, record.to_attrs(), before_tell=before_tell)


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
