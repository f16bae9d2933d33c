"""`optimizer ui` serves the night's runs: a real MLflow server queried over HTTP."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from optimizer.cli import main


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())


@pytest.mark.slow
def test_ui_serves_the_nights_runs(
    toy_repo: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    free_port: int,
    wait_healthy,
) -> None:
    monkeypatch.chdir(toy_repo)
    assert main(["run", "experiments/toy.toml", "--set", "budget.max_candidates=3"]) == 0
    port = free_port
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "optimizer.cli",
            "ui",
            "-e",
            "experiments/toy.toml",
            "--port",
            str(port),
        ],
        cwd=toy_repo,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc, "the UI")
        with urllib.request.urlopen(base + "/", timeout=5) as resp:
            assert resp.status == 200 and b"<html" in resp.read().lower()
        exp = json.loads(
            urllib.request.urlopen(
                f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name=toy", timeout=5
            ).read()
        )["experiment"]
        runs = _post(
            f"{base}/api/2.0/mlflow/runs/search",
            {"experiment_ids": [exp["experiment_id"]], "max_results": 100},
        )["runs"]
        tags = [{t["key"]: t["value"] for t in r["data"].get("tags", [])} for r in runs]
        candidates = sorted(t["optimizer.candidate"] for t in tags if "optimizer.candidate" in t)
        assert candidates == ["c0001", "c0002", "c0003"]
        assert sum(1 for t in tags if "optimizer.night" in t) == 1
        night = next(t["mlflow.runName"] for t in tags if "optimizer.night" in t)
        _check_in_browser(f"{base}/#/experiments/{exp['experiment_id']}/runs", night)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    # nothing of the server is left running (its workers live in a session of their own)
    store = str(toy_repo / ".optimizer" / "mlflow.db")
    deadline = time.monotonic() + 20
    while True:
        left = [p for p in Path("/proc").glob("[0-9]*") if _cmdline_has(p, store)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not left, f"{len(left)} MLflow server process(es) left running"


def _check_in_browser(url: str, night: str) -> None:
    """A real browser renders the runs page and shows the night (skipped without one)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium here for the browser check (apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--window-size=1400,900",
                "--virtual-time-budget=15000",
                "--dump-dom",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    assert night in dom, "the night's parent run is not on the rendered runs page"
    assert "matching runs" in dom


def _cmdline_has(proc_dir: Path, needle: str) -> bool:
    try:
        return needle in (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
