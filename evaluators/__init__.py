"""Trusted checking code, never edited by a proposer.

Each target kind registers an :class:`~evaluators._base.Evaluator` subclass under the
name used in ``target.toml``: built in (the table below), by entry point (group
``inference_optimizer.kinds`` in a user's package: ``name = "module:Class"``), or with
:func:`register`. Kinds are imported lazily so that the ``function`` kind does not pull in
torch. Kinds may also contribute ``optimizer`` subcommands (:class:`Command`, group
``inference_optimizer.commands``). docs/adding-a-kind.md has a worked example.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from evaluators._base import Command, EvalContext, Evaluator, result_from_call
from optimizer.errors import ConfigError

__all__ = [
    "Command",
    "EvalContext",
    "Evaluator",
    "commands",
    "get",
    "kinds",
    "register",
    "result_from_call",
]

KIND_GROUP = "inference_optimizer.kinds"
COMMAND_GROUP = "inference_optimizer.commands"

# The built-in registration: kind -> "module:Class", command -> "module:object".
_BUILTIN: dict[str, str] = {
    "function": "evaluators.function:FunctionEvaluator",
    "harness": "evaluators.harness:HarnessEvaluator",
    "kernel": "evaluators.kernels:KernelEvaluator",
    "routing": "evaluators.routing:RoutingEvaluator",
    "speculative": "evaluators.speculative:SpeculativeEvaluator",
}
_BUILTIN_COMMANDS: dict[str, str] = {
    "import-kernelbench": "evaluators.kernels.kernelbench:COMMAND",
}
_REGISTERED: dict[str, type[Evaluator]] = {}


def register(kind: str, cls: type[Evaluator]) -> None:
    """Register an evaluator class for ``kind`` in this process."""
    _REGISTERED[kind] = cls


def _entry_points(group: str) -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=group)}


def _table() -> dict[str, str]:
    return {**_entry_points(KIND_GROUP), **_BUILTIN}  # a plug-in never shadows a built-in


def kinds() -> list[str]:
    return sorted(set(_table()) | set(_REGISTERED))


def _load(ref: str, what: str) -> object:
    module, _, name = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{what}: cannot load {ref!r}: {type(exc).__name__}: {exc}") from None


def get(kind: str) -> type[Evaluator]:
    """The evaluator class for ``kind``; a ConfigError naming the known kinds otherwise."""
    if kind in _REGISTERED:
        return _REGISTERED[kind]
    table = _table()
    if kind not in table:
        raise ConfigError(
            f"unknown target kind {kind!r}; known kinds: {', '.join(kinds())} (a kind of "
            f"your own registers under the entry point group '{KIND_GROUP}')",
            key="kind",
        )
    cls = _load(table[kind], f"kind {kind!r}")
    if not (isinstance(cls, type) and issubclass(cls, Evaluator)):
        raise ConfigError(f"kind {kind!r}: {table[kind]} is not an Evaluator subclass")
    _REGISTERED[kind] = cls
    return cls


def commands() -> list[Command]:
    """Subcommands contributed by kinds (built in, then entry points)."""
    out = []
    for name, ref in {**_entry_points(COMMAND_GROUP), **_BUILTIN_COMMANDS}.items():
        cmd = _load(ref, f"command {name!r}")
        if not isinstance(cmd, Command):
            raise ConfigError(f"command {name!r}: {ref} is not an evaluators.Command")
        out.append(cmd)
    return sorted(out, key=lambda c: c.name)
