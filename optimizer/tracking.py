"""MLflow side of the engine: one parent run per night, one child run per candidate.

Everything goes through an :class:`mlflow.tracking.MlflowClient` with explicit run ids, so
no fluent global state (active run, global tracking URI) is read or changed and several
trackers can live in one process.

What a candidate's child run holds (names are stable; the MLflow UI and the consistency
checks read them)::

    params     knob.<NAME>, proposer, parent, candidate
    metrics    every EvalResult metric, objective.<i>, eval_cost_s, extra metrics
    tags       mlflow.parentRunId, optimizer.target, .state, .reason (<= 5000 chars),
               .branch, .commit, .candidate, .trial, .content_hash
    artifacts  candidate.diff, source/<file>, prompt.md, response.md, eval.json, eval.log
               (prompt, response and log only when non-empty)
    status     FINISHED for VALID candidates, FAILED otherwise (the state is in the tag)

Default local stores: ``sqlite:///<state_dir>/mlflow.db`` with artifacts under
``<state_dir>/mlartifacts`` (see :meth:`Tracker.local`); any tracking-server URI
(``http://...``) works as well, with the server choosing the artifact store.
"""

from __future__ import annotations

import json
import logging
import posixpath
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import sqlalchemy
from mlflow.entities import Metric, Param, RunStatus, RunTag, ViewType
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from sqlalchemy.exc import SADeprecationWarning

from optimizer.errors import WorkspaceError
from optimizer.records import Candidate, CandidateState, EvalResult

REASON_LIMIT = 5000
_PARAM_LIMIT = 6000  # MLflow rejects longer param values
_TAG_LIMIT = 8000  # MLflow rejects longer tag values
_BATCH_PARAMS = 100  # MLflow's limits per log_batch request
_BATCH_ENTRIES = 1000
NIGHT_TAG = "optimizer.night"
PARENT_TAG = "mlflow.parentRunId"


def _quiet_mlflow() -> None:
    # MLflow and alembic log every schema migration and run URL at INFO; the engine's own
    # log says what matters.
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _relax_sqlite(client: MlflowClient) -> None:
    """WAL journal and synchronous=NORMAL for a local sqlite store.

    MLflow commits 5-7 transactions per candidate; in the default rollback journal each
    one waits for several fsyncs, which cost 9 ms per commit on a busy disk here (115 ms
    per candidate, against 30 ms on an idle one). With WAL and synchronous=NORMAL a commit
    survives a crash of the process (only a power loss can drop the last transactions, and
    the database stays consistent).
    """
    engine = getattr(getattr(client._tracking_client, "store", None), "engine", None)
    if engine is None or engine.dialect.name != "sqlite":
        return

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")  # persistent in the file; cheap when set
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    sqlalchemy.event.listen(engine, "connect", on_connect)
    engine.dispose()  # pooled connections were opened before the listener existed


def _quote(value: str) -> str:
    """A string literal for an MLflow search filter."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise WorkspaceError(f"cannot search MLflow for {value!r}: it holds both quote kinds")


def _metric_key(name: str) -> str:
    # MLflow keys allow letters, digits, '_', '-', '.', ' ', ':' and '/'.
    return "".join(c if c.isalnum() or c in "_-. :/" else "_" for c in name)[:250]


class Tracker:
    """Writes nights and candidates of one experiment to an MLflow tracking store."""

    def __init__(self, uri: str, experiment: str, artifact_root: Path | None = None):
        _quiet_mlflow()
        self.uri = uri
        self.experiment = experiment
        # a tracking server keeps the artifacts itself (proxied); a local folder would leave
        # them on whichever machine ran the night
        remote = uri.startswith(("http://", "https://"))
        self.artifact_root = Path(artifact_root).resolve() if artifact_root and not remote else None
        try:
            with warnings.catch_warnings():
                # MLflow's own SQLAlchemy mappings trigger this once per process.
                warnings.simplefilter("ignore", SADeprecationWarning)
                self.client = MlflowClient(tracking_uri=uri)
                if uri.startswith("sqlite:"):
                    _relax_sqlite(self.client)
                self.experiment_id = self._experiment_id()
        except MlflowException as exc:
            raise WorkspaceError(
                f"cannot open MLflow experiment {experiment!r} at {uri}: {exc.message}; check "
                "the tracking URI (sqlite:///path/mlflow.db or http://host:port)"
            ) from exc

    @classmethod
    def local(cls, state_dir: Path, experiment: str) -> Tracker:
        """The default stores: ``<state_dir>/mlflow.db`` and ``<state_dir>/mlartifacts``."""
        state_dir = Path(state_dir).resolve()
        state_dir.mkdir(parents=True, exist_ok=True)
        return cls(f"sqlite:///{state_dir / 'mlflow.db'}", experiment, state_dir / "mlartifacts")

    def _experiment_id(self) -> str:
        found = self.client.get_experiment_by_name(self.experiment)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                self.client.restore_experiment(found.experiment_id)
            return str(found.experiment_id)
        location = self.artifact_root.as_uri() if self.artifact_root else None
        # MLflow 3's UI opens an experiment in its GenAI view unless told it holds runs;
        # the nested night/candidate runs are what people come to see
        tags = {"mlflow.experimentKind": "custom_model_development"}
        try:
            return str(
                self.client.create_experiment(
                    self.experiment, artifact_location=location, tags=tags
                )
            )
        except MlflowException:
            # Another worker created it between our lookup and create.
            again = self.client.get_experiment_by_name(self.experiment)
            if again is None:
                raise
            return str(again.experiment_id)

    # -- nights --------------------------------------------------------------------------

    def start_night(self, name: str, params: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        """Create the night's parent run; returns its run id."""
        run = self.client.create_run(
            self.experiment_id,
            tags={**{k: str(v)[:_TAG_LIMIT] for k, v in tags.items()}, NIGHT_TAG: name},
            run_name=name,
        )
        run_id = str(run.info.run_id)
        self._log_batch(run_id, params=params)
        return run_id

    def find_night(self, name: str) -> str | None:
        """The newest parent run of the night ``name`` (for --resume), or None."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`{NIGHT_TAG}` = {_quote(name)}",
            run_view_type=ViewType.ACTIVE_ONLY,
            max_results=1,
            order_by=["attributes.start_time DESC"],
        )
        return str(runs[0].info.run_id) if runs else None

    def resume_night(self, run_id: str) -> None:
        self.client.update_run(run_id, status="RUNNING")

    def delete_run(self, run_id: str) -> None:
        self.client.delete_run(run_id)

    def end_night(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status=status)

    def log_night_metrics(self, run_id: str, metrics: Mapping[str, float]) -> None:
        self._log_batch(run_id, metrics=metrics)

    def log_artifact_file(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(run_id, str(path), artifact_path)

    def log_curve(self, run_id: str, key: str, points: list[tuple[int, float]]) -> None:
        """A metric over steps (e.g. a draft's distillation loss), one batch."""
        now = int(time.time() * 1000)
        ms = [Metric(_metric_key(key), float(v), now, int(s)) for s, v in points]
        for i in range(0, len(ms), _BATCH_ENTRIES):
            self.client.log_batch(run_id, metrics=ms[i : i + _BATCH_ENTRIES])

    def register_model(self, run_id: str, artifact_path: str, name: str) -> str:
        """Register ``runs:/<run_id>/<artifact_path>`` as a new version of model ``name``."""
        try:
            self.client.get_registered_model(name)
        except MlflowException:
            self.client.create_registered_model(
                name, description="Winning drafts of the optimisation loop (weights and code)"
            )
        source = f"{self.client.get_run(run_id).info.artifact_uri}/{artifact_path}"
        version = self.client.create_model_version(name, source, run_id=run_id)
        return str(version.version)

    def _log_batch(
        self,
        run_id: str,
        *,
        metrics: Mapping[str, float] | None = None,
        params: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        """log_batch within MLflow's per-request limits (100 params, 1000 entries)."""
        now = int(time.time() * 1000)
        ms = [Metric(_metric_key(k), float(v), now, 0) for k, v in (metrics or {}).items()]
        ps = [Param(k, str(v)[:_PARAM_LIMIT]) for k, v in (params or {}).items()]
        ts = [RunTag(k, str(v)[:_TAG_LIMIT]) for k, v in (tags or {}).items()]
        while ms or ps or ts:  # one request in every realistic case
            take_p, ps = ps[:_BATCH_PARAMS], ps[_BATCH_PARAMS:]
            take_t, ts = ts[: _BATCH_ENTRIES - len(take_p)], ts[_BATCH_ENTRIES - len(take_p):]
            room = _BATCH_ENTRIES - len(take_p) - len(take_t)
            take_m, ms = ms[:room], ms[room:]
            self.client.log_batch(run_id, metrics=take_m, params=take_p, tags=take_t)

    # -- candidates ----------------------------------------------------------------------

    def log_candidate(
        self,
        *,
        parent_run_id: str,
        candidate: Candidate,
        result: EvalResult,
        branch: str,
        commit: str,
        trial_number: int,
        diff: str,
        prompt: str = "",
        response: str = "",
        eval_log: str = "",
        extra_metrics: Mapping[str, float] | None = None,
    ) -> str:
        """Record one evaluated candidate as a finished child run; returns its run id
        (:meth:`start_candidate`, then every step of :meth:`finish_candidate_steps`)."""
        run_id = self.start_candidate(parent_run_id=parent_run_id, candidate=candidate,
                                      branch=branch, trial_number=trial_number)
        for _ in self.finish_candidate_steps(
                run_id, candidate=candidate, result=result, commit=commit, diff=diff,
                prompt=prompt, response=response, eval_log=eval_log,
                extra_metrics=extra_metrics):
            pass
        return run_id

    def start_candidate(
        self, *, parent_run_id: str, candidate: Candidate, branch: str, trial_number: int
    ) -> str:
        """The candidate's child run, RUNNING, with the tags that name it (its state tag
        says RUNNING); returns its run id. The loop creates it while the candidate is
        evaluated, so that the trial can name it before it is told."""
        tags = {
            PARENT_TAG: parent_run_id,
            "optimizer.target": candidate.target,
            "optimizer.state": "RUNNING",
            "optimizer.branch": branch,
            "optimizer.candidate": candidate.id,
            "optimizer.trial": str(trial_number),
            "optimizer.content_hash": candidate.content_hash,
        }
        if candidate.summary:
            tags["mlflow.note.content"] = candidate.summary[:_TAG_LIMIT]
        run = self.client.create_run(
            self.experiment_id, tags=tags, run_name=f"{candidate.target}/{candidate.id}"
        )
        return str(run.info.run_id)

    def finish_candidate_steps(
        self,
        run_id: str,
        *,
        candidate: Candidate,
        result: EvalResult,
        commit: str,
        diff: str,
        prompt: str = "",
        response: str = "",
        eval_log: str = "",
        extra_metrics: Mapping[str, float] | None = None,
    ) -> Iterator[None]:
        """Everything of a candidate's run but its start, then its end, one store call at a
        time (3-10 ms each; the background writer may pause between them,
        ``optimizer.night.Writer``): one batch (state tags, params, metrics), one artifact
        upload, the status. Doing it again (``--resume`` finishing what a killed night
        left) gives the same run."""
        tags = {
            "optimizer.state": result.state.value,
            "optimizer.reason": result.reason[:REASON_LIMIT],
            "optimizer.stage": result.stage,
            "optimizer.commit": commit,
        }
        params = {f"knob.{k}": v for k, v in candidate.knobs.items()}
        params |= {
            "proposer": candidate.proposer,
            "parent": candidate.parent_id or "none",
            "candidate": candidate.id,
        }
        values = {**result.metrics, "eval_cost_s": result.cost_s}
        values |= {f"objective.{i}": v for i, v in enumerate(result.objectives)}
        values |= dict(extra_metrics or {})
        self._log_batch(run_id, metrics=values, params=params, tags=tags)
        yield

        texts = {
            "candidate.diff": diff,
            "eval.json": json.dumps(result.to_json(), indent=2, allow_nan=True),
            "prompt.md": prompt,
            "response.md": response,
            "eval.log": eval_log,
        }
        # an editable file elsewhere in the repository ("../../serving/x.py") is logged as
        # source/serving/x.py: never outside the folder uploaded
        texts |= {"source/" + "/".join(p for p in PurePosixPath(posixpath.normpath(n)).parts
                                       if p != ".."): src for n, src in candidate.files.items()}
        # One folder, one upload: log_text per file costs a temporary folder and an
        # artifact-repository call each (see bench/engine_parts.py for the figures).
        with tempfile.TemporaryDirectory(prefix="optimizer-run-") as tmp:
            for name, text in texts.items():
                if not text and name != "candidate.diff":
                    continue
                dest = Path(tmp, name)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(text)
            self.client.log_artifacts(run_id, tmp)
        yield

        status = RunStatus.FINISHED if result.state is CandidateState.VALID else RunStatus.FAILED
        self.client.set_terminated(run_id, status=RunStatus.to_string(status))

    def drop_candidate_runs(self, target: str, cid: str) -> int:
        """Delete every child run of candidate ``cid`` of ``target`` (over all nights);
        returns how many. ``--resume`` calls it before it logs an interrupted candidate, so
        that a run the killed night had begun (or finished) for it is not a second one."""
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=f"tags.`optimizer.candidate` = {_quote(cid)} "
            f"and tags.`optimizer.target` = {_quote(target)}",
            run_view_type=ViewType.ACTIVE_ONLY,
            max_results=1000,
        )
        for run in runs:
            self.client.delete_run(run.info.run_id)
        return len(runs)

    def candidate_runs(self, parent_run_id: str) -> list[dict[str, Any]]:
        """Every child run of a night, oldest first, as plain dicts."""
        out: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`{PARENT_TAG}` = {_quote(parent_run_id)}",
                run_view_type=ViewType.ACTIVE_ONLY,
                max_results=1000,
                order_by=["attributes.start_time ASC"],
                page_token=token,
            )
            for run in page:
                tags = run.data.tags
                out.append(
                    {
                        "run_id": run.info.run_id,
                        "candidate": tags.get("optimizer.candidate", ""),
                        "target": tags.get("optimizer.target", ""),
                        "state": tags.get("optimizer.state", ""),
                        "branch": tags.get("optimizer.branch", ""),
                        "commit": tags.get("optimizer.commit", ""),
                        "trial": tags.get("optimizer.trial", ""),
                        "status": run.info.status,
                    }
                )
            token = page.token
            if not token:
                return out

    def ui_command(self, host: str = "127.0.0.1", port: int = 5000) -> list[str]:
        """The command line that serves the UI over these stores.

        For a tracking server (``http(s)://``) the server already is the UI; this returns
        an empty list then.
        """
        if self.uri.startswith(("http://", "https://")):
            return []
        cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", self.uri]
        if self.artifact_root is not None:
            cmd += ["--default-artifact-root", self.artifact_root.as_uri()]
        return cmd + ["--host", host, "--port", str(port)]
