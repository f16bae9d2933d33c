"""The routing target kind: a serving-cluster simulator and its evaluator.

See docs/routing.md for the model, its calibration and the baseline table.
"""

from evaluators.routing.evaluator import RoutingEvaluator

__all__ = ["RoutingEvaluator"]
