"""The proposer contract, as a pytest suite every proposer runs.

- ``propose`` never raises past its boundary: a bad model answer, an unusable parent or a
  failing endpoint is a Proposal with ``rejected`` set to the reason;
- it is deterministic for a seed: two proposers made alike, asked the same contexts in the
  same order, return the same proposals;
- it edits only inside EVOLVE-BLOCKs and only editable files: every file of an accepted
  proposal equals its parent's outside the blocks.

Subclass :class:`ProposerContract` and provide ``make_proposer`` (a factory: seed ->
Proposer) and ``contexts`` (a list of ProposalContext to ask in order); optionally
``hostile_contexts`` (contexts that should make the proposer reject, not raise).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from optimizer.edits import evolve_regions
from optimizer.proposers._base import ProposalContext, Proposer
from optimizer.records import Proposal


def outside_blocks(source: str) -> list[str]:
    """The text of ``source`` outside its EVOLVE-BLOCKs, segment by segment."""
    out, pos = [], 0
    for start, end in evolve_regions(source):
        out.append(source[pos:start])
        pos = end
    out.append(source[pos:])
    return out


def _key(p: Proposal) -> tuple:
    return (p.parent_id, tuple(sorted(p.files.items())), tuple(sorted(p.fixed_knobs.items())),
            p.rejected, p.summary)


class ProposerContract:
    @pytest.fixture
    def make_proposer(self) -> Callable[[int], Proposer]:
        raise NotImplementedError("provide `make_proposer`: seed -> Proposer")

    @pytest.fixture
    def contexts(self) -> Sequence[ProposalContext]:
        raise NotImplementedError("provide `contexts`: the ProposalContexts to ask, in order")

    @pytest.fixture
    def hostile_contexts(self) -> Sequence[ProposalContext]:
        """Contexts whose parent cannot be edited (no EVOLVE-BLOCK content, broken markers)."""
        return ()

    def _ask(self, proposer: Proposer, contexts: Sequence[ProposalContext]) -> list[Proposal]:
        try:
            return [proposer.propose(c) for c in contexts]
        finally:
            proposer.close()

    def test_never_raises_past_its_boundary(
            self, make_proposer: Callable[[int], Proposer],
            contexts: Sequence[ProposalContext],
            hostile_contexts: Sequence[ProposalContext]) -> None:
        proposals = self._ask(make_proposer(0), [*contexts, *hostile_contexts])
        assert all(isinstance(p, Proposal) for p in proposals)
        for p in proposals[len(contexts):]:
            assert p.rejected or p.files, "a hostile context gives a reason or a proposal"

    def test_deterministic_per_seed(self, make_proposer: Callable[[int], Proposer],
                                    contexts: Sequence[ProposalContext]) -> None:
        first = [_key(p) for p in self._ask(make_proposer(7), contexts)]
        again = [_key(p) for p in self._ask(make_proposer(7), contexts)]
        assert first == again

    def test_edits_only_inside_evolve_blocks(self, make_proposer: Callable[[int], Proposer],
                                             contexts: Sequence[ProposalContext]) -> None:
        accepted = 0
        for ctx, p in zip(contexts, self._ask(make_proposer(3), contexts), strict=True):
            if p.rejected is not None:
                assert p.rejected.strip(), "a rejected proposal says why"
                continue
            accepted += 1
            assert set(p.files) <= set(ctx.target.editable), sorted(p.files)
            for rel, text in p.files.items():
                parent = ctx.parent.files[rel]
                assert outside_blocks(text) == outside_blocks(parent), (
                    f"{rel}: text outside the EVOLVE-BLOCKs changed")
        assert accepted, "no proposal was accepted: the contexts test nothing"
