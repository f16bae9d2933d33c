"""Bounded readers for the pipes of a sandboxed call, and response validation.

Every stream from the child (stdout, stderr, the JSON response) is a pipe drained by a
thread that keeps the first ``cap`` bytes and discards the rest, so gigabytes of output
cost CPU time but never memory or disk, and a chatty candidate never blocks on a full pipe.
"""

from __future__ import annotations

import json
import os
import select
import signal
import threading
from typing import Any

_CHUNK = 1 << 16


class CappedReader:
    """Drains a pipe's read end in a thread; keeps the first ``cap`` bytes."""

    def __init__(self, fd: int, cap: int):
        self.fd = fd
        self.cap = cap
        self.total = 0
        self._buf = bytearray()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([self.fd], [], [], 0.05)
                if not ready:
                    continue
                chunk = os.read(self.fd, _CHUNK)
                if not chunk:
                    return
                self.total += len(chunk)
                room = self.cap - len(self._buf)
                if room > 0:
                    self._buf += chunk[:room]
        except OSError:
            return

    def finish(self, grace_s: float = 1.0) -> bytes:
        """Wait for EOF (at most ``grace_s``: an escaped process may hold the pipe), close."""
        self._thread.join(grace_s)
        self._stop.set()
        self._thread.join()
        os.close(self.fd)
        return bytes(self._buf)

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def text(self, data: bytes) -> str:
        out = data.decode("utf-8", "replace")
        if self.truncated:
            dropped = self.total - self.cap
            out += f"\n[... {dropped} more bytes dropped: output capped at {self.cap}]"
        return out


def parse_response(data: bytes, total: int, cap: int) -> tuple[dict[str, Any] | None, str]:
    """The response dict, or None and the reason it is unusable."""
    if total > cap:
        return None, f"result rejected: {total} bytes exceed the {cap}-byte response cap"
    if not data:
        return None, ""
    try:
        value = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return None, f"result unreadable (truncated or not JSON): {exc}"
    if not isinstance(value, dict):
        return None, f"result is not a JSON object but {type(value).__name__}"
    return value, ""


def describe_exit(returncode: int | None) -> str:
    """'exit code 3' / 'killed by SIGKILL (memory or CPU limit, or killed)'."""
    if returncode is None:
        return "no exit status"
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    hint = {
        "SIGKILL": " (killed: memory exhausted, or killed from inside)",
        "SIGXCPU": " (CPU-time limit)",
        "SIGXFSZ": " (file-size limit)",
        "SIGSEGV": " (segmentation fault, e.g. stack overflow)",
    }.get(name, "")
    return f"killed by {name}{hint}"


def make_pipe() -> tuple[int, int]:
    """A pipe whose read end stays in the engine (close-on-exec) and write end is passed."""
    r, w = os.pipe()
    os.set_inheritable(r, False)
    return r, w
