"""Optuna glue: one study per target, ask/tell owned by the loop.

Study name ``<experiment>/<target>``; storage any SQLAlchemy URL (sqlite by default);
seeded TPE by default. A knob keeps its name as the Optuna parameter name while its
distribution stays compatible; a structure that re-ranges a categorical knob gets the
parameter ``NAME@<structure>`` instead (Optuna cannot change a categorical's choices).
"""

from __future__ import annotations

import logging
import warnings
import weakref
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, check_distribution_compatibility
from optuna.trial import TrialState

from optimizer.errors import ConfigError
from optimizer.targets import TargetSpec

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
log = logging.getLogger("optimizer.search")


def make_sampler(
    name: str, seed: int, n_startup_trials: int, multi: bool
) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        return optuna.samplers.TPESampler(
            seed=seed,
            n_startup_trials=n_startup_trials,
            multivariate=True,
            group=True,
            constant_liar=True,
        )
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "cmaes" and not multi:
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=n_startup_trials)
    raise ConfigError(
        f"unknown sampler {name!r}; choose tpe, random, nsga2 or cmaes", key="search.sampler"
    )


# the storage each study was opened with (its public interface reopens RUNNING trials)
_STORAGE_OF: weakref.WeakKeyDictionary[optuna.Study, optuna.storages.BaseStorage] = (
    weakref.WeakKeyDictionary()
)


def storage_for(url: str) -> optuna.storages.BaseStorage:
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
    storage: str, experiment: str, target: TargetSpec, sampler: optuna.samplers.BaseSampler
) -> optuna.Study:
    directions: list[Any] = [o.direction for o in target.objectives]
    name = f"{experiment}/{target.name}"
    rdb = storage_for(storage)
    try:
        study = optuna.create_study(
            storage=rdb,
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
) -> tuple[optuna.trial.Trial, dict[str, Any]]:
    """A new trial with values for every knob; ``fixed`` values are enqueued first."""
    renamed = {names[k]: d for k, d in dists.items()}
    if fixed:
        study.enqueue_trial({names[k]: v for k, v in fixed.items() if k in names})
    trial = study.ask(renamed)
    values = {k: trial.params[names[k]] for k in dists}
    return trial, values


def running_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
