"""Inside the sandbox: a session's server loop, and the generic handler of candidate functions.

A session is a sandboxed child that stays alive while the trusted side sends it requests
over a channel (:mod:`optimizer.sandbox.channel`). The order of events, all of it before
any candidate code runs except where it says so:

1. the child sends ``{"hello": pid}`` (its pid, for the trusted side's CPU accounting);
2. it receives the session's setup: the shared-memory region, if the session has one, and
   the spin (``spin_s``, see 4);
3. it builds the handler: ``entry(payload, io_dir)`` imports the candidate (candidate code
   runs from here on) and returns a :class:`Handler`; it answers ``{"ready": true}`` or
   ``{"error": ...}``;
4. for every request it answers ``{"ok": value}`` or ``{"error": ..., "where": ...}``;
   the trusted side times each request from its own side of the channel. With a spin,
   each side polls without blocking for up to ``spin_s`` for the next message (the child
   after each answer, the trusted side after each request) before it blocks: a message
   that comes within the spin is taken without a sleep and wake-up;
5. EOF on the channel ends the session.

Nothing the child says is believed without checking: the trusted side holds the inputs,
the reference and the clock. The generic handler, :func:`functions`, calls the functions a
target declares callable (``payload["functions"]``) of the candidate module
(``payload["module"]``); kinds with more to do in the candidate's process (a decoding loop
that must share the process with a draft model) bring their own entry and handler.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import select
import socket
import struct
import sys
import traceback
from pathlib import Path
from typing import Any, Protocol

from optimizer.sandbox import channel
from optimizer.sandbox.loader import load_module

# The session's setup: the region's size (the memfd rides on it, SCM_RIGHTS) and spin_s.
SHM_SETUP = struct.Struct("<Qd")


class Handler(Protocol):
    def handle(self, request: dict[str, Any]) -> Any:
        """The answer to one request (plain data and arrays); raise for an error."""


def _error(exc: BaseException, where: str) -> dict[str, Any]:
    tb = traceback.format_exc(limit=20)
    return {"error": f"{type(exc).__name__}: {exc}", "where": where, "traceback": tb[-4000:]}


def serve(entry: str, payload: dict[str, Any], io_dir: Path, channel_fd: int) -> dict[str, Any]:
    """Run one session; returns the summary the zygote's response pipe carries."""
    sock = socket.socket(fileno=channel_fd)
    sock.setblocking(True)
    channel.send(sock, {"hello": os.getpid()})
    shm_in = shm_out = None
    size_msg, fds, _, _ = socket.recv_fds(sock, SHM_SETUP.size, 1)
    if len(size_msg) != SHM_SETUP.size:
        return {"error": "session setup message truncated"}
    size, spin_s = SHM_SETUP.unpack(size_msg)
    if size and fds:  # inputs arrive in the first half; results leave through the second
        shm_in = channel.SharedRegion(fds[0], size, half=0)
        shm_out = channel.SharedRegion(fds[0], size, half=1, owns=False)
    module_name, _, func_name = entry.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), func_name)
        handler = factory(payload, io_dir)
    except BaseException as exc:  # noqa: BLE001 - candidate code may raise anything
        channel.send(sock, _error(exc, "import"))
        return {"served": 0, "error": f"{type(exc).__name__}: {exc}"}
    channel.send(sock, {"ready": True})
    served = 0
    # Wait for each request in poll, not in recv: a thread asleep in recv on a Unix socket
    # is also woken when the harness reads the answer it sent (the socket's send space comes
    # back), a spurious wake-up and context switch per request; poll wakes for input only.
    # With a spin, poll without blocking first, for up to spin_s after each answer: a
    # request that comes within it is taken without the sleep and wake-up.
    waiting = select.poll()
    waiting.register(sock, select.POLLIN)
    while True:
        if not (spin_s > 0 and channel.spin(waiting, spin_s)):
            waiting.poll()
        try:
            request = channel.recv(sock, shm_in)
        except channel.ChannelClosed:
            break
        served += 1
        try:
            answer: dict[str, Any] = {"ok": handler.handle(request)}
        except BaseException as exc:  # noqa: BLE001 - KeyboardInterrupt, SystemExit too
            answer = _error(exc, str(request.get("op", "")))
        try:
            channel.send(sock, answer, shm_out)
        except channel.BoundaryError as exc:
            channel.send(sock, {"error": str(exc), "where": "result"})
    return {"served": served}


# -- the generic handler: calling a candidate module's functions ---------------------------


class FunctionHandler:
    """Calls the declared functions of a candidate module; reads its declared constants.

    Requests: ``{"op": "call", "fn": name, "args": [...], "kwargs": {...}}``,
    ``{"op": "batch", "fn": name, "args_list": [[...], ...]}`` (one round trip for many
    calls: a policy asked about each of a few candidates), ``{"op": "get", "name":
    name}`` (a module constant such as a sample size) and ``{"op": "describe"}`` (the
    module's public names: functions by name, plain-data constants by value). With
    ``public`` every public function and constant of the module may be used. A call with
    ``"echo_args": true`` also returns its arguments as the call left them (did it modify
    its inputs?).
    """

    def __init__(self, module: Any, functions: list[str], constants: list[str],
                 public: bool = False):
        self.module = module
        self.functions = set(functions)
        self.constants = set(constants)
        self.public = public
        if public:
            for name, value in vars(module).items():
                if name.startswith("_") or isinstance(value, type(sys)):
                    continue
                (self.functions if callable(value) else self.constants).add(name)

    def describe(self) -> dict[str, Any]:
        functions = sorted(n for n in self.functions if callable(getattr(self.module, n, None)))
        constants = {}
        for name in sorted(self.constants):
            if hasattr(self.module, name):
                value = getattr(self.module, name)
                try:
                    channel.Encoder().encode(value)
                except channel.BoundaryError:
                    continue  # not plain data: it stays on the candidate's side
                constants[name] = value
        return {"functions": functions, "constants": constants}

    def _fn(self, name: str) -> Any:
        if name not in self.functions:
            raise LookupError(f"{name!r} is not a function this target lets the harness call")
        fn = getattr(self.module, name, None)
        if not callable(fn):
            raise AttributeError(f"the program defines no function {name}()")
        return fn

    def handle(self, request: dict[str, Any]) -> Any:
        op = request.get("op")
        if op == "call":
            args, kwargs = request.get("args", []), request.get("kwargs", {})
            value = self._fn(request["fn"])(*args, **kwargs)
            if request.get("echo_args"):  # the arguments as the call left them
                return {"value": value, "args": args, "kwargs": kwargs}
            return value
        if op == "batch":
            fn = self._fn(request["fn"])
            return [fn(*args) for args in request["args_list"]]
        if op == "describe":
            return self.describe()
        if op == "get":
            name = request["name"]
            if name not in self.constants:
                raise LookupError(f"{name!r} is not a constant this target lets the harness read")
            if not hasattr(self.module, name):
                raise AttributeError(f"the program defines no {name}")
            return getattr(self.module, name)
        raise ValueError(f"unknown request {op!r}")


def functions(payload: dict[str, Any], io_dir: Path) -> FunctionHandler:
    """The session entry for the ``function`` style: import ``payload["module"]`` (a file in
    the candidate's folder) and serve calls of ``payload["functions"]``."""
    path = Path.cwd() / payload["module"]
    module = load_module(path, str(payload.get("name", "candidate")))
    return FunctionHandler(module, list(payload.get("functions", ())),
                           list(payload.get("constants", ())), bool(payload.get("public")))
