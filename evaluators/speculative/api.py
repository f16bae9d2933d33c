"""What a draft module (a target's ``draft.py``) provides, and what it may use.

A draft module defines ``build(target: TargetView) -> Draft`` and, for trained drafts,
``LR`` (learning rate), optionally ``BATCH`` (sequences per step) and ``WEIGHT_DECAY``.
Knobs are annotated constants in the module itself.

The decoding loop (:mod:`evaluators.speculative.decoding`, trusted) keeps the sequence;
a :class:`Draft` keeps its own state and sees the sequence grow through three calls:

- ``reset(tokens, feats)``: a new sequence. ``tokens`` is ``[L]`` (the prompt plus the
  target's first token); ``feats`` is ``[L-1, F]``: row ``i`` is the target's hidden state
  at position ``i`` (the one that predicted ``tokens[i+1]``), for the target layers named
  in ``feature_layers`` (concatenated), or None when ``feature_layers`` is empty.
- ``propose(k, pick) -> list[int]``: draft ``k`` tokens after ``tokens[-1]``. For every
  drafted position call ``pick(logits)`` with the draft's logits ``[V]``; it returns the
  token to use (argmax when greedy, a sample when sampling) and records the logits as the
  draft distribution. Tokens not chosen by ``pick`` break losslessness for sampling.
  ``getattr(pick, "greedy", False)`` is True when ``pick`` returns the argmax of the logits
  it is given (greedy decoding): a draft may then chain its steps on the device, choosing
  each token by argmax itself, and hand ``pick`` the logits afterwards (the EAGLE seed
  does); the loop still checks that every drafted token is what ``pick`` returned.
- ``accept(tokens, feats)``: the sequence grew by ``tokens`` (accepted drafts plus the
  target's own next token) and ``feats`` by as many rows (same alignment as above).

Training: ``fit(data)`` (optional) sees the whole distillation set once, without gradients
(counts, lookup tables); then, for drafts with parameters, ``loss(batch) -> scalar tensor``
on batches of the same target-generated sequences:
``batch["tokens"]`` ``[B, T]``, ``batch["labels"]`` ``[B, T]`` (the target's greedy next
token at every position), ``batch["feats"]`` ``[B, T, F]`` (target hidden states at every
position, or None). A draft without parameters sets ``trainable = False``; it is given the
data only if it defines ``fit`` (the prompt-lookup n-gram drafter needs none).
Tensors a draft keeps as buffers are saved with its weights.

The evaluator builds a draft more than once: in a training session (``fit``, ``loss``),
whose parameters and buffers it saves, and then afresh in a new process for every timed
prompt, with the saved tensors loaded (``load_state_dict``) and the ``TargetView`` holding
the target's embedding and head only. Anything else a draft derives (lookup tables, say)
must be rebuilt from its buffers, in a ``load_state_dict`` post hook (the table draft does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

Pick = Callable[[torch.Tensor], int]


@dataclass(frozen=True)
class TargetView:
    """Read-only facts and frozen modules of the target a draft may reuse."""

    vocab: int
    d_model: int
    n_layers: int
    n_heads: int
    max_len: int
    embed: nn.Embedding  # the target's token embedding (frozen; tied with its LM head)
    head: Callable[[torch.Tensor], torch.Tensor]  # top-layer hidden [.., D] -> logits [.., V]

    @classmethod
    def of(cls, model: nn.Module) -> TargetView:
        m = cast(Any, model)
        cfg = m.cfg
        return cls(cfg.vocab, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.max_len,
                   m.embed, m.head)


class Draft(nn.Module):
    """Base of drafts: keeps the sequence (``self.tokens``, ``self.feats``) for subclasses."""

    feature_layers: tuple[int, ...] = ()
    trainable: bool = True

    def __init__(self) -> None:
        super().__init__()
        self.tokens: list[int] = []
        self.feats: torch.Tensor | None = None

    def reset(self, tokens: torch.Tensor, feats: torch.Tensor | None) -> None:
        self.tokens = [int(t) for t in tokens.tolist()]
        self.feats = feats

    def accept(self, tokens: list[int], feats: torch.Tensor | None) -> None:
        self.tokens.extend(tokens)
        if feats is not None and self.feats is not None:
            self.feats = torch.cat([self.feats, feats], 0)

    def propose(self, k: int, pick: Pick) -> list[int]:
        raise NotImplementedError

    def fit(self, data: dict[str, torch.Tensor | None]) -> None:
        """Fit on the whole distillation set (``tokens``, ``labels``, ``feats`` as in
        ``loss``) without gradients, before any gradient training. Default: nothing."""

    @property
    def wants_data(self) -> bool:
        """Whether the distillation set must be made for this draft (trained or fitted)."""
        return self.trainable or type(self).fit is not Draft.fit

    def loss(self, batch: dict[str, torch.Tensor | None]) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} is not trainable")


def point_mass(tok: int, vocab: int) -> torch.Tensor:
    """Logits ``[vocab]`` of a draft that is certain of ``tok`` (what a lookup draft hands
    ``pick``): 0 there, minus infinity elsewhere."""
    logits = torch.full((vocab,), float("-inf"))
    logits[tok] = 0.0
    return logits


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the common prefix: how much of a draft's cache is still valid."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
