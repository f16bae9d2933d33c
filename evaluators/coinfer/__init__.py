"""The ``coinfer`` kind: inference split between two machines. The ``codec`` mode measures a
codec for the hidden state that crosses the cut, or (``[evaluator] mode = "kv"``) for the KV
cache of the blocks before it, on the project's own trained language model
(docs/coinfer.md)."""

from evaluators.coinfer.codec import CodecEvaluator

__all__ = ["CodecEvaluator"]
