"""The contract every :class:`optimizer.night.Coordination` keeps (one process, workers
sharing a storage), as a pytest suite each implementation subclasses, in the manner of
Optuna's storage tests. A subclass gives the ``opened`` fixture: an implementation with a
toy target opened on a fresh study of its storage (:class:`Opened`)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import optuna
from optuna.trial import TrialState

from optimizer.archive import Archive
from optimizer.night import Coordination
from optimizer.records import (
    SEED_ID,
    ArchiveEntry,
    CandidateState,
    Proposal,
    candidate_number,
)


@dataclasses.dataclass
class Opened:
    coordination: Coordination
    run: Any  # what open_target and claim_winners are given of the night
    study: optuna.Study
    lane: Any  # target, archive, names (a LaneView)

    @property
    def archive(self) -> Archive:
        return self.lane.archive


def _proposal(proposer: str = "offline", files: dict[str, str] | None = None) -> Proposal:
    return Proposal(proposer, None if proposer == "seed" else SEED_ID,
                    files or {"program.py": "X = 1\n"}, "a test program")


def _claim(o: Opened, digest: str, proposer: str = "offline") -> tuple[str | None, str]:
    """A claim as the candidate's life makes it: the archive's knowledge passed in, the id
    pending afterwards."""
    archive = o.archive
    known = archive.hashes.get(digest) or archive.pending.get(digest)
    proposal = _proposal(proposer, {"program.py": f"# {digest}\n"})
    found, cid = o.coordination.claim(o.lane, proposal, o.study.ask(), digest,
                                      dict(proposal.files), {}, "s", known)
    if found is None:
        archive.pending[digest] = cid
    return found, cid


class CoordinationContract:
    """Subclass with an ``opened`` fixture (see the module docstring)."""

    def test_the_seed_gets_the_seeds_id_and_new_programs_fresh_ones(self, opened: Opened,
                                                                     ) -> None:
        assert _claim(opened, "seed-hash", "seed") == (None, SEED_ID)
        ids = [_claim(opened, f"h{i}")[1] for i in range(3)]
        assert len(set(ids)) == 3 and SEED_ID not in ids
        assert [candidate_number(c) for c in ids] == sorted(candidate_number(c) for c in ids)

    def test_a_known_program_is_a_duplicate_of_its_candidate(self, opened: Opened) -> None:
        found, cid = _claim(opened, "same")
        assert found is None and cid
        assert _claim(opened, "same") == (cid, "")

    def test_a_rejected_proposal_gets_an_id_of_its_own(self, opened: Opened) -> None:
        _, first = _claim(opened, "a")
        rejected = opened.coordination.claim_id(opened.lane, _proposal(), opened.study.ask())
        # recorded at once, as the candidate's life records a rejected proposal
        opened.archive.add(ArchiveEntry(rejected, SEED_ID, {}, {}, CandidateState.REJECTED,
                                        "no code"), "rejected")
        _, after = _claim(opened, "b")
        assert len({first, rejected, after}) == 3

    def test_nothing_to_run_again_on_a_fresh_night(self, opened: Opened) -> None:
        assert opened.coordination.next_job(opened.run, opened.lane) is None

    def test_a_target_whose_search_is_over_has_its_winner_selected_here(
            self, opened: Opened) -> None:
        for t in opened.study.get_trials(states=(TrialState.RUNNING,)):
            opened.study.tell(t.number, state=TrialState.FAIL)
        opened.coordination.searched([opened.lane])
        mine, theirs = opened.coordination.claim_winners(
            opened.run, [opened.lane], 1, rerun=lambda lane, proposal: None)
        assert mine == [opened.lane] and theirs == []


def night_of(tmp_path: Any, target: Any, storage: Any, **extra: Any) -> SimpleNamespace:
    """The little of a night that opening a target and claiming winners touch."""
    from optimizer.budget import Budget
    from optimizer.night import Writer

    config = SimpleNamespace(state_dir=tmp_path / "state", name="exp", optuna_storage=storage,
                             vcs=SimpleNamespace(keep_worktrees=True))
    ws = SimpleNamespace(candidate_ids=lambda name: [])
    return SimpleNamespace(config=config, ws=ws, say=lambda s: None, writer=Writer(),
                           budget=Budget(1.0), proposer=SimpleNamespace(observe=print),
                           **extra)
