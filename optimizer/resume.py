"""``--resume``: finish the records of candidates a killed run left behind, and rebuild
the archive (with every content hash) from the studies and branches."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.trial import TrialState

from optimizer import search
from optimizer.archive import Archive
from optimizer.errors import OptimizerError
from optimizer.night import Run
from optimizer.recording import InFlight, finish_pending, save, write_attrs
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
        record = CandidateRecord.from_trial(frozen)
        if record.complete:  # evaluated and logged; only the tell was lost
            if record.state is CandidateState.VALID and record.objectives:
                study.tell(frozen.number, list(record.objectives))
            else:
                study.tell(frozen.number, state=TrialState.FAIL)
            continue
        trial = search.live_trial(study, frozen.number)
        result = EvalResult(CandidateState.FAILED, INTERRUPTED, "interrupted")
        if not record.candidate:  # killed between ask and naming it: no branch, no run
            write_attrs(trial, dataclasses.replace(record, state=result.state, reason=INTERRUPTED))
            study.tell(frozen.number, state=TrialState.FAIL)
            continue
        cid = record.candidate
        has_branch = cid in r.ws.candidate_ids(target.name)
        files = (
            r.ws.read_files(target.name, cid, target.rel_path, target.editable)
            if has_branch
            else {}
        )
        cand = Candidate(id=cid, target=target.name, parent_id=record.parent,
                         proposer=record.proposer, files=files, knobs=dict(frozen.params),
                         content_hash=record.content_hash, summary=record.summary,
                         structure=record.structure)
        branch = r.ws.candidate_branch(target.name, cid) if has_branch else ""
        # Killed while or after logging the candidate in MLflow (in the concurrent loop
        # the recorder logs one while the slots evaluate others; the trial names its run
        # only after it is logged): that run goes, so the candidate keeps exactly one.
        r.tracker.drop_candidate_runs(target.name, cid)
        save(r, InFlight(target=target, study=study, trial=trial, cand=cand,
                         record=dataclasses.replace(record, branch=branch)), result)
        if has_branch:
            try:
                r.ws.remove_worktree(target.name, cid)
            except OptimizerError:
                pass
        r.say(f"[{target.name}] {cid} marked FAILED: {INTERRUPTED}")
    r.writer.flush()
    for cid in finish_pending(r, study, target, outputs):
        r.say(f"[{target.name}] {cid}: its MLflow run finished from the pending record")
    drop_leftover_worktrees(r, target)


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
