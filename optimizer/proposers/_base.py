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

from optimizer.records import ArchiveEntry, Proposal
from optimizer.targets import TargetSpec


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
    kind_text: str = ""  # how the target's kind evaluates candidates (its evaluator's text)
    trusted_files: Mapping[str, str] = field(default_factory=dict)  # shown, not editable


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
