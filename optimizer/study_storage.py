"""The Optuna storage of a night's studies: the RDB storage (the source of truth, written
synchronously as before), read through a cache that this process keeps up to date itself.

Optuna wraps an RDB storage in ``_CachedStorage``, which caches finished trials but reads
every unfinished one back from the database on each ``get_all_trials`` and ``get_trial``,
since another process might have written it. TPE with ``constant_liar`` reads all trials
three times per ask and the tell reads its trial twice: on the 2-core development machine
that was 16-25 ms of sqlite reads per candidate (2026-12-03), more than the sampling. A
night's studies are written by one process only (one ``optimizer run`` per experiment at a
time, its slots are threads sharing this object), so :class:`OneWriterStorage` reads the
database once per study and afterwards applies each of its own writes to the cached trial
right after the database has it. A kill loses nothing the database did not have: the next
process reads everything from the database again. Workers of several processes on one
study must use Optuna's own ``_CachedStorage`` (``open_study(..., one_writer=False)``).

:func:`write_user_attrs` writes several user attributes of a trial in one statement (an
upsert of all rows): Optuna's ``set_trial_user_attr`` is a transaction per attribute
(0.6-0.9 ms each on sqlite, 14 of them per candidate), and even in one transaction it
looks the trial up once per attribute.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from optuna import distributions
from optuna.storages import RDBStorage
from optuna.storages._cached_storage import _CachedStorage
from optuna.storages._rdb import models
from optuna.storages._rdb.storage import _create_scoped_session
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy import exc as sqlalchemy_exc


class OneWriterStorage(_CachedStorage):
    """``_CachedStorage`` for studies no other process writes (see the module docstring)."""

    def __init__(self, backend: RDBStorage) -> None:
        super().__init__(backend)
        self._loaded: set[int] = set()
        # trial id -> parameters checked and cached, written with the trial's next write
        self._deferred: dict[int, list[tuple[str, float, distributions.BaseDistribution]]] = {}
        # trial id -> user attributes to write with its next state change
        self._deferred_attrs: dict[int, dict[str, Any]] = {}

    # -- reads: the database once per study, then the cache -------------------------------

    def _read_trials_from_remote_storage(self, study_id: int) -> None:
        if study_id in self._loaded:
            return
        super()._read_trials_from_remote_storage(study_id)
        self._loaded.add(study_id)

    def _cached(self, trial_id: int) -> FrozenTrial | None:
        """The cached trial (callers hold ``_lock``); None where its study is not read yet."""
        found = self._trial_id_to_study_id_and_number.get(trial_id)
        if found is None or found[0] not in self._loaded:
            return None
        return self._studies[found[0]].trials.get(found[1])

    def get_trial(self, trial_id: int) -> FrozenTrial:
        with self._lock:
            trial = self._cached(trial_id)
            if trial is not None:
                # a finished trial never changes again; an unfinished one is copied, since
                # this cache changes it in place (Optuna's Trial keeps a copy of its own)
                return trial if trial.state.is_finished() else copy.deepcopy(trial)
        return super().get_trial(trial_id)

    # -- writes: the database first, then the cached trial --------------------------------

    def set_trial_param(
        self,
        trial_id: int,
        param_name: str,
        param_value_internal: float,
        distribution: distributions.BaseDistribution,
    ) -> None:
        """Checked now, written with the trial's next write (its attributes or its state:
        one transaction instead of one per parameter). A parameter name this process has
        not seen yet is written at once (the database knows its earlier distribution)."""
        with self._lock:
            trial = self._cached(trial_id)
            study_id = self._trial_id_to_study_id_and_number.get(trial_id, (-1, -1))[0]
            previous = (self._studies[study_id].param_distribution.get(param_name)
                        if trial is not None else None)
            if trial is not None and previous is not None:
                self._backend.check_trial_is_updatable(trial_id, trial.state)
                distributions.check_distribution_compatibility(previous, distribution)
                self._deferred.setdefault(trial_id, []).append(
                    (param_name, param_value_internal, distribution))
                self._cache_param(trial, param_name, param_value_internal, distribution)
                return
        super().set_trial_param(trial_id, param_name, param_value_internal, distribution)
        with self._lock:
            trial = self._cached(trial_id)
            if trial is not None:
                self._cache_param(trial, param_name, param_value_internal, distribution)

    @staticmethod
    def _cache_param(trial: FrozenTrial, name: str, internal: float,
                     distribution: distributions.BaseDistribution) -> None:
        trial.params[name] = distribution.to_external_repr(internal)
        trial.distributions[name] = distribution

    def _take_deferred(self, trial_id: int) -> list[tuple[str, float, Any]]:
        with self._lock:
            return self._deferred.pop(trial_id, [])

    def _put_back(self, trial_id: int, params: list[tuple[str, float, Any]]) -> None:
        """A write that failed: its deferred parameters wait for the next one."""
        if params:
            with self._lock:
                self._deferred[trial_id] = [*params, *self._deferred.get(trial_id, [])]

    @staticmethod
    def _add_params(session: Any, trial_id: int, params: list[tuple[str, float, Any]]) -> None:
        for name, internal, dist in params:
            session.add(models.TrialParamModel(
                trial_id=trial_id, param_name=name, param_value=internal,
                distribution_json=distributions.distribution_to_json(dist)))

    def set_trial_state_values(
        self, trial_id: int, state: TrialState, values: Sequence[float] | None = None
    ) -> bool:
        """RDBStorage's own, with the deferred parameters and attributes in the same
        transaction."""
        rdb = self._backend
        params = self._take_deferred(trial_id)
        with self._lock:
            attrs = self._deferred_attrs.pop(trial_id, {})
        changed = True
        try:
            with _create_scoped_session(rdb.scoped_session) as session:
                row = models.TrialModel.find_or_raise_by_id(trial_id, session, for_update=True)
                rdb.check_trial_is_updatable(trial_id, cast(TrialState, row.state))
                self._add_params(session, trial_id, params)
                _upsert_attrs(rdb, session, trial_id, attrs, check=False)
                if values is not None:
                    for objective, v in enumerate(values):
                        rdb._set_trial_value_without_commit(session, row, objective, v)
                if state == TrialState.RUNNING and row.state != TrialState.WAITING:
                    changed = False
                else:
                    row.state = state
                    if state == TrialState.RUNNING:
                        row.datetime_start = datetime.now()
                    if state.is_finished():
                        row.datetime_complete = datetime.now()
                    start, complete = row.datetime_start, row.datetime_complete
        except sqlalchemy_exc.IntegrityError:
            changed = False
        except BaseException:
            self._put_back(trial_id, params)
            with self._lock:
                self._deferred_attrs[trial_id] = {**attrs, **self._deferred_attrs.get(
                    trial_id, {})}
            raise
        with self._lock:
            trial = self._cached(trial_id)
            if trial is not None and changed:
                if values is not None:
                    trial.values = list(values)
                trial.datetime_start, trial.datetime_complete = start, complete
                trial.state = state
            elif trial is not None:  # refused (a WAITING trial someone else took): re-read
                self._loaded.discard(self._trial_id_to_study_id_and_number[trial_id][0])
        return changed

    def set_trial_intermediate_value(
        self, trial_id: int, step: int, intermediate_value: float
    ) -> None:
        super().set_trial_intermediate_value(trial_id, step, intermediate_value)
        with self._lock:
            trial = self._cached(trial_id)
            if trial is not None:
                trial.intermediate_values[step] = intermediate_value

    def set_trial_user_attr(self, trial_id: int, key: str, value: Any) -> None:
        self.set_trial_user_attrs(trial_id, {key: value})

    def set_trial_user_attrs(self, trial_id: int, attrs: Mapping[str, Any],
                             with_state: bool = False) -> None:
        """Several user attributes in one transaction (:func:`write_user_attrs`), with the
        deferred parameters; ``with_state``: in the transaction of the trial's next state
        change (its tell) instead, so that the record and the tell are one commit."""
        with self._lock:
            trial = self._cached(trial_id)
            if trial is not None:
                self._backend.check_trial_is_updatable(trial_id, trial.state)
                if with_state:
                    self._deferred_attrs.setdefault(trial_id, {}).update(attrs)
                    trial.user_attrs.update(copy.deepcopy(dict(attrs)))
                    return
        params = self._take_deferred(trial_id)
        try:
            write_user_attrs(self._backend, trial_id, attrs, check=trial is None,
                             before=lambda session: self._add_params(session, trial_id, params))
        except BaseException:
            self._put_back(trial_id, params)
            raise
        with self._lock:
            trial = self._cached(trial_id)
            if trial is not None:
                trial.user_attrs.update(copy.deepcopy(dict(attrs)))

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        super().set_trial_system_attr(trial_id, key, value)
        with self._lock:
            trial = self._cached(trial_id)
            if trial is not None:
                trial.system_attrs[key] = copy.deepcopy(value)


def write_user_attrs(rdb: RDBStorage, trial_id: int, attrs: Mapping[str, Any],
                     before: Callable[[Any], None] | None = None, check: bool = True) -> None:
    """``attrs`` into a live trial's user attributes in one transaction: one look-up of the
    trial and one upsert of every row on sqlite and PostgreSQL (Optuna's own
    per-attribute statements elsewhere). A finished trial raises, as Optuna does
    (``check=False``: the caller knows it is not). ``before(session)`` adds its own writes
    to the transaction."""
    with _create_scoped_session(rdb.scoped_session, True) as session:
        if before is not None:
            before(session)
        _upsert_attrs(rdb, session, trial_id, attrs, check)


def _upsert_attrs(rdb: RDBStorage, session: Any, trial_id: int, attrs: Mapping[str, Any],
                  check: bool = True) -> None:
    model = models.TrialUserAttributeModel
    if not attrs:
        return
    dialect = rdb.engine.name
    if dialect not in ("sqlite", "postgresql"):
        for key, value in attrs.items():
            rdb._set_trial_attr_without_commit(session, model, trial_id, key, value)
        return
    if check:
        trial = models.TrialModel.find_or_raise_by_id(trial_id, session)
        rdb.check_trial_is_updatable(trial_id, cast(TrialState, trial.state))
    from sqlalchemy.dialects import postgresql, sqlite

    insert: Any = sqlite.insert if dialect == "sqlite" else postgresql.insert
    stmt = insert(model).values([
        {"trial_id": trial_id, "key": key, "value_json": json.dumps(value)}
        for key, value in attrs.items()
    ])
    session.execute(stmt.on_conflict_do_update(
        index_elements=[model.trial_id, model.key],
        set_={"value_json": stmt.excluded.value_json},
    ))
