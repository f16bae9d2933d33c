"""Engine side of the warm zygote (see :mod:`optimizer.sandbox.zygote`).

One :class:`Zygote` is a sandboxed process that imported the preload modules once and forks
a child per call. If it dies (a candidate killed it, or it hung past the backstop), the
call that saw it die fails with a reason, the process is killed, and the next call starts a
fresh one.
"""

from __future__ import annotations

import concurrent.futures
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from optimizer.errors import ZygoteDied
from optimizer.sandbox.pipes import CappedReader, make_pipe
from optimizer.sandbox.wire import recv_msg, send_msg

# bwrap's --die-with-parent (PR_SET_PDEATHSIG) kills the sandbox when the *thread* that
# forked it ends, not the engine: a warm process started by a short-lived thread (a night's
# warm-up of its slots) was killed as that thread returned, and the first call on it failed
# ("connection reset", exit -9). Every warm process is forked by this one thread, which
# lives as long as the engine.
_SPAWNER = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                 thread_name_prefix="zygote-spawner")


class Zygote:
    def __init__(
        self,
        prefix: Sequence[str],
        env: Mapping[str, str],
        preload: Sequence[str],
        *,
        pidns: bool,
        cwd: Path,
        start_timeout_s: float,
    ):
        self.prefix = list(prefix)
        self.env = dict(env)
        self.preload = tuple(preload)
        self.pidns = pidns
        self.cwd = cwd
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.stderr: CappedReader | None = None
        self.hello: dict[str, Any] = {}
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> dict[str, Any]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        err_r, err_w = make_pipe()
        cmd = [
            *self.prefix,
            sys.executable,
            "-m",
            "optimizer.sandbox.zygote",
            str(theirs.fileno()),
            "1" if self.pidns else "0",
            ",".join(self.preload),
        ]
        try:
            self.proc = _SPAWNER.submit(
                subprocess.Popen,
                cmd,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err_w,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            ).result()
        finally:
            theirs.close()
            os.close(err_w)
        self.sock = ours
        self.stderr = CappedReader(err_r, 64 * 1024)
        self.starts += 1
        try:
            self.hello, _ = self._recv(self.start_timeout_s)
        except ZygoteDied as exc:
            self.kill()
            raise ZygoteDied(f"warm sandbox process did not start: {exc}") from None
        return self.hello

    def _recv(self, timeout_s: float) -> tuple[Any, list[int]]:
        assert self.sock is not None
        ready, _, _ = select.select([self.sock], [], [], timeout_s)
        if not ready:
            raise ZygoteDied(f"no answer within {timeout_s:.1f} s")
        self.sock.settimeout(timeout_s)
        try:
            return recv_msg(self.sock)
        except (EOFError, OSError, ValueError) as exc:
            raise ZygoteDied(f"{type(exc).__name__}: {exc}; {self._tail()}") from None

    def _tail(self) -> str:
        if self.proc is not None and self.proc.poll() is not None:
            return f"it exited with {self.proc.returncode}"
        return "it is unresponsive"

    def begin(self, request: Mapping[str, Any], fds: list[int]) -> None:
        """Send one request with its pipe write ends (and a session's channel)."""
        if not self.alive:
            self.kill()
            self.start()
        assert self.sock is not None
        try:
            send_msg(self.sock, dict(request), fds)
        except OSError as exc:
            self.kill()
            raise ZygoteDied(f"cannot send to the warm sandbox process: {exc}") from None

    def end(self, backstop_s: float) -> dict[str, Any]:
        """The zygote's reply once the call's child has ended (and been swept)."""
        try:
            reply, _ = self._recv(backstop_s)
        except ZygoteDied:
            self.kill()
            raise
        return dict(reply)

    def call(self, request: Mapping[str, Any], fds: list[int], backstop_s: float) -> dict:
        """One whole call: :meth:`begin`, then :meth:`end`."""
        self.begin(request, fds)
        return self.end(backstop_s)

    def kill(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc = None
        if self.stderr is not None:
            self.stderr.finish(0.2)
            self.stderr = None

    def close(self, grace_s: float = 2.0) -> None:
        """Ask politely (EOF on the socket), then kill."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            deadline = time.monotonic() + grace_s
            while self.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
        self.kill()
