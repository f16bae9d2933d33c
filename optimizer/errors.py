"""The exception tree of the engine.

::

    OptimizerError                    root: anything the engine raises on purpose
    +-- ConfigError                   bad experiment/target file or --set override (exit code 2)
    +-- WorkspaceError                not a git repo, unborn HEAD, unusable state dir
    +-- ProposalError                 a proposer could not produce a usable proposal
    |   +-- EditError                 an edit does not apply (no match, two matches,
    |                                 text outside an EVOLVE-BLOCK); carries the closest match
    +-- SandboxError                  the sandbox could not run a candidate at all
    |   +-- IsolationError            isolation was required but is not available
    +-- ValidationError               a candidate's output is wrong (INVALID)
    +-- BudgetExhausted               a budget (time, candidates, USD) is spent

The loop catches these narrowly at the trial boundary and turns them into a candidate
state with a reason; anything else is a bug in the engine and propagates.
"""

from __future__ import annotations


class OptimizerError(Exception):
    """Root of every error the engine raises on purpose."""


class ConfigError(OptimizerError):
    """A configuration problem: says what, where (file and key) and how to fix it."""

    def __init__(self, message: str, *, file: str | None = None, key: str | None = None):
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


class SandboxError(OptimizerError):
    """The sandbox itself failed (not the candidate)."""


class IsolationError(SandboxError):
    """Isolation was required (sandbox.require_isolation) but is not available here."""


class ValidationError(OptimizerError):
    """A candidate produced a wrong answer."""


class BudgetExhausted(OptimizerError):
    """A budget is spent; the loop stops after the current candidate."""
