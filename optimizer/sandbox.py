"""Run untrusted candidate code in a child process and get data back.

``Sandbox.call(entry, payload, workdir=..., io_dir=...)`` runs the trusted entry function
``"module:function"`` (see :mod:`evaluators._child`) in a fresh child process whose
current directory is the candidate's folder. The entry imports the candidate and returns
a JSON-able dict; nothing but JSON (and data files the trusted side reads itself) comes
back, never a pickle.

This first version gives: a process group killed as a whole on timeout, rlimits
(address space, CPU, file size, open files), an environment without secrets (allow-list),
captured and capped stdout/stderr.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# Variables a candidate may see; everything else (API keys, tokens) is dropped.
ENV_ALLOW = (
    "PATH",
    "LANG",
    "LC_ALL",
    "TZ",
    "CUDA_VISIBLE_DEVICES",
    "TRITON_INTERPRET",
    "TRITON_CACHE_DIR",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
)


@dataclass(frozen=True)
class SandboxSettings:
    timeout_s: float = 120.0
    memory_mb: int = 16384  # RLIMIT_AS; torch+triton need several GB of address space
    cpu_s: int = 0  # RLIMIT_CPU; 0 = derived from timeout
    file_mb: int = 1024  # RLIMIT_FSIZE
    max_files: int = 1024  # RLIMIT_NOFILE
    max_output_bytes: int = 1_000_000  # per stream
    require_isolation: bool = False
    extra_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CallResult:
    """Outcome of one sandboxed call. ``response`` is None when none was delivered."""

    response: dict[str, Any] | None
    returncode: int | None
    timed_out: bool
    wall_s: float
    stdout: str = ""
    stderr: str = ""
    error: str = ""  # why there is no response


def _limits(settings: SandboxSettings, timeout_s: float) -> None:
    cpu = settings.cpu_s or int(timeout_s * 2) + 5
    mem = settings.memory_mb * 1024 * 1024
    for res, val in (
        (resource.RLIMIT_AS, mem),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_FSIZE, settings.file_mb * 1024 * 1024),
        (resource.RLIMIT_NOFILE, settings.max_files),
        (resource.RLIMIT_CORE, 0),
    ):
        try:
            resource.setrlimit(res, (val, val))
        except (ValueError, OSError):
            pass


class Sandbox:
    """Runs trusted entry functions next to untrusted candidate code in a child process."""

    def __init__(self, settings: SandboxSettings | None = None):
        self.settings = settings or SandboxSettings()

    def close(self) -> None:
        pass

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _env(self, home: Path) -> dict[str, str]:
        env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
        env.update(self.settings.extra_env)
        env.update(
            {
                "HOME": str(home),
                "TMPDIR": str(home),
                "PYTHONPATH": str(PROJECT_ROOT),
                "PYTHONHASHSEED": "0",
                "PYTHONDONTWRITEBYTECODE": "1",
                "MPLBACKEND": "Agg",
            }
        )
        return env

    def call(
        self,
        entry: str,
        payload: Mapping[str, Any],
        *,
        workdir: Path,
        io_dir: Path | None = None,
        timeout_s: float | None = None,
    ) -> CallResult:
        timeout = float(timeout_s or self.settings.timeout_s)
        with tempfile.TemporaryDirectory(prefix="sbx-") as tmp:
            tmpdir = Path(tmp)
            io = io_dir or tmpdir / "io"
            io.mkdir(parents=True, exist_ok=True)
            request = tmpdir / "request.json"
            request.write_text(json.dumps({"payload": dict(payload), "io_dir": str(io)}))
            response = tmpdir / "response.json"
            out_path, err_path = tmpdir / "stdout", tmpdir / "stderr"
            home = tmpdir / "home"
            home.mkdir()
            cmd = [sys.executable, "-m", "evaluators._child", entry, str(request), str(response)]
            start = time.perf_counter()
            timed_out = False
            with open(out_path, "wb") as out, open(err_path, "wb") as err:
                proc = subprocess.Popen(
                    cmd,
                    cwd=workdir,
                    env=self._env(home),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    preexec_fn=lambda: _limits(self.settings, timeout),
                )
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    timed_out = True
                finally:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait()
            wall = time.perf_counter() - start
            stdout = _read_capped(out_path, self.settings.max_output_bytes)
            stderr = _read_capped(err_path, self.settings.max_output_bytes)
            data, error = None, ""
            if timed_out:
                error = f"timed out after {timeout:.1f} s"
            elif not response.exists():
                error = f"no result delivered (exit code {proc.returncode})"
                if stderr.strip():
                    error += ": " + stderr.strip()[-1500:]
            else:
                try:
                    data = json.loads(response.read_text())
                    if not isinstance(data, dict):
                        data, error = None, "result is not a JSON object"
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    error = f"unreadable result: {exc}"
            return CallResult(data, proc.returncode, timed_out, wall, stdout, stderr, error)


def _read_capped(path: Path, cap: int) -> str:
    with open(path, "rb") as fh:
        data = fh.read(cap + 1)
    text = data[:cap].decode("utf-8", "replace")
    if len(data) > cap:
        text += f"\n[... output truncated at {cap} bytes]"
    return text
