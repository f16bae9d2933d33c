"""``--resume``: finish the records of candidates a killed run left behind, and rebuild
the archive (with every content hash) from the studies and branches."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from optimizer import search
from optimizer.archive import Archive
from optimizer.errors import OptimizerError
from optimizer.night import Run
from optimizer.recording import InFlight, finish_pending, running_message, save, write_attrs
from optimizer.records import (
    SEED_ID,
    ArchiveEntry,
    Candidate,
    CandidateRecord,
    CandidateState,
    EvalResult,
    candidate_number,
)
from optimizer.targets import TargetSpec

INTERRUPTED = "interrupted: the run stopped before this candidate finished"


def recover_interrupted(
    r: Run, study: optuna.Study, target: TargetSpec,
    outputs: Callable[[str, EvalResult, Path], None] | None = None,
) -> None:
    """Trials left RUNNING by a killed run: finish their records in all three stores; then
    the MLflow runs of told candidates that the writer had not finished (``outputs`` logs
    what their evaluations left, where it is still on disk)."""
    for frozen in search.running_trials(study):
        cand = recover_trial(r, study, target, frozen, INTERRUPTED)
        if cand is not None:
            r.say(f"[{target.name}] {cand.id} marked FAILED: {INTERRUPTED}")
    r.writer.flush()
    for cid in finish_pending(r, study, target, outputs):
        r.say(f"[{target.name}] {cid}: its MLflow run finished from the pending record")
    drop_leftover_worktrees(r, target)


def recover_trial(r: Run, study: optuna.Study, target: TargetSpec, frozen: Any, reason: str,
                  claimed: Mapping[str, Any] | None = None) -> Candidate | None:
    """One trial its process left RUNNING, recorded in all three stores: a killed run's
    (``reason`` is INTERRUPTED; its program is on this checkout's branch) or a lost
    worker's (WORKER_LOST; ``claimed`` is its claim: program, knobs, lineage). A record
    that was complete is told its result; a trial that never named a candidate is FAILED;
    any other candidate is FAILED with ``reason``, with one MLflow run (one its process
    began is dropped) and its branch. Returns that candidate (None in the other cases)."""
    live = search.live_trial(study, frozen.number)
    record = CandidateRecord.from_trial(frozen)
    if record.complete:  # evaluated and logged; only the tell was lost
        if record.state is CandidateState.VALID and record.objectives:
            study.tell(live, list(record.objectives))
        else:
            study.tell(live, state=TrialState.FAIL)
        return None
    cid = record.candidate or str((claimed or {}).get("candidate", ""))
    if not cid:  # stopped between ask and naming it: no branch, no run
        write_attrs(live, dataclasses.replace(record, state=CandidateState.FAILED,
                                              reason=reason))
        study.tell(live, state=TrialState.FAIL)
        return None
    cand, record = (_left_here(r, target, frozen, record) if claimed is None
                    else _left_by_a_lost_worker(r, target, cid, record, claimed))
    # Killed while or after logging the candidate in MLflow (in the concurrent loop the
    # recorder logs one while the slots evaluate others; the trial names its run only
    # after it is logged): that run goes, so the candidate keeps exactly one.
    r.tracker.drop_candidate_runs(target.name, cid)
    stage = "interrupted" if claimed is None else "worker lost"
    save(r, InFlight(target=target, study=study, trial=live, cand=cand, record=record,
                     cleanup=_remover(r, target, cid) if record.branch else None),
         EvalResult(CandidateState.FAILED, reason, stage))
    return cand


def _left_here(r: Run, target: TargetSpec, frozen: Any, record: CandidateRecord,
               ) -> tuple[Candidate, CandidateRecord]:
    """A killed run's candidate: its program from its branch, when it has one."""
    cid = record.candidate
    has_branch = cid in r.ws.candidate_ids(target.name)
    files = (r.ws.read_files(target.name, cid, target.rel_path, target.editable)
             if has_branch else {})
    cand = Candidate(id=cid, target=target.name, parent_id=record.parent,
                     proposer=record.proposer, files=files, knobs=dict(frozen.params),
                     content_hash=record.content_hash, summary=record.summary,
                     structure=record.structure)
    branch = r.ws.candidate_branch(target.name, cid) if has_branch else ""
    return cand, dataclasses.replace(record, branch=branch)


def _left_by_a_lost_worker(r: Run, target: TargetSpec, cid: str, record: CandidateRecord,
                           claimed: Mapping[str, Any]) -> tuple[Candidate, CandidateRecord]:
    """A lost worker's candidate: its program from its claim, on a branch made here (and
    pushed to the remote as it is annotated)."""
    cand = Candidate(id=cid, target=target.name,
                     parent_id=claimed.get("parent", record.parent),
                     proposer=str(claimed.get("proposer", record.proposer)),
                     files=dict(claimed.get("files") or {}),
                     knobs=dict(claimed.get("knobs") or {}),
                     content_hash=str(claimed.get("content_hash", record.content_hash)),
                     summary=str(claimed.get("summary", record.summary)),
                     structure=str(claimed.get("structure", record.structure)))
    fresh = CandidateRecord.of(cand)
    if cand.files:
        r.ws.create_candidate(target.rel_path, target.name, cid, cand.files,
                              running_message(target, cand))
        fresh = dataclasses.replace(fresh, branch=r.ws.candidate_branch(target.name, cid))
    return cand, fresh


def _remover(r: Run, target: TargetSpec, cid: str) -> Callable[[], None]:
    def remove() -> None:
        try:
            r.ws.remove_worktree(target.name, cid)
        except OptimizerError:
            pass
    return remove


def drop_leftover_worktrees(r: Run, target: TargetSpec) -> None:
    """Worktrees a killed night left behind: a candidate recorded (or told) before its
    worktree was removed is no RUNNING trial, yet its folder stays. Nothing of the target
    is in flight here (one night per experiment at a time), so every one goes, unless
    ``[vcs] keep_worktrees`` asks to keep them."""
    if r.config.vcs.keep_worktrees:
        return
    folder = r.ws.worktree_path(target.name, SEED_ID).parent
    for path in sorted(folder.glob("c*")) if folder.is_dir() else ():
        try:
            r.ws.remove_worktree(target.name, path.name)
        except OptimizerError:
            pass


def load_archive(r: Run, study: optuna.Study, target: TargetSpec, archive: Archive) -> None:
    """Rebuild the archive from an earlier night's trials (sources from their branches)."""
    records = [
        (CandidateRecord.from_trial(t), t)
        for t in study.get_trials(deepcopy=False)
        if t.user_attrs.get("candidate")
    ]
    records.sort(key=lambda pair: candidate_number(pair[0].candidate))
    branches = set(r.ws.candidate_ids(target.name))
    for rec, t in records:
        cid = rec.candidate
        files: dict[str, str] = {}
        if cid in branches and (rec.state is CandidateState.VALID or cid == SEED_ID):
            files = r.ws.read_files(target.name, cid, target.rel_path, target.editable)
        entry = ArchiveEntry(
            id=cid,
            parent_id=rec.parent,
            files=files,
            knobs=dict(t.params),
            state=rec.state,
            reason=rec.reason,
            metrics=dict(rec.metrics),
            objectives=tuple(rec.objectives),
            summary=rec.summary,
            proposer=rec.proposer,
        )
        archive.add(entry, rec.structure, rec.content_hash)
    if archive.entries:
        r.say(f"[{target.name}] resumed with {len(archive.entries)} earlier candidate(s)")
