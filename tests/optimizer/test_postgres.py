"""A night whose Optuna studies live in a real PostgreSQL server (the scale-out store).

Uses ``OPTIMIZER_TEST_POSTGRES_URL`` when set; otherwise starts a throwaway cluster with
the machine's PostgreSQL binaries (as the ``postgres`` user when run as root) and skips
with the reason when neither is possible.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from optimizer.config import load_experiment
from optimizer.loop import run
from optimizer.status import collect_status


def _pg_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    for root in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (root / "initdb").exists():
            return root
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    if os.environ.get("OPTIMIZER_TEST_POSTGRES_URL"):
        yield os.environ["OPTIMIZER_TEST_POSTGRES_URL"]
        return
    pytest.importorskip("psycopg2", reason="psycopg2 is needed for PostgreSQL storage")
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries here (apt-get install postgresql)")
    # pytest's temp root is private to root; the server runs as `postgres`
    parent = Path(tempfile.mkdtemp(prefix="optimizer-pg-"))
    data = parent / "data"
    as_root = os.geteuid() == 0
    if as_root:
        import pwd

        os.chown(parent, pwd.getpwnam("postgres").pw_uid, -1)

    def sh(*cmd: str) -> None:
        full = ["su", "postgres", "-c", " ".join(cmd)] if as_root else list(cmd)
        subprocess.run(full, check=True, capture_output=True, timeout=120)

    port = _free_port()
    sh(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
    sh(
        str(bindir / "pg_ctl"),
        "-D",
        str(data),
        "-w",
        "-l",
        str(data.parent / "log"),
        "-o",
        f"'-p {port} -k {data.parent} -c listen_addresses=127.0.0.1'",
        "start",
    )
    try:
        deadline = time.monotonic() + 30
        import psycopg2

        while True:
            try:
                conn = psycopg2.connect(
                    host="127.0.0.1", port=port, user="postgres", dbname="postgres"
                )
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        conn.autocommit = True
        conn.cursor().execute("CREATE DATABASE optuna_test")
        conn.close()
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/optuna_test"
    finally:
        sh(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.slow
def test_night_with_optuna_on_postgresql(toy_repo: Path, postgres_url: str) -> None:
    cfg = load_experiment(
        toy_repo / "experiments/toy.toml",
        ["budget.max_candidates=6", f'search.storage="{postgres_url}"'],
        workspace=toy_repo,
    )
    summary = run(cfg, say=lambda s: None)
    assert summary.targets[0].candidates == 6
    import optuna

    study = optuna.load_study(study_name="toy/toy", storage=postgres_url)
    assert len([t for t in study.trials if t.user_attrs.get("candidate")]) == 6
    status = collect_status(cfg)
    assert status["consistent"] and status["totals"]["candidates"] == 6
