"""The archive keeps its rankings as entries are added; what it answers (and what a seeded
random draw picks from it, so the replay of a night) is what recomputing every time gives."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from optimizer.archive import Archive
from optimizer.records import SEED_ID, ArchiveEntry, CandidateState, candidate_id


def _naive(archive: Archive, entries: list[ArchiveEntry], minimize: bool) -> dict:
    valid = [e for e in entries if e.state is CandidateState.VALID and e.objectives]
    sign = 1.0 if minimize else -1.0
    ranked = sorted(valid, key=lambda e: (sign * e.objectives[0], e.id))
    seen: set[str] = set()
    tops = []
    for e in ranked:
        key = archive.structure_of.get(e.id, e.id)
        if key not in seen:
            seen.add(key)
            tops.append(e)
    return {"valid": valid, "ranked": ranked, "tops": tops,
            "seed": next((e for e in entries if e.id == SEED_ID), None)}


@pytest.mark.parametrize("minimize", [True, False])
def test_cached_answers_are_the_recomputed_ones(minimize: bool) -> None:
    target = SimpleNamespace(primary=SimpleNamespace(minimize=minimize))
    archive = Archive(target)  # type: ignore[arg-type]
    rng = random.Random(5)
    entries: list[ArchiveEntry] = []
    for n in range(1, 300):
        state = rng.choice([CandidateState.VALID] * 4 + [CandidateState.INVALID,
                                                         CandidateState.FAILED])
        objectives = (float(rng.randint(0, 40)),) if state is CandidateState.VALID else ()
        entry = ArchiveEntry(candidate_id(n), None, {"p.py": str(n)}, {"X": n}, state,
                             objectives=objectives)
        archive.pending[f"h{n}"] = entry.id
        assert archive.next_id() == candidate_id(n + 1)
        archive.add(entry, f"s{rng.randint(0, 6)}", f"h{n}")
        entries.append(entry)
        want = _naive(archive, entries, minimize)
        assert archive.valid() == want["valid"]
        assert archive.ranked() == want["ranked"]
        assert archive.best_per_structure() == want["tops"]
        assert archive.best() == (want["ranked"][0] if want["ranked"] else None)
        assert archive.seed is want["seed"]
        assert archive.get(entry.id) is entry
        if want["valid"]:  # the seeded draws the loop makes
            a, b = random.Random(n), random.Random(n)
            parent = archive.pick_parent(a)
            tops = want["tops"]
            if b.random() < 0.75 or len(want["valid"]) == 1:
                assert parent is tops[min(len(tops) - 1, int(b.expovariate(1.5)))]
            else:
                assert parent is b.choice(want["valid"])
            picks = [e for e in tops if e.id != parent.id][:2]
            rest = [e for e in want["valid"] if e.id != parent.id and e not in picks]
            if rest:
                picks.append(b.choice(rest))
            assert archive.inspirations(parent, a) == tuple(picks[:3])
    assert archive.next_id() == candidate_id(300)
    with pytest.raises(KeyError):
        archive.get("c9999")


def test_a_workers_summary_counts_its_own_candidates_only() -> None:
    from optimizer.lane import finish_summary
    from optimizer.night import TargetSummary

    target = SimpleNamespace(primary=SimpleNamespace(minimize=True))
    archive = Archive(target)  # type: ignore[arg-type]
    for n, state in enumerate([CandidateState.VALID, CandidateState.FAILED,
                               CandidateState.VALID, CandidateState.INVALID], start=1):
        objectives = (float(10 - n),) if state is CandidateState.VALID else ()
        archive.add(ArchiveEntry(candidate_id(n), None, {"p.py": str(n)}, {}, state, "", {},
                                 objectives))
    archive.theirs |= {candidate_id(2), candidate_id(3)}  # another worker evaluated them
    out = finish_summary(TargetSummary("t"), archive, earlier=0)
    assert out.states == {"VALID": 1, "INVALID": 1}
    assert out.best_candidate == candidate_id(3)  # the best is the study's, theirs included
