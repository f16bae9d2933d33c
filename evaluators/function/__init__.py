"""The ``function`` kind: the target brings its own trusted ``evaluate.py``."""

from evaluators.function.evaluator import FunctionEvaluator

__all__ = ["FunctionEvaluator"]
