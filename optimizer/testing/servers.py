"""Throwaway shared stores on this machine, for tests and benchmarks of workers: a
PostgreSQL cluster in a temporary folder and an MLflow tracking server, each started in
a process group of its own and stopped with everything it started.

    with postgres_cluster() as url, mlflow_server(folder) as uri:
        ...  # optimizer worker --storage url --tracking-uri uri

Where PostgreSQL's server programs or psycopg2 are missing, :func:`postgres_cluster`
raises :class:`Unavailable` saying what to install.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


class Unavailable(RuntimeError):
    """A store cannot be started here (the message says what is missing)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(base: str, proc: subprocess.Popen[bytes], what: str,
                 timeout_s: float = 90) -> None:
    """Poll ``base``/health until it answers 200; fail if ``proc`` exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited (status {proc.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up within {timeout_s:.0f} s")
        time.sleep(0.5)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``proc``'s whole process group (``optimizer ui``'s way of stopping its server)."""
    from optimizer.cli import stop_process_group

    stop_process_group(proc)


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (``initdb``, ``pg_ctl``), if installed."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    for root in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (root / "initdb").exists():
            return root
    return None


@contextlib.contextmanager
def postgres_cluster(database: str = "optuna") -> Iterator[str]:
    """A PostgreSQL cluster in a temporary folder, on a free port of 127.0.0.1, with one
    empty ``database``; yields its SQLAlchemy URL and removes the cluster afterwards. As
    root the server runs as the ``postgres`` user (PostgreSQL refuses root)."""
    try:
        import psycopg2
    except ImportError:
        raise Unavailable("psycopg2 is needed for PostgreSQL storage: pip install "
                          "'inference-optimizer[postgres]'") from None
    bindir = postgres_bin()
    if bindir is None:
        raise Unavailable("no PostgreSQL server programs here (apt-get install postgresql)")
    as_root = os.geteuid() == 0
    parent = Path(tempfile.mkdtemp(prefix="optimizer-pg-"))
    if as_root:
        import pwd

        try:
            os.chown(parent, pwd.getpwnam("postgres").pw_uid, -1)
        except KeyError:
            shutil.rmtree(parent, ignore_errors=True)
            raise Unavailable("running as root and there is no `postgres` user to run the "
                              "server as (the postgresql package makes one)") from None
    data = parent / "data"

    def sh(*cmd: str) -> None:
        full = ["su", "postgres", "-c", " ".join(cmd)] if as_root else list(cmd)
        subprocess.run(full, check=True, capture_output=True, timeout=120)

    port = free_port()
    sh(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
    sh(str(bindir / "pg_ctl"), "-D", str(data), "-w", "-l", str(parent / "log"), "-o",
       f"'-p {port} -k {parent} -c listen_addresses=127.0.0.1'", "start")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = psycopg2.connect(host="127.0.0.1", port=port, user="postgres",
                                        dbname="postgres")
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        conn.autocommit = True
        conn.cursor().execute(f'CREATE DATABASE "{database}"')
        conn.close()
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/{database}"
    finally:
        sh(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(parent, ignore_errors=True)


@contextlib.contextmanager
def mlflow_server(folder: Path, workers: int = 2) -> Iterator[str]:
    """An MLflow tracking server on a free port of 127.0.0.1, its sqlite store and its
    artifacts in ``folder``; yields its URI and stops its whole process group afterwards
    (the server's own workers included)."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
         "--artifacts-destination", (folder / "artifacts").as_uri(),
         "--workers", str(workers)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(uri, server, "the MLflow tracking server")
        yield uri
    finally:
        stop_group(server)
