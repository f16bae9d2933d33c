"""The function kind's harness: the target's trusted ``evaluate.py`` runs on the trusted side
and the candidate's module runs in a sandboxed process, reached across a channel.

``evaluate.py`` keeps its plain contract, ``evaluate(program_path) -> dict``: the path it is
given is a stand-in module (written to the evaluation's private scratch directory) whose
functions are :class:`RemoteFunction` objects. Importing the stand-in starts a fresh
sandboxed process that imports the candidate (before any input exists); calling one of its
functions sends the arguments by value, runs the candidate's function there and brings the
result back by value (plain data and numpy arrays; anything with behaviour is refused).
Its public constants are copied by value when the stand-in is imported. So the clock,
the inputs, the reference and every comparison stay in the trusted process, and nothing the
candidate does to its own process (patching ``time``, numpy, the reference, the caller's
frames) reaches them.

Timing: :func:`timed` gives a call's duration as measured on the trusted side around the
round trip (encoding the arguments is not counted; the channel's own cost, about 40 us
plus the copy of a large result, is). A target should time every call on fresh inputs and
check every timed output. Where the target says it times its calls only (``timed =
"calls"`` in its ``[evaluator]`` settings), each :func:`timed` call holds the device's
timing lock.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import secrets
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from optimizer.sandbox.loader import NotImportable, load_module

ENTRY = "optimizer.sandbox.serve:functions"
SHM_BYTES = 256 << 20  # large inputs and results cross through shared memory


class CandidateError(Exception):
    """The candidate's function raised; the message is its error."""


class CandidateTimeout(Exception):
    """The candidate did not answer within the evaluation's time limit."""


class InputModified(AssertionError):
    """The candidate's function wrote into an input it was given (a wrong answer)."""


class CandidateUnavailable(Exception):
    """The candidate's process could not start (an import error) or ended."""

    def __init__(self, message: str, timed_out: bool = False):
        self.timed_out = timed_out
        super().__init__(message)


class RemoteFunction:
    """A candidate function seen from the trusted side. ``last_seconds`` is the duration of
    the last call as measured here; ``map(args_list)`` makes many calls in one round trip."""

    def __init__(self, programs: Programs, session: Any, name: str):
        self._programs = programs
        self._session = session
        self.__name__ = name
        self.last_seconds = math.nan
        self.last_cpu_s: float | None = None

    def _request(self, message: dict[str, Any]) -> Any:
        reply = self._session.request(message, timeout_s=self._programs.remaining())
        self.last_seconds = reply.wall_s
        self.last_cpu_s = reply.cpu_s
        if reply.timed_out:
            raise CandidateTimeout(
                f"{self.__name__}() killed after {reply.wall_s:.1f} s: no answer within the "
                "evaluation's wall-clock limit"
            )
        if reply.died:
            raise CandidateUnavailable(f"{self.__name__}(): {reply.died}")
        if reply.error:
            raise CandidateError(f"{self.__name__}() raised {reply.error}")
        if reply.inputs_changed:
            raise InputModified(f"{self.__name__}() modified its input (large array "
                                f"{', '.join(map(str, reply.inputs_changed))} of the call)")
        return reply.value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._request({"op": "call", "fn": self.__name__, "args": list(args),
                              "kwargs": kwargs})

    def call_and_inputs(self, *args: Any, **kwargs: Any) -> tuple[Any, list[Any], dict[str, Any]]:
        """The result, and the arguments as the candidate's call left them."""
        out = self._request({"op": "call", "fn": self.__name__, "args": list(args),
                             "kwargs": kwargs, "echo_args": True})
        return out["value"], list(out["args"]), dict(out["kwargs"])

    def map(self, args_list: Sequence[Sequence[Any]]) -> list[Any]:
        """``[f(*args) for args in args_list]`` in one round trip."""
        return list(self._request({"op": "batch", "fn": self.__name__,
                                   "args_list": [list(a) for a in args_list]}))

    def __repr__(self) -> str:
        return f"<remote candidate function {self.__name__}>"


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``(fn(*args, **kwargs), seconds)``: for a candidate's function the seconds are
    measured on the trusted side around the round trip; for a local one, around the call."""
    if isinstance(fn, RemoteFunction):
        with fn._programs.timing():
            value = fn(*args, **kwargs)
        return value, fn.last_seconds
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - start


def call_and_inputs(fn: Callable[..., Any], *args: Any) -> tuple[Any, list[Any]]:
    """``fn(*args)`` and the arguments as the call left them (did it modify its inputs?).
    For a local function the arguments are copied first, so they are compared like the
    candidate's."""
    if isinstance(fn, RemoteFunction):
        value, after, _ = fn.call_and_inputs(*args)
        return value, after
    import copy

    mine = copy.deepcopy(list(args))
    return fn(*mine), mine


def batched(fn: Callable[..., Any], args_list: Sequence[Sequence[Any]]) -> list[Any]:
    """Many calls of ``fn``: one round trip for a candidate's function, a loop otherwise."""
    if isinstance(fn, RemoteFunction):
        return fn.map(args_list)
    return [fn(*args) for args in args_list]


def load_stand_in(path: str) -> Any:
    """Import a stand-in module (what ``evaluate.py``'s own loader does)."""
    try:
        return load_module(path, f"_stand_in_{next(_tokens)}", register=False)
    except NotImportable as exc:
        raise CandidateUnavailable(str(exc)) from None


_REGISTRY: dict[str, Programs] = {}
_tokens = itertools.count()


def bind(namespace: dict[str, Any], token: str) -> None:
    """Called by a stand-in module: start its candidate process and fill ``namespace``."""
    programs = _REGISTRY.get(token)
    if programs is None:
        raise CandidateUnavailable("this stand-in belongs to an evaluation that has ended")
    programs.populate(namespace)


class Programs:
    """The candidate processes of one evaluation stage (each import of the stand-in starts
    one), with the stage's deadline and what they cost."""

    def __init__(self, ctx: Any, workdir: Path, module: str, *, timed_calls: bool = False):
        self.ctx = ctx
        self.timed_calls = timed_calls  # timed() holds the device's timing lock
        self.workdir = workdir
        self.module = module
        self.deadline = time.monotonic() + ctx.timeout_s
        self.sessions: list[Any] = []
        self.import_s: list[float] = []
        self.cpu_s: list[float] = []
        self.token = f"{secrets.token_hex(8)}-{next(_tokens)}"
        self.path = ctx.scratch / f"program-{self.token}.py"

    def remaining(self) -> float:
        return max(0.05, self.deadline - time.monotonic())

    def timing(self) -> AbstractContextManager[Any]:
        """Around a call :func:`timed` times: the device's timing lock where the target
        times its calls only (``timed = "calls"``), else nothing (the caller holds it
        around the whole ``evaluate()``, or nothing is timed)."""
        return self.ctx.device_alone() if self.timed_calls else contextlib.nullcontext()

    def stand_in(self) -> str:
        """The path ``evaluate.py`` is given in place of the candidate's file."""
        self.ctx.scratch.mkdir(parents=True, exist_ok=True)
        self.path.write_text(
            f"# stand-in for {self.workdir / self.module}: its functions run in a sandboxed\n"
            "# process (evaluators/function/harness.py)\n"
            "from evaluators.function.harness import bind as _bind\n\n"
            f"_bind(globals(), {self.token!r})\n"
        )
        _REGISTRY[self.token] = self
        return str(self.path)

    def populate(self, namespace: dict[str, Any]) -> None:
        session = self.ctx.session(
            ENTRY,
            {"module": self.module, "public": True},
            workdir=self.workdir,
            timeout_s=self.remaining(),
            shm_bytes=SHM_BYTES,
        )
        self.sessions.append(session)
        if not session.ok:
            raise CandidateUnavailable(session.error, timed_out=session.timed_out)
        self.import_s.append(session.ready_s)
        reply = session.request({"op": "describe"}, timeout_s=self.remaining())
        if not reply.ok:
            if reply.timed_out:
                raise CandidateTimeout("the program did not answer after its import")
            raise CandidateUnavailable(reply.reason)
        desc = reply.value
        namespace.update(desc["constants"])
        for name in desc["functions"]:
            namespace[name] = RemoteFunction(self, session, name)
        namespace["__candidate_file__"] = str(self.workdir / self.module)

    def close(self) -> None:
        for session in self.sessions:
            used = session.cpu_s() if session.ok else None
            if used is not None:
                self.cpu_s.append(used)
            session.close()
        self.sessions.clear()
        _REGISTRY.pop(self.token, None)
        self.path.unlink(missing_ok=True)
