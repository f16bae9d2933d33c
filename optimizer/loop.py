"""The nightly loop: propose, apply, ask, commit, evaluate, tell, log; then pick winners.

Read :func:`run`, :func:`share_the_night` (several slots, proposals or workers: every
target at once) and :func:`optimize_target` (one target in its slice) top to bottom; the helpers
below them do one thing each. Per candidate the order is chosen so that a run killed at
any point can be resumed with Optuna, MLflow and git agreeing: ask (trial RUNNING) ->
branch -> evaluate -> annotate branch -> tell, then the MLflow run's contents in the
background writer (``optimizer.recording``). ``--resume`` turns trials left RUNNING into FAILED
("interrupted") everywhere, tells them their recorded result when it was complete, and
finishes the MLflow runs the writer had not.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import json
import queue
import random
import shutil
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

import evaluators
from evaluators._base import EvalContext, Evaluator
from optimizer import knobs, search, sharing
from optimizer import slots as slot_plan
from optimizer.accounting import Ledger, Prices
from optimizer.advice import dry_run_advice
from optimizer.archive import Archive
from optimizer.budget import Budget, StopOnSigint
from optimizer.config import ExperimentConfig, TargetEntry
from optimizer.errors import ProposalError
from optimizer.evaluation import (
    device_for,
    evaluate_candidate,
    fresh_context,
    io_dir_of,
    log_outputs,
    make_sandbox,
)
from optimizer.minimize import planned_trials
from optimizer.night import (
    Run,
    RunSummary,
    TargetSummary,
    Writer,
    night_metrics,
    open_night,
    trace_llm_calls,
)
from optimizer.proposers._base import ProposalContext, Proposer
from optimizer.recording import running_message, save, start_run, write_attrs
from optimizer.records import (
    SEED_ID,
    ArchiveEntry,
    Candidate,
    CandidateRecord,
    CandidateState,
    EvalResult,
    Proposal,
    content_hash,
)
from optimizer.resume import load_archive, recover_interrupted
from optimizer.sandbox import Sandbox
from optimizer.slots import Slot
from optimizer.stores import enable_fast_sqlite
from optimizer.targets import TargetSpec, broken_constraint
from optimizer.tracking import Tracker
from optimizer.vcs import Workspace
from optimizer.winners import best_contender, reduction_base, select_winner

MAX_DUPLICATES_IN_A_ROW = 40
MAX_CONSTRAINED_ASKS = 16  # knob samples tried per proposal against the target's constraints
CONFIRM_SHARE = 0.15  # of a target's part of the night, kept for confirming its winner at least
MAX_CONFIRM_SHARE = 0.5  # and at most, however slow its evaluations
TYPICAL_OF = 10  # candidates whose median cost prices a shared night's winner reserve

# Run, RunSummary and TargetSummary live in optimizer.night; re-exported for callers.
__all__ = ["CONFIRM_SHARE", "Run", "RunSummary", "TargetSummary", "optimize_target", "run",
           "share_the_night"]


# -- the loop --------------------------------------------------------------------------


def run(
    config: ExperimentConfig,
    *,
    resume: bool = False,
    proposer: Proposer | None = None,
    say: Callable[[str], None] = print,
) -> RunSummary:
    """Optimise every target of ``config`` within its budget; return what happened."""
    ws = Workspace(
        config.workspace, experiment=config.name, state_dir=config.state_dir, base=config.base
    )
    enable_fast_sqlite()
    for sub in ("reports", "logs", "cache", "worktrees"):
        (config.state_dir / sub).mkdir(parents=True, exist_ok=True)
    tracker = Tracker(config.tracking_uri, config.name, config.state_dir / "mlartifacts")
    night, parent_run_id = open_night(config, tracker, resume)
    summary = RunSummary(config.name, night, parent_run_id)
    budget = Budget(config.budget.minutes, config.budget.max_candidates, config.budget.usd)
    from optimizer.proposers import make_proposer

    the_proposer = proposer or make_proposer(config, night)
    if config.proposer.kind == "llm":
        trace_llm_calls(config)
    settings = getattr(the_proposer, "settings", None)
    ledger = Ledger(getattr(settings, "prices", None) or Prices())
    writer = Writer()
    r = Run(config, ws, tracker, the_proposer, budget, ledger, summary, say, writer)
    say(
        f"night {night} of experiment '{config.name}': {len(config.targets)} target(s), "
        f"{config.budget.minutes:g} min, proposer {the_proposer.name}"
    )
    try:
        with StopOnSigint(budget):
            if _night_width(config) > 1 or config.proposer.concurrency > 1:
                summary.targets.extend(share_the_night(r))
            else:  # the serial loop: each target in turn gets its share of what is left
                shares_left = sum(t.share for t in config.targets)
                for entry in config.targets:
                    slice_s = budget.remaining_s() * entry.share / shares_left
                    shares_left -= entry.share
                    summary.targets.append(
                        optimize_target(r, entry, time.monotonic() + slice_s))
                    if budget.stop.is_set() or summary.stop_reason:
                        break
        summary.stop_reason = summary.stop_reason or budget.exhausted() or "all targets done"
        writer.flush()
    finally:
        writer.close()  # what is queued is written; an error was raised by flush above
        the_proposer.close()
        tracker.log_night_metrics(parent_run_id, night_metrics(summary, ledger))
        accounts = config.state_dir / "reports" / f"{config.name}-{night}-llm-usage.json"
        accounts.write_text(json.dumps(ledger.summary(), indent=2))
        tracker.log_artifact_file(parent_run_id, accounts)
        tracker.end_night(parent_run_id, "KILLED" if budget.stop.is_set() else "FINISHED")
        (config.state_dir / "reports" / f"{config.name}-{night}.json").write_text(
            json.dumps(summary.to_json(), indent=2)
        )
        ws.close()
    return summary


def share_the_night(r: Run) -> list[TargetSummary]:
    """Every target's search at once on the night's slots: a free slot takes the next job
    of the target furthest behind its share (``optimizer.sharing``), so a slow seed or a
    target that runs out of ideas leaves no slot idle. The searches end at the night's
    deadline less what the targets keep for their winners; then the targets' winners are
    selected side by side, one slot each (``_select_winners_side_by_side``), or in turn,
    each in its part of what is left, when a target's kind runs alone or there is one
    slot. ``optimizer worker`` runs it too: every worker searches every target, and each
    target's winner is selected by the one worker that claims it (``_select_winners``)."""
    horizon = Horizon(time.monotonic() + r.budget.remaining_s(), shared=True)
    lanes = [_open_lane(r, entry, horizon) for entry in r.config.targets]
    night_s = max(0.0, horizon.deadline - time.monotonic())
    total = sum(lane.entry.share for lane in lanes)
    width = _night_width(r.config)
    locks: dict[object, Any] = {}  # one timing lock per device, whichever target times on it
    side_by_side = width > 1 and not any(lane.alone for lane in lanes)
    horizon.winners_at_once = width if side_by_side else 1
    for lane in lanes:
        lane.set_slice(night_s * lane.entry.share / total)
        # a kind that cannot evaluate beside others has the machine to itself (the Gate)
        lane.slots = slot_plan.plan(1 if lane.alone else width,
                                    type(lane.evaluator).uses_gpu, locks=locks)
        lane.seed_to_evaluate = lane.archive.seed is None
    try:
        _prepare_night(r, lanes)
        _search_concurrently(r, lanes, width)
        r.writer.flush()  # the searches' runs are complete before winners read them
        if r.shared is not None:
            r.shared.searched(lanes)
        chosen = [lane for lane in lanes if _seed_is_valid(r, lane)]
        _select_winners(r, chosen, width if side_by_side else 1, horizon.deadline)
    finally:
        for lane in lanes:
            _close_sandboxes(lane)
    return [_finish_summary(lane.out, lane.archive, lane.earlier) for lane in lanes]


def _prepare_night(r: Run, lanes: list[Lane]) -> None:
    """On a GPU night, before the first candidate: every slot's sandbox of every GPU
    target started (each warm process imports torch and Triton, 4-8 s with twenty at once)
    and each evaluator's night-wide trusted work done (``Evaluator.prepare``: the kernel
    kind's cases and references), all at once. Before, the first evaluation of each target
    on each slot paid its sandbox's start, and each seed its target's references: seeds took
    13-33 s on an NVIDIA H200 (2026-12-03). A failure here is said and left for the
    evaluation that meets it again (a sandbox that cannot start fails its candidate)."""
    jobs: list[tuple[str, Callable[[], None]]] = []
    for lane in lanes:
        device = device_for(lane.evaluator)
        if device != "cuda":
            continue
        ctx = fresh_context(r.config, lane.target, "prepare", None,
                            timeout_s=lane.target.timeout_s, device=device)
        jobs.append((f"{lane.target.name}: prepare",
                     functools.partial(_prepare_lane, lane.evaluator, ctx)))
        for slot in lane.slots:
            jobs.append((f"{lane.target.name}: sandbox of slot {slot.index}",
                         _sandbox(r, lane, slot).warm_up))
    if not jobs:
        return
    t0 = time.monotonic()
    failed: list[str] = []

    def run(name: str, job: Callable[[], None]) -> None:
        try:
            job()
        except Exception as exc:  # noqa: BLE001 - the evaluation that needs it fails instead
            failed.append(f"{name}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=run, args=job, daemon=True) for job in jobs]
    for t in threads:
        t.start()
    _join(*threads)
    took = time.monotonic() - t0
    r.summary.prepare_s = took
    r.say(f"night prepared in {took:.1f} s: {len(jobs)} jobs (sandbox starts, references)"
          + (f"; failed: {'; '.join(failed)[:500]}" if failed else ""))


def _prepare_lane(evaluator: Evaluator, ctx: EvalContext) -> None:
    try:
        evaluator.prepare(ctx)
    finally:  # its own (empty) io and scratch folders; what it made lives in the cache
        shutil.rmtree(ctx.io_dir, ignore_errors=True)
        shutil.rmtree(ctx.scratch, ignore_errors=True)


def _select_winners(r: Run, lanes: list[Lane], at_once: int, deadline: float) -> None:
    """The winners of ``lanes``' targets before ``deadline``: ``at_once`` side by side, or
    in turn, each batch in its part of what is left (its reserves' share of those still
    to select). With workers, each batch is the targets this worker claims once their
    search is over everywhere (``Shared.claim_winners``); the others' go to other workers."""
    left = list(lanes)
    while left and not r.budget.stop.is_set():
        if r.shared is None:
            batch = left if at_once > 1 else left[:1]
        else:
            batch, theirs = r.shared.claim_winners(
                r, left, at_once, rerun=lambda lane, proposal: _candidate(
                    r, lane, _sandbox(r, lane, lane.slots[0]), lane.slots[0], proposal))
            left = [lane for lane in left if lane not in theirs]
            if not batch:
                break
        now, kept = time.monotonic(), sum(x.reserve_s for x in left)
        part = sum(x.reserve_s for x in batch) / kept if kept else len(batch) / len(left)
        end = now + max(0.0, deadline - now) * part
        if at_once > 1:
            _select_winners_side_by_side(r, batch, at_once, end)
        else:
            batch[0].out.winner = _select_winner(r, batch[0], end)
            r.writer.flush()
        left = [lane for lane in left if lane not in batch]


def optimize_target(r: Run, entry: TargetEntry, deadline: float) -> TargetSummary:
    """One target within its slice of the night (the serial loop of ``run``)."""
    lane = _open_lane(r, entry, Horizon(deadline))
    lane.set_slice(max(0.0, deadline - time.monotonic()))
    target, archive, out = lane.target, lane.archive, lane.out
    # a kind that cannot evaluate in several threads gets one slot, and the whole machine
    wanted = r.config.run.slots if not lane.alone else 1
    lane.slots = slot_plan.plan(wanted, type(lane.evaluator).uses_gpu)
    serial = len(lane.slots) == 1 and r.config.proposer.concurrency == 1
    try:
        if serial:
            if archive.seed is None:
                _candidate(r, lane, _sandbox(r, lane, lane.slots[0]), lane.slots[0],
                           _seed_proposal(target))
            if not _seed_is_valid(r, lane):
                return _finish_summary(out, archive, lane.earlier)
            _search(r, lane, _sandbox(r, lane, lane.slots[0]), lane.slots[0])
        else:  # the seed and the starts side by side; proposals once the seed is valid
            lane.seed_to_evaluate = archive.seed is None
            _search_concurrently(r, [lane], len(lane.slots))
            if not _seed_is_valid(r, lane):
                return _finish_summary(out, archive, lane.earlier)
        r.writer.flush()  # the search's runs are complete before winners read them
        if not r.budget.stop.is_set():
            out.winner = _select_winner(r, lane, deadline)
    finally:
        _close_sandboxes(lane)
    r.writer.flush()
    return _finish_summary(out, archive, lane.earlier)


@dataclasses.dataclass
class Horizon:
    """When a search ends: the deadline less what its targets keep for their winners (one
    target's slice, or every target of a shared night)."""

    deadline: float
    shared: bool = False  # several targets' searches at once (share_the_night)
    reserved_s: dict[str, float] = dataclasses.field(default_factory=dict)  # by target
    winners_at_once: int = 1  # winners selected side by side at the end (on as many slots)

    @property
    def search_end(self) -> float:
        """The deadline less the winners' time: their reserves in turn, or side by side
        the longest of them (their sum shared by the slots when it is more)."""
        kept = list(self.reserved_s.values())
        if not kept:
            return self.deadline
        return self.deadline - max(max(kept), sum(kept) / max(1, self.winners_at_once))


@dataclasses.dataclass
class Lane:
    """One target's search state within a night (what its candidates share)."""

    entry: TargetEntry
    evaluator: Evaluator
    study: optuna.Study
    names: search.ParamNames
    archive: Archive
    out: TargetSummary
    rng: random.Random
    kind_text: str
    trusted_files: dict[str, str]
    horizon: Horizon
    earlier: int = 0  # candidates of earlier nights in the archive
    slice_s: float = 0.0  # the target's part of the night, in seconds
    starts: list[str] = dataclasses.field(default_factory=list)
    dup_streak: int = 0
    seed_to_evaluate: bool = False  # the concurrent search begins with the seed
    reserve_set: bool = False  # one target's slice: its reserve, from the seed's cost, is set
    seed_cost_s: float = 0.0  # what the seed's evaluation cost this night
    ahead: search.AskAhead | None = None  # the next trial, asked while the serial loop proposes
    priced_for: tuple[str, int] = ("", 0)  # the contender its reserve counts, its trials
    slots: list[Slot] = dataclasses.field(default_factory=list)
    sandboxes: dict[int, Sandbox] = dataclasses.field(default_factory=dict)  # by slot index
    # the concurrent search's: proposals made and waiting for a slot, proposals being made,
    # proposals made or being made whose candidates are not recorded yet, whether the
    # target's search goes on, proposals left unevaluated when it stopped
    ready: collections.deque[Proposal] = dataclasses.field(default_factory=collections.deque)
    making: int = 0
    flying: int = 0
    searching: bool = True
    dropped: int = 0

    def set_slice(self, slice_s: float) -> None:
        """The target's part of the night; until its seed is measured it keeps
        CONFIRM_SHARE of it for its winner."""
        self.slice_s = slice_s
        self.horizon.reserved_s[self.target.name] = CONFIRM_SHARE * slice_s

    def reserve_for_winner(self, r: Run) -> None:
        """Once the seed is measured: keep what confirming a winner will take. One target's
        slice prices it once, at the seed's cost. In a shared night a target keeps it only
        once it has a contender (a candidate beating the seed by ``min_gain``; one with none
        would leave it unused at the end, when no search is left to take it, so it keeps
        CONFIRM_SHARE of its part until then), and prices it again as the contender and
        the candidates' cost change: that contender's planned reduction trials, at the
        median cost of the last candidates."""
        if not self.seed_cost_s:
            return  # a seed of an earlier night: the default share of the slice
        if not self.horizon.shared:
            if not self.reserve_set:  # the seed's cost, once
                self.reserve_set = True
                self.horizon.reserved_s[self.target.name] = _winner_reserve(
                    r, self.evaluator, self.seed_cost_s, self.slice_s)
            return
        contender = best_contender(self.target, self.archive)
        if contender is None:
            return
        # the contender of now, at what the night's candidates cost (the seed's evaluation
        # builds the night's cases and warms the sandbox: up to 4x a candidate's on a GPU);
        # its planned trials are counted once (a diff and a parse)
        if self.priced_for[0] != contender.id:
            base = reduction_base(self.archive, contender)
            self.priced_for = (contender.id, planned_trials(base, contender))
        self.horizon.reserved_s[self.target.name] = _winner_reserve(
            r, self.evaluator, self.typical_cost_s(), self.slice_s, trials=self.priced_for[1])

    def typical_cost_s(self) -> float:
        """The median cost of this night's last candidates, its first (the seed, or a start
        beside it) left out; the seed's cost until there are three."""
        recent = self.out.eval_s[1:][-TYPICAL_OF:]
        return statistics.median(recent) if len(recent) >= 3 else self.seed_cost_s

    def drop_reserve(self) -> None:
        """The seed is not valid: nothing to confirm, the time goes to the other targets."""
        self.horizon.reserved_s[self.target.name] = 0.0

    @property
    def search_deadline(self) -> float:
        return self.horizon.search_end

    @property
    def reserve_s(self) -> float:
        return self.horizon.reserved_s.get(self.target.name, 0.0)

    @property
    def alone(self) -> bool:
        """Its evaluations cannot run beside others (``Evaluator.concurrent_evaluations``)."""
        return not type(self.evaluator).concurrent_evaluations

    @property
    def target(self) -> TargetSpec:
        return self.entry.spec


def _open_lane(r: Run, entry: TargetEntry, horizon: Horizon) -> Lane:
    """A target's evaluator, study and archive (earlier nights' candidates; a killed
    night's interrupted ones recorded first), and its starts still to evaluate."""
    target = entry.spec
    evaluator = evaluators.get(target.kind)(target)
    study = search.open_study(
        r.config.optuna_storage if r.shared is None else r.shared.storage,
        r.config.name,
        target,
        search.make_sampler(
            r.config.search.sampler,
            r.config.seed,
            r.config.search.n_startup_trials,
            len(target.objectives) > 1,
        ),
        one_writer=r.shared is None,  # workers' studies change under them: Optuna's cache
    )
    archive = Archive(target)
    outputs = lambda run_id, result, io_dir: log_outputs(  # noqa: E731
        r, evaluator, run_id, result, io_dir)
    if r.shared is None:
        recover_interrupted(r, study, target, outputs=outputs)
        load_archive(r, study, target, archive)
    else:  # workers share the study: only lost workers' trials are recovered
        r.shared.open_target(r, study, target, archive, outputs)
    lane = Lane(
        entry, evaluator, study, search.ParamNames(study), archive, TargetSummary(target.name),
        rng=random.Random(f"{r.config.seed}/{target.name}/{len(archive.entries)}"),
        kind_text=evaluator.prompt_text(),
        trusted_files=evaluator.prompt_files(),
        horizon=horizon,
        earlier=len(archive.entries),
    )
    # the target's other starting programs come first, each a structure of its own
    lane.starts = [s for s in target.starts
                   if content_hash(target.start_files(s)) not in archive.hashes]
    return lane


def _night_width(config: ExperimentConfig) -> int:
    """Slots of a night: the most any target's kind that evaluates beside others is
    planned (a kind that cannot gets one slot, and runs alone)."""
    kinds = {evaluators.get(e.spec.kind) for e in config.targets}
    return max((slot_plan.count(config.run.slots, kind.uses_gpu) for kind in kinds
                if kind.concurrent_evaluations), default=1)


def _sandbox(r: Run, lane: Lane, slot: Slot) -> Sandbox:
    """The target's sandbox on ``slot``, made the first time it is needed (only that slot's
    thread uses it; a kind that runs alone has one)."""
    if slot.index not in lane.sandboxes:
        lane.sandboxes[slot.index] = make_sandbox(r.config, lane.target, lane.evaluator,
                                                  slot=slot)
    return lane.sandboxes[slot.index]


def _close_sandboxes(lane: Lane) -> None:
    for sandbox in lane.sandboxes.values():
        sandbox.close()
    lane.sandboxes.clear()


class Turns:
    """The winners' phase side by side: reduction trials share the machine (``shared``), a
    confirmation has it alone (``alone``: its final check and its interleaved pairs run
    while no other target's evaluation does, as they did in turn). A confirmation waiting
    goes before trials that arrive after it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = 0  # trials under way
        self._alone = False  # a confirmation under way
        self._waiting = 0  # confirmations waiting for the machine
        self.shared = _Turn(self, alone=False)
        self.alone = _Turn(self, alone=True)

    def enter(self, alone: bool) -> None:
        with self._cond:
            if alone:
                self._waiting += 1
                self._cond.wait_for(lambda: not self._alone and self._running == 0)
                self._waiting -= 1
                self._alone = True
            else:
                self._cond.wait_for(lambda: not self._alone and self._waiting == 0)
                self._running += 1

    def leave(self, alone: bool) -> None:
        with self._cond:
            if alone:
                self._alone = False
            else:
                self._running -= 1
            self._cond.notify_all()


class _Turn:
    """``with turns.shared:`` / ``with turns.alone:`` (see :class:`Turns`)."""

    def __init__(self, turns: Turns, alone: bool):
        self.turns, self.is_alone = turns, alone

    def __enter__(self) -> None:
        self.turns.enter(self.is_alone)

    def __exit__(self, *exc: object) -> None:
        self.turns.leave(self.is_alone)


def _select_winners_side_by_side(r: Run, lanes: list[Lane], width: int,
                                 deadline: float) -> None:
    """The winners of a shared night's targets selected at once, each on a slot of its own
    (at most ``width`` at a time), all before ``deadline``: the targets' reduction trials
    run beside each other, a confirmation (final check and interleaved pairs) has the
    machine alone (:class:`Turns`), and whatever touches the stores, git or the budgets
    takes turns. In turn they left the other slots idle (a GPU night's four winners took
    1.7 of its 8 minutes on one slot)."""
    lock = threading.RLock()
    turns = Turns()
    free: queue.Queue[int] = queue.Queue()
    for i in range(width):
        free.put(i)
    errors: list[BaseException] = []

    def select(lane: Lane) -> None:
        index = free.get()
        try:
            if r.budget.stop.is_set() or errors:
                return
            slot = lane.slots[index % len(lane.slots)]
            lane.out.winner = _select_winner(r, lane, deadline, slot=slot, lock=lock,
                                             turns=turns)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller's thread
            errors.append(exc)
        finally:
            free.put(index)

    threads = [threading.Thread(target=select, args=(lane,), daemon=True,
                                name=f"winner-{lane.target.name}") for lane in lanes]
    for t in threads:
        t.start()
    _join(*threads)
    r.writer.flush()
    if errors:
        raise errors[0]


def _select_winner(r: Run, lane: Lane, deadline: float, slot: Slot | None = None,
                   lock: Any = None, turns: Turns | None = None) -> dict[str, Any] | None:
    """The target's winner: its best candidates reduced and confirmed against the seed
    (optimizer.winners) on ``slot`` (its first by default), before ``deadline``. With
    ``lock``, other targets' winners are being selected meanwhile: the parts that touch
    the stores, git or the budgets hold it, and ``turns`` says when a reduction trial and
    a confirmation may run."""
    target, archive, out = lane.target, lane.archive, lane.out
    slot = slot or lane.slots[0]
    sandbox = _sandbox(r, lane, slot)

    def trial(files: dict[str, str], summary: str, parent: str) -> ArchiveEntry | None:
        """A reduced program, evaluated as a candidate of its own."""
        proposal = Proposal("minimize", parent, files, summary,
                            fixed_knobs=knobs.values_of(files))
        most = r.config.budget.max_candidates
        if most and r.budget.candidates >= most:  # other targets' trials took the rest
            return None
        with turns.shared if turns is not None else contextlib.nullcontext():
            _candidate(r, lane, sandbox, slot, proposal, lock=lock)
        cid = archive.hashes.get(content_hash(files))
        return archive.get(cid) if cid else None

    # reduction trials are candidates too: they count against the budgets
    left = [r.config.stats.minimize_trials]
    if r.config.budget.max_candidates:
        left.append(r.config.budget.max_candidates - r.budget.candidates)
    if lane.entry.max_candidates:
        left.append(lane.entry.max_candidates - out.candidates)
    return select_winner(r, target, lane.evaluator, sandbox, lane.study, archive,
                         evaluate=trial, deadline=deadline, max_trials=max(0, min(left)),
                         device_lock=slot.timing, lock=lock,
                         alone=turns.alone if turns is not None else None)


def _seed_proposal(target: TargetSpec) -> Proposal:
    files = target.seed_files()
    return Proposal("seed", None, files, "the target's seed program",
                    fixed_knobs=knobs.values_of(files))


def _seed_is_valid(r: Run, lane: Lane) -> bool:
    """Whether there is a measured seed to optimise against; if not, the target's note
    says why (a seed not measurable on this machine is skipped, not an error)."""
    seed = lane.archive.seed
    if seed is not None and seed.state is CandidateState.VALID:
        lane.reserve_for_winner(r)
        return True
    why = seed.reason if seed else "not evaluated"
    if seed is not None and seed.state is CandidateState.PRUNED:
        lane.out.note = f"seed not measured here ({why[:300]}); skipped on this machine"
    else:
        lane.out.note = f"seed program is not valid ({why[:300]}); nothing to optimise against"
    r.say(f"[{lane.target.name}] {lane.out.note}")
    return False


def _search(r: Run, lane: Lane, sandbox: Sandbox, slot: Slot) -> None:
    """The serial search: one proposal, then its evaluation, until the slice is spent. The
    proposal's trial is asked meanwhile (``search.AskAhead``): nothing else touches the
    study until it is taken, so the trial is the one asking afterwards would give."""
    with r.writer.held():  # the writer runs while candidates are evaluated (Writer)
        _search_held(r, lane, sandbox, slot)


def _search_held(r: Run, lane: Lane, sandbox: Sandbox, slot: Slot) -> None:
    while (job := _next_job(r, lane)) is not None and job is not _WAIT:
        lane.ahead = search.AskAhead(lane.study)
        proposal = job if isinstance(job, Proposal) else _propose(r, lane, job)
        _record_usage(r, lane, proposal)
        evaluated = _candidate(r, lane, sandbox, slot, proposal)
        if _duplicate_streak(lane, evaluated):
            break


def _search_concurrently(r: Run, lanes: list[Lane], width: int) -> None:
    """The search of one or several targets with ``width`` slots evaluating a candidate
    each, ``proposer.concurrency`` proposals being made meanwhile and one thread recording
    the evaluated ones. A free slot takes the next proposal of the target furthest behind
    its share (``sharing.Shares``); a proposer makes the next one for the target furthest
    behind counting what it has waiting. A target whose kind cannot evaluate beside others
    evaluates alone (``sharing.Gate``), on its one slot. Proposing and evaluating run
    unlocked; everything that touches an archive, a study, git or the budgets holds ``lock``
    (MLflow is the writer thread's alone). A target's search ends when its next job is none
    (its seed is not valid, the night's search is over, a candidate limit, a budget: the
    last stops every target) or at its duplicate streak; a proposal still waiting then is not
    evaluated (no trial, no branch). Trials are asked when a slot admits its candidate."""
    lock = threading.RLock()  # re-entered by the store guards of a candidate admitted under it
    changed = threading.Condition(lock)  # a proposal made, a slot freed, a search over
    shares = sharing.Shares(lane.entry.share for lane in lanes)
    gate = sharing.Gate()
    waiting_room = width + r.config.proposer.concurrency  # proposals made or being made
    errors: list[BaseException] = []
    settling: queue.Queue[tuple[Lane, _Admitted, EvalResult, str] | None] = queue.Queue(
        maxsize=2 * width)

    def guarded(part: str) -> contextlib.AbstractContextManager[Any]:
        return lock

    def fail(exc: BaseException) -> None:
        with changed:
            errors.append(exc)
            changed.notify_all()

    def more_to_come() -> bool:
        return not errors and any(x.searching or x.ready or x.making for x in lanes)

    def next_job() -> tuple[Lane, Proposal | ProposalContext] | None:
        """The job a proposer takes next (under ``lock``), or None for now."""
        queued = {i: len(x.ready) + x.making for i, x in enumerate(lanes)}
        if sum(queued.values()) >= waiting_room:
            return None
        for i in shares.by_need([i for i, x in enumerate(lanes) if x.searching], queued):
            lane = lanes[i]
            job = _next_job(r, lane, lanes)
            if job is None:
                _stop_search(lane, lanes if r.summary.stop_reason else [lane])
                changed.notify_all()
            elif job is not _WAIT:  # _WAIT: a limit reached only by candidates in flight
                lane.flying += 1
                lane.making += 1
                return lane, job
        return None

    def proposing() -> None:
        try:
            while True:
                with changed:
                    while (taken := next_job()) is None:
                        if errors or not any(x.searching for x in lanes):
                            return
                        changed.wait(0.05)  # a seed's verdict, a duplicate: then go on
                lane, job = taken
                proposal = job if isinstance(job, Proposal) else _propose(r, lane, job)
                with changed:
                    _record_usage(r, lane, proposal)
                    lane.making -= 1
                    lane.ready.append(proposal)
                    changed.notify_all()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller's thread
            fail(exc)

    def take() -> tuple[Lane, Proposal, int] | None:
        """The next proposal a free slot evaluates and its job's handle; None when the
        search is over (under ``lock``; waits for a proposal and for the gate). Proposals
        too late to evaluate are dropped first, without waiting for the gate."""
        while True:
            for lane in lanes:
                if lane.ready and (errors or _too_late(r, lane)):
                    lane.dropped += len(lane.ready)
                    lane.flying -= len(lane.ready)
                    lane.ready.clear()
                    _release(lane)
            ready = [i for i, x in enumerate(lanes) if x.ready]
            i = shares.most_behind(ready) if gate.open() else None
            if i is None:
                if not more_to_come():
                    return None
                changed.wait(0.2)
                continue
            lane = lanes[i]
            gate.enter(lane.alone)
            while lane.alone and not gate.drained():  # the machine to itself
                changed.wait(0.2)
            if lane.ready and not errors and not _too_late(r, lane):
                return lane, lane.ready.popleft(), shares.begin(i, width if lane.alone else 1)
            gate.leave(lane.alone)  # dropped or too late meanwhile: choose again
            changed.notify_all()

    def evaluating(index: int) -> None:
        while True:
            try:
                with changed:
                    taken = take()
            except BaseException as exc:  # noqa: BLE001 - re-raised by the caller's thread
                fail(exc)
                return
            if taken is None:
                return
            lane, proposal, job = taken
            try:
                with changed:
                    admitted = _admit(r, lane, proposal, guarded)
                if isinstance(admitted, _Admitted):
                    slot = lane.slots[0 if lane.alone else index]
                    result, eval_log = evaluate_candidate(
                        r, lane.target, lane.evaluator, _sandbox(r, lane, slot),
                        admitted.cand.id, admitted.cand_dir, slot=slot)
                    settling.put((lane, admitted, result, eval_log))  # take the next one
                    continue
                with changed:
                    lane.flying -= 1
                    if _duplicate_streak(lane, admitted is not False):
                        _stop_search(lane, [lane])
                    _release(lane)
            except BaseException as exc:  # noqa: BLE001 - re-raised by the caller's thread
                fail(exc)
            finally:
                with changed:
                    shares.end(job)
                    gate.leave(lane.alone)
                    changed.notify_all()

    def recording() -> None:
        """Records evaluated candidates in order (branch, MLflow, trial, archive) off the
        slots' path; a kill before a record is written leaves its trial RUNNING, which
        ``--resume`` turns into an interrupted candidate, as for one killed mid-evaluation."""
        while (item := settling.get()) is not None:
            if errors:
                continue
            lane, admitted, result, eval_log = item
            try:
                _settle(r, lane, admitted, result, eval_log, guard=guarded)
                with changed:
                    lane.flying -= 1
                    _duplicate_streak(lane, True)
                    lane.reserve_for_winner(r)  # a contender keeps its winner's time
                    _release(lane)
                    changed.notify_all()
            except BaseException as exc:  # noqa: BLE001 - re-raised by the caller's thread
                fail(exc)

    workers = [threading.Thread(target=proposing, name=f"propose-{i}", daemon=True)
               for i in range(r.config.proposer.concurrency)]
    slot_threads = [threading.Thread(target=evaluating, args=(i,), daemon=True,
                                     name=f"slot-{i}") for i in range(width)]
    recorder = threading.Thread(target=recording, name="record", daemon=True)
    for t in (*workers, *slot_threads, recorder):
        t.start()
    _join(*workers, *slot_threads)
    settling.put(None)
    _join(recorder)
    if errors:
        raise errors[0]
    for lane in lanes:
        if lane.dropped:
            r.say(f"[{lane.target.name}] {lane.dropped} proposal(s) still queued when the "
                  "search stopped were not evaluated")
    stop = r.budget.exhausted()
    if stop and not r.summary.stop_reason:
        r.summary.stop_reason = stop


def _stop_search(lane: Lane, lanes: list[Lane]) -> None:
    """``lanes``' searches are over (a budget of the whole night stops every target); a
    target whose seed is not valid keeps nothing for a winner."""
    for x in lanes:
        x.searching = False
    if _seed_is_out(lane):
        lane.drop_reserve()
    _release(lane)


def _too_late(r: Run, lane: Lane) -> bool:
    """Whether a proposal of ``lane`` still waiting for a slot is not evaluated: a stop
    was asked for, the search is over, the target's duplicate streak is reached or its
    seed is not valid."""
    return (r.budget.stop.is_set() or time.monotonic() >= lane.search_deadline
            or lane.dup_streak >= MAX_DUPLICATES_IN_A_ROW or _seed_is_out(lane))


def _seed_is_out(lane: Lane) -> bool:
    seed = lane.archive.seed
    return seed is not None and seed.state is not CandidateState.VALID


def _release(lane: Lane) -> None:
    """A target out of the night with nothing in flight closes its sandboxes at once
    (a kernel kind's warm process holds torch and triton, 370 MB: five kernel targets
    without a GPU held ten of them until the night's end)."""
    if not lane.searching and not lane.flying and _seed_is_out(lane):
        _close_sandboxes(lane)


def _join(*threads: threading.Thread) -> None:
    """Wait for ``threads`` in short turns: a Ctrl-C that the kernel hands to another thread
    only marks the signal, and Python runs its handler in the main thread when that thread
    next runs Python code; a join without a timeout would keep it waiting all night."""
    for t in threads:
        while t.is_alive():
            t.join(timeout=0.1)


_WAIT = Proposal("wait", None, {})  # see _next_job


def _next_job(r: Run, lane: Lane, lanes: list[Lane] | None = None,
              ) -> Proposal | ProposalContext | None:
    """What to evaluate next: a declared start, or the context to propose from; None when
    the target's search is over. ``lanes`` are the targets searched at once (``lane`` among
    them): their proposals still being made or evaluated (``Lane.flying``) count against
    the budgets, and while they alone fill a candidate limit the answer is ``_WAIT`` (ask
    again)."""
    target, out, archive = lane.target, lane.out, lane.archive
    lanes = lanes or [lane]
    flying, in_flight = lane.flying, sum(x.flying for x in lanes)
    next_usd = (r.ledger.estimate_next_usd(target.name)
                + sum(r.ledger.estimate_next_usd(x.target.name) * x.flying for x in lanes)
                if r.budget.usd else 0.0)
    stop = r.budget.exhausted(next_usd)
    if stop:  # a budget of the whole run: no other target starts either
        r.summary.stop_reason = stop
        return None
    if time.monotonic() >= lane.search_deadline:
        return None
    if r.budget.max_candidates and r.budget.candidates + in_flight >= r.budget.max_candidates:
        return _WAIT
    if lane.entry.max_candidates and out.candidates + flying >= lane.entry.max_candidates:
        return _WAIT if out.candidates < lane.entry.max_candidates else None
    if r.shared is not None:  # the other workers' candidates; a lost worker's, to re-run
        rerun = r.shared.next_job(r, lane)
        if rerun is not None:
            return rerun
    if lane.seed_to_evaluate:
        lane.seed_to_evaluate = False
        return _seed_proposal(target)
    if _seed_is_out(lane):
        return None  # nothing to improve on: the target's starts are not evaluated either
    if lane.starts:
        start = lane.starts.pop(0)
        files = target.start_files(start)
        return Proposal("start", SEED_ID, files, f"the target's start {start}",
                        fixed_knobs=knobs.values_of(files))
    if archive.seed is None:
        return _WAIT  # the seed is still being evaluated
    lane.reserve_for_winner(r)
    if time.monotonic() >= lane.search_deadline:
        return None
    parent = archive.pick_parent(lane.rng)
    return ProposalContext(
        target=target,
        parent=parent,
        seed=archive.seed,
        inspirations=archive.inspirations(parent, lane.rng),
        feedback=archive.feedback(),
        rng_seed=r.config.seed,
        iteration=len(archive.entries) + out.duplicates + flying,
        structures_seen=archive.structures(),
        kind_text=lane.kind_text,
        trusted_files=lane.trusted_files,
    )


def _propose(r: Run, lane: Lane, context: ProposalContext) -> Proposal:
    """The proposer's answer; one that fails is a rejected proposal with the reason."""
    try:
        return r.proposer.propose(context)
    except ProposalError as exc:
        return Proposal(r.proposer.name, context.parent.id, {}, rejected=str(exc))


def _record_usage(r: Run, lane: Lane, proposal: Proposal) -> None:
    if proposal.usage.calls:
        r.ledger.record(lane.target.name, proposal.usage)
        r.budget.spent_usd = r.ledger.usd


def _duplicate_streak(lane: Lane, evaluated: bool) -> bool:
    """Count duplicates in a row; True when the target should stop for them."""
    lane.dup_streak = 0 if evaluated else lane.dup_streak + 1
    if lane.dup_streak >= MAX_DUPLICATES_IN_A_ROW:
        lane.out.note = f"stopped early: {lane.dup_streak} duplicate proposals in a row"
        seed = lane.archive.seed
        lane.out.note += dry_run_advice(lane.target, seed.files if seed else {},
                                        [e.proposer for e in lane.archive.entries])
        return True
    return False


@dataclasses.dataclass
class _Admitted:
    """A candidate with its trial and branch, ready to be evaluated."""

    proposal: Proposal
    cand: Candidate
    record: CandidateRecord
    trial: Any
    structure: str
    digest: str
    cand_dir: Path
    overhead_s: float
    run: Future[str]  # its MLflow run, being created by the writer


def _candidate(r: Run, lane: Lane, sandbox: Sandbox, slot: Slot, proposal: Proposal,
               lock: Any = None) -> bool:
    """Turn one proposal into an evaluated candidate; False when it was a duplicate. With
    ``lock``, admitting and recording hold it (other threads make candidates meanwhile)."""
    turn = lock or contextlib.nullcontext()
    with turn, r.writer.held():  # the writer's jobs run while the candidate is evaluated
        admitted = _admit(r, lane, proposal)
    if not isinstance(admitted, _Admitted):
        return admitted
    with r.writer.runs():
        result, eval_log = evaluate_candidate(
            r, lane.target, lane.evaluator, sandbox, admitted.cand.id, admitted.cand_dir,
            slot=slot)
    with turn, r.writer.held():
        _settle(r, lane, admitted, result, eval_log)
    return True


def _admit(r: Run, lane: Lane, proposal: Proposal,
           guard: Callable[[str], contextlib.AbstractContextManager[Any]] | None = None,
           ) -> _Admitted | bool:
    """Knob values, content hash and branch of a proposal: the candidate to evaluate, or
    True when it was recorded as rejected, False when it was a duplicate."""
    target, study, archive, out = lane.target, lane.study, lane.archive, lane.out
    t0 = time.perf_counter()
    if proposal.rejected is None:
        try:
            knob_set = knobs.knobs_of_files(proposal.files)
        except ProposalError as exc:
            proposal = dataclasses.replace(proposal, rejected=f"bad knob declaration: {exc}")
    if proposal.rejected is not None:
        _record_rejected(r, lane, proposal, guard)
        return True
    dists = knobs.distributions(knob_set.values())
    structure = knobs.structure_key(proposal.files)
    fixed = {k: v for k, v in proposal.fixed_knobs.items() if k in dists}
    broken: str | None = None
    for _ in range(MAX_CONSTRAINED_ASKS):
        ahead, lane.ahead = lane.ahead, None
        trial, values = search.ask(study, dists, lane.names.map(dists, structure), fixed, ahead)
        broken = broken_constraint(target.knob_constraints, values)
        if broken is None:
            break
        # values the target says cannot work: never a candidate, and the sampler learns so
        search.set_user_attrs(trial, {"reason": f"knob values break {broken}",
                                      "state": "CONSTRAINED"})
        study.tell(trial, state=TrialState.FAIL)
        if set(fixed) == set(dists):
            break  # the proposal fixed every value: asking again cannot help
    if broken is not None:
        _record_rejected(r, lane, dataclasses.replace(
            proposal, rejected=f"knob values {values} break the target's constraint "
                               f"{broken}"), guard)
        return True
    files = knobs.substitute_files(proposal.files, values)
    digest = content_hash(files)
    known = archive.hashes.get(digest) or archive.pending.get(digest)
    cid = ""
    if r.shared is not None:  # an atomic claim of the content and an id, across workers
        known, cid = r.shared.claim(lane, proposal, trial, digest, files, values, structure,
                                    known)
    if known is not None:
        _record_duplicate(study, trial, archive, known)
        out.duplicates += 1
        return False
    cand = Candidate(
        cid or (SEED_ID if proposal.proposer == "seed" else archive.next_id()),
        target.name,
        proposal.parent_id,
        proposal.proposer,
        files,
        values,
        digest,
        proposal.summary,
        structure,
    )
    archive.pending[digest] = cand.id
    record = CandidateRecord.of(cand, branch=r.ws.candidate_branch(target.name, cand.id))
    write_attrs(trial, record)  # RUNNING: a killed run finds it and finishes its record
    cand_dir, _ = r.ws.create_candidate(target.rel_path, target.name, cand.id, files,
                                        running_message(target, cand))
    run = start_run(r, cand, record.branch, trial.number)
    return _Admitted(proposal, cand, record, trial, structure, digest, cand_dir,
                     time.perf_counter() - t0, run)


def _settle(r: Run, lane: Lane, a: _Admitted, result: EvalResult, eval_log: str,
            guard: Callable[[str], contextlib.AbstractContextManager[Any]] | None = None,
            ) -> None:
    """Record an evaluated candidate everywhere (branch, trial; MLflow in the writer) and in
    the archive. ``guard(part)`` is held around each part ("git", "optuna", "state"); by
    default nothing is (the serial loop)."""
    hold = guard or (lambda part: contextlib.nullcontext())
    target, archive, cand = lane.target, lane.archive, a.cand
    t1 = time.perf_counter()
    with hold("state"):
        best_before = archive.best()
    io_dir = io_dir_of(r.config, target, cand.id)
    save(
        r,
        target,
        lane.study,
        a.trial,
        a.record,
        cand,
        result,
        prompt=a.proposal.prompt,
        response=a.proposal.response,
        eval_log=eval_log,
        outputs=lambda run_id: log_outputs(r, lane.evaluator, run_id, result, io_dir),
        io_dir=io_dir,
        run=a.run,
        cleanup=(None if r.config.vcs.keep_worktrees
                 else lambda: r.ws.remove_worktree(target.name, cand.id)),
        guard=hold,
    )
    with hold("state"):
        _add_to_archive(r, lane, a, result, best_before, t1)


def _add_to_archive(r: Run, lane: Lane, a: _Admitted, result: EvalResult,
                    best_before: ArchiveEntry | None, t1: float) -> None:
    target, archive, out, cand = lane.target, lane.archive, lane.out, a.cand
    entry = ArchiveEntry.of(cand, result)
    archive.add(entry, a.structure, a.digest)
    r.proposer.observe(entry)
    r.budget.candidates += 1
    out.candidates += 1
    out.eval_s.append(result.cost_s)
    if a.proposal.proposer == "seed":
        lane.seed_cost_s = result.cost_s
    best = archive.best()
    if a.proposal.usage.calls and best is not None and best is not best_before:
        r.ledger.mark_improvement(target.name, candidate=best.id, model=a.proposal.usage.model)
    r.summary.engine_overhead_ms.append((a.overhead_s + time.perf_counter() - t1) * 1000)
    _say_candidate(r, target, archive, entry, result)


def _record_rejected(
    r: Run,
    lane: Lane,
    proposal: Proposal,
    guard: Callable[[str], contextlib.AbstractContextManager[Any]] | None = None,
) -> None:
    """A proposal without usable code: a REJECTED candidate with a trial and a run, no branch."""
    target, study, archive, out = lane.target, lane.study, lane.archive, lane.out
    ahead, lane.ahead = lane.ahead, None
    trial = ahead.take(sampled=False) if ahead is not None else study.ask()
    result = EvalResult(CandidateState.REJECTED, str(proposal.rejected), "proposal")
    cand = Candidate(
        r.shared.claim_id(lane, proposal, trial) if r.shared is not None
        else SEED_ID if proposal.proposer == "seed" else archive.next_id(),
        target.name,
        proposal.parent_id,
        proposal.proposer,
        {},
        {},
        "",
        proposal.summary,
    )
    record = CandidateRecord.of(cand)
    write_attrs(trial, record)
    save(r, target, study, trial, record, cand, result, prompt=proposal.prompt,
         response=proposal.response, guard=guard)
    entry = ArchiveEntry.of(cand, result, files=proposal.files)
    archive.add(entry, "rejected")
    r.proposer.observe(entry)
    r.budget.candidates += 1
    out.candidates += 1
    _say_candidate(r, target, archive, entry, result)


def _record_duplicate(study: optuna.Study, trial: Any, archive: Archive, of: str) -> None:
    """Not evaluated: no candidate id, branch or run; the sampler learns the known value."""
    write_attrs(trial, CandidateRecord(state=CandidateState.DUPLICATE, duplicate_of=of),
                before_tell=True)
    original = None if of in archive.pending.values() else archive.get(of)  # under evaluation
    if original is not None and original.state is CandidateState.VALID and original.objectives:
        study.tell(trial, list(original.objectives))
    else:
        study.tell(trial, state=TrialState.FAIL)


def _say_candidate(
    r: Run, target: TargetSpec, archive: Archive, entry: ArchiveEntry, result: EvalResult
) -> None:
    best = archive.best()
    metric = target.primary.metric
    value = f"{metric}={entry.objectives[0]:.6g}" if entry.objectives else result.reason[:90]
    best_s = f"best {best.objectives[0]:.6g} ({best.id})" if best else "no valid candidate yet"
    left = r.budget.remaining_s() / 60
    r.say(
        f"[{target.name}] {entry.id} {entry.state.value:<9} "
        f"{value.splitlines()[0] if value else ''}"
        f" | {best_s} | {entry.proposer} | {left:.1f} min left"
    )


def _winner_reserve(r: Run, evaluator: Evaluator, eval_s: float, slice_s: float,
                    trials: int | None = None) -> float:
    """Seconds of a target's slice kept for its winner: the reduction's trials (``trials``
    when its contender is known, else the most it may take) and the confirmation (what the
    kind says it costs: ``Evaluator.confirmation_evaluations``), at ``eval_s`` each; between
    CONFIRM_SHARE and MAX_CONFIRM_SHARE of the slice. (A fixed 15% left a timed target's
    confirmation, 30 evaluations, running 1.2 minutes past a 50-second slice in the nightly,
    and the targets after it got less; charging a kernel's one-call comparison as 30
    evaluations and 12 trials at its seed's cost ended a GPU night's search 3.5 minutes
    early, and its winners took 1.7 of them.)"""
    confirm = evaluator.confirmation_evaluations(r.config.stats.confirm_repeats)
    most = r.config.stats.minimize_trials
    wanted = (confirm + (most if trials is None else min(most, trials))) * eval_s
    return min(MAX_CONFIRM_SHARE * slice_s, max(CONFIRM_SHARE * slice_s, wanted))


def _finish_summary(out: TargetSummary, archive: Archive, earlier: int) -> TargetSummary:
    """States of this night's candidates (this process's: not other workers'); seed and
    best over every night of the study."""
    for e in archive.entries[earlier:]:
        if e.id in archive.theirs:
            continue
        out.states[e.state.value] = out.states.get(e.state.value, 0) + 1
    if archive.seed and archive.seed.objectives:
        out.seed_value = archive.seed.objectives[0]
    best = archive.best()
    if best:
        out.best_value, out.best_candidate = best.objectives[0], best.id
    return out
