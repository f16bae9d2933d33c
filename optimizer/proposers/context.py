"""The LLM proposer's context policy: which past candidates each prompt shows, and how.

A policy answers two questions for every call on a target, from the target's history of
candidates (oldest first) alone:

- ``window(n, most)``: the index of the first of the ``n`` candidates shown (at most
  ``most`` of them);
- ``brief(i, n, most)``: whether candidate ``i`` of the shown ones is reduced to its verdict
  line, its reason's first line and its metrics (its validation report and logs left out).

and one flag, ``frozen_inspirations``: whether the "best and diverse" candidates shown stay
the same for a whole epoch of the feedback log, or are the archive's new draw on every call.

Provider prompt caches serve the longest prefix a prompt shares with an earlier one, so a
policy's cost is decided by where its prompt first differs from the previous call's. The
policies here are the agent-harness family's findings applied to the proposer itself
(docs/harness.md, "Dogfood"): ``sliding`` is what a harness without a cache in mind sends;
``append-only`` (the default) only appends between epoch boundaries; ``masked`` does the
same and also drops the reports of the previous epoch's candidates at each boundary, where
the prefix changes anyway, the way the harness's context policy masks old tool results.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar


class ContextPolicy(ABC):
    """One way to show a target's past candidates (see the module docstring)."""

    name: ClassVar[str]
    frozen_inspirations: ClassVar[bool]

    @abstractmethod
    def window(self, n: int, most: int) -> int:
        """The first shown index of a history of ``n`` candidates (``0 <= i <= n``)."""

    def brief(self, i: int, n: int, most: int) -> bool:
        """Whether shown candidate ``i`` (of ``n``) is shown without its reports."""
        return False


def epoch_start(n: int, most: int) -> int:
    """The first shown index when the log only grows within epochs of ``most // 2``.

    A window that slides by one changes its first entry on every call and breaks the cached
    prefix right there; this one restarts at an epoch boundary and then only grows, so it
    shows between ``most // 2 + 1`` and ``most`` candidates."""
    epoch = max(1, most // 2)
    return max(0, ((n - 1) // epoch) * epoch - epoch) if n else 0


class AppendOnly(ContextPolicy):
    """The log only grows between epoch boundaries; inspirations kept for an epoch."""

    name = "append-only"
    frozen_inspirations = True

    def window(self, n: int, most: int) -> int:
        return epoch_start(n, most)


class Sliding(ContextPolicy):
    """The last ``most`` candidates and the archive's inspirations of this call."""

    name = "sliding"
    frozen_inspirations = False

    def window(self, n: int, most: int) -> int:
        return max(0, n - most)


class Masked(AppendOnly):
    """Append-only, and the previous epoch's candidates shown without their reports.

    The brief entries are decided at the epoch boundary (everything before the current
    epoch's first candidate), so within an epoch every entry's text stays the same."""

    name = "masked"

    def brief(self, i: int, n: int, most: int) -> bool:
        epoch = max(1, most // 2)
        current = ((n - 1) // epoch) * epoch if n else 0
        return i < current


POLICIES: dict[str, type[ContextPolicy]] = {
    p.name: p for p in (AppendOnly, Sliding, Masked)
}


def policy(name: str) -> ContextPolicy:
    """The policy named ``name``; ValueError names the known ones."""
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(
            f"context must be one of {', '.join(sorted(POLICIES))}, not {name!r}"
        ) from None
