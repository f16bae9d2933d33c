"""Budgets: wall-clock minutes, candidates, US dollars; and a stop flag for Ctrl-C.

The loop asks ``budget.exhausted()`` before each candidate. Time is split between
targets by their ``share``: in the serial loop a target gets its share of what is left
when it starts, so time a fast target leaves unused goes to the targets after it; with
several slots or proposals in flight every target searches at once and a free slot serves
the one furthest behind its share (:mod:`optimizer.sharing`).
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from types import FrameType


@dataclass
class Budget:
    minutes: float
    max_candidates: int = 0
    usd: float = 0.0
    started: float = field(default_factory=time.monotonic)
    candidates: int = 0
    spent_usd: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)
    stop_reason: str = ""

    @property
    def deadline(self) -> float:
        return self.started + self.minutes * 60.0

    def remaining_s(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def exhausted(self, next_usd: float = 0.0) -> str:
        """Why the run must stop now ("" while it may go on)."""
        if self.stop.is_set():
            return self.stop_reason or "stopped"
        if time.monotonic() >= self.deadline:
            return f"time budget of {self.minutes:g} min spent"
        if self.max_candidates and self.candidates >= self.max_candidates:
            return f"candidate budget of {self.max_candidates} spent"
        if self.usd and self.spent_usd + next_usd > self.usd:
            return f"USD budget of {self.usd:g} spent (${self.spent_usd:.4f} so far)"
        return ""

    def request_stop(self, reason: str) -> None:
        self.stop_reason = reason
        self.stop.set()


class StopOnSigint:
    """First Ctrl-C: finish the current candidate, then stop. Second: interrupt now."""

    def __init__(self, budget: Budget):
        self.budget = budget
        self._old: object = None

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.budget.stop.is_set():
            raise KeyboardInterrupt
        self.budget.request_stop("interrupted (Ctrl-C): stopped after the current candidate")
        print("\nStopping after the current candidate (Ctrl-C again to abort now).", flush=True)

    def __enter__(self) -> StopOnSigint:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)  # type: ignore[arg-type]
