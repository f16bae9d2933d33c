"""A contender that fails its final check hands over to the next best candidate of its
structure (a knob apart, often right), before the next structure's best."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from optimizer import winners
from optimizer.archive import Archive
from optimizer.records import SEED_ID, ArchiveEntry, CandidateState


def _entry(cid: str, value: float, metrics: dict[str, float] | None = None) -> ArchiveEntry:
    return ArchiveEntry(cid, None if cid == SEED_ID else SEED_ID, {"p.py": cid}, {},
                        CandidateState.VALID, objectives=(value,),
                        metrics=metrics or {}, proposer="seed" if cid == SEED_ID else "offline")


def _night(monkeypatch: pytest.MonkeyPatch, wrong: set[str],
           entries: list[tuple[str, float, str]], timed_out_of: frozenset[str] | set[str] = (
               frozenset()), metrics: dict[str, dict[str, float]] | None = None,
           ) -> tuple[dict | None, list[str]]:
    """select_winner over ``entries`` (id, objective, structure): the ids in ``wrong`` fail
    their final check, those in ``timed_out_of`` their timing; the ids confirmed, in turn."""
    target = SimpleNamespace(name="t", min_gain=0.05, primary=SimpleNamespace(minimize=True))
    archive = Archive(target)  # type: ignore[arg-type]
    archive.add(_entry(SEED_ID, 1.0), "seed")
    for cid, value, structure in entries:
        archive.add(_entry(cid, value, (metrics or {}).get(cid)), structure)
    confirmed: list[str] = []

    def confirm(r: Any, target: Any, evaluator: Any, sandbox: Any, seed: ArchiveEntry,
                best: ArchiveEntry, device_lock: Any = None) -> winners.Evidence:
        confirmed.append(best.id)
        if best.id in wrong:
            return winners.Evidence(False, "final check: input 3 answered wrong", wrong=True)
        if best.id in timed_out_of:
            return winners.Evidence(False, "speedup 1.01x, 95% CI [0.99, 1.03]")
        return winners.Evidence(True, "speedup 1.5x")

    monkeypatch.setattr(winners, "_confirm", confirm)
    monkeypatch.setattr(winners, "_publish", lambda r, target, evaluator, study, archive,
                        best, evidence: {"candidate": best.id, "pull_branch": f"pr/{best.id}"})
    r = SimpleNamespace(say=lambda s: None)
    contest = winners.Contest(target, None, None, None, archive)  # type: ignore[arg-type]
    won = winners.select_winner(r, contest)  # type: ignore[arg-type]
    return won, confirmed


def test_the_next_of_the_structure_is_tried_after_a_failed_final_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    won, confirmed = _night(monkeypatch, {"c0002"},
                            [("c0002", 0.5, "a"), ("c0003", 0.6, "a"), ("c0004", 0.7, "b")])
    assert won is not None and won["candidate"] == "c0003"
    assert confirmed == ["c0002", "c0003"]


def test_a_timing_that_does_not_confirm_moves_on_to_the_next_structure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    won, confirmed = _night(monkeypatch, set(), [("c0002", 0.5, "a"), ("c0003", 0.6, "a"),
                                                 ("c0004", 0.7, "b")], timed_out_of={"c0002"})
    assert won is not None and won["candidate"] == "c0004"
    assert confirmed == ["c0002", "c0004"]  # the same structure's next is not tried


def test_retries_after_failed_final_checks_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = [(f"c{n:04d}", 0.4 + n / 100, "a") for n in range(2, 9)]
    won, confirmed = _night(monkeypatch, {e[0] for e in entries}, entries)
    assert won is None
    assert len(confirmed) == 1 + winners.FINAL_CHECK_RETRIES


def test_a_program_that_measured_what_a_refused_one_did_is_not_tried(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # c0003 and c0005 are c0002 in effect (every figure equal, a knob they do not use
    # apart; the stage timings differ): after c0002's refusal the retries and the next
    # structure's best skip them and go to c0004, which measured something else
    same = {"capacity": 2.0, "ttft_p90_s": 1.5}
    figures = {"c0002": {**same, "stage_s/performance": 0.6},
               "c0003": {**same, "stage_s/performance": 0.7},
               "c0004": {"capacity": 1.8, "ttft_p90_s": 1.2},
               "c0005": {**same, "stage_s/performance": 0.5}}
    won, confirmed = _night(monkeypatch, {"c0002"},
                            [("c0002", 0.5, "a"), ("c0003", 0.5, "a"), ("c0004", 0.55, "a"),
                             ("c0005", 0.5, "b")], metrics=figures)
    assert won is not None and won["candidate"] == "c0004"
    assert confirmed == ["c0002", "c0004"]
    # the next structure's best, c0005, is c0002 in effect too: that structure's next goes
    figures["c0006"] = {"capacity": 1.7, "ttft_p90_s": 1.1}
    won, confirmed = _night(monkeypatch, {"c0002", "c0004"},
                            [("c0002", 0.5, "a"), ("c0003", 0.5, "a"), ("c0004", 0.55, "a"),
                             ("c0005", 0.5, "b"), ("c0006", 0.6, "b")], metrics=figures)
    assert won is not None and won["candidate"] == "c0006"
    assert confirmed == ["c0002", "c0004", "c0006"]
    # with nothing measured to compare, equal objectives are not enough to skip
    won, confirmed = _night(monkeypatch, {"c0002"}, [("c0002", 0.5, "a"), ("c0003", 0.5, "a")])
    assert confirmed == ["c0002", "c0003"]
