"""Child-side runner: ``python -m optimizer.sandbox.child RESPONSE_FD [CHANNEL_FD]`` (the cold
start).

Runs inside the sandbox. Reads the request (JSON) from stdin, applies its resource limits
and Landlock (:mod:`optimizer.sandbox.landlock`) to itself, imports the trusted entry
function ``module:function`` and calls it with the payload and the io directory; the
JSON-able return value (or the error) is written to the response pipe ``RESPONSE_FD``.
Nothing else goes back: the engine parses that JSON, never a
pickle. KeyboardInterrupt and SystemExit raised by candidate code become an ``error``
field, never an exit of the engine. :mod:`optimizer.sandbox.zygote` calls :func:`run_entry` in a
forked child instead of starting an interpreter.

The request::

    {"entry": "module:function", "payload": {...}, "io_dir": "/abs/path",
     "limits": {"as": bytes, "cpu": s, "fsize": bytes, "nofile": n, "nproc": n},
     "landlock": true, "writable": ["/abs/workdir", "/abs/io_dir"]}

This module imports only the standard library.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import resource
import sys
import traceback
from pathlib import Path
from typing import Any

from optimizer.sandbox import landlock
from optimizer.sandbox.landlock import abi as landlock_abi
from optimizer.slots import pin_from_env

__all__ = ["apply_limits", "call_home", "confine", "landlock_abi", "main", "run_entry"]

_RLIMITS = {
    "as": resource.RLIMIT_AS,
    "cpu": resource.RLIMIT_CPU,
    "fsize": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
    "nproc": resource.RLIMIT_NPROC,
    "core": resource.RLIMIT_CORE,
}


def apply_limits(limits: dict[str, int]) -> None:
    """Set soft = hard limits on this process (trusted code, before any candidate import).

    A value of 0 means "leave as is" (except ``core``, where 0 is the limit). Lowering a
    hard limit is always allowed, so the candidate cannot raise them back.
    """
    for name, value in limits.items():
        if name not in _RLIMITS or (value <= 0 and name != "core"):
            continue
        try:
            resource.setrlimit(_RLIMITS[name], (int(value), int(value)))
        except (ValueError, OSError) as exc:
            print(f"sandbox: cannot set RLIMIT_{name.upper()}={value}: {exc}", file=sys.stderr)


# This process's own threads (resolved in the child, so its own pid): a thread's name is
# written to /proc/self/task/<tid>/comm (pthread_setname_np), and the CUDA driver names its
# threads and fails to start with error 304 when it cannot (an H100, kernel 6.18, with
# Landlock; bench/gpu_sandbox_probe.py). Nothing there reaches beyond this process.
OWN_TASKS = "/proc/self/task"


def call_home(tmp: str) -> dict[str, str]:
    """The variables that make a call's private tmp directory its home. TRITON_HOME too:
    Triton reads HOME when it is imported, which for a warm call is in the zygote (the
    engine's home, where a confined call may not write and which calls must not share)."""
    return {"HOME": tmp, "TMPDIR": tmp, "TMP": tmp, "TEMP": tmp, "TRITON_HOME": tmp}


def confine(request: dict[str, Any], extra_writable: list[str]) -> None:
    """Limits, then Landlock when the request asks for it (trusted code, before the entry)."""
    apply_limits(request.get("limits", {}))
    if request.get("landlock"):
        why = landlock.restrict([*request.get("writable", []), *extra_writable, "/dev",
                                 OWN_TASKS])
        if why:
            print(f"sandbox: {why}; writes are not confined beyond the mounts", file=sys.stderr)


def _jsonable(value: Any) -> Any:
    """Fallback for json.dump: numbers-like to float (NaN/Inf as strings), else repr."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return repr(value)[:200]
    return number if math.isfinite(number) else str(number)


def run_entry(
    entry: str, payload: dict[str, Any], io_dir: str, response_fd: int,
    channel_fd: int | None = None,
) -> int:
    """Import and call ``entry``; write its dict (or ``{"error": ...}``) to ``response_fd``.

    With ``channel_fd`` the call is a session: ``entry`` returns a handler and
    :func:`optimizer.sandbox.serve.serve` answers the trusted side's requests with it until
    the channel closes; the response is then a summary of the session.
    """
    module_name, _, func_name = entry.partition(":")
    sys.path.insert(0, os.getcwd())  # the candidate's folder
    if os.environ.get("OPTIMIZER_CANDIDATE_ROOT"):  # its repository (editable files there)
        sys.path.insert(1, os.path.normpath(os.path.join(os.getcwd(),
                                                         os.environ["OPTIMIZER_CANDIDATE_ROOT"])))
    result: dict[str, Any]
    try:
        if channel_fd is not None:
            from optimizer.sandbox.serve import serve

            result = serve(entry, payload, Path(io_dir), channel_fd)
        else:
            func = getattr(importlib.import_module(module_name), func_name)
            value = func(payload, Path(io_dir))
            result = value if isinstance(value, dict) else {"value": value}
    except BaseException as exc:  # noqa: BLE001 - candidate code may raise anything
        tb = traceback.format_exc(limit=20)
        result = {"error": f"{type(exc).__name__}: {exc}\n{tb[-3000:]}"}
    try:
        data = json.dumps(result, default=_jsonable).encode()
    except (TypeError, ValueError) as exc:  # e.g. circular structures
        data = json.dumps({"error": f"result is not JSON-serialisable: {exc}"}).encode()
    with os.fdopen(response_fd, "wb", closefd=True) as fh:
        fh.write(data)
    return 0


def main(argv: list[str]) -> int:
    pin_from_env()
    response_fd = int(argv[0])
    channel_fd = int(argv[1]) if len(argv) > 1 else None
    request = json.loads(sys.stdin.buffer.read())
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the candidate gets no stdin
    os.close(devnull)
    confine(request, [os.environ.get("TMPDIR", "/tmp")])
    return run_entry(request["entry"], request.get("payload", {}), request["io_dir"], response_fd,
                     channel_fd=channel_fd)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip atexit handlers and non-daemon threads a candidate left behind
