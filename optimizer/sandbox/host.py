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
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Unpack

from optimizer.errors import IsolationError, SandboxError, ZygoteDied
from optimizer.sandbox.bwrap import (
    ENV_ALLOW,
    bwrap_argv,
    default_ro,
    probe,
    scrubbed_env,
)
from optimizer.sandbox.calls import (
    CallOptions,
    CallResult,
    SessionOptions,
    unknown_options,
)
from optimizer.sandbox.child import call_home
from optimizer.sandbox.pipes import CappedReader, describe_exit, make_pipe, parse_response
from optimizer.sandbox.session import Session
from optimizer.sandbox.zygote_host import Zygote

__all__ = ["ENV_ALLOW", "CallResult", "Launch", "Sandbox", "SandboxSettings", "Session"]

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
    hidden: tuple[Path, ...] = ()  # more trusted folders hidden inside (a shared cache)
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
        # Warm processes: one serves one call or session at a time; a session that stays
        # open while another call runs (a baseline beside a candidate) gets its own, with
        # its own namespaces, so that clean-up after one never touches the other.
        self._zygote: Zygote | None = None  # the first; more in _spare when needed at once
        self._spare: list[Zygote] = []
        self._busy: set[int] = set()
        self._lock = threading.Lock()
        # a warm process starts once: a call that needs one another thread is starting
        # (warm_up) waits for it instead of starting a spare
        self._starting = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            for z in [self._zygote, *self._spare]:
                if z is not None:
                    z.close()
            self._zygote, self._spare, self._busy = None, [], set()

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
            fixed.update(call_home(tmp))
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
            hidden=[*([s.state_dir] if s.state_dir else []), *s.hidden],
            env=env,
            chdir=chdir,
            tmp_mb=s.tmp_mb,
            allow_gpu=s.allow_gpu,
        )

    def _new_zygote(self) -> Zygote:
        assert self._rw_root is not None
        env = self._env("/tmp" if self.isolation == "bwrap" else "")
        return Zygote(
            self._prefix([self._rw_root], PROJECT_ROOT, env),
            env,
            self.settings.preload,
            pidns=self.isolation == "bwrap",
            cwd=PROJECT_ROOT,
            start_timeout_s=self.settings.start_timeout_s,
        )

    def _acquire(self) -> Zygote:
        """An idle warm process (a new one when all are busy), marked busy."""
        with self._lock:
            if self._zygote is None:
                self._zygote = self._new_zygote()
            for z in [self._zygote, *self._spare]:
                if id(z) not in self._busy:
                    self._busy.add(id(z))
                    return z
            z = self._new_zygote()
            self._spare.append(z)
            self._busy.add(id(z))
            return z

    def _release(self, zygote: Zygote) -> None:
        with self._lock:
            self._busy.discard(id(zygote))

    def _ensure_started(self, zygote: Zygote) -> None:
        with self._starting:
            if not zygote.alive:
                hello = zygote.start()
                if hello.get("errors"):
                    log.warning("warm sandbox could not preload: %s",
                                "; ".join(hello["errors"]))

    def warm_up(self) -> None:
        """Start the zygote now (it imports the preload modules) instead of on first call;
        a call meanwhile waits for it. Not beside :meth:`close`."""
        if self._rw_root is None or not self.settings.warm:
            return
        with self._lock:
            if self._zygote is None:
                self._zygote = self._new_zygote()
            z = self._zygote
        try:
            self._ensure_started(z)
        except ZygoteDied as exc:
            raise SandboxError(str(exc)) from None

    # -- the call ----------------------------------------------------------------------
    def call(self, entry: str, payload: Mapping[str, Any], *, workdir: Path,
             **options: Unpack[CallOptions]) -> CallResult:
        """Run ``entry(payload, io_dir)`` in a sandboxed child in ``workdir``; its JSON.
        ``options``: :class:`~optimizer.sandbox.calls.CallOptions`."""
        unknown_options(options, CallOptions)
        return self._launch(entry, payload, workdir, options, None).finish()

    def open_session(self, entry: str, payload: Mapping[str, Any], *, workdir: Path,
                     **options: Unpack[SessionOptions]) -> Session:
        """A sandboxed child that serves requests until closed (see
        :mod:`optimizer.sandbox.serve`): ``entry(payload, io_dir)`` builds its handler.
        ``options``: :class:`~optimizer.sandbox.calls.SessionOptions` (``timeout_s`` bounds
        the whole session; on ``spin_s`` see :mod:`optimizer.sandbox.session`)."""
        unknown_options(options, SessionOptions)
        spin_s = options.get("spin_s", 0.0)
        if not 0.0 <= spin_s < float("inf"):
            raise ValueError(f"spin_s must be a finite number of seconds >= 0, not {spin_s}")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            launch = self._launch(entry, payload, workdir, options, theirs)
        finally:
            theirs.close()
        timeout = float(options.get("timeout_s") or self.settings.timeout_s)
        return Session(ours, launch, shm_bytes=options.get("shm_bytes", 0),
                       ready_timeout_s=options.get("ready_timeout_s") or timeout, spin_s=spin_s)

    def _launch(
        self,
        entry: str,
        payload: Mapping[str, Any],
        workdir: Path,
        options: CallOptions,
        channel: socket.socket | None,
    ) -> Launch:
        io_dir, writable = options.get("io_dir"), options.get("writable")
        timeout = float(options.get("timeout_s") or self.settings.timeout_s)
        workdir = Path(os.path.realpath(workdir))
        own_io = None
        if io_dir is None:
            base = self._rw_root if self._rw_root and self.settings.warm else None
            own_io = Path(tempfile.mkdtemp(prefix=".sbx-io-", dir=base))
            io = own_io
        else:
            io = Path(os.path.realpath(io_dir))
            io.mkdir(parents=True, exist_ok=True)
        warm = (
            self.settings.warm
            and self._rw_root is not None
            and _under(workdir, self._rw_root)
            and _under(io, self._rw_root)
        )
        request: dict[str, Any] = {"entry": entry, "payload": dict(payload), "io_dir": str(io)}
        request["limits"] = self._limits(timeout)
        request["landlock"] = self.settings.landlock
        request["writable"] = (
            [str(workdir), str(io)] if writable is None
            else [os.path.realpath(p) for p in writable]
        )
        if self.settings.allow_gpu:
            # the CUDA driver opens its device nodes read-write; Landlock counts that
            # as a write, so without these the driver fails with error 304
            request["writable"] += sorted(glob.glob("/dev/nvidia*"))
        try:
            if warm:
                launch = self._launch_warm(request, workdir, timeout, channel)
            else:
                launch = self._launch_cold(request, workdir, io, timeout, channel)
        except BaseException:
            if own_io is not None:
                shutil.rmtree(own_io, ignore_errors=True)
            raise
        launch.own_io = own_io
        return launch

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

    def _launch_warm(
        self, request: dict[str, Any], workdir: Path, timeout: float,
        channel: socket.socket | None,
    ) -> Launch:
        request.update(workdir=str(workdir), timeout_s=timeout, env=self._env("").copy())
        start = time.perf_counter()
        zygote = self._acquire()
        _, rfds, wfds = self._pipes()
        readers = self._readers(rfds)
        launch = Launch(self, readers, timeout, start, zygote=zygote)
        fds = wfds + ([channel.fileno()] if channel is not None else [])
        try:
            self._ensure_started(zygote)
            zygote.begin(request, fds)
        except ZygoteDied as exc:
            launch.died = f"sandbox process died during the call ({exc}); it will be restarted"
        finally:
            for fd in wfds:
                os.close(fd)
        return launch

    def _launch_cold(
        self, request: dict[str, Any], workdir: Path, io: Path, timeout: float,
        channel: socket.socket | None,
    ) -> Launch:
        tmp = tempfile.mkdtemp(prefix="sbx-")
        bwrap = self.isolation == "bwrap"
        env = self._env("/tmp" if bwrap else tmp)
        prefix = self._prefix([workdir, io], workdir, env)
        _, rfds, wfds = self._pipes()
        out_w, err_w, resp_w = wfds
        cmd = [*prefix, sys.executable, "-m", "optimizer.sandbox.child", str(resp_w)]
        passed = [resp_w]
        if channel is not None:
            cmd.append(str(channel.fileno()))
            passed.append(channel.fileno())
        start = time.perf_counter()
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=workdir,
                env=env,  # bwrap itself gets no secrets: /proc/1/environ is readable
                stdin=subprocess.PIPE,
                stdout=out_w,
                stderr=err_w,
                pass_fds=tuple(passed),
                start_new_session=True,
            )
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            for fd in wfds:
                os.close(fd)
        readers = self._readers(rfds)
        threading.Thread(target=_feed, args=(proc, request), daemon=True).start()
        return Launch(self, readers, timeout, start, proc=proc, tmp=tmp)


@dataclass(eq=False)
class Launch:
    """A started sandboxed child: how to wait for its end and what it said."""

    sandbox: Sandbox
    readers: list[CappedReader]
    timeout: float
    start: float
    zygote: Zygote | None = None
    proc: subprocess.Popen[bytes] | None = None
    tmp: str = ""
    died: str = ""
    own_io: Path | None = None
    result: CallResult | None = None

    @property
    def root_pid(self) -> int | None:
        """The host pid of the process the child descends from (bwrap, or the zygote)."""
        if self.proc is not None:
            return self.proc.pid
        if self.zygote is not None and self.zygote.proc is not None:
            return self.zygote.proc.pid
        return None

    def kill_child(self, host_pid: int | None) -> None:
        """Kill the child now (a session whose request timed out)."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        elif host_pid:
            try:
                os.kill(host_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def finish(self) -> CallResult:
        """Wait for the child's end (at most the call's timeout) and collect what it said."""
        if self.result is not None:
            return self.result
        try:
            self.result = self._finish()
        finally:
            if self.own_io is not None:
                shutil.rmtree(self.own_io, ignore_errors=True)
            if self.tmp:
                shutil.rmtree(self.tmp, ignore_errors=True)
        return self.result

    def _finish(self) -> CallResult:
        sb = self.sandbox
        if self.zygote is not None:
            reply: dict[str, Any] = {}
            try:
                if not self.died:
                    reply = self.zygote.end(backstop_s=self.timeout + 10.0)
            except ZygoteDied as exc:
                self.died = f"sandbox process died during the call ({exc}); it will be restarted"
            finally:
                sb._release(self.zygote)
            if reply.get("error"):
                self.died = f"sandbox refused the call: {reply['error']}"
            return sb._finish(self.readers, reply.get("returncode"),
                              bool(reply.get("timed_out")), time.perf_counter() - self.start,
                              self.timeout, self.died)
        assert self.proc is not None
        timed_out = False
        remaining = max(0.0, self.timeout - (time.perf_counter() - self.start))
        try:
            self.proc.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # bwrap: its init dies, the namespace too
            except ProcessLookupError:
                pass
            self.proc.wait()
        wall = time.perf_counter() - self.start
        return sb._finish(self.readers, self.proc.returncode, timed_out, wall, self.timeout)


def _feed(proc: subprocess.Popen[bytes], request: Mapping[str, Any]) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps(request).encode())
        proc.stdin.close()
    except OSError:
        pass  # the child died before reading: its exit status says why
