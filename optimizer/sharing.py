"""How the targets of one night share its evaluation slots.

Every target is a *lane*. Whenever a slot is free it takes the next job of the lane that is
furthest behind its share: the fewest slot-seconds used per unit of ``share`` among the
lanes that have a job ready. A job's seconds count from the moment a slot takes it, so a
lane whose seed takes two minutes is not behind while it runs, and the other lanes fill the
other slots meanwhile. A lane with nothing to give (its seed still running and no start
left, or its search over) is simply not among the ready ones, so its time goes to the
others: nothing is lost to a lane that waits or drops out.

A job that must have the machine to itself (a kind that cannot evaluate beside other
evaluations) passes the :class:`Gate`: it waits until the running jobs are done, nothing
starts beside it, and it is charged for every slot it keeps idle.

Plain state, no threads and no locks of its own: the loop holds its lock around every call.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping

DEFAULT_JOB_S = 1.0  # a lane's typical job before any lane has finished one


class Shares:
    """Slot-seconds used per lane (finished jobs and those running) against its share."""

    def __init__(self, shares: Iterable[float], clock: Callable[[], float] = time.monotonic):
        self.shares = [float(s) for s in shares]
        if any(s <= 0 for s in self.shares):
            raise ValueError(f"shares must be > 0: {self.shares}")
        self._clock = clock
        self._done_s = [0.0] * len(self.shares)
        self._jobs = [0] * len(self.shares)
        self._running: dict[int, tuple[int, float, float]] = {}  # job -> lane, start, slots
        self._ids = itertools.count()

    def begin(self, lane: int, slots: float = 1.0) -> int:
        """A job of ``lane`` starts, holding ``slots`` slots; returns its handle."""
        job = next(self._ids)
        self._running[job] = (lane, self._clock(), slots)
        return job

    def end(self, job: int) -> float:
        """The job is over: its slot-seconds are the lane's for good (returned)."""
        lane, start, slots = self._running.pop(job)
        spent = (self._clock() - start) * slots
        self._done_s[lane] += spent
        self._jobs[lane] += 1
        return spent

    def used_s(self, lane: int) -> float:
        now = self._clock()
        return self._done_s[lane] + sum((now - start) * slots
                                        for at, start, slots in self._running.values()
                                        if at == lane)

    def typical_s(self, lane: int) -> float:
        """What one more job of ``lane`` will likely cost: its mean so far, else the mean of
        every lane's jobs, else :data:`DEFAULT_JOB_S`."""
        if self._jobs[lane]:
            return self._done_s[lane] / self._jobs[lane]
        if sum(self._jobs):
            return sum(self._done_s) / sum(self._jobs)
        return DEFAULT_JOB_S

    def by_need(self, lanes: Iterable[int], queued: Mapping[int, int] | None = None,
                ) -> list[int]:
        """``lanes`` from the furthest behind its share to the least; ``queued`` jobs a lane
        already has waiting count at its typical cost (whom to propose for next). Ties go to
        the lane named first in the experiment."""
        queued = queued or {}
        return sorted(lanes, key=lambda i: (
            (self.used_s(i) + queued.get(i, 0) * self.typical_s(i)) / self.shares[i], i))

    def most_behind(self, lanes: Iterable[int]) -> int | None:
        """The lane a free slot serves next among ``lanes`` (those with a job ready)."""
        order = self.by_need(lanes)
        return order[0] if order else None


class Gate:
    """Jobs that run beside each other, and jobs that must run alone.

    A job that runs alone claims the gate (:meth:`enter` with ``alone``): from then on no job
    enters, and it starts once :meth:`drained` says the jobs already running have left. One
    job claims the gate at a time."""

    def __init__(self) -> None:
        self.running = 0  # jobs running beside each other
        self.claimed = False  # a job that runs alone is waiting to start, or running

    def open(self) -> bool:
        """Whether a job, alone or not, may enter now."""
        return not self.claimed

    def enter(self, alone: bool) -> None:
        if self.claimed:
            raise RuntimeError("the gate is claimed by a job that runs alone")
        if alone:
            self.claimed = True
        else:
            self.running += 1

    def drained(self) -> bool:
        """Whether a job that claimed the gate has the machine to itself."""
        return self.running == 0

    def leave(self, alone: bool) -> None:
        if alone:
            self.claimed = False
        else:
            self.running -= 1
