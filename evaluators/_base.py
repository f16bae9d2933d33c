"""The evaluator contract, as the kinds import it.

The base lives on the engine's ground floor (:mod:`optimizer.kinds._base`, where its
contract is written), so that the engine calls it without importing a kind: imports run
from the kinds to the engine, never back. This module re-exports it for the kinds.
"""

from optimizer.kinds._base import (
    Command,
    EvalContext,
    Evaluator,
    SandboxLike,
    read_source,
    result_from_call,
    text_beside,
    valid_from_metrics,
)

__all__ = [
    "Command",
    "EvalContext",
    "Evaluator",
    "SandboxLike",
    "read_source",
    "result_from_call",
    "text_beside",
    "valid_from_metrics",
]
