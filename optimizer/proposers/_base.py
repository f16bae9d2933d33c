"""The proposer contract.

``Proposer.propose(context) -> Proposal``: given the parent to improve (and the archive's
best/diverse inspirations and recent feedback), return the complete new content of the
target's editable files, possibly with new or re-ranged knob declarations. A proposer
never raises for a bad model answer: it returns a Proposal with ``rejected`` set to the
reason. Proposers are deterministic for a given ``context.rng_seed`` where they can be.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from optimizer.records import CandidateState, Proposal
from optimizer.targets import TargetSpec


@dataclass(frozen=True)
class ArchiveEntry:
    """An evaluated candidate as proposers see it.

    ``files`` are the candidate's sources *with knob declarations* (the structure) and
    ``knobs`` the values it was evaluated with; ``objectives`` follow the target's order.
    """

    id: str
    parent_id: str | None
    files: Mapping[str, str]
    knobs: Mapping[str, Any]
    state: CandidateState
    reason: str = ""
    metrics: Mapping[str, float] = field(default_factory=dict)
    objectives: tuple[float, ...] = ()
    artifacts: Mapping[str, str] = field(default_factory=dict)
    summary: str = ""
    proposer: str = ""


@dataclass(frozen=True)
class ProposalContext:
    target: TargetSpec
    parent: ArchiveEntry  # the program to improve (the seed on the first iteration)
    seed: ArchiveEntry  # the target's seed program as evaluated
    inspirations: tuple[ArchiveEntry, ...] = ()  # best and diverse others
    feedback: tuple[ArchiveEntry, ...] = ()  # most recent candidates, newest first
    rng_seed: int = 0
    iteration: int = 0
    structures_seen: int = 0  # distinct structures in the archive so far


class Proposer(ABC):
    """Base of proposers; ``name`` is recorded with every candidate."""

    name: str = ""

    @abstractmethod
    def propose(self, context: ProposalContext) -> Proposal:
        """Return the next proposal (never raise for a bad model answer)."""

    def observe(self, entry: ArchiveEntry) -> None:  # noqa: B027 - optional hook
        """Hear how a candidate this proposer made ended (for bandits); optional."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients and files."""
