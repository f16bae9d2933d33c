"""Child-side runner: ``python -m optimizer.sandbox.child RESPONSE_FD [CHANNEL_FD]`` (the cold
start).

Runs inside the sandbox. Reads the request (JSON) from stdin, applies its resource limits
to itself, imports the trusted entry function ``module:function`` and calls it with the
payload and the io directory; the JSON-able return value (or the error) is written to the
response pipe ``RESPONSE_FD``. Nothing else goes back: the engine parses that JSON, never a
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

import ctypes
import importlib
import json
import math
import os
import resource
import struct
import sys
import traceback
from pathlib import Path
from typing import Any

from optimizer.slots import pin_from_env

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


# Landlock (Linux >= 5.13): an unprivileged LSM, so it works with and without bwrap, as
# root too. Syscall numbers are the same on every architecture.
_LL_CREATE, _LL_ADD_RULE, _LL_RESTRICT = 444, 445, 446
_PR_SET_NO_NEW_PRIVS = 38
# write-type rights by ABI: WRITE_FILE, REMOVE_DIR, REMOVE_FILE, MAKE_* (v1); REFER (v2);
# TRUNCATE (v3). Reads are not handled: bwrap decides what is visible.
_LL_WRITE = {1: 0x1FF2, 2: 0x3FF2, 3: 0x7FF2}
_LL_SCOPE_SIGNAL = 1 << 1  # ABI 6: no signals to processes outside the domain


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when unavailable."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return max(0, int(libc.syscall(_LL_CREATE, None, 0, 1)))


def landlock_writes(paths: list[str]) -> str:
    """Allow writes only beneath ``paths`` (and /dev) for this process and its descendants.

    With Landlock ABI >= 6 it also forbids signalling processes outside the sandbox (the
    zygote, the engine). Returns "" when applied, else why not (old kernel, disabled LSM).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(_LL_CREATE, None, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION
    if abi < 1:
        return f"Landlock unavailable (errno {ctypes.get_errno()})"
    handled = _LL_WRITE[min(abi, 3)]
    if abi >= 6:
        attr = struct.pack("=QQQ", handled, 0, _LL_SCOPE_SIGNAL)
    else:
        attr = struct.pack("=Q", handled)
    ruleset = libc.syscall(_LL_CREATE, attr, len(attr), 0)
    if ruleset < 0:
        return f"landlock_create_ruleset failed (errno {ctypes.get_errno()})"
    try:
        for path in [*paths, "/dev"]:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = struct.pack("=Qi", handled, fd)  # landlock_path_beneath_attr, packed
                if libc.syscall(_LL_ADD_RULE, ruleset, 1, rule, 0) < 0:
                    return f"landlock_add_rule({path}) failed (errno {ctypes.get_errno()})"
            finally:
                os.close(fd)
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if libc.syscall(_LL_RESTRICT, ruleset, 0) < 0:
            return f"landlock_restrict_self failed (errno {ctypes.get_errno()})"
    finally:
        os.close(ruleset)
    return ""


def confine(request: dict[str, Any], extra_writable: list[str]) -> None:
    """Limits, then Landlock when the request asks for it (trusted code, before the entry)."""
    apply_limits(request.get("limits", {}))
    if request.get("landlock"):
        why = landlock_writes([*request.get("writable", []), *extra_writable])
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
