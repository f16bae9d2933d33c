"""A sandboxed call's vocabulary: its options, what it gives back, and what a session needs
of the child it runs in.

:class:`CallOptions` and :class:`SessionOptions` are the keywords of
``Sandbox.call``/``Sandbox.open_session`` (and of ``EvalContext.session``), written once;
:class:`CallResult` is the outcome the host hands to evaluators; :class:`Started` is the
part of a launched child (:class:`optimizer.sandbox.host.Launch`) that a session uses. All
sit below the host, the session and the kinds' base, so that none imports another to name
them. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypedDict


class CallOptions(TypedDict, total=False):
    """How one sandboxed call runs, besides its entry, payload and folder."""

    io_dir: Path | None  # the folder shared with the child (None: a private one)
    timeout_s: float | None  # its wall-clock limit (None: the sandbox's)
    writable: Sequence[Path] | None  # where it may write (None: its folder and io_dir)


class SessionOptions(CallOptions, total=False):
    """How a session runs: a call's options, and these."""

    shm_bytes: int  # the shared region for large inputs (0: none)
    ready_timeout_s: float | None  # how long its start may take (None: timeout_s)
    spin_s: float  # how long each side busy-waits for the next message (0: none)


def unknown_options(options: Mapping[str, Any], allowed: type) -> None:
    """A TypeError naming the keywords in ``options`` that ``allowed`` (one of the options
    classes above) has not: the type checker sees them, a call at run time is checked here."""
    unknown = set(options) - set(allowed.__annotations__)
    if unknown:
        raise TypeError(f"unknown sandbox option(s): {', '.join(sorted(unknown))}")


@dataclass(frozen=True)
class CallResult:
    """Outcome of one sandboxed call. ``response`` is None when none was delivered."""

    response: dict[str, Any] | None
    returncode: int | None
    timed_out: bool
    wall_s: float
    stdout: str = ""
    stderr: str = ""
    error: str = ""  # why there is no response


class Started(Protocol):
    """A started sandboxed child, as a session sees it."""

    @property
    def root_pid(self) -> int | None:
        """The host pid of the process the child descends from (bwrap, or the zygote)."""

    def kill_child(self, host_pid: int | None) -> None:
        """Kill the child now."""

    def finish(self) -> CallResult:
        """Wait for the child's end and collect what it said."""
