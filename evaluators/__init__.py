"""Trusted checking code, never edited by a proposer.

Each target kind registers an :class:`~evaluators._base.Evaluator` subclass under the
name used in ``target.toml``. Kinds are imported lazily so that the ``function`` kind
does not pull in torch.
"""

from __future__ import annotations

import importlib

from evaluators._base import EvalContext, Evaluator, result_from_call

__all__ = ["EvalContext", "Evaluator", "get", "kinds", "register", "result_from_call"]

# kind -> "module:Class"; add a line here when a kind joins.
_BUILTIN: dict[str, str] = {
    "function": "evaluators.function:FunctionEvaluator",
    "kernel": "evaluators.kernels:KernelEvaluator",
    "routing": "evaluators.routing:RoutingEvaluator",
    "speculative": "evaluators.speculative:SpeculativeEvaluator",
}
_REGISTERED: dict[str, type[Evaluator]] = {}


def register(kind: str, cls: type[Evaluator]) -> None:
    """Register an evaluator class for ``kind`` (third-party kinds)."""
    _REGISTERED[kind] = cls


def kinds() -> list[str]:
    return sorted(set(_BUILTIN) | set(_REGISTERED))


def get(kind: str) -> type[Evaluator]:
    """The evaluator class for ``kind``; KeyError with the known kinds otherwise."""
    if kind in _REGISTERED:
        return _REGISTERED[kind]
    if kind not in _BUILTIN:
        raise KeyError(f"unknown target kind {kind!r}; known kinds: {', '.join(kinds())}")
    module, _, name = _BUILTIN[kind].partition(":")
    cls = getattr(importlib.import_module(module), name)
    _REGISTERED[kind] = cls
    return cls
