"""`optimizer evaluate NAME -e EXP`: a target named in an experiment is evaluated with the
experiment's settings for it (its [targets.settings] and [sandbox]), --set over them."""

from pathlib import Path

import pytest

import optimizer.workbench
from optimizer.cli import main
from optimizer.records import CandidateState, EvalResult

ROOT = Path(__file__).resolve().parents[2]


class _Seen:
    """Stands in for the workbench: records what it was given, evaluates nothing."""

    calls: list = []

    def __init__(self, target, *, workspace, sandbox, cache_dir):
        self.calls.append((target, sandbox))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def evaluate(self, files):
        return EvalResult(CandidateState.VALID, metrics={"speedup": 1.0}, objectives=(1.0,))


@pytest.fixture
def seen(monkeypatch):
    _Seen.calls = []
    monkeypatch.setattr(optimizer.workbench, "Workbench", _Seen)
    return _Seen.calls


def test_a_target_named_in_an_experiment_gets_the_experiments_settings(seen, capsys):
    exp = ROOT / "experiments/speculative-h200.toml"
    assert main(["evaluate", "spec_eagle", "-e", str(exp), "--set", "evaluator.train_s=3",
                 "--set", "sandbox.memory_mb=3000", "--json"]) == 0
    (target, sandbox), = seen
    assert target.name == "spec_eagle"
    assert target.evaluator["preset"] == "h200"  # the experiment's; target.toml says default
    assert target.evaluator["distill_seqs"] == 4096
    assert target.evaluator["train_s"] == 3  # --set wins over the experiment
    assert sandbox.memory_mb == 3000


def test_a_target_folder_keeps_its_own_settings(seen):
    assert main(["evaluate", str(ROOT / "targets/speculative/eagle"), "--set",
                 "evaluator.train_s=3", "--json"]) == 0
    (target, _), = seen
    assert target.evaluator["preset"] == "default" and target.evaluator["train_s"] == 3
