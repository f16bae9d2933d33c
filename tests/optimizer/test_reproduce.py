"""Deterministic means reproducible: a program of a deterministic target is evaluated again
in a fresh process and its objective metrics must repeat bit for bit."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from optimizer import reproduce
from optimizer.records import CandidateState, EvalResult
from optimizer.targets import load_target
from optimizer.workbench import Workbench

ROOT = Path(__file__).resolve().parents[2]
JITTER = (ROOT / "tests/adversarial/cheats/function/prefix_cache/jitter_memo_last/policy.py")


def _target(noise: str = "deterministic") -> SimpleNamespace:
    return SimpleNamespace(name="t", noise=noise,
                           objectives=(SimpleNamespace(metric="hit_ratio"),))


class _Evaluator:
    """Answers each evaluate() with the next of ``values`` (hit_ratio), or a state."""

    def __init__(self, *values: float | CandidateState):
        self.values = list(values)
        self.calls: list[Path] = []

    def evaluate(self, folder: Path, ctx: object) -> EvalResult:
        self.calls.append(folder)
        v = self.values.pop(0)
        if isinstance(v, CandidateState):
            return EvalResult(v, "crashed", "performance")
        return EvalResult(CandidateState.VALID, metrics={"hit_ratio": v, "cpu_s": v / 7})


def test_differences_are_bit_for_bit() -> None:
    names = ("a", "b", "c")
    assert reproduce.differences(names, {"a": 0.5, "b": math.nan, "c": 1.0},
                                 {"a": 0.5, "b": math.nan, "c": 1.0}) == []
    diff = reproduce.differences(names, {"a": 0.1 + 0.2, "b": 1.0, "c": 2.0},
                                 {"a": 0.3, "b": 1.0})
    assert diff == ["a 0.30000000000000004 then 0.3", "c 2.0 then missing"]


def test_a_metric_that_differs_at_all_is_not_reproducible_with_both_values() -> None:
    rep = reproduce.verify(_target(), _Evaluator(0.4745), Path("p"), None,
                           {"hit_ratio": 0.4711, "cpu_s": 1.0})
    assert not rep.ok and rep.reason.startswith("not reproducible")
    assert "hit_ratio 0.4711 then 0.4745" in rep.reason
    judged = reproduce.judged(EvalResult(CandidateState.VALID, objectives=(0.4711,)), rep)
    assert judged.state is CandidateState.INVALID and judged.objectives == ()
    assert "not reproducible" in judged.reason
    # only the objectives must repeat: a CPU time is no part of the program's answer
    same = reproduce.verify(_target(), _Evaluator(0.4711), Path("p"), None,
                            {"hit_ratio": 0.4711, "cpu_s": 9.0})
    assert same.ok and reproduce.judged(EvalResult(CandidateState.VALID), same).ok


def test_a_re_run_that_fails_or_raises_is_not_reproducible() -> None:
    rep = reproduce.verify(_target(), _Evaluator(CandidateState.FAILED), Path("p"), None,
                           {"hit_ratio": 0.5})
    assert not rep.ok and "FAILED (crashed)" in rep.reason

    class Raises:
        def evaluate(self, folder: Path, ctx: object) -> EvalResult:
            raise RuntimeError("sandbox gone")

    rep = reproduce.verify(_target(), Raises(), Path("p"), None, {"hit_ratio": 0.5})
    assert not rep.ok and "sandbox gone" in rep.reason


def _entry(id_: str, value: float) -> SimpleNamespace:
    return SimpleNamespace(id=id_, metrics={"hit_ratio": value})


def test_the_seed_is_checked_once_a_night_and_each_candidate_before_confirmation() -> None:
    summary = SimpleNamespace(reproduced=[])
    seed, a, b = _entry("c0000", 0.40), _entry("c0007", 0.45), _entry("c0009", 0.46)
    ev = _Evaluator(0.40, 0.45, 0.47)
    target = _target()
    assert reproduce.before_confirmation(summary, target, ev, None, (seed, Path("s")),
                                         (a, Path("a"))) is None
    failed = reproduce.before_confirmation(summary, target, ev, None, (seed, Path("s")),
                                           (b, Path("b")))
    assert ev.calls == [Path("s"), Path("a"), Path("b")]  # the seed once
    assert failed is not None and failed["confirmed"] is False and failed["wrong"] is True
    assert failed["state"] == "INVALID"
    assert failed["headline"] == ("c0009: not reproducible: evaluated again in a fresh process "
                                  "on the same inputs: hit_ratio 0.46 then 0.47")
    [line] = reproduce.pr_lines(summary, "t", "c0007")
    assert line.startswith("- Reproduced: evaluated again in a fresh process")
    assert "hit_ratio = 0.45" in line and "the seed reproduced the same way" in line
    assert reproduce.pr_lines(summary, "t", "c0009") == []
    cost = reproduce.night_cost(summary)
    assert cost.startswith("reproduced in a fresh process: 2 of 3 programs")
    assert "not reproducible: c0009" in cost


def test_a_seed_that_does_not_repeat_stops_the_confirmation() -> None:
    summary = SimpleNamespace(reproduced=[])
    failed = reproduce.before_confirmation(summary, _target(), _Evaluator(0.41), None,
                                           (_entry("c0000", 0.40), Path("s")),
                                           (_entry("c0003", 0.45), Path("a")))
    assert failed is not None and failed["headline"].startswith("the seed: not reproducible")
    assert failed["wrong"] is False  # the next candidate would meet the same seed


def test_a_timed_target_is_not_re_run() -> None:
    summary = SimpleNamespace(reproduced=[])
    ev = _Evaluator()
    assert reproduce.before_confirmation(summary, _target("timing"), ev, None,
                                         (_entry("s", 1.0), Path("s")),
                                         (_entry("c", 2.0), Path("c"))) is None
    assert ev.calls == [] and reproduce.night_cost(summary) == ""


@pytest.mark.slow
def test_a_policy_with_random_jitter_is_invalid_not_reproducible(tmp_path: Path) -> None:
    """The prefix-cache policy that adds os.urandom jitter and memoises its last call (it
    passes validate's call-twice check): INVALID, "not reproducible", both hit ratios;
    the seed stays VALID."""
    target = load_target(ROOT / "targets/function/prefix_cache", ROOT)
    with Workbench(target, state_dir=tmp_path / "state") as bench:
        res = bench.evaluate({"policy.py": JITTER.read_text()})
        assert res.state is CandidateState.INVALID, res.reason
        assert res.reason.startswith("not reproducible") and res.stage == "reproduce"
        assert res.reason.count("hit_ratio") == 1 and " then " in res.reason
        assert bench.evaluate().state is CandidateState.VALID


def test_a_nights_winner_on_a_deterministic_target_was_re_run_and_says_so(
        toy_repo: Path) -> None:
    import subprocess

    from optimizer.cli import _summary_table
    from optimizer.config import load_experiment
    from optimizer.loop import run

    cfg = load_experiment(toy_repo / "experiments/toy.toml", ["budget.max_candidates=12"],
                          workspace=toy_repo)
    summary = run(cfg, say=lambda line: None)
    (t,) = summary.targets
    assert t.winner is not None
    checks = {(c["role"], c["program"]): c for c in summary.reproduced}
    winner = t.winner["candidate"]
    assert checks[("candidate", winner)]["ok"] and any(r == "seed" for r, _ in checks)
    assert all(c["ok"] and c["cost_s"] >= 0 for c in checks.values())
    message = subprocess.run(["git", "-C", str(toy_repo), "log", "-1", "--format=%B",
                              t.winner["pull_branch"]], check=True, capture_output=True,
                             text=True).stdout
    assert "- Reproduced: evaluated again in a fresh process on the same inputs" in message
    assert "the seed reproduced the same way" in message
    assert "reproduced in a fresh process: " in _summary_table(summary)
