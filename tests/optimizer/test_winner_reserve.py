"""What a target keeps of its part of the night for its winner: the reduction's trials and
the confirmation, priced at what its evaluations cost, and what its kind says a
confirmation costs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from evaluators._base import Evaluator
from evaluators.kernels.evaluator import CASE_POOL, KernelEvaluator
from optimizer import lane as lanes
from optimizer.archive import Archive
from optimizer.night import TargetSummary
from optimizer.records import SEED_ID, ArchiveEntry, CandidateState, Confirmation
from optimizer.winners_phase import Turns

SEED = "# EVOLVE-BLOCK-START\nA = 1  # knob: int 1..64\nB = 2  # knob: int 1..64\n" \
       "C = 0.5  # knob: float 0.0..8.0\n# EVOLVE-BLOCK-END\n"


class _Paired(Evaluator):
    kind = "paired-test"

    def confirmation(self) -> Confirmation:
        return Confirmation.PAIRED

    def correctness(self, cand_dir, ctx):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def performance(self, cand_dir, ctx):  # type: ignore[no-untyped-def]
        raise NotImplementedError


class _Exact(_Paired):
    def confirmation(self) -> Confirmation:
        return Confirmation.EXACT


def _run(repeats: int = 15, trials: int = 40) -> SimpleNamespace:
    stats = SimpleNamespace(confirm_repeats=repeats, minimize_trials=trials)
    return SimpleNamespace(config=SimpleNamespace(stats=stats))


def test_a_confirmation_costs_what_the_kind_says() -> None:
    paired, exact = object.__new__(_Paired), object.__new__(_Exact)
    assert paired.confirmation_evaluations(15) == 30  # 15 interleaved pairs
    assert exact.confirmation_evaluations(15) == 2  # the two held-out runs
    # a kernel's comparison alternates candidate and seed in one timed call: the final
    # check's correctness calls, the end-to-end gate's two calls and that call, not 30
    kernel = object.__new__(KernelEvaluator)
    assert kernel.confirmation_evaluations(15) == -(-CASE_POOL // 3) + 2 + 2 < 30


def test_the_reserve_counts_the_known_contenders_trials_within_its_bounds() -> None:
    ev = object.__new__(_Paired)
    r = _run()
    # unknown contender: the fallback count of trials
    assert lanes.winner_reserve(r, ev, 1.0, 100.0) == pytest.approx(30 + lanes.FALLBACK_TRIALS)
    assert lanes.winner_reserve(r, ev, 1.0, 100.0, trials=3) == pytest.approx(33)
    # a known plan is priced whole, up to the minimize_trials ceiling
    assert lanes.winner_reserve(r, ev, 1.0, 100.0, trials=18) == pytest.approx(48)
    assert lanes.winner_reserve(_run(trials=10), ev, 1.0, 100.0, trials=18) == pytest.approx(40)
    # never below CONFIRM_SHARE nor above MAX_CONFIRM_SHARE of the slice
    assert lanes.winner_reserve(r, ev, 0.01, 100.0) == pytest.approx(lanes.CONFIRM_SHARE * 100)
    assert lanes.winner_reserve(r, ev, 10.0, 100.0) == pytest.approx(
        lanes.MAX_CONFIRM_SHARE * 100)


def _entry(cid: str, files: dict[str, str], value: float, proposer: str = "offline",
           parent: str | None = SEED_ID) -> ArchiveEntry:
    return ArchiveEntry(cid, parent if cid != SEED_ID else None, files, {},
                        CandidateState.VALID, objectives=(value,), proposer=proposer)


def _lane(shared: bool, costs: list[float]) -> lanes.Lane:
    target = SimpleNamespace(name="t", min_gain=0.03, primary=SimpleNamespace(minimize=True))
    archive = Archive(target)  # type: ignore[arg-type]
    archive.add(_entry(SEED_ID, {"k.py": SEED}, 1.0, proposer="seed"), "s0")
    out = TargetSummary("t")
    out.eval_s = list(costs)
    lane = lanes.Lane(entry=SimpleNamespace(spec=target), evaluator=object.__new__(_Paired),
                     study=None, names=None, archive=archive, out=out,  # type: ignore[arg-type]
                     rng=None, kind_text="", trusted_files={},  # type: ignore[arg-type]
                     horizon=lanes.Horizon(1e9, shared=shared))
    lane.set_slice(400.0)
    lane.seed_cost_s = costs[0]
    return lane


def test_a_shared_night_prices_the_reserve_at_its_candidates_cost_once_it_has_a_contender(
        ) -> None:
    # the seed's evaluation cost 40 s (it built the night's cases), its candidates 2 s
    lane = _lane(True, [40.0, 2.0, 2.5, 1.5, 2.0])
    r = _run()
    lane.reserve_for_winner(r)
    assert lane.reserve_s == pytest.approx(lanes.CONFIRM_SHARE * 400)  # no contender yet
    # a contender two knobs away from the seed: two hunks to revert, no float knob
    best = SEED.replace("A = 1 ", "A = 8 ").replace("B = 2 ", "B = 4 ")
    lane.archive.add(_entry("c0002", {"k.py": best}, 0.5), "s1")
    lane.reserve_for_winner(r)
    assert lane.typical_cost_s() == pytest.approx(2.0)
    assert lane.reserve_s == pytest.approx((30 + 2) * 2.0)
    # a better contender with a float knob too: a third hunk, and its rounding (0.25 -> 0.2)
    better = best.replace("C = 0.5 ", "C = 0.25 ")
    lane.archive.add(_entry("c0003", {"k.py": better}, 0.4), "s2")
    lane.reserve_for_winner(r)
    assert lane.reserve_s == pytest.approx((30 + 3 + 1) * 2.0)


def test_the_reserve_covers_a_complete_reduction_priced_at_the_measured_cost() -> None:
    """A routing-like contender (a zero-weighted sign flip, a 16-digit float knob, two int
    knobs moved): the reserve is its plan's every trial and the confirmation's, at the
    median cost of the night's candidates, not the six trials a short night once kept."""
    from optimizer.minimize import Plan

    lane = _lane(True, [40.0, 3.0, 3.5, 2.5, 3.0, 9.0])  # median of the candidates: 3.0
    best = (SEED.replace("A = 1 ", "A = 8 ").replace("B = 2 ", "B = 4 ")
            .replace("C = 0.5 ", "C = 7.134184006256638 ")
            + "D = 0.0  # knob: float 0.0..1.0\ndef f(v):\n    return A * v - D * v\n")
    seed = SEED + "D = 0.0  # knob: float 0.0..1.0\ndef f(v):\n    return A * v + D * v\n"
    lane.archive = Archive(lane.archive.target)
    lane.archive.add(_entry(SEED_ID, {"k.py": seed}, 1.0, proposer="seed"), "s0")
    lane.archive.add(_entry("c0002", {"k.py": best}, 0.5), "s1")
    plan = Plan.of({"k.py": seed}, {"k.py": best})
    assert len(plan.no_op) == 1 and len(plan.rest) == 3  # the sign flip; A, B and C
    assert plan.trials == 1 + 3 + 3  # C: 7, 7.1, ..., 7.13418 bisected in three
    lane.reserve_for_winner(_run())
    assert lane.typical_cost_s() == pytest.approx(3.0)
    assert lane.reserve_s == pytest.approx((30 + plan.trials) * 3.0)
    assert lane.reserve_s > (30 + 6) * 3.0


def test_one_targets_slice_keeps_the_seeds_price_as_before() -> None:
    lane = _lane(False, [40.0, 2.0, 2.5, 1.5])
    lane.reserve_for_winner(_run())
    assert lane.reserve_s == pytest.approx(lanes.MAX_CONFIRM_SHARE * 400)


def test_a_confirmation_has_the_machine_alone_while_trials_share_it() -> None:
    """The winners side by side: two trials run at once; a confirmation waits for the trials
    under way, and a trial that comes after a waiting confirmation waits for it."""
    import threading
    import time

    turns = Turns()
    events: list[str] = []
    held = threading.Event()

    def trial(name: str, hold_s: float) -> None:
        with turns.shared:
            events.append(f"{name} in")
            held.set()
            time.sleep(hold_s)
            events.append(f"{name} out")

    def confirm() -> None:
        with turns.alone:
            events.append("confirm in")
            time.sleep(0.2)
            events.append("confirm out")

    a = threading.Thread(target=trial, args=("a", 0.4))
    b = threading.Thread(target=trial, args=("b", 0.4))
    a.start()
    b.start()
    held.wait()
    time.sleep(0.05)
    c = threading.Thread(target=confirm)
    c.start()
    time.sleep(0.05)
    late = threading.Thread(target=trial, args=("late", 0.0))
    late.start()
    for t in (a, b, c, late):
        t.join(5)
    assert events[:2] == ["a in", "b in"] or events[:2] == ["b in", "a in"]  # side by side
    i = events.index("confirm in")
    assert {"a out", "b out"} <= set(events[:i])  # it waited for the trials under way
    assert events[i + 1] == "confirm out"  # nothing ran beside it
    assert events.index("late in") > events.index("confirm out")  # the later trial waited


def test_in_turn_a_target_without_a_contender_leaves_its_part_to_those_with_one(
        monkeypatch) -> None:
    """Winners in turn: a target with a contender first, then one without (it keeps
    CONFIRM_SHARE of its part until it has one): the first gets all the time left."""
    import threading
    import time

    from optimizer import winners_phase

    with_one = _lane(True, [40.0, 2.0, 2.5, 1.5])
    best = SEED.replace("A = 1 ", "A = 8 ")
    with_one.archive.add(_entry("c0002", {"k.py": best}, 0.5), "s1")
    with_one.reserve_for_winner(_run())
    without = _lane(True, [40.0, 2.0, 2.5, 1.5])
    without.reserve_for_winner(_run())
    assert with_one.reserve_s > 0 and without.reserve_s == pytest.approx(
        lanes.CONFIRM_SHARE * 400)
    ends: list[float] = []
    monkeypatch.setattr(winners_phase, "select_lane_winner",
                        lambda r, lane, end, **kw: ends.append(end))
    coordination = SimpleNamespace(
        claim_winners=lambda r, left, at_most, rerun: (left[:1], []))
    r = SimpleNamespace(budget=SimpleNamespace(stop=threading.Event()),
                        coordination=coordination, writer=SimpleNamespace(flush=lambda: None))
    deadline = time.monotonic() + 100.0
    winners_phase.select_winners(r, [with_one, without], 1, deadline)  # type: ignore[arg-type]
    assert len(ends) == 2 and ends[0] == pytest.approx(deadline, abs=1.0), ends
