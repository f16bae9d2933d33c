"""A concurrent night of several targets: the slots serve every target at once, by share.
A slow seed idles no slot, a target whose seed is not valid leaves its time to the others,
and a kind that cannot evaluate beside others still evaluates alone."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import optuna
import pytest

import evaluators
from evaluators.function import FunctionEvaluator
from optimizer import loop
from optimizer import slots as slot_plan
from optimizer.config import load_experiment
from optimizer.loop import run
from optimizer.status import collect_status

_LOGGED = "fh.write(json.dumps([start, time.monotonic()]) + \"\\n\")"


def _tagged(evaluate: str, tag: str) -> str:
    """The slow evaluate.py, its log lines naming the target."""
    assert _LOGGED in evaluate
    return evaluate.replace(
        _LOGGED, f"fh.write(json.dumps([start, time.monotonic(), {tag!r}]) + \"\\n\")")


def _slow_first(evaluate: str) -> str:
    """... whose first evaluation in this process (the seed's) takes SLOW_SEED_S."""
    return evaluate.replace(
        "    start = time.monotonic()\n",
        "    start = time.monotonic()\n"
        "    if not _SEEN:\n"
        "        _SEEN.append(path)\n"
        "        time.sleep(float(os.environ['SLOW_SEED_S']))\n", 1) + "\n_SEEN = []\n"


def _invalid_seed(evaluate: str) -> str:
    """... whose check refuses every program with the seed's X (and notes when it did)."""
    return evaluate.replace("def validate(path):\n", textwrap.dedent("""\
        def validate(path):
            if _load(path).X == 1:
                with open(os.environ["TOY_EVAL_LOG"], "a") as fh:
                    fh.write(json.dumps([time.monotonic(), time.monotonic(), "refused"]) + "\\n")
                raise AssertionError("X = 1 is wrong here")
        """), 1)


def _night(repo: Path, names: dict[str, float], body: str = "") -> Path:
    """An experiment of the toy targets ``names`` with their shares."""
    targets = "".join(f'\n[[targets]]\npath = "targets/function/{n}"\nshare = {s}\n'
                      for n, s in names.items())
    exp = repo / "experiments" / "shared.toml"
    exp.write_text(textwrap.dedent("""
        name = "shared"
        seed = 3
        [budget]
        minutes = 3
        [search]
        n_startup_trials = 4
        [stats]
        minimize_trials = 0
        [run]
        slots = 2
        [proposer]
        concurrency = 2
    """) + body + targets)
    return exp


def _git_commit(repo: Path, message: str) -> None:
    import subprocess

    for args in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm",
                                 message]):
        subprocess.run(["git", "-C", str(repo), *args], check=True)


def _evaluations(log: Path) -> list[tuple[float, float, str]]:
    return sorted(tuple(json.loads(line)) for line in log.read_text().splitlines())


def _overlap(a: tuple[float, float, str], b: tuple[float, float, str]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _kept_horizons(monkeypatch: pytest.MonkeyPatch) -> list[loop.Horizon]:
    """The night's horizons, as the loop makes them (what each target keeps, when the
    searches end)."""
    horizons: list[loop.Horizon] = []

    class Kept(loop.Horizon):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, **kwargs)
            horizons.append(self)

    monkeypatch.setattr(loop, "Horizon", Kept)
    return horizons


@pytest.fixture
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slot_plan.os, "sched_getaffinity", lambda pid: {0, 1})


def _repo(toy_repo: Path, toy_target_adder, slow_evaluate: str,
          **evaluates: str) -> Path:
    """The toy repository with toy targets named as ``evaluates``' keys, each with that
    evaluate.py (the tagged slow one when empty)."""
    for name, evaluate in evaluates.items():
        toy_target_adder(toy_repo, name, evaluate or _tagged(slow_evaluate, name))
    return toy_repo


def test_every_target_gets_the_slots_by_share(
        toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_cores: None,
        toy_target_adder, slow_evaluate: str) -> None:
    repo = _repo(toy_repo, toy_target_adder, slow_evaluate, big="", small="")
    monkeypatch.setenv("TOY_EVAL_S", "0.15")
    monkeypatch.setenv("TOY_EVAL_LOG", str(tmp_path / "evals.jsonl"))
    exp = _night(repo, {"big": 2.0, "small": 1.0})
    cfg = load_experiment(exp, ["budget.max_candidates=36",
                                "targets.big.evaluator.repeats=1",
                                "targets.small.evaluator.repeats=1"], workspace=repo)
    summary = run(cfg, say=lambda s: None)

    by = {t.target: t for t in summary.targets}
    assert [t.target for t in summary.targets] == ["big", "small"]  # the summaries as before
    assert sum(t.candidates for t in summary.targets) == 36  # the night's limit, exactly
    assert by["big"].candidates > 0 and by["small"].candidates > 0
    # equal costs: the evaluation time splits as the shares, 2:1
    ratio = sum(by["big"].eval_s) / sum(by["small"].eval_s)
    assert 1.4 < ratio < 2.8, (ratio, by["big"].candidates, by["small"].candidates)
    evals = _evaluations(tmp_path / "evals.jsonl")
    mixed = [(a, b) for i, a in enumerate(evals) for b in evals[i + 1:]
             if a[2] != b[2] and _overlap(a, b)]
    assert mixed, "no evaluation of one target ran beside one of the other"
    status = collect_status(cfg)
    assert status["consistent"], status
    assert all(t.winner is not None for t in summary.targets)  # each target's winner


def test_a_slow_seed_idles_no_slot(
        toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_cores: None,
        toy_target_adder, slow_evaluate: str) -> None:
    """One target's seed takes 4 s: the other target's candidates fill the other slot
    meanwhile (a night of slices would have left it idle), and the slow target gets its
    share once its seed is in."""
    slow = _slow_first(_tagged(slow_evaluate, "slow"))
    repo = _repo(toy_repo, toy_target_adder, slow_evaluate, slow=slow, quick="")
    monkeypatch.setenv("TOY_EVAL_S", "0.15")
    monkeypatch.setenv("SLOW_SEED_S", "4")
    monkeypatch.setenv("TOY_EVAL_LOG", str(tmp_path / "evals.jsonl"))
    exp = _night(repo, {"slow": 1.0, "quick": 1.0})
    cfg = load_experiment(exp, ["budget.max_candidates=40",
                                "targets.slow.evaluator.repeats=1",
                                "targets.quick.evaluator.repeats=1"], workspace=repo)
    summary = run(cfg, say=lambda s: None)

    by = {t.target: t for t in summary.targets}
    evals = _evaluations(tmp_path / "evals.jsonl")
    seed = next(e for e in evals if e[2] == "slow")  # its first evaluation
    assert seed[1] - seed[0] >= 4.0
    beside = [e for e in evals if e[2] == "quick" and seed[0] <= e[0] and e[1] <= seed[1]]
    assert len(beside) >= 6, f"{len(beside)} evaluations beside the slow seed: {evals}"
    assert by["slow"].candidates >= 5 and by["slow"].states.get("VALID", 0) >= 5
    assert sum(t.candidates for t in summary.targets) == 40


def test_a_target_whose_seed_is_invalid_leaves_its_time_to_the_others(
        toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_cores: None,
        toy_target_adder, slow_evaluate: str) -> None:
    """The broken target has three quarters of the night by share; its seed is INVALID, so
    it drops out at once: none of its four starts is taken after the verdict, it keeps no
    time for a winner, the other target's candidates fill both slots, and its search runs
    to the night's end less its own winner's time."""
    broken = _invalid_seed(_tagged(slow_evaluate, "broken"))
    repo = _repo(toy_repo, toy_target_adder, slow_evaluate, broken=broken, fine="")
    folder = repo / "targets/function/broken"
    (folder / "variants").mkdir()
    for x in (3, 4, 5, 6):
        (folder / "variants" / f"x{x}.py").write_text(
            (folder / "program.py").read_text().replace("X = 1  #", f"X = {x}  #"))
    starts = ", ".join(f'"variants/x{x}.py"' for x in (3, 4, 5, 6))
    (folder / "target.toml").write_text((folder / "target.toml").read_text()
                                        + f"starts = [{starts}]\n")
    _git_commit(repo, "starts of the broken target")
    monkeypatch.setenv("TOY_EVAL_S", "0.2")
    monkeypatch.setenv("TOY_EVAL_LOG", str(tmp_path / "evals.jsonl"))
    horizons = _kept_horizons(monkeypatch)
    exp = _night(repo, {"broken": 3.0, "fine": 1.0})
    cfg = load_experiment(exp, ["budget.minutes=0.2", "targets.broken.evaluator.repeats=1",
                                "targets.fine.evaluator.repeats=1"], workspace=repo)
    summary = run(cfg, say=lambda s: None)

    by = {t.target: t for t in summary.targets}
    # the seed, and the starts the other slot took beside it before its verdict (as many
    # as fit in the seed's evaluation on a loaded machine), none after
    assert by["broken"].states["INVALID"] == 1, by["broken"]
    assert "not valid" in by["broken"].note
    (horizon,) = horizons
    assert horizon.reserved_s["broken"] == 0.0
    assert horizon.search_end == pytest.approx(horizon.deadline - horizon.reserved_s["fine"])
    evals = _evaluations(tmp_path / "evals.jsonl")
    (seed_eval,) = [e for e in evals if e[2] == "refused"]
    starts = [e for e in evals if e[2] == "broken"]
    assert by["broken"].candidates == 1 + len(starts) < 5, by["broken"]
    # between the seed's refusal and its verdict (recorded by another thread) each of the
    # two slots may take one more
    assert sum(e[0] > seed_eval[1] for e in starts) <= 2, (seed_eval, starts)
    fine = [e for e in evals if e[2] == "fine"]
    after = [e for e in fine if e[0] > seed_eval[1]]
    pairs = sum(1 for i, a in enumerate(after) for b in after[i + 1:] if _overlap(a, b))
    assert pairs >= 5, f"the fine target did not have both slots: {after}"
    # the search went on until its end (a candidate starts within one evaluation of it)
    assert max(e[0] for e in fine) > horizon.search_end - 1.5, (fine[-3:], horizon)
    assert by["fine"].winner is not None


class _AloneFunction(FunctionEvaluator):
    """The function kind as a kind that cannot evaluate beside others."""

    kind = "function_alone"
    concurrent_evaluations = False


def test_a_kind_that_cannot_evaluate_beside_others_runs_alone(
        toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_cores: None,
        toy_target_adder, slow_evaluate: str) -> None:
    monkeypatch.setitem(evaluators._REGISTERED, "function_alone", _AloneFunction)
    toy_target_adder(toy_repo, "solo", _tagged(slow_evaluate, "solo"), kind="function_alone")
    repo = _repo(toy_repo, toy_target_adder, slow_evaluate, pair="")
    monkeypatch.setenv("TOY_EVAL_S", "0.15")
    monkeypatch.setenv("TOY_EVAL_LOG", str(tmp_path / "evals.jsonl"))
    exp = _night(repo, {"solo": 1.0, "pair": 1.0})
    cfg = load_experiment(exp, ["budget.max_candidates=30", "targets.solo.evaluator.repeats=1",
                                "targets.pair.evaluator.repeats=1"], workspace=repo)
    summary = run(cfg, say=lambda s: None)

    by = {t.target: t for t in summary.targets}
    assert by["solo"].candidates >= 4 and by["pair"].candidates >= 4
    evals = _evaluations(tmp_path / "evals.jsonl")
    solo = [e for e in evals if e[2] == "solo"]
    pair = [e for e in evals if e[2] == "pair"]
    assert len(solo) >= 4
    assert not [(a, b) for a in solo for b in evals if a is not b and _overlap(a, b)]
    # the other target still evaluates on both slots
    assert any(_overlap(a, b) for i, a in enumerate(pair) for b in pair[i + 1:])
    # charged for both slots it held: the solo target evaluated about half as often
    assert sum(by["solo"].eval_s) < sum(by["pair"].eval_s)


def test_several_targets_share_one_study_each_and_stores_agree(
        toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_cores: None,
        toy_target_adder, slow_evaluate: str) -> None:
    """Three targets, one of them the plain toy: each keeps its own study, branches and
    candidate ids; nothing is lost or evaluated twice within a target."""
    repo = _repo(toy_repo, toy_target_adder, slow_evaluate, a="", b="")
    monkeypatch.setenv("TOY_EVAL_S", "0.05")
    monkeypatch.setenv("TOY_EVAL_LOG", str(tmp_path / "evals.jsonl"))
    exp = _night(repo, {"toy": 1.0, "a": 1.0, "b": 0.5})
    cfg = load_experiment(exp, ["budget.max_candidates=30", "targets.b.max_candidates=4",
                                "proposer.concurrency=3"], workspace=repo)
    t0 = time.monotonic()
    summary = run(cfg, say=lambda s: None)
    assert time.monotonic() - t0 < 120
    by = {t.target: t for t in summary.targets}
    assert by["b"].candidates == 4  # a target's own limit, exactly
    assert sum(t.candidates for t in summary.targets) == 30
    for name in ("toy", "a", "b"):
        study = optuna.load_study(study_name=f"shared/{name}", storage=cfg.optuna_storage)
        assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
        ids = [t.user_attrs["candidate"] for t in study.trials if t.user_attrs.get("candidate")]
        assert len(ids) == len(set(ids)) == by[name].candidates
        assert "c0001" in ids
    status = collect_status(cfg)
    assert status["consistent"], status


@pytest.mark.parametrize("to", ["process", "proposer thread"])
def test_ctrl_c_stops_every_target_and_records_what_is_in_flight(
        toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_cores: None,
        toy_target_adder, slow_evaluate: str, to: str) -> None:
    """The first Ctrl-C of a shared night: no target takes another proposal, what is in
    flight is recorded, no winner is selected, and the stores agree. The kernel may hand a
    Ctrl-C to any thread of the process; handed to a proposer's, it stopped the night only
    at its end while the main thread waited on a join without a timeout."""
    import os
    import signal
    import threading

    from optimizer.proposers.offline import OfflineProposer

    class Interrupting(OfflineProposer):
        made = 0

        def propose(self, context):  # type: ignore[no-untyped-def]
            Interrupting.made += 1
            if Interrupting.made == 8:
                if to == "process":
                    os.kill(os.getpid(), signal.SIGINT)
                else:
                    signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            return super().propose(context)

    repo = _repo(toy_repo, toy_target_adder, slow_evaluate, one="", two="")
    monkeypatch.setenv("TOY_EVAL_S", "0.2")
    monkeypatch.setenv("TOY_EVAL_LOG", str(tmp_path / "evals.jsonl"))
    exp = _night(repo, {"one": 1.0, "two": 1.0})
    cfg = load_experiment(exp, ["budget.max_candidates=200"], workspace=repo)
    summary = run(cfg, proposer=Interrupting(seed=0), say=lambda s: None)

    assert summary.stop_reason.startswith("interrupted")
    assert all(t.winner is None for t in summary.targets)
    # no proposal after the stop but those already being made (two proposers), and none
    # evaluated that was not proposed
    assert Interrupting.made <= 8 + 2
    assert sum(t.candidates + t.duplicates for t in summary.targets) <= Interrupting.made + 2
    for name in ("one", "two"):
        study = optuna.load_study(study_name=f"shared/{name}", storage=cfg.optuna_storage)
        assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    status = collect_status(cfg)
    assert status["consistent"], status


def test_the_winners_are_selected_side_by_side(
        toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_cores: None,
        toy_target_adder, slow_evaluate: str) -> None:
    """Once the searches end, each target's winner (its reduction trials and confirmation)
    is selected on a slot of its own at the same time as the other's, and the searches
    keep back the longer of the two reserves, not their sum."""
    repo = _repo(toy_repo, toy_target_adder, slow_evaluate, left="", right="")
    monkeypatch.setenv("TOY_EVAL_S", "0.2")
    monkeypatch.setenv("TOY_EVAL_LOG", str(tmp_path / "evals.jsonl"))
    horizons = _kept_horizons(monkeypatch)
    # when the winners' phase begins: every search evaluation has ended by then
    phase: list[float] = []
    select = loop.select_winners

    def noted(*args, **kwargs):  # type: ignore[no-untyped-def]
        phase.append(time.monotonic())
        return select(*args, **kwargs)

    monkeypatch.setattr(loop, "select_winners", noted)
    exp = _night(repo, {"left": 1.0, "right": 1.0})
    cfg = load_experiment(exp, ["budget.minutes=0.4", "stats.minimize_trials=4",
                                "stats.confirm_repeats=4",
                                "targets.left.evaluator.repeats=1",
                                "targets.right.evaluator.repeats=1"], workspace=repo)
    t0 = time.monotonic()
    summary = run(cfg, say=lambda s: None)
    took = time.monotonic() - t0

    by = {t.target: t for t in summary.targets}
    assert by["left"].winner is not None and by["right"].winner is not None
    (horizon,) = horizons
    assert horizon.winners_at_once == 2
    kept = horizon.reserved_s
    assert horizon.search_end == pytest.approx(horizon.deadline - max(kept.values()))
    evals = _evaluations(tmp_path / "evals.jsonl")
    assert len(phase) == 1 and phase[0] >= horizon.search_end
    after = [e for e in evals if e[0] > phase[0]]  # the winners' evaluations
    assert {e[2] for e in after} == {"left", "right"}, after
    mixed = [(a, b) for i, a in enumerate(after) for b in after[i + 1:]
             if a[2] != b[2] and _overlap(a, b)]
    assert mixed, f"the winners' evaluations did not run side by side: {after}"
    assert took < 0.4 * 60 + 20, took  # the night kept to its budget
    status = collect_status(cfg)
    assert status["consistent"], status
