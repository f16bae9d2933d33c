"""Run untrusted candidate code in a child process and get data back.

``Sandbox.call(entry, payload, workdir=..., io_dir=...)`` runs the trusted entry function
``"module:function"`` (see :mod:`optimizer.sandbox.child`) in a child process whose current
directory is the candidate's folder. The entry imports the candidate and returns a
JSON-able dict; nothing but that JSON (read through a capped pipe and validated) and data
files in ``io_dir`` (which the trusted side reads itself) comes back, never a pickle.

Two ways to start the child:

- warm (default): when ``workdir`` and ``io_dir`` lie under ``settings.rw_root``, a zygote
  that has imported ``settings.preload`` forks the child (see :mod:`optimizer.sandbox.zygote`);
- cold: a fresh interpreter per call (``python -m optimizer.sandbox.child``), used otherwise.

Both run under bubblewrap when it works here (``Sandbox.isolation == "bwrap"``): user, PID,
network, IPC, UTS and mount namespaces, a non-root uid, a read-only view of what the
evaluation needs, tmpfs over the homes and the state dir, writable only the candidate's
paths and a private tmp. Without bwrap (``"rlimits"``) the child runs in its own session
with resource limits only, and one warning says so. docs/sandbox.md has the threat model.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimizer.errors import IsolationError, SandboxError, ZygoteDied
from optimizer.sandbox.bwrap import (
    ENV_ALLOW,
    bwrap_argv,
    default_ro,
    probe,
    scrubbed_env,
)
from optimizer.sandbox.pipes import CappedReader, describe_exit, make_pipe, parse_response
from optimizer.sandbox.zygote_host import Zygote

__all__ = ["ENV_ALLOW", "CallResult", "Sandbox", "SandboxSettings"]

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
log = logging.getLogger("optimizer.sandbox")
_warned = False  # the reduced-isolation warning is given once per process


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
    # -- isolation (bubblewrap) --------------------------------------------------------
    workspace: Path | None = None  # the repository root: read-only inside
    state_dir: Path | None = None  # hidden inside (tmpfs over it)
    rw_root: Path | None = None  # writable inside; holds every candidate worktree/io dir
    preload: tuple[str, ...] = ()  # modules the warm zygote imports, e.g. ("torch", "triton")
    allow_gpu: bool = False  # bind /dev/nvidia* (and /sys read-only) when true
    extra_ro: tuple[Path, ...] = ()  # more read-only paths (datasets, model weights)
    python_path: tuple[Path, ...] = ()  # more import roots (a kind from a user's package)
    isolation: str = "auto"  # "auto" (bwrap when it works), "bwrap" (required), "rlimits"
    max_procs: int = 256  # RLIMIT_NPROC inside the user namespace (tasks, threads included)
    tmp_mb: int = 1024  # size of the private tmpfs /tmp and /dev/shm (bwrap only)
    max_response_bytes: int = 16_000_000  # the JSON response; larger is rejected
    warm: bool = True  # use the zygote when workdir and io_dir lie under rw_root
    start_timeout_s: float = 300.0  # the zygote's preload (torch+triton: ~5-10 s cold)
    landlock: bool = True  # confine writes to workdir, io_dir and tmp (Linux >= 5.13)


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


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


class Sandbox:
    """Runs trusted entry functions next to untrusted candidate code in a child process."""

    def __init__(self, settings: SandboxSettings | None = None):
        global _warned
        self.settings = s = settings or SandboxSettings()
        if s.isolation not in ("auto", "bwrap", "rlimits"):
            raise SandboxError(
                f"sandbox.isolation = {s.isolation!r}: expected 'auto', 'bwrap' or 'rlimits'"
            )
        why = probe() if s.isolation != "rlimits" else "isolation = 'rlimits' was chosen"
        if why and (s.require_isolation or s.isolation == "bwrap"):
            raise IsolationError(
                f"isolation required but unavailable: {why}. Install bubblewrap "
                "(apt-get install bubblewrap) and allow user namespaces "
                "(sysctl kernel.unprivileged_userns_clone=1), or set "
                "sandbox.require_isolation = false"
            )
        self.isolation = "rlimits" if why else "bwrap"
        if why and s.isolation == "auto" and not _warned:
            _warned = True
            log.warning(
                "sandbox isolation is reduced to rlimits and a process group (%s): "
                "candidates can read files and the network like the engine can",
                why,
            )
        self._rw_root = Path(os.path.realpath(s.rw_root)) if s.rw_root else None
        self._zygote: Zygote | None = None
        self._lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            if self._zygote is not None:
                self._zygote.close()
                self._zygote = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- pieces ------------------------------------------------------------------------
    def _env(self, tmp: str) -> dict[str, str]:
        fixed = {
            "PYTHONPATH": os.pathsep.join(
                [str(PROJECT_ROOT), *(str(p) for p in self.settings.python_path)]
            ),
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "MPLBACKEND": "Agg",
        }
        if tmp:
            fixed.update({"HOME": tmp, "TMPDIR": tmp})
        return scrubbed_env(self.settings.extra_env, fixed)

    def _limits(self, timeout: float) -> dict[str, int]:
        s = self.settings
        return {
            "as": s.memory_mb * 1024 * 1024,
            "cpu": s.cpu_s or int(timeout * 2) + 5,
            "fsize": s.file_mb * 1024 * 1024,
            "nofile": s.max_files,
            # RLIMIT_NPROC is ignored for root; inside the user namespace we are not root
            "nproc": s.max_procs if self.isolation == "bwrap" else 0,
            "core": 0,
        }

    def _prefix(self, rw: list[Path], chdir: Path, env: Mapping[str, str]) -> list[str]:
        if self.isolation != "bwrap":
            return []
        s = self.settings
        return bwrap_argv(
            ro=default_ro(s.workspace, (*s.extra_ro, *s.python_path), PROJECT_ROOT),
            rw=rw,
            hidden=[s.state_dir] if s.state_dir else [],
            env=env,
            chdir=chdir,
            tmp_mb=s.tmp_mb,
            allow_gpu=s.allow_gpu,
        )

    def _zygote_for_call(self) -> Zygote:
        if self._zygote is None:
            assert self._rw_root is not None
            env = self._env("/tmp" if self.isolation == "bwrap" else "")
            self._zygote = Zygote(
                self._prefix([self._rw_root], PROJECT_ROOT, env),
                env,
                self.settings.preload,
                pidns=self.isolation == "bwrap",
                cwd=PROJECT_ROOT,
                start_timeout_s=self.settings.start_timeout_s,
            )
        return self._zygote

    def warm_up(self) -> None:
        """Start the zygote now (it imports the preload modules) instead of on first call."""
        if self._rw_root is None or not self.settings.warm:
            return
        with self._lock:
            z = self._zygote_for_call()
            if not z.alive:
                try:
                    hello = z.start()
                except ZygoteDied as exc:
                    raise SandboxError(str(exc)) from None
                if hello.get("errors"):
                    log.warning("warm sandbox could not preload: %s", "; ".join(hello["errors"]))

    # -- the call ----------------------------------------------------------------------
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
        workdir = Path(os.path.realpath(workdir))
        own_io = None
        if io_dir is None:
            base = self._rw_root if self._rw_root and self.settings.warm else None
            own_io = Path(tempfile.mkdtemp(prefix=".sbx-io-", dir=base))
            io = own_io
        else:
            io = Path(os.path.realpath(io_dir))
            io.mkdir(parents=True, exist_ok=True)
        try:
            warm = (
                self.settings.warm
                and self._rw_root is not None
                and _under(workdir, self._rw_root)
                and _under(io, self._rw_root)
            )
            request: dict[str, Any] = {"entry": entry, "payload": dict(payload), "io_dir": str(io)}
            request["limits"] = self._limits(timeout)
            request["landlock"] = self.settings.landlock
            request["writable"] = [str(workdir), str(io)]
            if self.settings.allow_gpu:
                # the CUDA driver opens its device nodes read-write; Landlock counts that
                # as a write, so without these the driver fails with error 304
                request["writable"] += sorted(glob.glob("/dev/nvidia*"))
            if warm:
                return self._call_warm(request, workdir, timeout)
            return self._call_cold(request, workdir, io, timeout)
        finally:
            if own_io is not None:
                shutil.rmtree(own_io, ignore_errors=True)

    def _pipes(self) -> tuple[list[CappedReader], list[int], list[int]]:
        """(readers for stdout/stderr/response, their write ends) - readers start later."""
        pairs = [make_pipe() for _ in range(3)]
        return [], [r for r, _ in pairs], [w for _, w in pairs]

    def _readers(self, rfds: list[int]) -> list[CappedReader]:
        cap = self.settings.max_output_bytes
        caps = (cap, cap, self.settings.max_response_bytes)
        return [CappedReader(fd, c) for fd, c in zip(rfds, caps, strict=True)]

    def _finish(
        self,
        readers: list[CappedReader],
        returncode: int | None,
        timed_out: bool,
        wall: float,
        timeout: float,
        died: str = "",
    ) -> CallResult:
        out, err, resp = (r.finish() for r in readers)
        stdout, stderr = readers[0].text(out), readers[1].text(err)
        data, error = parse_response(resp, readers[2].total, self.settings.max_response_bytes)
        if timed_out:
            data, error = None, f"timed out after {timeout:.1f} s (killed with all descendants)"
        elif died:
            data, error = None, died
        elif data is None and not error:
            error = f"no result delivered ({describe_exit(returncode)})"
            if stderr.strip():
                error += ": " + stderr.strip()[-1500:]
        return CallResult(data, returncode, timed_out, wall, stdout, stderr, error)

    def _call_warm(self, request: dict[str, Any], workdir: Path, timeout: float) -> CallResult:
        request.update(workdir=str(workdir), timeout_s=timeout, env=self._env("").copy())
        start = time.perf_counter()
        with self._lock:
            zygote = self._zygote_for_call()
            _, rfds, wfds = self._pipes()
            readers = self._readers(rfds)
            died, reply = "", {}
            try:
                if not zygote.alive:
                    hello = zygote.start()
                    if hello.get("errors"):
                        log.warning("warm sandbox could not preload: %s", hello["errors"])
                reply = zygote.call(request, wfds, backstop_s=timeout + 10.0)
            except ZygoteDied as exc:
                died = f"sandbox process died during the call ({exc}); it will be restarted"
            finally:
                for fd in wfds:
                    os.close(fd)
            if reply.get("error"):
                died = f"sandbox refused the call: {reply['error']}"
            return self._finish(
                readers,
                reply.get("returncode"),
                bool(reply.get("timed_out")),
                time.perf_counter() - start,
                timeout,
                died,
            )

    def _call_cold(
        self, request: dict[str, Any], workdir: Path, io: Path, timeout: float
    ) -> CallResult:
        with tempfile.TemporaryDirectory(prefix="sbx-") as tmp:
            bwrap = self.isolation == "bwrap"
            env = self._env("/tmp" if bwrap else tmp)
            prefix = self._prefix([workdir, io], workdir, env)
            _, rfds, wfds = self._pipes()
            out_w, err_w, resp_w = wfds
            cmd = [*prefix, sys.executable, "-m", "optimizer.sandbox.child", str(resp_w)]
            start = time.perf_counter()
            try:
                proc = subprocess.Popen(
                    cmd,
                    cwd=workdir,
                    env=env,  # bwrap itself gets no secrets: /proc/1/environ is readable
                    stdin=subprocess.PIPE,
                    stdout=out_w,
                    stderr=err_w,
                    pass_fds=(resp_w,),
                    start_new_session=True,
                )
            finally:
                for fd in wfds:
                    os.close(fd)
            readers = self._readers(rfds)
            threading.Thread(target=_feed, args=(proc, request), daemon=True).start()
            timed_out = False
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                try:
                    os.killpg(proc.pid, 9)  # bwrap: its init dies, and the namespace with it
                except ProcessLookupError:
                    pass
                proc.wait()
            wall = time.perf_counter() - start
            return self._finish(readers, proc.returncode, timed_out, wall, timeout)


def _feed(proc: subprocess.Popen[bytes], request: Mapping[str, Any]) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps(request).encode())
        proc.stdin.close()
    except OSError:
        pass  # the child died before reading: its exit status says why
