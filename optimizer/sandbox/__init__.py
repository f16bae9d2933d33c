"""The sandbox: untrusted candidate code runs in a child process, data comes back.

Both halves live here. The engine's half: :mod:`~optimizer.sandbox.host` (``Sandbox``,
the settings, the call), :mod:`~optimizer.sandbox.bwrap` (namespaces, mounts, the scrubbed
environment), :mod:`~optimizer.sandbox.pipes` (bounded readers) and
:mod:`~optimizer.sandbox.zygote_host` (the warm process, seen from outside). The inside
half, which imports only the standard library before any candidate code:
:mod:`~optimizer.sandbox.child` (limits, Landlock, running one entry function) and
:mod:`~optimizer.sandbox.zygote` (the warm process that forks one child per call). Both
halves speak :mod:`~optimizer.sandbox.wire`.
"""

from optimizer.sandbox.bwrap import ENV_ALLOW
from optimizer.sandbox.host import CallResult, Sandbox, SandboxSettings

__all__ = ["ENV_ALLOW", "CallResult", "Sandbox", "SandboxSettings"]
