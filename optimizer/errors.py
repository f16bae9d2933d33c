"""The exception tree of the engine.

::

    OptimizerError                    root: anything the engine raises on purpose
    +-- ConfigError                   bad experiment/target file or --set override (exit code 2)
    +-- WorkspaceError                not a git repo, unborn HEAD, unusable state dir
    +-- ProposalError                 a proposer could not produce a usable proposal
    |   +-- EditError                 an edit does not apply (no match, two matches,
    |   |                             text outside an EVOLVE-BLOCK); carries the closest match
    |   +-- KnobError                 a knob declaration or value is unusable
    +-- SandboxError                  the sandbox could not run a candidate at all
        +-- IsolationError            isolation was required but is not available
        +-- ZygoteDied                the warm sandbox process is gone or unresponsive

The loop catches these narrowly at the trial boundary and turns them into a candidate
state with a reason; anything else is a bug in the engine and propagates. What a candidate
does wrong is not an exception but a state (INVALID, FAILED, TIMEOUT, REJECTED) with a
reason, and a spent budget is a stop reason: neither has a class here.
tests/optimizer/test_errors.py checks this drawing against the classes, and that every
class is raised somewhere.
"""

from __future__ import annotations


class OptimizerError(Exception):
    """Root of every error the engine raises on purpose."""


class ConfigError(OptimizerError):
    """A configuration problem: says what, where (file and key) and how to fix it."""

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None):
        self.message = message
        self.file = file
        self.key = key
        where = ", ".join(p for p in (file, f"key '{key}'" if key else None) if p)
        super().__init__(f"{where}: {message}" if where else message)


class WorkspaceError(OptimizerError):
    """The workspace (git repository, state directory) cannot be used."""


class ProposalError(OptimizerError):
    """A proposer failed to produce a usable proposal (the candidate is REJECTED)."""


class EditError(ProposalError):
    """An edit does not apply exactly; ``closest`` names the nearest text that exists."""

    def __init__(self, message: str, *, file: str | None = None, closest: str | None = None):
        self.file = file
        self.closest = closest
        super().__init__(message)


class KnobError(ProposalError):
    """A knob declaration or value is unusable; says which file, line and knob, and the fix."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 knob: str | None = None):
        self.file = file
        self.line = line
        self.knob = knob
        where = file or ""
        if line is not None:
            where = f"{where}, line {line}" if where else f"line {line}"
        if knob:
            where = f"{where}: knob {knob}" if where else f"knob {knob}"
        super().__init__(f"{where}: {message}" if where else message)


class SandboxError(OptimizerError):
    """The sandbox itself failed (not the candidate)."""


class IsolationError(SandboxError):
    """Isolation was required (sandbox.require_isolation) but is not available here."""


class ZygoteDied(SandboxError):
    """The warm sandbox process is gone or unresponsive; the message says what was seen."""
