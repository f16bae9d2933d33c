"""The kinds, as the engine finds them: the plug-in base and the registry.

A target kind is an :class:`Evaluator` subclass registered under the name used in
``target.toml``. The engine finds one by name, like any plug-in, and never imports a kind
itself:

- registered in this process with :func:`register`;
- built in: the package named :data:`BUILTIN_PACKAGE` holds the table ``BUILTIN_KINDS``
  (kind -> ``"module:Class"``) and ``BUILTIN_COMMANDS`` (name -> ``"module:object"``),
  imported by name when first asked for;
- by entry point in a user's package: group ``inference_optimizer.kinds``,
  ``name = "module:Class"`` (a plug-in never shadows a built-in kind).

Kinds are imported lazily, so that the ``function`` kind does not pull in torch. Kinds may
also contribute ``optimizer`` subcommands (:class:`Command`, group
``inference_optimizer.commands``). docs/adding-a-kind.md has a worked example.

Imports run one way: the kinds import this ground floor (records, targets, errors, the
sandbox's primitives and this base), and nothing of the engine imports a kind.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from optimizer.errors import ConfigError
from optimizer.kinds._base import (
    Command,
    EvalContext,
    Evaluator,
    SandboxLike,
    read_source,
    result_from_call,
    text_beside,
)

__all__ = [
    "BUILTIN_PACKAGE",
    "COMMAND_GROUP",
    "KIND_GROUP",
    "Command",
    "EvalContext",
    "Evaluator",
    "SandboxLike",
    "commands",
    "get",
    "kinds",
    "read_source",
    "register",
    "result_from_call",
    "text_beside",
]

KIND_GROUP = "inference_optimizer.kinds"
COMMAND_GROUP = "inference_optimizer.commands"
BUILTIN_PACKAGE = "evaluators"  # the package of the built-in kinds, looked up by name

_REGISTERED: dict[str, type[Evaluator]] = {}


def register(kind: str, cls: type[Evaluator]) -> None:
    """Register an evaluator class for ``kind`` in this process."""
    _REGISTERED[kind] = cls


def _builtin(table: str) -> dict[str, str]:
    """A table of the built-in package; empty where the package is not installed."""
    try:
        package = importlib.import_module(BUILTIN_PACKAGE)
    except ModuleNotFoundError as exc:
        if exc.name != BUILTIN_PACKAGE:
            raise
        return {}
    return dict(getattr(package, table, {}))


def _entry_points(group: str) -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=group)}


def _table() -> dict[str, str]:
    return {**_entry_points(KIND_GROUP), **_builtin("BUILTIN_KINDS")}  # built-ins win


def kinds() -> list[str]:
    """Every kind this process can find."""
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
    for name, ref in {**_entry_points(COMMAND_GROUP), **_builtin("BUILTIN_COMMANDS")}.items():
        cmd = _load(ref, f"command {name!r}")
        if not isinstance(cmd, Command):
            raise ConfigError(f"command {name!r}: {ref} is not a kinds.Command")
        out.append(cmd)
    return sorted(out, key=lambda c: c.name)
