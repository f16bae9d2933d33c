"""``optimizer worker``: any number of workers, on any machines, share one night.

Every worker runs the loop of :mod:`optimizer.loop` (the concurrent search, with its slots
and proposals in flight) in its own clone of the repository, against shared stores:
Optuna's RDB storage (PostgreSQL for several machines), an MLflow tracking server and a
git remote. Optuna's storage is the only shared state; there is no scheduler or queue:

- A program is claimed before it is evaluated, and a candidate id with it, in one
  transaction of inserts into Optuna's ``study_system_attributes`` table, whose unique key
  makes them atomic (:mod:`optimizer.claims`). Of two workers that propose the same
  content, one evaluates it; the other records a duplicate of its candidate.
- Each trial a worker holds has an Optuna heartbeat (``RDBStorage(heartbeat_interval,
  grace_period)``), beaten from a thread of its own. A trial whose heartbeat is older than
  the grace period is stale (the storage's ``_get_stale_trial_ids``, the query that
  ``optuna.storages.fail_stale_trials`` runs), and so is a RUNNING trial seen without any
  heartbeat for longer than the grace period (its worker died between creating and beating
  it); the one worker that claims ``lost:<trial>``
  records it FAILED ("worker lost") in all three stores, the branch on the remote and a
  run of its own included, then turns it FAILED in Optuna, and evaluates the program
  again as a new candidate ("re-run of cNNNN"). The record is written while the trial is
  still RUNNING (Optuna refuses attributes of a finished trial), and the tell makes it
  final: a worker that was only slow finds its trial finished and its result unused.
- Before each parent is chosen the archive takes in the trials other workers finished
  (Optuna's cached storage reads only trials newer than the ones it has, plus the ones it
  saw unfinished); the programs come from the claims (``trial:<number>``), not from git.
- Candidate branches are pushed to the remote as each is recorded. When a target's search
  is over everywhere (no worker searching it, no trial RUNNING), the one worker that claims
  ``winners:<night>`` selects, reduces, confirms and publishes its winner.
- A worker's record (host, pid, start, last heartbeat, what it holds) is a study system
  attribute of ``<experiment>:workers``, written by that worker; ``optimizer status``
  shows it. Nights are rows there too (``night:<n>``, claimed in sequence).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import threading
import time
import uuid
import warnings
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from optimizer import search
from optimizer.accounting import Ledger, Prices
from optimizer.archive import Archive
from optimizer.budget import Budget
from optimizer.claims import Claims
from optimizer.config import ExperimentConfig
from optimizer.errors import OptimizerError
from optimizer.night import Coordination, LaneView, Run, RunSummary, Writer, night_metrics
from optimizer.records import (
    WORKER_LOST,
    ArchiveEntry,
    CandidateRecord,
    CandidateState,
    EvalResult,
    Proposal,
    candidate_number,
)
from optimizer.resume import recover_trial
from optimizer.shared_stores import (  # noqa: F401 - re-exported for callers
    Night,
    SharedStorage,
    SharedWorkspace,
    check_shared,
    join_night,
    open_storage,
    open_tracker,
    remote_candidate_ids,
    worker_rows,
    workers_study,
)
from optimizer.targets import TargetSpec
from optimizer.tracking import Tracker

log = logging.getLogger("optimizer.worker")
# Optuna warns that heartbeats are meant for Study.optimize: here a thread beats them
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
_FINISHED = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
REFRESH_S = 0.1  # the archive takes in other workers' trials at most this often


# -- the hooks the loop calls ----------------------------------------------------------------


@dataclasses.dataclass
class _TargetState:
    study: optuna.Study
    study_id: int
    target: TargetSpec
    archive: Archive
    seen: set[int] = dataclasses.field(default_factory=set)  # trial numbers taken in
    mine: set[int] = dataclasses.field(default_factory=set)  # trials this worker asked
    next_number: int = 2
    checked: float = 0.0  # when stale trials were last looked for (monotonic)
    refreshed: float = 0.0
    reruns: list[Proposal] = dataclasses.field(default_factory=list)


class Shared(Coordination):
    """Workers sharing a night through Optuna's storage (``Run.coordination``)."""

    one_writer = False  # the studies change under each worker: Optuna's cache is off

    def __init__(self, storage: SharedStorage, claims: Claims, night: Night, wid: str,
                 wsid: int, heartbeat_s: int, grace_s: int):
        self.storage = storage
        self.claims = claims
        self.night = night
        self.wid = wid
        self.wsid = wsid
        self.heartbeat_s = heartbeat_s
        self.grace_s = grace_s
        self.targets: dict[str, _TargetState] = {}
        self._rerun_of: dict[int, tuple[Proposal, str]] = {}  # id(proposal) -> it, lost id
        self.record: dict[str, Any] = {
            "host": socket.gethostname(), "pid": os.getpid(), "started": time.time(),
            "heartbeat": time.time(), "night": night.name, "target": "", "searching": [],
            "phase": "starting", "holds": [], "candidates": 0}
        self._record_lock = threading.Lock()

    def study_storage(self, r: Run) -> SharedStorage:
        return self.storage

    # the worker's record

    def write_record(self, **changes: Any) -> None:
        with self._record_lock:  # one upsert at a time: the heartbeat's and the loop's
            self.record.update(changes, heartbeat=time.time(),
                               holds=sorted(self.storage.holding().values()))
            self.storage.set_study_system_attr(self.wsid, f"worker:{self.wid}",
                                               dict(self.record))

    def workers(self) -> dict[str, dict[str, Any]]:
        rows = self.claims.prefixed(self.wsid, "worker:")
        return {k.split(":", 1)[1]: v for k, v in rows.items()}

    # a target opens

    def open_target(self, r: Run, study: optuna.Study, target: TargetSpec, archive: Archive,
                    outputs: Callable[[str, EvalResult, Path], None]) -> None:
        from optimizer.recording import finish_pending
        from optimizer.resume import drop_leftover_worktrees

        search.SHARED_STUDIES.add(study)
        t = _TargetState(study, self.storage.get_study_id_from_name(study.study_name), target,
                         archive)
        self.targets[target.name] = t
        self._searching(self.record["searching"] + [target.name])
        for cid in finish_pending(r, study, target, outputs):  # this clone's, left by a kill
            r.say(f"[{target.name}] {cid}: its MLflow run finished from the pending record")
        drop_leftover_worktrees(r, target)
        self._recover(r, t, force=True)
        self._refresh(r, t)
        if archive.entries:
            r.say(f"[{target.name}] {len(archive.entries)} candidate(s) in the study so far")

    # before each parent is chosen

    def next_job(self, r: Run, lane: LaneView) -> Proposal | None:
        t = self.targets[lane.target.name]
        self._recover(r, t)
        if t.reruns:
            return t.reruns.pop(0)
        if time.monotonic() - t.refreshed >= REFRESH_S:
            self._refresh(r, t, lane.names)
        return None

    # as a candidate is admitted

    def claim(self, lane: LaneView, proposal: Proposal, trial: Any, digest: str,
              files: dict[str, str], values: dict[str, Any], structure: str,
              known: str | None) -> tuple[str | None, str]:
        """(the candidate that has this content, "") or (None, the id of a new one)."""
        t = self.targets[lane.target.name]
        rerun = self._rerun_of.pop(id(proposal), None)
        if rerun is None and known is not None:
            return known, ""
        payload = {"files": dict(files), "knobs": dict(values), "parent": proposal.parent_id,
                   "proposer": proposal.proposer, "summary": proposal.summary[:500],
                   "structure": structure, "worker": self.wid, "night": self.night.name}
        won, cid = self.claims.candidate(
            t.study_id, digest=digest, trial=trial.number, first_id=self._first(t),
            payload=payload, seed=proposal.proposer == "seed" and rerun is None,
            rerun=rerun is not None)
        if not won:
            if not cid:
                raise OptimizerError(f"content claim of {digest[:12]} names no candidate")
            t.archive.pending.setdefault(digest, cid)  # until its record arrives
            return cid, ""
        self._taken(t, trial, cid)
        return None, cid

    def claim_id(self, lane: LaneView, proposal: Proposal, trial: Any) -> str:
        """A candidate id for a rejected proposal (no content to claim)."""
        t = self.targets[lane.target.name]
        payload: dict[str, Any] = {"files": {}, "knobs": {}, "parent": proposal.parent_id,
                   "proposer": proposal.proposer, "summary": proposal.summary[:500],
                   "structure": "rejected", "worker": self.wid, "night": self.night.name}
        _, cid = self.claims.candidate(t.study_id, digest="", trial=trial.number,
                                       first_id=self._first(t), payload=payload)
        self._taken(t, trial, cid)
        return cid

    def _first(self, t: _TargetState) -> int:
        return max(candidate_number(t.archive.next_id()), t.next_number)

    def _taken(self, t: _TargetState, trial: Any, cid: str) -> None:
        t.next_number = max(t.next_number, candidate_number(cid) + 1)
        t.mine.add(trial.number)
        self.storage.label(trial._trial_id, f"{t.target.name}/{cid} (trial {trial.number})")
        with self._record_lock:
            self.record["candidates"] += 1

    # the others' candidates

    def _refresh(self, r: Run, t: _TargetState, names: search.ParamNames | None = None) -> None:
        t.refreshed = time.monotonic()
        new = [tr for tr in t.study.get_trials(deepcopy=False, states=_FINISHED)
               if tr.number not in t.seen]
        if not new:
            return
        records = []
        for tr in new:
            t.seen.add(tr.number)
            if names is not None:
                for param, dist in tr.distributions.items():
                    names.known.setdefault(param, dist)
            rec = CandidateRecord.from_trial(tr)
            if rec.candidate and rec.state.finished and tr.number not in t.mine:
                records.append((rec, tr))
        if not records:
            return
        payloads = self.claims.read(t.study_id, [f"trial:{tr.number}" for _, tr in records])
        branches: set[str] | None = None
        records.sort(key=lambda pair: candidate_number(pair[0].candidate))
        for rec, tr in records:
            cid, target = rec.candidate, t.target
            files = dict(payloads.get(f"trial:{tr.number}", {}).get("files") or {})
            if not files and rec.state is CandidateState.VALID:  # a night of `optimizer run`
                branches = branches if branches is not None else set(
                    r.ws.candidate_ids(target.name))
                if cid in branches:
                    files = r.ws.read_files(target.name, cid, target.rel_path, target.editable)
            entry = ArchiveEntry(
                id=cid, parent_id=rec.parent, files=files, knobs=dict(tr.params),
                state=rec.state, reason=rec.reason, metrics=dict(rec.metrics),
                objectives=tuple(rec.objectives), summary=rec.summary, proposer=rec.proposer)
            lost = rec.reason == WORKER_LOST
            for digest in [d for d, c in t.archive.pending.items() if c == cid]:
                del t.archive.pending[digest]  # it was another worker's, under evaluation
            t.archive.add(entry, rec.structure, "" if lost else rec.content_hash)
            t.archive.theirs.add(cid)
            r.proposer.observe(entry)

    # lost workers

    def _recover(self, r: Run, t: _TargetState, force: bool = False) -> None:
        """Trials whose heartbeat is stale: recorded once, everywhere, and re-run."""
        if not force and time.monotonic() - t.checked < self.heartbeat_s:
            return
        t.checked = time.monotonic()
        try:
            stale = self.storage.stale_trial_ids(t.study_id)
        except optuna.exceptions.StorageInternalError as exc:  # a busy store: next time
            log.warning("looking for stale trials failed: %s", exc)
            return
        for trial_id in stale:
            frozen = self.storage.get_trial(trial_id)
            if frozen.state is not TrialState.RUNNING or trial_id in self.storage.holding():
                continue
            if self.claims.take(t.study_id, f"lost:{frozen.number}",
                                {"by": self.wid, "at": time.time()}):
                try:
                    self._record_lost(r, t, frozen)
                except optuna.exceptions.UpdateFinishedTrialError:
                    r.say(f"[{t.target.name}] trial {frozen.number} finished meanwhile: its "
                          "worker was only slow")

    def _record_lost(self, r: Run, t: _TargetState, frozen: Any) -> None:
        """A lost worker's trial recorded once, everywhere (``resume.recover_trial``), and
        its program queued to run again."""
        key = f"trial:{frozen.number}"
        claimed: dict[str, Any] = self.claims.read(t.study_id, [key]).get(key) or {}
        cand = recover_trial(r, t.study, t.target, frozen, WORKER_LOST, claimed=claimed)
        if cand is None:
            return
        r.say(f"[{t.target.name}] {cand.id} FAILED: {WORKER_LOST}")
        if cand.files:
            rerun = Proposal(cand.proposer, cand.parent_id, cand.files,
                             f"re-run of {cand.id} (worker lost): {cand.summary}"[:500],
                             fixed_knobs=dict(cand.knobs))
            self._rerun_of[id(rerun)] = (rerun, cand.id)
            t.reruns.append(rerun)

    # the end of the night's searches

    def _searching(self, names: list[str]) -> None:
        """The targets this worker searches now (its record's ``searching``)."""
        self.write_record(searching=names, target=", ".join(names),
                          phase="searching" if names else "finishing")

    def searched(self, lanes: Sequence[Any]) -> None:
        """This worker's search of ``lanes``' targets is over."""
        done = {lane.target.name for lane in lanes}
        self._searching([n for n in self.record["searching"] if n not in done])

    def claim_winners(self, r: Run, lanes: list[Any], at_most: int,
                      rerun: Callable[[Any, Proposal], None]) -> tuple[list[Any], list[Any]]:
        """(the lanes whose winners this worker selects now, at most ``at_most``; the lanes
        whose winners are another worker's). Waits until some target's search is over
        everywhere (no worker searching it, no trial RUNNING), re-running lost candidates
        meanwhile (``rerun``); each target's winner is claimed once for the night
        (``winners:<night>``). Workers look at the targets from different places in the
        list, so that several of them take different targets' winners at once."""
        key = f"winners:{self.night.name}"
        start = zlib.crc32(self.wid.encode()) % len(lanes) if lanes else 0
        order = lanes[start:] + lanes[:start]
        mine: list[Any] = []
        theirs: list[Any] = []
        while not r.budget.stop.is_set():
            for lane in order:
                if lane in mine or lane in theirs or len(mine) >= at_most:
                    continue
                t = self.targets[lane.target.name]
                self._recover(r, t)
                if t.reruns:
                    rerun(lane, t.reruns.pop(0))
                    continue
                if self.claims.read(t.study_id, [key]):
                    theirs.append(lane)  # another worker selects it
                elif self._search_over(t):
                    r.writer.flush()  # this worker's records are in before the winner reads
                    if self.claims.take(t.study_id, key, {"by": self.wid, "at": time.time()}):
                        self._refresh(r, t, lane.names)
                        mine.append(lane)
                        r.say(f"[{t.target.name}] this worker selects the night's winner")
                    else:
                        theirs.append(lane)
            if mine or len(theirs) == len(lanes):
                break
            time.sleep(min(1.0, self.heartbeat_s / 2))
        if mine:
            self.write_record(phase="selecting the winner",
                              target=", ".join(lane.target.name for lane in mine))
        return mine, theirs

    def _search_over(self, t: _TargetState) -> bool:
        if self.storage.get_all_trials(t.study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            return False
        now = time.time()
        for wid, rec in self.workers().items():
            if (wid != self.wid and rec.get("night") == self.night.name
                    and rec.get("phase") != "done"
                    and t.target.name in rec.get("searching", [rec.get("target")])
                    and now - float(rec.get("heartbeat", 0)) < self.grace_s):
                return False
        return True


class Heartbeat:
    """A thread that beats every held trial's Optuna heartbeat and the worker's record."""

    def __init__(self, shared: Shared):
        self.shared = shared
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _beat(self) -> None:
        while not self._stop.wait(self.shared.heartbeat_s):
            try:
                for trial_id in self.shared.storage.holding():
                    self.shared.storage.record_heartbeat(trial_id)
                self.shared.write_record()
            except Exception as exc:  # noqa: BLE001 - the next beat tries again
                log.warning("heartbeat failed: %s", exc)


# -- the night of one worker -----------------------------------------------------------------


def work(config: ExperimentConfig, *, proposer: Any = None,
         say: Callable[[str], None] = print) -> RunSummary:
    """Join (or start) the experiment's night and work on it until its time is up."""
    from optimizer.stores import enable_fast_sqlite

    for note in check_shared(config):
        say(f"note: {note}")
    enable_fast_sqlite()
    for sub in ("reports", "logs", "cache", "worktrees"):
        (config.state_dir / sub).mkdir(parents=True, exist_ok=True)
    ws = SharedWorkspace(config.workspace, experiment=config.name, state_dir=config.state_dir,
                         base=config.base, remote=config.vcs.push)
    try:
        ws.fetch_experiment()
        storage = open_storage(config.search.storage, config.worker.heartbeat_s,
                               config.worker.grace)
        claims = Claims(storage)
        optuna.create_study(storage=storage, study_name=workers_study(config.name),
                            load_if_exists=True)
        wsid = storage.get_study_id_from_name(workers_study(config.name))
        tracker = open_tracker(config)
        wid = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        night = join_night(config, storage, claims, tracker, wsid, ws.base_commit, wid)
        # each worker samples and proposes from a seed of its own (the same seed everywhere
        # would propose the same programs everywhere: duplicates)
        config = dataclasses.replace(config, seed=zlib.crc32(f"{config.seed}/{wid}".encode()))
        return _work(config, ws, storage, claims, tracker, night, wid, wsid, proposer, say)
    finally:
        ws.close()


# what a worker that loses the race to create a new database's tables is told
def _work(config: ExperimentConfig, ws: SharedWorkspace, storage: SharedStorage, claims: Claims,
          tracker: Tracker, night: Night, wid: str, wsid: int, proposer: Any,
          say: Callable[[str], None]) -> RunSummary:
    from optimizer.loop import share_the_night, spend_night
    from optimizer.proposers import make_proposer

    pointer = config.state_dir / "logs" / f"{config.name}.night.json"
    pointer.write_text(json.dumps({"night": night.name, "parent_run_id": night.parent_run_id}))
    summary = RunSummary(config.name, night.name, night.parent_run_id)
    budget = Budget(max(0.0, night.end - time.time()) / 60, config.budget.max_candidates,
                    config.budget.usd)
    the_proposer = proposer or make_proposer(config, f"{night.name}-{wid}")
    ledger = Ledger(getattr(getattr(the_proposer, "settings", None), "prices", None) or Prices())
    writer = Writer()
    shared = Shared(storage, claims, night, wid, wsid, config.worker.heartbeat_s,
                    config.worker.grace)
    r = Run(config, ws, tracker, the_proposer, budget, ledger, summary, say, writer, shared)
    shared.write_record(phase="starting")
    say(f"worker {wid} on night {night.name} of experiment '{config.name}': "
        f"{len(config.targets)} target(s), {budget.minutes:.1f} min left, "
        f"proposer {the_proposer.name}")

    def finish() -> None:
        metrics = night_metrics(summary, ledger)
        tracker.log_night_metrics(night.parent_run_id,
                                  {f"worker.{wid}.{k}": v for k, v in metrics.items()})
        shared.write_record(phase="done", target="")
        alive = [w for k, w in shared.workers().items() if k != wid
                 and w.get("night") == night.name and w.get("phase") != "done"
                 and time.time() - float(w.get("heartbeat", 0)) < shared.grace_s]
        if not alive:  # the last worker of the night ends its parent run
            tracker.end_night(night.parent_run_id,
                              "KILLED" if budget.stop.is_set() else "FINISHED")
        (config.state_dir / "reports" / f"{config.name}-{night.name}-{wid}.json").write_text(
            json.dumps(summary.to_json(), indent=2))

    # every target at once, as `optimizer run` does with several slots
    return spend_night(r, share_the_night, finish, Heartbeat(shared))
