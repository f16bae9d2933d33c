"""The ``harness`` kind: context policies of an agent harness replayed on recorded agent
trajectories, billed exactly under providers' prompt-cache rules (docs/harness.md)."""

from evaluators.harness.evaluator import HarnessEvaluator

__all__ = ["HarnessEvaluator"]
