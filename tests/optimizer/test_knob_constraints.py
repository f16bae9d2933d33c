"""Knob constraints in target.toml: values that cannot work are never evaluated."""

from __future__ import annotations

import subprocess
from pathlib import Path

import optuna
import pytest

from optimizer.config import load_experiment
from optimizer.errors import ConfigError
from optimizer.loop import run
from optimizer.proposers.offline import OfflineProposer
from optimizer.records import Proposal
from optimizer.status import collect_status
from optimizer.targets import broken_constraint, load_target

TARGET = """
name = "t"
kind = "function"
editable = ["program.py"]
objectives = [{ metric = "cost" }]
"""


def _target(tmp_path: Path, extra: str) -> Path:
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "target.toml").write_text(TARGET + extra)
    (folder / "program.py").write_text("X = 1  # knob: int 0..9\n")
    (folder / "evaluate.py").write_text("def evaluate(p):\n    return {'cost': 1.0}\n")
    return folder


@pytest.mark.parametrize("expr, why", [
    ("__import__('os').system('true')", "Call is not allowed"),
    ("X.real > 0", "Attribute is not allowed"),
    ("X <", "not an expression"),
    ("X == 'a'", "is not a number"),
])
def test_a_bad_constraint_is_a_config_error_naming_it(tmp_path: Path, expr: str,
                                                      why: str) -> None:
    folder = _target(tmp_path, "knob_constraints = ['''" + expr + "''']\n")
    with pytest.raises(ConfigError) as err:
        load_target(folder, tmp_path)
    assert why in str(err.value) and "knob_constraints[0]" in str(err.value)


def test_constraints_are_checked_on_the_values() -> None:
    rule = ("NUM_STAGES * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 <= 232448",)
    big = {"NUM_STAGES": 2, "BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 128}
    assert broken_constraint(rule, big) == rule[0]
    assert broken_constraint(rule, {**big, "BLOCK_K": 64}) is None
    assert broken_constraint(rule, {"NUM_STAGES": 9}) is None  # a knob the program dropped
    assert broken_constraint(("A // B < 1",), {"A": 1, "B": 0}) == "A // B < 1"


def _constrain(repo: Path, rule: str) -> None:
    toml = repo / "targets/function/toy/target.toml"
    toml.write_text(toml.read_text() + f"knob_constraints = [{rule!r}]\n".replace("'", '"'))
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qam", "constrain"], check=True)


def test_the_night_never_evaluates_values_outside_the_constraints(toy_repo: Path) -> None:
    _constrain(toy_repo, "X <= 4")
    cfg = load_experiment(toy_repo / "experiments/toy.toml",
                          ["budget.max_candidates=14", "stats.minimize_trials=0"],
                          workspace=toy_repo)
    summary = run(cfg, say=lambda s: None)
    assert summary.targets[0].candidates == 14
    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    evaluated = [t for t in study.trials if t.user_attrs.get("candidate")]
    xs = [t.params["X"] for t in evaluated if "X" in t.params]
    assert xs and max(xs) <= 4
    skipped = [t for t in study.trials if t.user_attrs.get("state") == "CONSTRAINED"]
    assert skipped, "the sampler never proposed X > 4: the test checks nothing"
    assert all(t.params["X"] > 4 and "X <= 4" in t.user_attrs["reason"] for t in skipped)
    status = collect_status(cfg)
    assert status["consistent"], status
    assert status["targets"]["toy"]["constrained"] == len(skipped)


def test_a_proposal_fixing_values_outside_them_is_rejected_with_the_reason(
        toy_repo: Path) -> None:
    _constrain(toy_repo, "X <= 4")

    class Fixed(OfflineProposer):
        def propose(self, context):  # type: ignore[no-untyped-def]
            return Proposal("fixed", context.parent.id, dict(context.seed.files), "X at 9",
                            fixed_knobs={"X": 9, "Y": 0.5})

    cfg = load_experiment(toy_repo / "experiments/toy.toml",
                          ["budget.max_candidates=3", "stats.minimize_trials=0"],
                          workspace=toy_repo)
    summary = run(cfg, proposer=Fixed(), say=lambda s: None)
    assert summary.targets[0].states.get("REJECTED") == 2
    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    reasons = [t.user_attrs.get("reason", "") for t in study.trials
               if t.user_attrs.get("state") == "REJECTED"]
    assert reasons and all("break the target's constraint X <= 4" in r for r in reasons)
