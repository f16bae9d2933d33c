"""``--resume``: finish the records of candidates a killed run left behind, and rebuild
the archive (with every content hash) from the studies and branches."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from optimizer import search
from optimizer.archive import Archive
from optimizer.errors import OptimizerError
from optimizer.night import Run
from optimizer.proposers._base import ArchiveEntry
from optimizer.recording import commit_message
from optimizer.records import Candidate, CandidateState, EvalResult
from optimizer.targets import TargetSpec


def recover_interrupted(r: Run, study: optuna.Study, target: TargetSpec) -> None:
    """Trials left RUNNING by a killed run: finish their records in all three stores."""
    for frozen in search.running_trials(study):
        attrs = frozen.user_attrs
        cid = attrs.get("candidate")
        complete = attrs.get("state") not in (None, CandidateState.RUNNING.value)
        if complete and attrs.get("mlflow_run_id"):
            # evaluated and logged; only the tell was lost
            if attrs["state"] == CandidateState.VALID.value and attrs.get("objectives"):
                study.tell(frozen.number, list(attrs["objectives"]))
            else:
                study.tell(frozen.number, state=TrialState.FAIL)
            continue
        reason = "interrupted: the run stopped before this candidate finished"
        if not cid:  # killed between ask and naming it: no branch, no run
            study._storage.set_trial_user_attr(frozen._trial_id, "state", "FAILED")
            study._storage.set_trial_user_attr(frozen._trial_id, "reason", reason)
            study.tell(frozen.number, state=TrialState.FAIL)
            continue
        result = EvalResult(CandidateState.FAILED, reason, "interrupted")
        has_branch = cid in r.ws.candidate_ids(target.name)
        files = (
            r.ws.read_files(target.name, cid, target.rel_path, target.editable)
            if has_branch
            else {}
        )
        cand = Candidate(
            cid,
            target.name,
            attrs.get("parent") or None,
            attrs.get("proposer", ""),
            files,
            frozen.params,
            attrs.get("content_hash", ""),
            attrs.get("summary", ""),
        )
        branch = commit = diff = ""
        if has_branch:
            branch = r.ws.candidate_branch(target.name, cid)
            commit = r.ws.annotate(target.name, cid, commit_message(target, cand, result))
            diff = r.ws.diff(target.name, cid)
            try:
                r.ws.remove_worktree(target.name, cid)
            except OptimizerError:
                pass
        run_id = r.tracker.log_candidate(
            parent_run_id=r.summary.parent_run_id,
            candidate=cand,
            result=result,
            branch=branch,
            commit=commit,
            trial_number=frozen.number,
            diff=diff,
        )
        storage, tid = study._storage, frozen._trial_id
        for key, value in (
            ("reason", reason),
            ("commit", commit),
            ("mlflow_run_id", run_id),
            ("state", CandidateState.FAILED.value),
            ("metrics", {}),
            ("objectives", []),
        ):
            storage.set_trial_user_attr(tid, key, value)
        study.tell(frozen.number, state=TrialState.FAIL)
        r.say(f"[{target.name}] {cid} marked FAILED: {reason}")


def load_archive(r: Run, study: optuna.Study, target: TargetSpec, archive: Archive) -> None:
    """Rebuild the archive from an earlier night's trials (sources from their branches)."""
    frozen = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("candidate")]
    frozen.sort(key=lambda t: t.user_attrs["candidate"])
    branches = set(r.ws.candidate_ids(target.name))
    for t in frozen:
        a = t.user_attrs
        cid = a["candidate"]
        state = CandidateState(a.get("state", "FAILED"))
        files: dict[str, str] = {}
        if cid in branches and (state is CandidateState.VALID or cid == "c0001"):
            files = r.ws.read_files(target.name, cid, target.rel_path, target.editable)
        entry = ArchiveEntry(
            cid,
            a.get("parent") or None,
            files,
            dict(t.params),
            state,
            a.get("reason", ""),
            dict(a.get("metrics", {})),
            tuple(a.get("objectives", [])),
            {},
            a.get("summary", ""),
            a.get("proposer", ""),
        )
        archive.add(entry, a.get("structure", ""), a.get("content_hash", ""))
    if archive.entries:
        r.say(f"[{target.name}] resumed with {len(archive.entries)} earlier candidate(s)")
