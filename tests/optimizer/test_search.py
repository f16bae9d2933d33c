"""Optuna glue: asking ahead gives the trials asking afterwards would, and trial attributes
written in one transaction, on real sqlite stores and in memory."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import (
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from optimizer import search

X = IntDistribution(0, 20)
Y = FloatDistribution(0.0, 1.0)
Z = CategoricalDistribution([1, 2, 4, 8])


def _study(tmp_path: Path, name: str, storage: str = "sqlite") -> optuna.Study:
    store = (search.storage_for(f"sqlite:///{tmp_path / name}.db") if storage == "sqlite"
             else optuna.storages.InMemoryStorage())
    return optuna.create_study(storage=store, study_name=name,
                               sampler=search.make_sampler("tpe", 7, 4, False))


def _plan(n: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(distributions, fixed values) per trial: the knobs change, some values are pinned."""
    rng = random.Random(3)
    out: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for i in range(n):
        dists: dict[str, Any] = {"X": X, "Y": Y} if i < 12 else {"X": X, "Y": Y, "Z": Z}
        fixed: dict[str, Any] = {}
        if i % 7 == 3:
            fixed = {"X": rng.randint(0, 20)}  # an AST mutation pins the knob it changed
        if i % 11 == 5:
            fixed = {k: (5 if k == "X" else 0.5 if k == "Y" else 2) for k in dists}  # a start
        out.append((dists, fixed))
    return out


def _objective(values: dict[str, Any]) -> float:
    return abs(values["X"] - 7) + 10 * abs(values["Y"] - 0.3) + values.get("Z", 1) / 8


def _night(study: optuna.Study, ahead: bool, n: int = 40) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for dists, fixed in _plan(n):
        names = {k: k for k in dists}
        # as the serial loop does: the trial is asked while the proposal is made
        early = search.AskAhead(study) if ahead else None
        trial, values = search.ask(study, dists, names, fixed, early)
        out.append((trial.number, values))
        if values["X"] == 13:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, _objective(values))
    return out


@pytest.mark.parametrize("storage", ["sqlite", "memory"])
def test_asking_ahead_gives_the_trials_asking_afterwards_gives(tmp_path: Path,
                                                               storage: str) -> None:
    plain = _night(_study(tmp_path, "plain", storage), ahead=False)
    early = _night(_study(tmp_path, "early", storage), ahead=True)
    assert early == plain
    for (_, values), (dists, fixed) in zip(early, _plan(40), strict=True):
        assert set(values) == set(dists)
        assert all(values[k] == v for k, v in fixed.items())


def test_ask_ahead_error_is_raised_where_the_trial_is_taken() -> None:
    class Broken:
        def ask(self) -> None:
            raise RuntimeError("storage is gone")

    ahead = search.AskAhead(Broken())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="storage is gone"):
        ahead.take()


ATTRS = {f"k{i}": v for i, v in enumerate(
    ["c0002", "VALID", "", {"cost": 1.5}, [1.5], None, 3, "x" * 3000, True])}


@pytest.mark.parametrize("storage", ["sqlite", "memory"])
def test_set_user_attrs_writes_every_attribute(tmp_path: Path, storage: str) -> None:
    study = _study(tmp_path, "attrs", storage)
    trial = study.ask()
    trial.set_user_attr("k1", "RUNNING")  # one that exists is overwritten
    search.set_user_attrs(trial, ATTRS)
    assert trial.user_attrs == ATTRS
    search.set_user_attrs(trial, {"state": "last"})  # a single one
    study.tell(trial, 1.0)
    want = {**ATTRS, "state": "last"}
    assert study.trials[0].user_attrs == want
    if storage == "sqlite":  # what another process reads back from the file
        again = optuna.load_study(study_name="attrs",
                                  storage=f"sqlite:///{tmp_path / 'attrs'}.db")
        assert again.trials[0].user_attrs == want


def test_set_user_attrs_refuses_a_finished_trial(tmp_path: Path) -> None:
    study = _study(tmp_path, "done")
    trial = study.ask()
    study.tell(trial, 1.0)
    with pytest.raises(RuntimeError):
        search.set_user_attrs(trial, {"a": 1, "b": 2})
    assert study.trials[0].user_attrs == {}
