"""Proposers: offline (knob search + AST mutation), llm (any OpenAI-compatible endpoint),
replay (a recorded night). :func:`make_proposer` builds the one a config names."""

from __future__ import annotations

from typing import TYPE_CHECKING

from optimizer.proposers._base import ProposalContext, Proposer
from optimizer.proposers.offline import OfflineProposer
from optimizer.records import ArchiveEntry

if TYPE_CHECKING:
    from optimizer.config import ExperimentConfig

__all__ = ["ArchiveEntry", "OfflineProposer", "ProposalContext", "Proposer", "make_proposer"]


def make_proposer(config: ExperimentConfig, night: str = "adhoc") -> Proposer:
    """The proposer an experiment names; an LLM's exchanges go to a cassette per night."""
    kind = config.proposer.kind
    if kind == "offline":
        off = config.proposer.offline
        return OfflineProposer(config.seed, off.knob_search_share, off.max_mutations,
                               off.knob_nudge_share)
    if kind == "llm":
        from optimizer.proposers.llm import LLMProposer

        settings = config.proposer.llm
        cassette = config.state_dir / "cassettes" / f"{config.name}-{night}.jsonl"
        cassette.parent.mkdir(parents=True, exist_ok=True)
        return LLMProposer(settings, cassette=cassette, seed=config.seed)
    if kind.startswith("replay:"):
        from pathlib import Path

        from optimizer.proposers.replay import ReplayProposer

        return ReplayProposer(Path(kind.removeprefix("replay:")))
    raise ValueError(f"unknown proposer kind {kind!r}")
