"""The stores the workers of ``optimizer worker`` share, and the night they join: Optuna's
RDB storage with heartbeats (:class:`SharedStorage`), the worker's clone that pushes
each candidate's branch (:class:`SharedWorkspace`), the tracking store, the night's row
(:func:`join_night`) and the workers' rows for ``optimizer status``. How the workers
share the night's work is :mod:`optimizer.worker`'s."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from optimizer.claims import Claims
from optimizer.config import ExperimentConfig
from optimizer.errors import ConfigError, OptimizerError, WorkspaceError
from optimizer.tracking import Tracker
from optimizer.vcs import BRANCH_ROOT, Workspace

log = logging.getLogger("optimizer.worker")
# Optuna warns that heartbeats are meant for Study.optimize: here a thread beats them
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")


def workers_study(experiment: str) -> str:
    """The study that holds an experiment's nights and workers (no target's: no '/')."""
    return f"{experiment}:workers"


# -- settings ------------------------------------------------------------------------------


def check_shared(config: ExperimentConfig) -> list[str]:
    """What the workers share, checked before anything is written; returns warnings."""
    notes = []
    if not config.search.storage:
        raise ConfigError(
            "`optimizer worker` shares the night through Optuna's storage, and none is set "
            "(the default is this checkout's own .optimizer/optuna.db). For workers on several "
            'machines set [search] storage = "postgresql+psycopg2://user@host/db" or pass '
            "--storage URL; for workers on this machine only, one sqlite file they all name "
            "(--storage sqlite:////abs/path/optuna.db)", key="search.storage")
    if not config.tracking.uri:
        raise ConfigError(
            "`optimizer worker` records runs in a tracking store the workers share, and none "
            'is set. For several machines set [tracking] uri = "http://host:5000" (an '
            "`mlflow server`) or pass --tracking-uri URI; for this machine only, "
            "sqlite:////abs/path/mlflow.db", key="tracking.uri")
    if not config.vcs.push:
        raise ConfigError(
            "`optimizer worker` pushes candidate and pull branches to a git remote the "
            'workers share, and none is set: [vcs] push = "origin" or --remote NAME (each '
            "worker works in its own clone of the repository)", key="vcs.push")
    if config.search.storage.startswith("sqlite:"):
        notes.append("the Optuna storage is a sqlite file: workers on this machine only "
                     "(use PostgreSQL for several machines)")
    elif config.search.storage.startswith("postgresql"):
        try:
            import psycopg2  # noqa: F401
        except ImportError:
            raise ConfigError(
                "a postgresql:// storage needs psycopg2: pip install "
                "'inference-optimizer[postgres]'", key="search.storage") from None
    if not config.tracking.uri.startswith(("http://", "https://")):
        notes.append("the tracking store is not a server: workers on this machine only")
    return notes


# -- the stores ----------------------------------------------------------------------------


class SharedStorage(optuna.storages.RDBStorage):
    """Optuna's RDB storage with heartbeats: every trial created here gets one at once
    (Optuna never finds a trial without one stale) and is held until it is finished;
    :class:`Heartbeat` beats the held ones."""

    def __init__(self, url: str, heartbeat_s: int, grace_s: int):
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        super().__init__(url, heartbeat_interval=heartbeat_s, grace_period=grace_s)
        self.held: dict[int, str] = {}  # trial id -> what it is, for the worker's record
        self._held_lock = threading.Lock()
        self._unbeaten: dict[int, float] = {}  # RUNNING trial without a heartbeat -> seen at

    def _create_new_trial(self, study_id: int, template_trial: Any = None) -> Any:
        frozen = super()._create_new_trial(study_id, template_trial)
        self.record_heartbeat(frozen._trial_id)
        with self._held_lock:
            self.held[frozen._trial_id] = f"trial {frozen.number}"
        return frozen

    def stale_trial_ids(self, study_id: int) -> list[int]:
        """The trials of ``study_id`` whose worker is lost (what :meth:`_get_stale_trial_ids`
        finds, the hook Optuna's ``fail_stale_trials`` calls)."""
        return self._get_stale_trial_ids(study_id)

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        """Optuna's stale trials (a heartbeat older than the grace period) and the RUNNING
        trials that never had a heartbeat: a worker killed between creating a trial and
        beating it leaves it RUNNING for good (Optuna passes over trials without one), and
        every other worker would wait for it, its target's winner until the night's end. A
        live worker beats a trial as it creates it, so one that this storage has seen
        without a heartbeat for longer than the grace period is lost (timed on this
        machine's clock: no two machines' clocks are compared)."""
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        stale = super()._get_stale_trial_ids(study_id)
        grace = float(self.grace_period or 2 * (self.heartbeat_interval or 1))
        with _create_scoped_session(self.scoped_session, True) as session:
            rows = (session.query(models.TrialModel.trial_id)
                    .outerjoin(models.TrialHeartbeatModel,
                               models.TrialHeartbeatModel.trial_id == models.TrialModel.trial_id)
                    .filter(models.TrialModel.study_id == study_id,
                            models.TrialModel.state == TrialState.RUNNING,
                            models.TrialHeartbeatModel.trial_heartbeat_id.is_(None))
                    .all())
        unbeaten = {int(row[0]) for row in rows}
        now = time.monotonic()
        with self._held_lock:
            mine = set(self.held)
            for trial_id in set(self._unbeaten) - unbeaten:  # beaten or finished since
                del self._unbeaten[trial_id]
            for trial_id in unbeaten - mine:
                seen = self._unbeaten.setdefault(trial_id, now)
                if now - seen > grace and trial_id not in stale:
                    stale.append(trial_id)
        return stale

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Any = None) -> bool:
        done = super().set_trial_state_values(trial_id, state, values)
        if state.is_finished():
            with self._held_lock:
                self.held.pop(trial_id, None)
        return done

    def label(self, trial_id: int, text: str) -> None:
        with self._held_lock:
            if trial_id in self.held:
                self.held[trial_id] = text

    def holding(self) -> dict[int, str]:
        with self._held_lock:
            return dict(self.held)


class SharedWorkspace(Workspace):
    """The worker's clone: a candidate's branch goes to the remote as it is recorded."""

    def __init__(self, *args: Any, remote: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.remote = remote

    def annotate(self, target: str, cid: str, message: str) -> str:
        sha = super().annotate(target, cid, message)
        self.push(self.remote, [self.candidate_branch(target, cid)])
        return sha

    def fetch_experiment(self) -> None:
        """Candidate branches of earlier nights, for the programs of their candidates."""
        refs = f"refs/heads/{BRANCH_ROOT}/{self.experiment}/*"
        try:
            self._git("fetch", "--quiet", self.remote, f"+{refs}:{refs}")
        except Exception as exc:  # noqa: BLE001 - named in the error
            raise WorkspaceError(
                f"cannot fetch from the git remote {self.remote!r}: {exc}; check "
                "`git remote -v` in this clone and that the remote is reachable") from None


@dataclasses.dataclass(frozen=True)
class Night:
    name: str
    number: int
    start: float  # epoch seconds
    end: float
    minutes: float
    parent_run_id: str
    base_commit: str


def join_night(config: ExperimentConfig, storage: SharedStorage, claims: Claims,
               tracker: Tracker, wsid: int, base_commit: str, wid: str) -> Night:
    """The experiment's open night (or the one ``[worker] night`` names), else a new one:
    the first worker to claim ``night:<n>`` starts it, with its MLflow parent run."""
    wanted = config.worker.night
    for _ in range(10):
        rows = sorted(((int(k.split(":", 1)[1]), v) for k, v in
                       claims.prefixed(wsid, "night:").items()), key=lambda kv: kv[0])
        now = time.time()
        found = [(n, v) for n, v in rows if v["name"] == wanted] if wanted else rows[-1:]
        if found and (found[-1][1]["end"] > now or wanted):
            n, v = found[-1]
            if v["end"] <= now:
                raise OptimizerError(
                    f"night {wanted!r} of experiment '{config.name}' is over; start a new "
                    "night (another --night name, or none)")
            if v["base_commit"] != base_commit:
                raise WorkspaceError(
                    f"this clone's base commit {base_commit[:12]} is not the night's "
                    f"{v['base_commit'][:12]}: check out the commit the other workers use")
            return Night(v["name"], n, v["start"], v["end"], v["minutes"],
                         v["parent_run_id"], v["base_commit"])
        number = rows[-1][0] + 1 if rows else 1
        name = wanted or time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
        if any(v["name"] == name for _, v in rows):
            name = f"{name}-{number}"
        params = {"experiment_file": str(config.file), "seed": config.seed,
                  "proposer": config.proposer.kind, "budget_minutes": config.budget.minutes,
                  "targets": ",".join(t.spec.name for t in config.targets), "workers": "shared"}
        run_id = tracker.start_night(name, params, {"optimizer.experiment": config.name})
        value: dict[str, Any] = {
            "name": name, "start": now, "end": now + config.budget.minutes * 60,
            "minutes": config.budget.minutes, "parent_run_id": run_id,
            "base_commit": base_commit, "started_by": wid}
        if claims.take(wsid, f"night:{number}", value):
            return Night(name, number, value["start"], value["end"], value["minutes"], run_id,
                         base_commit)
        tracker.delete_run(run_id)  # another worker started the night first
    raise OptimizerError("could not open or join a night (ten claims lost in a row)")


_CREATION_RACE = ("already exists", "UNIQUE constraint failed", "duplicate key",
                  "database is locked")


@contextlib.contextmanager
def _sqlite_turn(url: str) -> Iterator[None]:
    """For a sqlite URL, a lock file beside the database held meanwhile: workers on this
    machine create or migrate a new file's schema one at a time (MLflow's migrations,
    run by two processes at once, leave each other's temporary tables: "table
    _alembic_tmp_tags already exists"). Other URLs: nothing."""
    if not url.startswith("sqlite:///"):
        yield
        return
    path = Path(url.removeprefix("sqlite:///"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def open_storage(url: str, heartbeat_s: int, grace_s: int, tries: int = 5) -> SharedStorage:
    """The shared Optuna storage; workers that start at once on a new database race its
    table creation and schema stamp ("table ... already exists", "UNIQUE constraint failed:
    alembic_version"): on sqlite they take turns, elsewhere the next try finds them made."""
    for attempt in range(tries):
        try:
            with _sqlite_turn(url):
                return SharedStorage(url, heartbeat_s, grace_s)
        except Exception as exc:  # noqa: BLE001 - any driver's error, named
            if attempt == tries - 1 or not any(m in str(exc) for m in _CREATION_RACE):
                raise ConfigError(f"cannot open the Optuna storage: {exc}",
                                  key="search.storage") from None
            time.sleep(0.5 + attempt)
    raise AssertionError("unreachable")


def open_tracker(config: ExperimentConfig) -> Tracker:
    """The tracker; workers that start at once on one sqlite file take turns at MLflow's
    schema migration (``_sqlite_turn``), and one that still meets another's half-made
    schema (a "duplicate column" error) tries again."""
    for attempt in range(5):
        try:
            with _sqlite_turn(config.tracking_uri):
                return Tracker(config.tracking_uri, config.name,
                               config.state_dir / "mlartifacts")
        except Exception:
            if attempt == 4 or not config.tracking_uri.startswith("sqlite:"):
                raise
            time.sleep(1.0 + attempt)
    raise AssertionError("unreachable")


def remote_candidate_ids(ws: Workspace, remote: str) -> dict[str, set[str]]:
    """Candidate ids with a branch on ``remote``, per target; pull branches under "/pr/"."""
    out: dict[str, set[str]] = {}
    listing = ws._git("ls-remote", "--heads", remote, f"refs/heads/{BRANCH_ROOT}/*")
    for line in listing.splitlines():
        ref = line.split("\t", 1)[-1].removeprefix("refs/heads/")
        parts = ref.split("/")
        if len(parts) == 4 and parts[:2] == [BRANCH_ROOT, ws.experiment]:
            out.setdefault(parts[2], set()).add(parts[3])
        elif len(parts) == 4 and parts[1] == "pr" and parts[2] == ws.experiment:
            out.setdefault("/pr/", set()).add(ref)
    return out


def worker_rows(config: ExperimentConfig) -> list[dict[str, Any]]:
    """The workers' records of the experiment (for ``optimizer status``), newest first."""
    storage = optuna.storages.RDBStorage(config.optuna_storage, skip_table_creation=True)
    try:
        study_id = storage.get_study_id_from_name(workers_study(config.name))
    except KeyError:
        return []
    rows = []
    grace = config.worker.grace
    for key, value in Claims(storage).prefixed(study_id, "worker:").items():
        age = time.time() - float(value.get("heartbeat", 0))
        alive = value.get("phase") != "done" and age < grace
        rows.append({"worker": key.split(":", 1)[1], **value, "heartbeat_age_s": round(age, 1),
                     "alive": alive})
    nights = Claims(storage).prefixed(study_id, "night:")
    for row in rows:
        row["night_end"] = next((v["end"] for v in nights.values()
                                 if v["name"] == row.get("night")), None)
    rows.sort(key=lambda row: -float(row.get("started", 0)))
    return rows
