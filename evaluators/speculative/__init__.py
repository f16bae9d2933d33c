"""The ``speculative`` kind: draft models for speculative decoding (see evaluator.py)."""

from evaluators.speculative.evaluator import SpeculativeEvaluator

__all__ = ["SpeculativeEvaluator"]
