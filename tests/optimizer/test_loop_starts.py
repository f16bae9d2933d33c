"""A target's declared starts: evaluated after the seed, each a structure of its own."""

from __future__ import annotations

import subprocess
from pathlib import Path

import optuna
import pytest

from optimizer.config import load_experiment
from optimizer.errors import ConfigError
from optimizer.loop import run
from optimizer.targets import load_target

# a different structure (a third knob, another formula) that starts nearer the optimum
START = '''
"""Toy program, rewritten: the same cost, computed another way."""

# EVOLVE-BLOCK-START
X = 6  # knob: int 0..20
Y = 0.4  # knob: float 0.0..1.0
SCALE = 10  # knob: choices=[10]


def cost():
    return sum((abs(X - 7), SCALE * abs(Y - 0.3), 1.0))
# EVOLVE-BLOCK-END
'''


def _commit(repo: Path) -> None:
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qm", "starts"], check=True)


def _with_start(repo: Path) -> Path:
    target = repo / "targets/function/toy"
    (target / "variants").mkdir()
    (target / "variants/rewritten.py").write_text(START)
    toml = target / "target.toml"
    toml.write_text(toml.read_text() + 'starts = ["variants/rewritten.py"]\n')
    _commit(repo)
    return target


def test_a_start_is_evaluated_after_the_seed_as_its_own_structure(toy_repo: Path) -> None:
    _with_start(toy_repo)
    cfg = load_experiment(toy_repo / "experiments/toy.toml", ["budget.max_candidates=6"],
                          workspace=toy_repo)
    run(cfg, say=lambda s: None)
    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    trials = sorted((t for t in study.trials if t.user_attrs.get("candidate")),
                    key=lambda t: t.user_attrs["candidate"])
    seed, start = trials[0].user_attrs, trials[1].user_attrs
    assert seed["proposer"] == "seed" and start["proposer"] == "start"
    assert start["parent"] == seed["candidate"] and "variants/rewritten.py" in start["summary"]
    assert start["state"] == "VALID" and start["structure"] != seed["structure"]
    assert trials[1].values[0] == pytest.approx(3.0)  # 1 + 10 * 0.1 + 1
    # a second night does not evaluate it again
    cfg2 = load_experiment(toy_repo / "experiments/toy.toml", ["budget.max_candidates=2"],
                           workspace=toy_repo)
    run(cfg2, say=lambda s: None)
    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    assert sum(t.user_attrs.get("proposer") == "start" for t in study.trials) == 1


def test_a_start_that_is_missing_or_ambiguous_is_a_clear_error(toy_repo: Path) -> None:
    target = toy_repo / "targets/function/toy"
    toml = target / "target.toml"
    base = toml.read_text()
    toml.write_text(base + 'starts = ["variants/none.py"]\n')
    with pytest.raises(ConfigError, match="starts.*does not exist"):
        load_target(target, toy_repo)
    (target / "other.py").write_text("X = 1\n")
    (target / "v.py").write_text("X = 2\n")
    toml.write_text(base.replace('editable = ["program.py"]',
                                 'editable = ["program.py", "other.py"]')
                    + 'starts = ["v.py"]\n')
    with pytest.raises(ConfigError, match="one file but the target has 2 editable files"):
        load_target(target, toy_repo)
    (target / "vdir").mkdir()
    (target / "vdir/other.py").write_text("X = 3\n")
    toml.write_text(base.replace('editable = ["program.py"]',
                                 'editable = ["program.py", "other.py"]')
                    + 'starts = ["vdir"]\n')
    spec = load_target(target, toy_repo)
    files = spec.start_files("vdir")
    assert files["other.py"] == "X = 3\n" and files["program.py"] == spec.seed_files()[
        "program.py"]
