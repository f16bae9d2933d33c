"""Trusted checking code, never edited by a proposer.

Each target kind is an :class:`~optimizer.kinds.Evaluator` subclass registered under the
name used in ``target.toml``: built in (the tables below, which the engine's registry
:mod:`optimizer.kinds` reads by this package's name), by entry point (group
``inference_optimizer.kinds`` in a user's package: ``name = "module:Class"``), or with
:func:`register`. Kinds are imported lazily so that the ``function`` kind does not pull in
torch. Kinds may also contribute ``optimizer`` subcommands (:class:`Command`, group
``inference_optimizer.commands``). docs/adding-a-kind.md has a worked example.

The registry and the base are the engine's ground floor, re-exported here: this package
imports the engine's ground floor, and the engine never imports this package.
"""

from __future__ import annotations

from optimizer.kinds import _REGISTERED as _REGISTERED  # tests patch the table here
from optimizer.kinds import (
    COMMAND_GROUP,
    KIND_GROUP,
    Command,
    EvalContext,
    Evaluator,
    commands,
    get,
    kinds,
    register,
    result_from_call,
)

__all__ = [
    "BUILTIN_COMMANDS",
    "BUILTIN_KINDS",
    "COMMAND_GROUP",
    "KIND_GROUP",
    "Command",
    "EvalContext",
    "Evaluator",
    "commands",
    "get",
    "kinds",
    "register",
    "result_from_call",
]

# The built-in registration: kind -> "module:Class", command -> "module:object".
BUILTIN_KINDS: dict[str, str] = {
    "coinfer": "evaluators.coinfer:CodecEvaluator",
    "function": "evaluators.function:FunctionEvaluator",
    "harness": "evaluators.harness:HarnessEvaluator",
    "kernel": "evaluators.kernels:KernelEvaluator",
    "routing": "evaluators.routing:RoutingEvaluator",
    "speculative": "evaluators.speculative:SpeculativeEvaluator",
}
BUILTIN_COMMANDS: dict[str, str] = {
    "import-kernelbench": "evaluators.kernels.kernelbench:COMMAND",
    "init": "evaluators.scaffold:COMMAND",
}
