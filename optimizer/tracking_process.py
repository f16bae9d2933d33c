"""A night's MLflow store calls in a process of their own.

MLflow's SQLAlchemy store spends 20-35 ms of Python per candidate (a run created, one batch,
one artifact upload, its end). In the engine's process that Python holds the GIL the slots'
threads need to open their sandboxes and take their next candidate: with 4 slots of an
I/O-bound target on 2 cores the record writer held the GIL about a third of the time the
engine did. :class:`TrackerProcess` is a :class:`~optimizer.tracking.Tracker` whose every
call is a request to a child process that holds the real one; the engine pickles the
arguments and waits on a socket, which releases the GIL. A night of one slot keeps the
plain Tracker (:func:`tracker_for`).

The child ends when the engine closes it or dies (the socket's end). A call the child could
not do raises here with the child's reason; a child that is gone makes every later call
raise :class:`~optimizer.errors.WorkspaceError`.
"""

from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from optimizer.errors import WorkspaceError
from optimizer.tracking import Tracker

# Tracker's methods that stay in the engine: they read no store
LOCAL_CALLS = frozenset({"local", "ui_command", "close"})


class RemoteError(RuntimeError):
    """A call the tracking process could not do (an exception that does not pickle)."""


class TrackerProcess(Tracker):
    """A :class:`Tracker` run in a child process (see the module's docstring)."""

    def __init__(self, uri: str, experiment: str, artifact_root: Path | None = None):
        self.uri = uri
        self.experiment = experiment
        remote = uri.startswith(("http://", "https://"))
        self.artifact_root = Path(artifact_root).resolve() if artifact_root and not remote else None
        self._lock = threading.Lock()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        root = str(Path(__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-m", "optimizer.tracking_process", str(theirs.fileno())],
                pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self._conn: Connection | None = Connection(ours.detach())
        try:
            self.experiment_id = str(self._call("__init__", (uri, experiment, artifact_root), {}))
        except BaseException:
            self.close()
            raise

    @property
    def client(self) -> Any:  # type: ignore[override]
        raise AttributeError("a TrackerProcess has no MLflow client in this process; "
                             "add the call to Tracker and use it by name")

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with self._lock:
            if self._conn is None:
                raise WorkspaceError("the MLflow tracking process is closed")
            try:
                self._conn.send((name, args, kwargs))
                status, value = self._conn.recv()
            except (EOFError, OSError) as exc:
                self._conn.close()
                self._conn = None
                code = self._proc.wait(timeout=10) if self._proc is not None else None
                raise WorkspaceError(f"the MLflow tracking process ended during {name}() "
                                     f"(exit {code}): {exc or 'its socket closed'}") from None
        if status == "error":
            raise value
        return value

    def finish_candidate_steps(self, run_id: str, **kwargs: Any) -> Iterator[None]:
        # one request: the steps exist so that a held writer can pause between them, and
        # this process holds no GIL while the child does them
        self._call("finish_candidate_steps", (run_id,), kwargs)
        yield

    def close(self) -> None:
        """End the child (it finishes the call it is in; nothing is queued)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def __del__(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()


def tracker_for(uri: str, experiment: str, artifact_root: Path | None, slots: int) -> Tracker:
    """A :class:`TrackerProcess` for a night of several slots; the plain :class:`Tracker`
    for one of one slot, whose writer runs while its one candidate is evaluated (the loop
    holds it otherwise, ``optimizer.night.Writer``) and which would pay the process's start
    (1-3 s: MLflow's imports and store) for nothing."""
    if slots > 1:
        return TrackerProcess(uri, experiment, artifact_root)
    return Tracker(uri, experiment, artifact_root)


def _forwarder(name: str) -> Any:
    def call(self: TrackerProcess, *args: Any, **kwargs: Any) -> Any:
        return self._call(name, args, kwargs)

    call.__name__ = name
    call.__doc__ = getattr(Tracker, name).__doc__
    return call


for _name, _member in vars(Tracker).items():
    if (callable(_member) and not _name.startswith("_") and _name not in LOCAL_CALLS
            and _name not in vars(TrackerProcess)):
        setattr(TrackerProcess, _name, _forwarder(_name))


def _answer(conn: Connection, tracker: Tracker | None, request: Any) -> Tracker | None:
    name, args, kwargs = request
    try:
        if name == "__init__":
            uri, experiment, root = args
            tracker = Tracker(uri, experiment, root)
            value: Any = tracker.experiment_id
        else:
            assert tracker is not None
            value = getattr(tracker, name)(*args, **kwargs)
            if name == "finish_candidate_steps":
                value = [None for _ in value]
    except Exception as exc:  # noqa: BLE001 - raised in the engine, which called
        try:
            pickle.loads(pickle.dumps(exc))
            error: BaseException = exc
        except Exception:  # noqa: BLE001 - an exception that does not travel: its text does
            error = RemoteError(f"{type(exc).__name__}: {exc}")
        conn.send(("error", error))
        return tracker
    conn.send(("ok", value))
    return tracker


def main(argv: list[str]) -> None:
    conn = Connection(int(argv[0]))
    tracker: Tracker | None = None
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return  # the engine closed it, or ended
        tracker = _answer(conn, tracker, request)


if __name__ == "__main__":
    main(sys.argv[1:])
