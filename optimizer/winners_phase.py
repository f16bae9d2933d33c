"""The night's winners' phase: each target's best candidates reduced and confirmed against
its seed (:func:`optimizer.winners.select_winner`) once its search is over, in turn or side
by side on the night's slots (:class:`Turns`), and with workers by the one worker that
claims the target."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import Any

from optimizer.candidate import one_candidate
from optimizer.lane import Lane
from optimizer.night import Run
from optimizer.records import ArchiveEntry, Proposal, content_hash
from optimizer.scheduler import join
from optimizer.slots import Slot
from optimizer.winners import Contest, best_contender, select_winner


def select_winners(r: Run, lanes: list[Lane], at_once: int, deadline: float) -> None:
    """The winners of ``lanes``' targets before ``deadline``: ``at_once`` side by side, or
    in turn, each batch in its part of what is left (its reserves' share of those still
    to select; a target without a contender needs none of it: :func:`_needs_s`). With
    workers, each batch is the targets this worker claims once their search is over
    everywhere (``Shared.claim_winners``); the others' go to other workers."""
    left = list(lanes)
    while left and not r.budget.stop.is_set():
        batch, theirs = r.coordination.claim_winners(
            r, left, at_once, rerun=lambda lane, proposal: one_candidate(
                r, lane, lane.slots[0], proposal))
        left = [lane for lane in left if lane not in theirs]
        if not batch:
            break
        now, kept = time.monotonic(), sum(_needs_s(x) for x in left)
        part = sum(_needs_s(x) for x in batch) / kept if kept else len(batch) / len(left)
        end = now + max(0.0, deadline - now) * part
        if at_once > 1:
            _side_by_side(r, batch, at_once, end)
        else:
            batch[0].out.winner = select_lane_winner(r, batch[0], end)
            r.writer.flush()
        left = [lane for lane in left if lane not in batch]


def _needs_s(lane: Lane) -> float:
    """What a target's winner needs of the time left: its reserve, or nothing when it has
    no contender (its winner is 'no winner' at once). The CONFIRM_SHARE such a target kept
    went to the winners selected before it, and a routing winner's reduction was cut short
    one trial before its end on 2 cores (2026-12-05) while three targets without a
    contender held their parts of the time after it."""
    return lane.reserve_s if best_contender(lane.target, lane.archive) is not None else 0.0


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


def _side_by_side(r: Run, lanes: list[Lane], width: int, deadline: float) -> None:
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
            lane.out.winner = select_lane_winner(r, lane, deadline, slot=slot, lock=lock,
                                                 turns=turns)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller's thread
            errors.append(exc)
        finally:
            free.put(index)

    threads = [threading.Thread(target=select, args=(lane,), daemon=True,
                                name=f"winner-{lane.target.name}") for lane in lanes]
    for t in threads:
        t.start()
    join(*threads)
    r.writer.flush()
    if errors:
        raise errors[0]


def select_lane_winner(r: Run, lane: Lane, deadline: float, slot: Slot | None = None,
                       lock: Any = None, turns: Turns | None = None) -> dict[str, Any] | None:
    """The target's winner: its best candidates reduced and confirmed against the seed
    (optimizer.winners) on ``slot`` (its first by default), before ``deadline``. With
    ``lock``, other targets' winners are being selected meanwhile: the parts that touch
    the stores, git or the budgets hold it, and ``turns`` says when a reduction trial and
    a confirmation may run."""
    archive, out = lane.archive, lane.out
    slot = slot or lane.slots[0]
    at_once = turns.shared if turns is not None else contextlib.nullcontext()

    def trial(files: dict[str, str], summary: str, parent: str) -> ArchiveEntry | None:
        """A reduced program, evaluated as a candidate of its own."""
        most = r.config.budget.max_candidates
        if most and r.budget.candidates >= most:  # other targets' trials took the rest
            return None
        with at_once:
            one_candidate(r, lane, slot, Proposal.as_written("minimize", parent, files,
                                                             summary), lock=lock)
        cid = archive.hashes.get(content_hash(files))
        return archive.get(cid) if cid else None

    # reduction trials are candidates too: they count against the budgets
    left = [r.config.stats.minimize_trials]
    if r.config.budget.max_candidates:
        left.append(r.config.budget.max_candidates - r.budget.candidates)
    if lane.entry.max_candidates:
        left.append(lane.entry.max_candidates - out.candidates)
    return select_winner(r, Contest(
        target=lane.target, evaluator=lane.evaluator, sandbox=lane.sandbox(r, slot),
        study=lane.study, archive=archive, evaluate=trial, deadline=deadline,
        max_trials=max(0, min(left)), device_lock=slot.timing, lock=lock,
        alone=turns.alone if turns is not None else None))
