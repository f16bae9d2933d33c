"""A night: the handles one invocation shares, its summary, and opening or resuming it.

A night is one MLflow parent run; ``.optimizer/logs/<experiment>.night.json`` names the
last one so that ``--resume`` can reopen it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from optimizer.accounting import Ledger
from optimizer.budget import Budget
from optimizer.config import ExperimentConfig
from optimizer.errors import OptimizerError
from optimizer.proposers._base import Proposer
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

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Writer:
    """The background writer: one thread that runs the record jobs it is given in order
    (a candidate's MLflow run, its clean-up), so that the loop goes on once the trial is
    told. The queue is bounded (``maxsize``): a loop that outruns the stores waits at
    :meth:`submit`. Nothing in it is the only copy of anything: the trial's state is the
    source of truth and every job's input is on disk first (:mod:`optimizer.recording`),
    so a kill loses no record; ``--resume`` runs what was left. A failed job makes the
    next :meth:`submit` or :meth:`flush` raise."""

    def __init__(self, maxsize: int = 32):
        self._jobs: queue.Queue[tuple[Callable[[], Any], Future[Any]] | None] = queue.Queue(
            maxsize)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="record-writer", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while (item := self._jobs.get()) is not None:
            job, done = item
            try:
                done.set_result(job())
            except BaseException as exc:  # noqa: BLE001 - raised by the loop's thread
                self._error = self._error or exc
                done.set_exception(exc)
            finally:
                self._jobs.task_done()
        self._jobs.task_done()

    def submit(self, job: Callable[[], Any]) -> Future[Any]:
        """Queue ``job``; its result (or error) arrives in the returned future."""
        self.check()
        done: Future[Any] = Future()
        self._jobs.put((job, done))
        return done

    def flush(self) -> None:
        """Wait until every job queued so far has run."""
        self._jobs.join()
        self.check()

    def check(self) -> None:
        if self._error is not None:
            raise OptimizerError(
                f"writing a record failed: {self._error!r}; the trials hold every result, "
                "`optimizer run ... --resume` writes what is missing"
            ) from self._error

    def close(self) -> None:
        """Run what is queued, then stop the thread (raises nothing: see :meth:`check`)."""
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()


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
    shared: Any = None  # `optimizer worker`: claims and refreshes (optimizer.worker.Shared)


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
