"""Replica-level scheduler hooks: what the simulator shows a scheduler and what it accepts.

A scheduler policy module defines three functions; the simulator calls them on every
replica (the same module for all replicas)::

    schedule(queue, replica) -> int     # index into `queue` of the request to prefill next
    chunk_size(request, replica) -> int # prefill tokens per step for `request` (1..budget)
    evict(running, replica) -> int      # index into `running` of the sequence to preempt

``schedule`` is called when a replica can start a prefill and two or more requests wait;
it sees the first :data:`QUEUE_WINDOW` waiting requests (preempted ones are put first,
then arrival order). ``chunk_size`` is called once each time a request enters prefill; a
step then carries ``min(chunk, token_budget - running)`` prefill tokens. ``evict`` is
called when the KV cache is full and two or more sequences run (recompute preemption).

Every hook's answer is an int; a :class:`Hooks` records them in call order (the
sandboxed child returns that log) and :func:`replay_hooks` plays a log back on the
trusted side. A log that runs out, or has answers left over, is an invalid log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class DecisionError(ValueError):
    """A policy (or a replayed log) gave an answer that is not a valid decision."""


QUEUE_WINDOW = 16  # waiting requests a schedule() call sees (bounds its cost per admission)
HOOKS = ("schedule", "chunk_size", "evict")


class Waiting:
    """A request waiting for prefill on this replica."""

    __slots__ = ("id", "arrival", "prompt_tokens", "context_tokens", "cached_tokens",
                 "preempted", "waited_s")
    id: int
    arrival: float
    prompt_tokens: int
    context_tokens: int  # prompt + tokens generated before a preemption (to recompute)
    cached_tokens: int  # leading tokens this replica's prefix cache holds now
    preempted: int
    waited_s: float


class Running:
    """A sequence in the decode batch (its output length is unknown to the scheduler)."""

    __slots__ = ("id", "arrival", "prompt_tokens", "context_tokens", "generated", "preempted")
    id: int
    arrival: float
    prompt_tokens: int
    context_tokens: int  # KV tokens it holds now
    generated: int
    preempted: int


class ReplicaState:
    """The replica the hook is called for, at ``now``."""

    __slots__ = ("now", "index", "accelerator", "running", "waiting", "queued_tokens",
                 "kv_capacity", "kv_used", "token_budget", "max_seqs")
    now: float
    index: int
    accelerator: str
    running: int
    waiting: int
    queued_tokens: int
    kv_capacity: int
    kv_used: int  # tokens held by running sequences plus the prefill in progress
    token_budget: int
    max_seqs: int


class Hooks:
    """The three hooks (None: the built-in FCFS / full budget / youngest choice).

    With ``record`` every answer is appended to ``log[hook]`` and, with ``timed``, the
    wall time of every call to ``times``.
    """

    def __init__(self, schedule: Callable[..., Any] | None = None,
                 chunk_size: Callable[..., Any] | None = None,
                 evict: Callable[..., Any] | None = None, *, record: bool = False,
                 timed: bool = False):
        self.schedule, self.chunk_size, self.evict = schedule, chunk_size, evict
        self.log: dict[str, list[int]] | None = {h: [] for h in HOOKS} if record else None
        self.times: list[float] | None = [] if timed else None

    @classmethod
    def from_module(cls, module: Any, **kwargs: Any) -> Hooks:
        found = {h: getattr(module, h, None) for h in HOOKS}
        missing = [h for h, f in found.items() if not callable(f)]
        if missing:
            raise AttributeError(
                f"scheduler policy must define {', '.join(HOOKS)}; missing {', '.join(missing)}"
            )
        return cls(found["schedule"], found["chunk_size"], found["evict"], **kwargs)

    def leftovers(self) -> str:
        """Non-empty when a replayed log had answers nobody asked for."""
        return ""


class _Replayed(Hooks):
    def __init__(self, log: dict[str, list[int]]):
        self._log = {h: list(log.get(h, [])) for h in HOOKS}
        self._pos = dict.fromkeys(HOOKS, 0)
        super().__init__(*(self._player(h) for h in HOOKS))

    def _player(self, hook: str) -> Callable[..., int]:
        answers = self._log[hook]

        def play(*_: Any) -> int:
            pos = self._pos[hook]
            if pos >= len(answers):
                raise DecisionError(f"the decision log has only {len(answers)} {hook}() "
                                    "answers; the simulation asks for more")
            self._pos[hook] = pos + 1
            return answers[pos]

        return play

    def leftovers(self) -> str:
        extra = {h: len(self._log[h]) - self._pos[h] for h in HOOKS}
        extra = {h: n for h, n in extra.items() if n}
        return ", ".join(f"{n} {h}() answers" for h, n in extra.items())


def replay_hooks(log: dict[str, list[int]]) -> Hooks:
    """Hooks that answer from a recorded log, in call order."""
    return _Replayed(log)
