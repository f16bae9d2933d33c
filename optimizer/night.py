"""A night: the handles one invocation shares, its summary, and opening or resuming it.

A night is one MLflow parent run; ``.optimizer/logs/<experiment>.night.json`` names the
last one so that ``--resume`` can reopen it.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import inspect
import json
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import optuna

from optimizer import search
from optimizer.accounting import Ledger
from optimizer.archive import Archive
from optimizer.budget import Budget
from optimizer.config import ExperimentConfig
from optimizer.errors import OptimizerError
from optimizer.proposers._base import Proposer
from optimizer.records import SEED_ID, EvalResult, Proposal
from optimizer.targets import TargetSpec
from optimizer.tracking import Tracker
from optimizer.vcs import Workspace

log = logging.getLogger("optimizer.loop")


@dataclass
class TargetSummary:
    target: str
    candidates: int = 0
    duplicates: int = 0
    states: dict[str, int] = field(default_factory=dict)
    seed_value: float | None = None
    best_value: float | None = None
    best_candidate: str | None = None
    winner: dict[str, Any] | None = None
    note: str = ""
    eval_s: list[float] = field(default_factory=list)  # each evaluation's cost, in order


@dataclass
class RunSummary:
    experiment: str
    night: str
    parent_run_id: str
    targets: list[TargetSummary] = field(default_factory=list)
    stop_reason: str = ""
    engine_overhead_ms: list[float] = field(default_factory=list)
    prepare_s: float = 0.0  # a GPU night's start: sandboxes and references (loop._prepare_night)
    reproduced: list[dict[str, Any]] = field(default_factory=list)  # optimizer.reproduce

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Writer:
    """The background writer: one thread that runs the record jobs it is given in order
    (a candidate's MLflow run, its clean-up), so that the loop goes on once the trial is
    told. The queue is bounded (``maxsize``): a loop that outruns the stores waits at
    :meth:`submit`. Nothing in it is the only copy of anything: the trial's state is the
    source of truth and every job's input is on disk first (:mod:`optimizer.recording`),
    so a kill loses no record; ``--resume`` runs what was left. A failed job makes the
    next :meth:`submit` or :meth:`flush` raise.

    The thread shares the interpreter with the loop: on 2 cores an MLflow job (20-30 ms of
    Python) running beside the loop's own bookkeeping doubled it (30 ms per candidate
    instead of 19, bench/engine_overhead.py, 2026-12-03). So while the loop holds
    :meth:`held` (the serial loop does around admitting and recording a candidate) no job
    starts; jobs run while the candidate is evaluated or proposed. Nothing waits on a held
    writer: a full queue, :meth:`result`, :meth:`flush` and :meth:`close` let it run.
    A job that returns a generator is run step by step, and a held writer pauses between
    steps (a candidate's record is 6 steps of 1-10 ms). ``first=True`` jobs (a candidate's
    MLflow run, which the loop waits for) go before the others.
    """

    def __init__(self, maxsize: int = 32):
        self._maxsize = maxsize
        self._first: collections.deque[tuple[Callable[[], Any], Future[Any]]] = (
            collections.deque())
        self._rest: collections.deque[tuple[Callable[[], Any], Future[Any]]] = (
            collections.deque())
        self._cond = threading.Condition()
        self._unfinished = 0  # queued or running
        self._held = 0  # sections of the loop in which no job starts
        # ... except while this is above 0: sections in which jobs may run even when held
        # (an evaluation under way, a caller waiting on the writer)
        self._open = 0
        self._closing = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="record-writer", daemon=True)
        self._thread.start()

    def _free(self) -> bool:
        """Whether a job may start, or its next step run."""
        return self._held == 0 or self._open > 0 or self._closing

    def _may_start(self) -> bool:
        queued = bool(self._first or self._rest)
        return (queued and self._free()) or (self._closing and not queued)

    def _work(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(self._may_start)
                if not (self._first or self._rest):
                    return  # closing, nothing left
                job, done = (self._first or self._rest).popleft()
                self._cond.notify_all()  # room in the queue
            try:
                value = job()
                if inspect.isgenerator(value):  # steps: a held loop pauses it between them
                    value = self._steps(value)
                done.set_result(value)
            except BaseException as exc:  # noqa: BLE001 - raised by the loop's thread
                self._error = self._error or exc
                done.set_exception(exc)
            finally:
                with self._cond:
                    self._unfinished -= 1
                    self._cond.notify_all()

    def _steps(self, steps: Generator[Any, Any, Any]) -> Any:
        while True:
            try:
                next(steps)
            except StopIteration as stop:
                return stop.value
            with self._cond:
                self._cond.wait_for(self._free)

    def submit(self, job: Callable[[], Any], first: bool = False) -> Future[Any]:
        """Queue ``job``; its result (or error) arrives in the returned future."""
        self.check()
        done: Future[Any] = Future()
        with self._cond:
            if len(self._first) + len(self._rest) >= self._maxsize:
                with self._wait_locked():
                    self._cond.wait_for(
                        lambda: len(self._first) + len(self._rest) < self._maxsize)
            (self._first if first else self._rest).append((job, done))
            self._unfinished += 1
            self._cond.notify_all()
        return done

    @contextlib.contextmanager
    def _wait_locked(self) -> Iterator[None]:
        """:meth:`runs` for a caller that holds the lock and waits on the writer."""
        self._open += 1
        self._cond.notify_all()
        try:
            yield
        finally:
            self._open -= 1

    def result(self, done: Future[Any]) -> Any:
        """``done.result()`` of one of this writer's jobs (it runs even while held)."""
        if not done.done():
            with self.runs():
                return done.result()
        return done.result()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """No job starts meanwhile (one that runs goes on), unless the loop waits on one."""
        with self._cond:
            self._held += 1
        try:
            yield
        finally:
            with self._cond:
                self._held -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def runs(self) -> Iterator[None]:
        """Jobs may start meanwhile, held or not (an evaluation under way, or a caller
        waiting on the writer)."""
        with self._cond:
            self._open += 1
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._open -= 1

    def flush(self) -> None:
        """Wait until every job queued so far has run."""
        with self.runs(), self._cond:
            self._cond.wait_for(lambda: self._unfinished == 0)
        self.check()

    def check(self) -> None:
        if self._error is not None:
            raise OptimizerError(
                f"writing a record failed: {self._error!r}; the trials hold every result, "
                "`optimizer run ... --resume` writes what is missing"
            ) from self._error

    def close(self) -> None:
        """Run what is queued, then stop the thread (raises nothing: see :meth:`check`)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()


class LaneView(Protocol):
    """What a :class:`Coordination` sees of a target's lane (``optimizer.lane.Lane``)."""

    @property
    def target(self) -> TargetSpec: ...

    archive: Archive
    names: search.ParamNames


Outputs = Callable[[str, EvalResult, Path], None]


class Coordination(ABC):
    """What the engine asks where other processes may share its night: one process
    (``optimizer.coordination.Alone``) or workers sharing Optuna's storage
    (``optimizer.worker.Shared``); the engine never asks which one it has. The contract,
    which ``optimizer.testing.coordination`` checks on both:

    - :meth:`open_target`: the target's trials a killed process left behind are recorded
      (``optimizer.resume.recover_trial``) and the archive holds the study's candidates;
    - :meth:`claim`: a new program gets a fresh candidate id, a known one names the
      candidate it duplicates; ids never repeat; :meth:`claim_id` an id for a program-less
      (rejected) proposal;
    - :meth:`next_job`: a program to evaluate before proposing (a lost worker's
      candidate run again), or None;
    - :meth:`claim_winners`: the targets whose winners this process selects now, and
      those another does."""

    one_writer: bool = True  # only this process writes the studies (Optuna may cache them)

    @abstractmethod
    def study_storage(self, r: Run) -> str | optuna.storages.RDBStorage:
        """The Optuna storage the targets' studies live in."""

    @abstractmethod
    def open_target(self, r: Run, study: optuna.Study, target: TargetSpec, archive: Archive,
                    outputs: Outputs) -> None:
        """A target's study opens: its left-behind trials recorded, its archive loaded."""

    @abstractmethod
    def claim(self, lane: LaneView, proposal: Proposal, trial: Any, digest: str,
              files: dict[str, str], values: dict[str, Any], structure: str,
              known: str | None) -> tuple[str | None, str]:
        """(the candidate that has this content, "") or (None, the id of a new one);
        ``known`` is the candidate this process knows with the content, if any."""

    def claim_id(self, lane: LaneView, proposal: Proposal, trial: Any) -> str:
        """A candidate id for a rejected proposal (no content to claim)."""
        return local_id(lane.archive, proposal)

    def next_job(self, r: Run, lane: LaneView) -> Proposal | None:
        """A program to evaluate before proposing another, or None."""
        return None

    def searched(self, lanes: Sequence[Any]) -> None:
        """This process's search of ``lanes``' targets is over."""
        return None

    def claim_winners(self, r: Run, lanes: list[Any], at_most: int,
                      rerun: Callable[[Any, Proposal], Any]) -> tuple[list[Any], list[Any]]:
        """(the lanes whose winners this process selects now, at most ``at_most`` (one
        process takes every lane when several may be selected at once: they take turns at
        the slots); the lanes whose winners are another's)."""
        return (lanes if at_most > 1 else lanes[:1]), []


def local_id(archive: Archive, proposal: Proposal) -> str:
    """The next candidate id of one process's archive (the seed's for the seed)."""
    return SEED_ID if proposal.proposer == "seed" else archive.next_id()


@dataclass
class Run:
    """Handles shared by every target of one invocation (not a god object: no logic)."""

    config: ExperimentConfig
    ws: Workspace
    tracker: Tracker
    proposer: Proposer
    budget: Budget
    ledger: Ledger  # LLM tokens and dollars, per call, candidate, target and night
    summary: RunSummary
    say: Callable[[str], None]
    writer: Writer  # MLflow runs and clean-up, off the loop's path
    # one process (coordination.Alone), or `optimizer worker`'s claims (worker.Shared)
    coordination: Coordination


def night_metrics(summary: RunSummary, ledger: Ledger) -> dict[str, float]:
    usage = ledger.summary()
    m: dict[str, float] = {
        **{f"llm_{k}": float(v) for k, v in usage.items() if isinstance(v, int | float)},
        "candidates": float(sum(t.candidates for t in summary.targets)),
        "duplicates": float(sum(t.duplicates for t in summary.targets)),
        "winners": float(sum(1 for t in summary.targets if t.winner)),
    }
    if summary.engine_overhead_ms:
        s = sorted(summary.engine_overhead_ms)
        m["engine_overhead_ms_median"] = s[len(s) // 2]
    return m


def open_night(config: ExperimentConfig, tracker: Tracker, resume: bool) -> tuple[str, str]:
    """A new night (parent run), or with ``resume`` the last one of this experiment."""
    pointer = config.state_dir / "logs" / f"{config.name}.night.json"
    if resume and pointer.is_file():
        data = json.loads(pointer.read_text())
        run_id = tracker.find_night(data["night"])
        if run_id:
            tracker.resume_night(run_id)
            return data["night"], run_id
    if resume:
        raise OptimizerError(
            f"--resume: no earlier night of experiment '{config.name}' under {config.state_dir}; "
            "run without --resume to start one"
        )
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    night, n = stamp, 1
    while tracker.find_night(night) is not None:  # two nights started in the same second
        n += 1
        night = f"{stamp}-{n}"
    params = {
        "experiment_file": str(config.file),
        "seed": config.seed,
        "proposer": config.proposer.kind,
        "budget_minutes": config.budget.minutes,
        "targets": ",".join(t.spec.name for t in config.targets),
    }
    run_id = tracker.start_night(night, params, {"optimizer.experiment": config.name})
    pointer.write_text(json.dumps({"night": night, "parent_run_id": run_id}))
    return night, run_id


def trace_llm_calls(config: ExperimentConfig) -> None:
    """MLflow's OpenAI tracing, where installed: every chat call becomes a trace of the
    experiment (the prompt and response files of each candidate are logged regardless)."""
    try:
        import mlflow
        import mlflow.openai

        mlflow.set_tracking_uri(config.tracking_uri)
        mlflow.set_experiment(config.name)
        mlflow.openai.autolog(log_traces=True, silent=True)
    except Exception as exc:  # noqa: BLE001 - tracing is a convenience, never a reason to stop
        log.info("MLflow OpenAI tracing not enabled: %s", exc)
