"""What one sandboxed call gives back, and what a session needs of the child it runs in.

:class:`CallResult` is the outcome the host hands to evaluators; :class:`Started` is the
part of a launched child (:class:`optimizer.sandbox.host.Launch`) that a session uses. Both
sit below the host and the session, so that neither imports the other to name them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


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
