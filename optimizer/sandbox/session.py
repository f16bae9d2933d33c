"""The trusted side of a session: a sandboxed child that answers requests until closed.

The harness (an evaluator, in the engine's process) holds the inputs, the reference and
the clock; the candidate's process only computes. Every request is timed here, around the
round trip on the channel: the clock starts after the request is encoded and stops when the
whole answer has arrived, so encoding is not counted and nothing the candidate does to the
clocks of its own process moves the measurement. The child's CPU time is read from the
kernel's accounting of its process (``/proc/<pid>/stat``: user and system time of all its
threads), so work moved to extra threads shows too.

    with sandbox.open_session("optimizer.sandbox.serve:functions", payload, workdir=...) as s:
        reply = s.request({"op": "call", "fn": "f", "args": [x]}, timeout_s=5)
        reply.value, reply.wall_s

A session opened with ``spin_s`` trades CPU for latency: after sending a request the trusted
side polls for the answer without blocking for up to ``spin_s`` (then blocks for the rest of
the request's limit), and the child does the same for the next request after each answer
(it learns ``spin_s`` in the setup message, with the shared region). A blocking wait costs a
sleep and a wake-up, a context switch on each side of every round trip; on a machine with
idle cores a spin of a few milliseconds removes most of that from each round trip, at the
price of up to ``spin_s`` of a core after each message.

Failures are values, not exceptions, where the candidate caused them: a request that takes
longer than its limit kills the child (``reply.timed_out``); a child that dies or closes
the channel gives ``reply.died``; an exception in the candidate comes back as
``reply.error``. :class:`SessionError` is raised only for misuse (a closed session).
"""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass
from typing import Any

from optimizer.errors import SandboxError
from optimizer.sandbox import channel
from optimizer.sandbox.calls import CallResult, Started
from optimizer.sandbox.procfs import cpu_seconds, host_pid
from optimizer.sandbox.serve import SHM_SETUP


class SessionError(SandboxError):
    """A session used after it ended."""


@dataclass(frozen=True)
class Reply:
    """One request's outcome. ``value`` is the answer when ``ok``; ``wall_s`` the round
    trip measured on the trusted side; ``cpu_s`` the child's CPU time during it (when
    asked for)."""

    value: Any = None
    error: str = ""
    where: str = ""
    wall_s: float = 0.0
    cpu_s: float | None = None
    timed_out: bool = False
    died: str = ""
    inputs_changed: tuple[int, ...] = ()  # large inputs the call wrote into (see request)

    @property
    def ok(self) -> bool:
        return not (self.error or self.timed_out or self.died)

    @property
    def reason(self) -> str:
        if self.timed_out:
            return f"no answer within {self.wall_s:.2f} s: the process was killed"
        return self.died or self.error


class Session:
    """A running session (see the module docstring). Use as a context manager."""

    def __init__(self, sock: socket.socket, launch: Started, *, shm_bytes: int = 0,
                 ready_timeout_s: float = 120.0, spin_s: float = 0.0):
        self.sock = sock
        self.launch = launch
        self.spin_s = spin_s  # how long each side polls without blocking (module docstring)
        self._poller = select.poll()
        self._poller.register(sock, select.POLLIN)
        self.shm = channel.SharedRegion.create(shm_bytes) if shm_bytes else None
        self.pid: int | None = None
        self.ready_s = 0.0
        self.error = ""  # why the session could not start (import failed, child died)
        self.timed_out = False  # it did not become ready in time
        self.result: CallResult | None = None
        self._closed = False
        self._start = start = time.perf_counter()
        hello = self._wait(ready_timeout_s)
        if hello is not None and "hello" in hello:
            self.pid = host_pid(int(hello["hello"]), launch.root_pid)
            try:
                socket.send_fds(sock, [SHM_SETUP.pack(shm_bytes, spin_s)],
                                [self.shm.fd] if self.shm else [])
            except OSError as exc:
                self.error = f"the sandboxed process went away at start: {exc}"
            if not self.error:
                ready = self._wait(ready_timeout_s - (time.perf_counter() - start))
                if ready is None or not ready.get("ready"):
                    self.error = self._start_error(ready)
        else:
            self.error = self._start_error(hello)
        self.ready_s = time.perf_counter() - start

    # -- starting ------------------------------------------------------------------------
    def _wait(self, timeout_s: float) -> dict[str, Any] | None:
        ready, _, _ = select.select([self.sock], [], [], max(0.0, timeout_s))
        if not ready:
            self.timed_out = True
            return None
        try:
            return channel.recv(self.sock)
        except (channel.ChannelClosed, channel.BoundaryError, OSError):
            return None

    def _start_error(self, message: dict[str, Any] | None) -> str:
        if message is not None and message.get("error"):
            tb = str(message.get("traceback", ""))
            return f"the program failed at import: {message['error']}\n{tb[-2000:]}".strip()
        self.launch.kill_child(self.pid)
        res = self.close()
        if res.timed_out:  # the launch's own limit killed it before the ready wait ended
            self.timed_out = True
        if self.timed_out:
            return f"not ready within {time.perf_counter() - self._start:.1f} s (killed)"
        return res.error or "the sandboxed process ended before it was ready"

    @property
    def ok(self) -> bool:
        return not self.error and not self._closed

    # -- requests ------------------------------------------------------------------------
    def request(self, message: dict[str, Any], *, timeout_s: float,
                cpu: bool = False) -> Reply:
        """Send one request and wait for its answer, timing the round trip from here.
        Large arrays of the request travel through the shared region, where the child
        reads them in place; afterwards (outside the timing) they are compared with what
        was sent, and ``Reply.inputs_changed`` lists those the call wrote into."""
        if self._closed or self.error:
            raise SessionError(f"session is not running: {self.error or 'closed'}")
        parts = channel.pack(message, self.shm)  # encoding is not timed
        cpu0 = cpu_seconds(self.pid) if cpu else None
        t0 = time.perf_counter()
        try:
            channel.transmit(self.sock, parts)
            if not self._answered(timeout_s):
                wall = time.perf_counter() - t0
                self.launch.kill_child(self.pid)
                self._end()
                return Reply(wall_s=wall, timed_out=True)
            header, blob = channel.recv_raw(self.sock)
        except (channel.ChannelClosed, OSError) as exc:
            wall = time.perf_counter() - t0
            res = self._end()
            if res.timed_out:  # the session's own limit killed it first: a timeout still
                return Reply(wall_s=wall, timed_out=True)
            return Reply(wall_s=wall, died=f"the sandboxed process ended during the request "
                                          f"({res.error or exc})")
        wall = time.perf_counter() - t0
        cpu1 = cpu_seconds(self.pid) if cpu else None
        try:
            answer = channel.unpack(header, blob, self.shm, copy_shm=True)
        except channel.BoundaryError as exc:
            return Reply(wall_s=wall, error=f"unreadable answer: {exc}", where="result")
        used = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
        changed = tuple(self.shm.changed_slots()) if self.shm is not None else ()
        if "error" in answer:
            tb = str(answer.get("traceback", ""))
            err = str(answer["error"]) + (f"\n{tb[-2000:]}" if tb else "")
            return Reply(error=err, where=str(answer.get("where", "")), wall_s=wall, cpu_s=used,
                         inputs_changed=changed)
        return Reply(value=answer.get("ok"), wall_s=wall, cpu_s=used, inputs_changed=changed)

    def _answered(self, timeout_s: float) -> bool:
        """Whether the answer (or EOF) is there within ``timeout_s``: a spin of up to
        ``spin_s`` first, then a blocking wait for what is left of the limit."""
        if self.spin_s > 0:
            start = time.perf_counter()
            if channel.spin(self._poller, min(self.spin_s, timeout_s)):
                return True
            timeout_s -= time.perf_counter() - start
        ready, _, _ = select.select([self.sock], [], [], max(0.0, timeout_s))
        return bool(ready)

    def cpu_s(self) -> float | None:
        """The child's CPU time so far."""
        return cpu_seconds(self.pid)

    # -- ending ----------------------------------------------------------------------------
    def _end(self) -> CallResult:
        self._closed = True
        try:
            self.sock.close()
        except OSError:
            pass
        if self.result is None:
            self.result = self.launch.finish()
        if self.shm is not None:
            self.shm.close()
            self.shm = None
        return self.result

    def close(self) -> CallResult:
        """End the session (EOF on the channel); what the child printed and how it ended."""
        if self._closed and self.result is not None:
            return self.result
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        return self._end()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
