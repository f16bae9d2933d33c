"""The sandbox: untrusted candidate code runs in a child process, data comes back.

Both halves live here. The engine's half: :mod:`~optimizer.sandbox.host` (``Sandbox``,
the settings, the call), :mod:`~optimizer.sandbox.bwrap` (namespaces, mounts, the scrubbed
environment), :mod:`~optimizer.sandbox.pipes` (bounded readers) and
:mod:`~optimizer.sandbox.zygote_host` (the warm process, seen from outside). The inside
half, which imports only the standard library before any candidate code:
:mod:`~optimizer.sandbox.child` (limits, running one entry function) and
:mod:`~optimizer.sandbox.zygote` (the warm process that forks one child per call). Both
halves speak :mod:`~optimizer.sandbox.wire`.

The primitives are ground floor, shared by the engine and the kinds (a kind's own child
adds layers with them): :mod:`~optimizer.sandbox.loader` (importing a file by its path),
:mod:`~optimizer.sandbox.landlock` (what a process may read and write),
:mod:`~optimizer.sandbox.seccomp` (no processes, no message IPC) and
:mod:`~optimizer.sandbox.procfs` (the kernel's process table). Importing one of them does
not load the engine's half: this package's names are imported when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optimizer.sandbox.bwrap import ENV_ALLOW
    from optimizer.sandbox.calls import CallResult
    from optimizer.sandbox.host import Sandbox, SandboxSettings

__all__ = ["ENV_ALLOW", "CallResult", "Sandbox", "SandboxSettings"]

_HOME = {"ENV_ALLOW": "bwrap", "CallResult": "calls", "Sandbox": "host",
         "SandboxSettings": "host"}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
