"""Fixtures shared by the engine tests: a throwaway git workspace with a tiny target."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from evaluators.function.toy import (
    NOTING_EVALUATE,
    SLOW_EVALUATE,
    add_toy_target,
    make_toy_repo,
    write_experiment,
)
from optimizer.testing import servers


@pytest.fixture
def slow_evaluate() -> str:
    return SLOW_EVALUATE


@pytest.fixture
def noting_evaluate() -> str:
    return NOTING_EVALUATE


@pytest.fixture
def toy_target_adder():
    """The ``add_toy_target`` helper, as a fixture."""
    return add_toy_target


@pytest.fixture
def toy_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with one committed toy target and an experiment file."""
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return make_toy_repo(tmp_path / "repo")


@pytest.fixture
def experiment_writer():
    """The ``write_experiment`` helper, as a fixture (test modules cannot import conftest)."""
    return write_experiment


def _free_port() -> int:
    return servers.free_port()


def _wait_healthy(base: str, proc: subprocess.Popen, what: str, timeout_s: float = 90) -> None:
    try:
        servers.wait_healthy(base, proc, what, timeout_s)
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return _free_port()


@pytest.fixture
def wait_healthy():
    """``wait_healthy(base_url, process, what)``: poll ``/health`` until it answers 200."""
    return _wait_healthy


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL cluster's URL (or $OPTIMIZER_TEST_POSTGRES_URL's)."""
    if os.environ.get("OPTIMIZER_TEST_POSTGRES_URL"):
        yield os.environ["OPTIMIZER_TEST_POSTGRES_URL"]
        return
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(servers.postgres_cluster("optuna_test"))
        except servers.Unavailable as exc:
            pytest.skip(str(exc))
        yield url
