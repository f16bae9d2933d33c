"""Optuna glue: one study per target, ask/tell owned by the loop.

Study name ``<experiment>/<target>``; storage any SQLAlchemy URL (sqlite by default);
seeded TPE by default. A knob keeps its name as the Optuna parameter name while its
distribution stays compatible; a structure that re-ranges a categorical knob gets the
parameter ``NAME@<structure>`` instead (Optuna cannot change a categorical's choices).
"""

from __future__ import annotations

import copy
import logging
import threading
import warnings
import weakref
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, check_distribution_compatibility
from optuna.search_space.group_decomposed import _GroupDecomposedSearchSpace, _SearchSpaceGroup
from optuna.trial import TrialState

from optimizer.errors import ConfigError
from optimizer.study_storage import OneWriterStorage, write_user_attrs
from optimizer.targets import TargetSpec

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
log = logging.getLogger("optimizer.search")


def make_sampler(
    name: str, seed: int, n_startup_trials: int, multi: bool
) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        tpe = WindowedTPESampler(
            seed=seed,
            n_startup_trials=n_startup_trials,
            multivariate=True,
            group=True,
            constant_liar=True,
        )
        if tpe._group_decomposed_search_space is not None:
            tpe._group_decomposed_search_space = _GroupsSoFar(include_pruned=True)
        return tpe
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "cmaes" and not multi:
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=n_startup_trials)
    raise ConfigError(
        f"unknown sampler {name!r}; choose tpe, random, nsga2 or cmaes", key="search.sampler"
    )


# TPE's "above" density g(x) (every trial but the best few) is built from the most recent
# this many trials; the "below" density l(x) still comes from the best of all of them.
ABOVE_WINDOW = 256


class WindowedTPESampler(optuna.samplers.TPESampler):
    """Optuna's TPE, with the trials outside its good set (those g(x) is estimated from)
    limited to the ``ABOVE_WINDOW`` most recent. An ask compares candidate points against
    every above trial, so its cost grew with the study: 3.0 ms at 100 trials, 7.5 ms at
    1,000 on the development machine, and in the serial loop the ask is on the critical
    path. TPE already weights older trials less (a ramp from 1/n up); the window drops the
    oldest, least-weighted ones. Up to ``ABOVE_WINDOW`` above trials (about 280 in the
    study) the sampler is Optuna's, suggestion for suggestion."""

    def _build_parzen_estimator(self, study: optuna.Study,
                                search_space: dict[str, BaseDistribution],
                                trials: list[optuna.trial.FrozenTrial],
                                handle_below: bool) -> Any:
        if not handle_below and len(trials) > ABOVE_WINDOW:
            newest = set(sorted(t.number for t in trials)[-ABOVE_WINDOW:])
            trials = [t for t in trials if t.number in newest]  # in the order given
        return super()._build_parzen_estimator(study, search_space, trials, handle_below)


# studies that workers on other machines share (optimizer.worker): a trial enqueued with
# fixed values could be asked by any of them, so fixed values are suggested in the trial
SHARED_STUDIES: weakref.WeakSet[optuna.Study] = weakref.WeakSet()


class _GroupsSoFar(_GroupDecomposedSearchSpace):
    """TPE's search-space groups (``group=True``), adding each finished trial once.

    Optuna's version adds every complete trial's distributions again on every ask: O(N) per
    ask, 2-3 ms at 1000 trials on the development machine. Adding a trial's distributions
    to groups that already hold them changes nothing (each group is inside them or apart
    from them, in the same order), and a finished trial never changes, so the groups are
    the ones Optuna computes, trial for trial."""

    def __init__(self, include_pruned: bool = False) -> None:
        super().__init__(include_pruned)
        self._added: set[int] = set()

    def calculate(self, study: optuna.Study, use_cache: bool = False) -> _SearchSpaceGroup:
        if self._study_id is None:
            self._study_id = study._study_id
        elif self._study_id != study._study_id:
            raise ValueError("`_GroupDecomposedSearchSpace` cannot handle multiple studies.")
        states = ((TrialState.COMPLETE, TrialState.PRUNED) if self._include_pruned
                  else (TrialState.COMPLETE,))
        for trial in study._get_trials(deepcopy=False, states=states, use_cache=use_cache):
            if trial.number not in self._added:
                self._added.add(trial.number)
                self._search_space.add_distributions(trial.distributions)
        return copy.deepcopy(self._search_space)


# the storage each study was opened with (its public interface reopens RUNNING trials)
_STORAGE_OF: weakref.WeakKeyDictionary[optuna.Study, optuna.storages.BaseStorage] = (
    weakref.WeakKeyDictionary()
)


def storage_for(url: str) -> optuna.storages.RDBStorage:
    if url.startswith("sqlite:///"):
        from pathlib import Path

        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.RDBStorage(url)


def live_trial(study: optuna.Study, number: int) -> optuna.trial.Trial:
    """A writable handle on trial ``number`` of ``study`` (one a killed run left RUNNING),
    through the storage's public interface (``study`` comes from :func:`open_study`)."""
    storage = _STORAGE_OF[study]
    study_id = storage.get_study_id_from_name(study.study_name)
    return optuna.trial.Trial(
        study, storage.get_trial_id_from_study_id_trial_number(study_id, number)
    )


def open_study(
    storage: str | optuna.storages.RDBStorage, experiment: str, target: TargetSpec,
    sampler: optuna.samplers.BaseSampler, one_writer: bool = True,
) -> optuna.Study:
    """The target's study. ``one_writer``: no other process writes it meanwhile (a night;
    ``optimizer.study_storage``), so its trials are read from the database only once."""
    directions: list[Any] = [o.direction for o in target.objectives]
    name = f"{experiment}/{target.name}"
    rdb = storage_for(storage) if isinstance(storage, str) else storage
    try:
        study = optuna.create_study(
            storage=OneWriterStorage(rdb) if one_writer else rdb,
            study_name=name,
            sampler=sampler,
            directions=directions,
            load_if_exists=True,
        )
    except ValueError as exc:
        raise ConfigError(
            f"study {name!r} exists with other directions ({exc}); use another experiment name"
        ) from None
    _STORAGE_OF[study] = rdb
    metrics = [o.metric for o in target.objectives]
    if study.metric_names != metrics:
        study.set_metric_names(metrics)
    return study


class ParamNames:
    """Maps knob names to Optuna parameter names, keeping distributions compatible."""

    def __init__(self, study: optuna.Study):
        self.known: dict[str, BaseDistribution] = {}
        for trial in study.get_trials(deepcopy=False):
            self.known.update(trial.distributions)

    def map(self, dists: Mapping[str, BaseDistribution], structure: str) -> dict[str, str]:
        """Optuna parameter name for each knob name."""
        names = {}
        for knob, dist in dists.items():
            param = knob
            old = self.known.get(param)
            if old is not None:
                try:
                    check_distribution_compatibility(old, dist)
                    if old != dist and isinstance(
                        dist, optuna.distributions.CategoricalDistribution
                    ):
                        raise ValueError("categorical choices changed")
                except ValueError:
                    param = f"{knob}@{structure[:6]}"
            names[knob] = param
            self.known[param] = dist
        return names


def ask(
    study: optuna.Study,
    dists: Mapping[str, BaseDistribution],
    names: Mapping[str, str],
    fixed: Mapping[str, Any],
    ahead: AskAhead | None = None,
) -> tuple[optuna.trial.Trial, dict[str, Any]]:
    """A new trial with values for every knob; ``fixed`` values are enqueued first. With
    ``ahead`` the trial asked in the background is taken and its values suggested."""
    renamed = {names[k]: d for k, d in dists.items()}
    pinned = {names[k]: v for k, v in fixed.items() if k in names}
    if ahead is None and not (pinned and study in SHARED_STUDIES):
        if pinned:
            study.enqueue_trial(pinned)
        trial = study.ask(renamed)
    else:
        # study.ask(dists) samples relatively only when some value is not pinned
        trial = (ahead.take(sampled=bool(set(renamed) - set(pinned))) if ahead is not None
                 else study.ask())
        if pinned:  # what an enqueued trial holds: its suggestions return these values
            trial._fixed_params = dict(pinned)
        for name, dist in renamed.items():
            _suggest(trial, name, dist)
    values = {k: trial.params[names[k]] for k in dists}
    return trial, values


def _suggest(trial: optuna.trial.Trial, name: str, dist: BaseDistribution) -> Any:
    """``trial.suggest_*`` for a distribution object (what ``study.ask(dists)`` does)."""
    if isinstance(dist, optuna.distributions.FloatDistribution):
        return trial.suggest_float(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, optuna.distributions.IntDistribution):
        return trial.suggest_int(name, dist.low, dist.high, step=dist.step, log=dist.log)
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return trial.suggest_categorical(name, dist.choices)
    raise TypeError(f"no suggestion for {type(dist).__name__}")


class AskAhead:
    """The next trial, asked in a background thread while the proposal is being made.

    Optuna's relative sampling (TPE's multivariate model over every trial: 7-20 ms, more
    as the study grows) does not depend on the distributions a trial is asked with: it
    runs on the first suggestion, over the search space inferred from the trials so far.
    So a bare ``study.ask()`` plus that sampling can run before the proposal exists, and
    the suggestions afterwards only look the values up. The study must not change
    meanwhile (the serial loop proposes, nothing else), so the trial and its values are
    exactly what ``study.ask(dists)`` after the proposal would have given, and a night
    with one slot replays exactly. A run killed meanwhile leaves the trial RUNNING with
    no candidate; ``--resume`` marks it FAILED ("interrupted").
    """

    def __init__(self, study: optuna.Study):
        self._study = study
        self._done = threading.Event()
        self._trial: optuna.trial.Trial | None = None
        self._error: BaseException | None = None
        self._sampler: optuna.samplers.BaseSampler | None = None
        threading.Thread(target=self._ask, name="ask-ahead", daemon=True).start()

    def _ask(self) -> None:
        try:
            trial = self._study.ask()
            self._sampler = copy.deepcopy(self._study.sampler)  # its random state before
            trial.relative_params  # noqa: B018 - the sampling itself (lazy in Optuna)
            self._trial = trial
        except BaseException as exc:  # noqa: BLE001 - raised where the trial is taken
            self._error = exc
        finally:
            self._done.set()

    def take(self, sampled: bool = True) -> optuna.trial.Trial:
        """The trial; ``sampled=False`` when none of its values will be sampled."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._trial is not None
        if not sampled and self._sampler is not None:
            self._study.sampler = self._sampler
        return self._trial


def set_user_attrs(trial: Any, attrs: Mapping[str, Any], before_tell: bool = False) -> None:
    """Several user attributes of a live trial, in one transaction where the storage is
    Optuna's RDB storage (each ``set_user_attr`` is a commit of its own: 0.6-0.9 ms each
    on sqlite, 14 of them per candidate; ``study_storage.write_user_attrs``); one by one,
    in their order, elsewhere. ``before_tell``: the trial is told next, and on a night's
    storage the attributes are written in the tell's transaction."""
    storage = trial.storage
    rdb = getattr(storage, "_backend", storage)
    if not isinstance(rdb, optuna.storages.RDBStorage) or len(attrs) < 2:
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        return
    if isinstance(storage, OneWriterStorage):
        storage.set_trial_user_attrs(trial._trial_id, attrs, with_state=before_tell)
    else:
        write_user_attrs(rdb, trial._trial_id, attrs)
    trial._cached_frozen_trial.user_attrs.update(attrs)


def running_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
