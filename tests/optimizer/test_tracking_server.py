"""A night recorded on a real MLflow tracking server (http://), not the local sqlite file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from optimizer.config import load_experiment
from optimizer.loop import run
from optimizer.status import collect_status


@pytest.mark.slow
def test_night_on_a_tracking_server(
    toy_repo: Path, tmp_path: Path, free_port: int, wait_healthy
) -> None:
    port = free_port
    store = tmp_path / "server"
    store.mkdir()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{store / 'mlflow.db'}",
            "--artifacts-destination",
            (store / "artifacts").as_uri(),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(uri, server, "the tracking server")
        cfg = load_experiment(
            toy_repo / "experiments/toy.toml",
            ["budget.max_candidates=4", f'tracking.uri="{uri}"'],
            workspace=toy_repo,
        )
        summary = run(cfg, say=lambda s: None)
        assert summary.targets[0].candidates == 4
        assert not (cfg.state_dir / "mlflow.db").exists()  # nothing went to the local file
        status = collect_status(cfg)
        assert status["consistent"] and status["totals"]["mlflow_runs"] == 4
        from mlflow.tracking import MlflowClient

        client = MlflowClient(uri)
        exp = client.get_experiment_by_name("toy")
        (r,) = client.search_runs([exp.experiment_id], "tags.`optimizer.candidate` = 'c0001'")
        names = {a.path for a in client.list_artifacts(r.info.run_id)}
        assert {"candidate.diff", "eval.json"} <= names
        assert list((store / "artifacts").rglob("eval.json"))  # stored by the server
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        try:
            os.killpg(server.pid, signal.SIGKILL)  # workers the server left behind
        except ProcessLookupError:
            pass
