"""The search's scheduler: one or several targets' candidates on the night's slots.

``width`` slots evaluate a candidate each, ``proposers`` threads make proposals meanwhile,
and one thread records the evaluated ones in order. A free slot takes the next proposal of
the target furthest behind its share (``sharing.Shares``); a proposer makes the next one
for the target furthest behind counting what it has waiting. A target whose kind cannot
evaluate beside others evaluates alone (``sharing.Gate``), on its one slot. Proposing and
evaluating run unlocked; everything that touches an archive, a study, git or the budgets
holds the scheduler's lock (MLflow is the writer thread's alone).

Its state is plain and in sight: per target a :class:`Track` (proposals ready, being made,
in flight; whether its search goes on; its duplicate streak), and the policy of the
night (:class:`Policy`). The serial loop is this scheduler with one slot and one proposal
in flight (:meth:`Policy.serial`): a proposal is made once the one before is recorded, its
trial is asked while it is made (``search.AskAhead``), and a proposal made is evaluated
however late; a night of one slot replays exactly for a seed.

A target's search ends when its next job is none (its seed is not valid, the night's
search is over, a candidate limit, a budget: the last stops every target) or at its
duplicate streak; with several in flight a proposal still waiting then is not evaluated
(no trial, no branch).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import queue
import sys
import threading
import time
from collections.abc import Iterator

from optimizer import search, sharing
from optimizer.advice import dry_run_advice
from optimizer.candidate import admit, evaluate, propose, record_usage, settle
from optimizer.lane import Lane, seed_proposal, start_proposal
from optimizer.night import Run
from optimizer.proposers._base import ProposalContext
from optimizer.recording import InFlight
from optimizer.records import EvalResult, Proposal

MAX_DUPLICATES_IN_A_ROW = 40

_WAIT = Proposal("wait", None, {})  # a limit reached only by candidates in flight: ask again


@dataclasses.dataclass(frozen=True)
class Policy:
    """How a search runs: ``width`` slots; at most ``waiting`` proposals made or being made
    and not yet taken by a slot; at most ``in_flight`` proposals between their making and
    their record (0: no limit); ``proposers`` threads making them; whether a trial is asked
    while its proposal is made (only where nothing else touches the study meanwhile), and
    whether a proposal still waiting when its target's search ends is dropped."""

    width: int
    proposers: int
    waiting: int
    in_flight: int = 0
    ask_ahead: bool = False
    drop_late: bool = True

    @classmethod
    def serial(cls, ask_ahead: bool = True) -> Policy:
        """One slot, one proposal in flight: the serial loop (its trial asked ahead where
        this process alone writes the study)."""
        return cls(width=1, proposers=1, waiting=1, in_flight=1, ask_ahead=ask_ahead,
                   drop_late=False)

    @classmethod
    def concurrent(cls, width: int, proposers: int) -> Policy:
        return cls(width=width, proposers=proposers, waiting=width + proposers)


@dataclasses.dataclass
class Track:
    """The scheduler's state of one target: proposals made and waiting for a slot (each
    with its trial asked ahead, if any), proposals being made, proposals made or being
    made whose candidates are not recorded yet, whether its search goes on, proposals
    left unevaluated when it stopped, duplicates in a row, and whether its seed is still
    to evaluate."""

    lane: Lane
    ready: collections.deque[tuple[Proposal, search.AskAhead | None]] = dataclasses.field(
        default_factory=collections.deque)
    making: int = 0
    flying: int = 0
    searching: bool = True
    dropped: int = 0
    dup_streak: int = 0
    seed_to_evaluate: bool = False


class Scheduler:
    """Runs the search of ``lanes`` under ``policy`` (see the module docstring)."""

    def __init__(self, r: Run, lanes: list[Lane], policy: Policy):
        self.r, self.policy = r, policy
        self.tracks = [Track(lane, seed_to_evaluate=lane.archive.seed is None)
                       for lane in lanes]
        self.shares = sharing.Shares(lane.entry.share for lane in lanes)
        self.gate = sharing.Gate()
        self.lock = threading.RLock()  # re-entered by a candidate's store guards
        self.changed = threading.Condition(self.lock)  # a proposal made, a slot freed, ...
        self.errors: list[BaseException] = []
        self.settling: queue.Queue[tuple[Track, InFlight, EvalResult, str] | None] = (
            queue.Queue(maxsize=2 * policy.width))

    # -- the search ---------------------------------------------------------------------

    def run(self) -> None:
        """Search until every target's search is over; raises what a thread raised."""
        p = self.policy
        threads = [threading.Thread(target=self._proposing, name=f"propose-{i}", daemon=True)
                   for i in range(p.proposers)]
        threads += [threading.Thread(target=self._evaluating, args=(i,), daemon=True,
                                     name=f"slot-{i}") for i in range(p.width)]
        recorder = threading.Thread(target=self._recording, name="record", daemon=True)
        # the serial loop lets the writer run only while a candidate is evaluated (Writer)
        held = self.r.writer.held() if p.in_flight == 1 else contextlib.nullcontext()
        with held, _quick_gil_handover(p.width > 1):
            for t in (*threads, recorder):
                t.start()
            join(*threads)
            self.settling.put(None)
            join(recorder)
        if self.errors:
            raise self.errors[0]
        for track in self.tracks:
            if track.dropped:
                self.r.say(f"[{track.lane.target.name}] {track.dropped} proposal(s) still "
                           "queued when the search stopped were not evaluated")
        stop = self.r.budget.exhausted()
        if stop and not self.r.summary.stop_reason:
            self.r.summary.stop_reason = stop

    def _guard(self, part: str) -> contextlib.AbstractContextManager[object]:
        return self.lock

    def _fail(self, exc: BaseException) -> None:
        with self.changed:
            self.errors.append(exc)
            self.changed.notify_all()

    def _more_to_come(self) -> bool:
        return not self.errors and any(t.searching or t.ready or t.making
                                       for t in self.tracks)

    # -- proposing ------------------------------------------------------------------------

    def _proposing(self) -> None:
        try:
            while True:
                with self.changed:
                    while (taken := self._take_job()) is None:
                        if self.errors or not any(t.searching for t in self.tracks):
                            return
                        self.changed.wait(0.05)  # a seed's verdict, a duplicate: go on
                track, job = taken
                ahead = (search.AskAhead(track.lane.study) if self.policy.ask_ahead
                         else None)
                proposal = job if isinstance(job, Proposal) else propose(self.r, job)
                with self.changed:
                    record_usage(self.r, track.lane, proposal)
                    track.making -= 1
                    track.ready.append((proposal, ahead))
                    self.changed.notify_all()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller's thread
            self._fail(exc)

    def _take_job(self) -> tuple[Track, Proposal | ProposalContext] | None:
        """The job a proposer takes next (under the lock), or None for now."""
        p, tracks = self.policy, self.tracks
        queued = {i: len(t.ready) + t.making for i, t in enumerate(tracks)}
        if sum(queued.values()) >= p.waiting:
            return None
        if p.in_flight and sum(t.flying for t in tracks) >= p.in_flight:
            return None
        for i in self.shares.by_need([i for i, t in enumerate(tracks) if t.searching], queued):
            track = tracks[i]
            job = self.next_job(track)
            if job is None:
                self._stop_search(track, tracks if self.r.summary.stop_reason else [track])
                self.changed.notify_all()
            elif job is not _WAIT:
                track.flying += 1
                track.making += 1
                return track, job
        return None

    def next_job(self, track: Track) -> Proposal | ProposalContext | None:
        """What to evaluate next for ``track``: a declared start, or the context to propose
        from; None when the target's search is over. Proposals of every target still being
        made or evaluated count against the budgets, and while they alone fill a candidate
        limit the answer is ``_WAIT`` (ask again)."""
        r, lane = self.r, track.lane
        target, out, archive = lane.target, lane.out, lane.archive
        in_flight = sum(t.flying for t in self.tracks)
        next_usd = (r.ledger.estimate_next_usd(target.name)
                    + sum(r.ledger.estimate_next_usd(t.lane.target.name) * t.flying
                          for t in self.tracks) if r.budget.usd else 0.0)
        stop = r.budget.exhausted(next_usd)
        if stop:  # a budget of the whole run: no other target starts either
            r.summary.stop_reason = stop
            return None
        if time.monotonic() >= lane.search_deadline:
            return None
        if (r.budget.max_candidates
                and r.budget.candidates + in_flight >= r.budget.max_candidates):
            return _WAIT
        if lane.entry.max_candidates and out.candidates + track.flying >= lane.entry.max_candidates:
            return _WAIT if out.candidates < lane.entry.max_candidates else None
        rerun = r.coordination.next_job(r, lane)  # a lost worker's candidate, to run again
        if rerun is not None:
            return rerun
        if track.seed_to_evaluate:
            track.seed_to_evaluate = False
            return seed_proposal(target)
        if lane.seed_is_out:
            return None  # nothing to improve on: the target's starts are not evaluated either
        if lane.starts:
            return start_proposal(target, lane.starts.pop(0))
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
            iteration=len(archive.entries) + out.duplicates + track.flying,
            structures_seen=archive.structures(),
            kind_text=lane.kind_text,
            trusted_files=lane.trusted_files,
        )

    # -- evaluating -----------------------------------------------------------------------

    def _evaluating(self, index: int) -> None:
        while True:
            try:
                with self.changed:
                    taken = self._take_proposal()
            except BaseException as exc:  # noqa: BLE001 - re-raised by the caller's thread
                self._fail(exc)
                return
            if taken is None:
                return
            track, proposal, ahead, job = taken
            lane = track.lane
            try:
                with self.changed:
                    flight = admit(self.r, lane, proposal, ahead, self._guard)
                if isinstance(flight, InFlight):
                    slot = lane.slots[0 if lane.alone else index]
                    with self.r.writer.runs():
                        result, eval_log = evaluate(self.r, lane, flight, slot)
                    self.settling.put((track, flight, result, eval_log))  # take the next one
                    continue
                with self.changed:
                    track.flying -= 1
                    if self._duplicate_streak(track, flight is not False):
                        self._stop_search(track, [track])
                    self._release(track)
            except BaseException as exc:  # noqa: BLE001 - re-raised by the caller's thread
                self._fail(exc)
            finally:
                with self.changed:
                    self.shares.end(job)
                    self.gate.leave(lane.alone)
                    self.changed.notify_all()

    def _take_proposal(self) -> tuple[Track, Proposal, search.AskAhead | None, int] | None:
        """The next proposal a free slot evaluates and its job's handle; None when the
        search is over (under the lock; waits for a proposal and for the gate). Proposals
        too late to evaluate are dropped first, without waiting for the gate."""
        while True:
            for track in self.tracks:
                if track.ready and (self.errors or self._too_late(track)):
                    track.dropped += len(track.ready)
                    track.flying -= len(track.ready)
                    track.ready.clear()
                    self._release(track)
            ready = [i for i, t in enumerate(self.tracks) if t.ready]
            i = self.shares.most_behind(ready) if self.gate.open() else None
            if i is None:
                if not self._more_to_come():
                    return None
                self.changed.wait(0.2)
                continue
            track = self.tracks[i]
            alone = track.lane.alone
            self.gate.enter(alone)
            while alone and not self.gate.drained():  # the machine to itself
                self.changed.wait(0.2)
            if track.ready and not self.errors and not self._too_late(track):
                proposal, ahead = track.ready.popleft()
                slots = self.policy.width if alone else 1
                return track, proposal, ahead, self.shares.begin(i, slots)
            self.gate.leave(alone)  # dropped or too late meanwhile: choose again
            self.changed.notify_all()

    # -- recording ------------------------------------------------------------------------

    def _recording(self) -> None:
        """Records evaluated candidates in order (branch, MLflow, trial, archive) off the
        slots' path; a kill before a record is written leaves its trial RUNNING, which
        ``--resume`` turns into an interrupted candidate, as for one killed mid-evaluation."""
        while (item := self.settling.get()) is not None:
            if self.errors:
                continue
            track, flight, result, eval_log = item
            try:
                settle(self.r, track.lane, flight, result, eval_log, guard=self._guard)
                with self.changed:
                    track.flying -= 1
                    self._duplicate_streak(track, True)
                    track.lane.reserve_for_winner(self.r)  # a contender keeps its time
                    self._release(track)
                    self.changed.notify_all()
            except BaseException as exc:  # noqa: BLE001 - re-raised by the caller's thread
                self._fail(exc)

    # -- a target's search ending -----------------------------------------------------------

    def _duplicate_streak(self, track: Track, evaluated: bool) -> bool:
        """Count duplicates in a row; True when the target should stop for them."""
        track.dup_streak = 0 if evaluated else track.dup_streak + 1
        if track.dup_streak >= MAX_DUPLICATES_IN_A_ROW:
            lane = track.lane
            seed = lane.archive.seed
            lane.out.note = (f"stopped early: {track.dup_streak} duplicate proposals in a row"
                             + dry_run_advice(lane.target, seed.files if seed else {},
                                              [e.proposer for e in lane.archive.entries]))
            return True
        return False

    def _stop_search(self, track: Track, tracks: list[Track]) -> None:
        """``tracks``' searches are over (a budget of the whole night stops every target);
        a target whose seed is not valid keeps nothing for a winner."""
        for t in tracks:
            t.searching = False
        if track.lane.seed_is_out:
            track.lane.drop_reserve()
        self._release(track)

    def _too_late(self, track: Track) -> bool:
        """Whether a proposal of ``track`` still waiting for a slot is not evaluated: a stop
        was asked for, the search is over, the target's duplicate streak is reached or its
        seed is not valid. The serial loop evaluates the one proposal it made."""
        lane = track.lane
        if not self.policy.drop_late:
            return False
        return (self.r.budget.stop.is_set() or time.monotonic() >= lane.search_deadline
                or track.dup_streak >= MAX_DUPLICATES_IN_A_ROW or lane.seed_is_out)

    def _release(self, track: Track) -> None:
        """A target out of the night with nothing in flight closes its sandboxes at once
        (a kernel kind's warm process holds torch and triton, 370 MB: five kernel targets
        without a GPU held ten of them until the night's end)."""
        if not track.searching and not track.flying and track.lane.seed_is_out:
            track.lane.close_sandboxes()


# With several slots, a slot's thread that waits on its sandbox (a socket, a fork) takes the
# GIL back after each wait, behind whichever thread computes meanwhile (a sampler's ask, a
# record): at Python's 5 ms switch interval that cost each evaluation tens of milliseconds
# on 2 cores. At 0.5 ms, 4 slots of an I/O-bound target evaluated 4% more candidates per
# second (six pairs of toy nights each, 2026-12-06); one slot's rate did not change.
GIL_SWITCH_S = 0.0005


@contextlib.contextmanager
def _quick_gil_handover(on: bool) -> Iterator[None]:
    before = sys.getswitchinterval()
    if on:
        sys.setswitchinterval(min(before, GIL_SWITCH_S))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def join(*threads: threading.Thread) -> None:
    """Wait for ``threads`` in short turns: a Ctrl-C that the kernel hands to another thread
    only marks the signal, and Python runs its handler in the main thread when that thread
    next runs Python code; a join without a timeout would keep it waiting all night."""
    for t in threads:
        while t.is_alive():
            t.join(timeout=0.1)
