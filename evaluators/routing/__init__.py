"""The routing target kind: a serving-cluster simulator and its evaluator.

See docs/routing.md for the model, its calibration and the baseline table. The evaluator
is imported on first use: the candidate's sandboxed process imports only
evaluators.routing.child (and the records it rebuilds), never the simulator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evaluators.routing.evaluator import RoutingEvaluator

__all__ = ["RoutingEvaluator"]


def __getattr__(name: str) -> Any:
    if name == "RoutingEvaluator":
        from evaluators.routing.evaluator import RoutingEvaluator

        return RoutingEvaluator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
