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
from optimizer.study_storage import OneWriterStorage

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


def _as_stored(t: optuna.trial.FrozenTrial) -> tuple:
    return (t.number, t.state, t.params, t.distributions, t.user_attrs, t.system_attrs,
            t.values, t.intermediate_values, t.datetime_start is None,
            t.datetime_complete is None)


def _busy_study(study: optuna.Study) -> None:
    """Asks, pinned values, attributes, intermediate values, states of every kind."""
    for i, (dists, fixed) in enumerate(_plan(30)):
        trial, values = search.ask(study, dists, {k: k for k in dists}, fixed,
                                   search.AskAhead(study) if i % 2 else None)
        search.set_user_attrs(trial, {"candidate": f"c{i:04d}", "state": "RUNNING"})
        trial.set_user_attr("single", i)
        trial.report(float(i), step=1)
        if i % 5 == 4:
            continue  # left RUNNING, as a killed night leaves it
        search.set_user_attrs(trial, {"state": "VALID", "metrics": {"cost": 1.0 * i}},
                              before_tell=i % 3 == 0)
        if i % 6 == 1:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        elif i % 6 == 2:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, _objective(values))


def test_one_writer_storage_reads_what_the_database_holds(tmp_path: Path) -> None:
    """Everything the night reads from the cache is what the database holds (a fresh
    process reading the file), and the sampler sees what Optuna's own storage shows it."""
    url = f"sqlite:///{tmp_path / 'own.db'}"
    rdb = search.storage_for(url)
    own = optuna.create_study(storage=OneWriterStorage(rdb), study_name="s",
                              sampler=search.make_sampler("tpe", 7, 4, False))
    _busy_study(own)
    plain = _study(tmp_path, "plain")  # Optuna's cached storage, reading back every time
    _busy_study(plain)
    fresh = optuna.load_study(study_name="s", storage=url)
    cached = own.get_trials(deepcopy=False)
    assert [_as_stored(t) for t in cached] == [_as_stored(t) for t in fresh.trials]
    assert [_as_stored(t) for t in cached] == [_as_stored(t) for t in plain.trials]
    for a, b in zip(cached, fresh.trials, strict=True):
        for when in ("datetime_start", "datetime_complete"):
            x, y = getattr(a, when), getattr(b, when)
            assert x is None or abs((x - y).total_seconds()) < 0.001
    # a second process's night reads it all back and goes on
    again = optuna.create_study(storage=OneWriterStorage(search.storage_for(url)),
                                study_name="s", load_if_exists=True,
                                sampler=search.make_sampler("tpe", 7, 4, False))
    assert [_as_stored(t) for t in again.trials] == [_as_stored(t) for t in cached]
    trial = again.ask({"X": X})
    again.tell(trial, 1.0)
    assert optuna.load_study(study_name="s", storage=url).trials[-1].params == trial.params


def test_one_writer_storage_refuses_what_optuna_refuses(tmp_path: Path) -> None:
    study = optuna.create_study(
        storage=OneWriterStorage(search.storage_for(f"sqlite:///{tmp_path / 'r.db'}")),
        sampler=search.make_sampler("tpe", 7, 4, False))
    first = study.ask({"X": X})
    study.tell(first, 1.0)
    with pytest.raises(ValueError):  # an incompatible distribution for a known name
        study.ask({"X": CategoricalDistribution(["a", "b"])})
    done = study.trials[0]
    with pytest.raises(RuntimeError):
        study._storage.set_trial_param(done._trial_id, "X", 3.0, X)
    with pytest.raises(RuntimeError):
        search.set_user_attrs(optuna.trial.Trial(study, done._trial_id), {"a": 1, "b": 2})


def test_tpe_groups_added_once_are_optunas_groups(tmp_path: Path) -> None:
    """search._GroupsSoFar adds each finished trial once; TPE samples exactly what it does
    with Optuna's own group decomposition (which adds every trial on every ask)."""
    from optuna.search_space.group_decomposed import _GroupDecomposedSearchSpace

    ours = _study(tmp_path, "ours", "memory")
    assert isinstance(ours.sampler._group_decomposed_search_space, search._GroupsSoFar)
    theirs = _study(tmp_path, "theirs", "memory")
    theirs.sampler._group_decomposed_search_space = _GroupDecomposedSearchSpace(True)
    assert _night(ours, ahead=True, n=60) == _night(theirs, ahead=True, n=60)
    assert (ours.sampler._group_decomposed_search_space._search_space.search_spaces
            == theirs.sampler._group_decomposed_search_space._search_space.search_spaces)


def test_attributes_before_the_tell_are_one_commit_with_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    study = optuna.create_study(storage=OneWriterStorage(search.storage_for(url)),
                                sampler=search.make_sampler("tpe", 7, 4, False),
                                study_name="t")
    trial = study.ask({"X": X})
    search.set_user_attrs(trial, {"candidate": "c0002", "state": "RUNNING"})
    search.set_user_attrs(trial, {"state": "VALID", "commit": "abc"}, before_tell=True)
    assert study.trials[0].user_attrs["state"] == "VALID"  # this process sees it at once
    on_disk = optuna.load_study(study_name="t", storage=url).trials[0]
    assert on_disk.user_attrs == {"candidate": "c0002", "state": "RUNNING"}
    assert on_disk.params == trial.params  # the parameters came with the first write
    study.tell(trial, 2.0)
    on_disk = optuna.load_study(study_name="t", storage=url).trials[0]
    assert on_disk.user_attrs == {"candidate": "c0002", "state": "VALID", "commit": "abc"}
    assert on_disk.state == optuna.trial.TrialState.COMPLETE and on_disk.values == [2.0]


def test_tpe_with_its_above_window_is_optunas_tpe_below_the_window(tmp_path: Path,
                                                                   monkeypatch) -> None:
    """Below the window the sampler is Optuna's, suggestion for suggestion; past it, the
    above density is built from the most recent trials only, the below one from all."""
    def plain_tpe() -> optuna.samplers.TPESampler:
        tpe = optuna.samplers.TPESampler(seed=7, n_startup_trials=4, multivariate=True,
                                         group=True, constant_liar=True)
        tpe._group_decomposed_search_space = search._GroupsSoFar(include_pruned=True)
        return tpe

    theirs = _study(tmp_path, "theirs", "memory")
    theirs.sampler = plain_tpe()
    theirs_night = _night(theirs, ahead=False, n=80)
    assert _night(_study(tmp_path, "ours", "memory"), ahead=False, n=80) == theirs_night

    seen: list[tuple[bool, list[int]]] = []
    build = optuna.samplers.TPESampler._build_parzen_estimator

    def spy(self, study, space, trials, handle_below):  # what Optuna's TPE is given
        seen.append((handle_below, [t.number for t in trials]))
        return build(self, study, space, trials, handle_below)

    monkeypatch.setattr(optuna.samplers.TPESampler, "_build_parzen_estimator", spy)
    monkeypatch.setattr(search, "ABOVE_WINDOW", 30)
    windowed = _night(_study(tmp_path, "windowed", "memory"), ahead=False, n=80)
    assert windowed != theirs_night  # the window changed what was sampled
    above = [nums for below, nums in seen if not below]
    assert max(len(nums) for nums in above) == 30
    assert min(above[-1]) >= 80 - 30 - 25  # the newest (the good set is kept apart)
    assert max(len(nums) for below, nums in seen if below) <= 25  # Optuna's good set
