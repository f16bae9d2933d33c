"""What a lossy cut costs the model's output: the next-token distribution and the text.

- ``kl``: KL(p_exact || p_decoded) of the next-token distribution at every position, in nats
  (the exact model is the reference: how much probability the decoded run misplaces);
- top-1 agreement: the share of positions whose most likely token stays the same;
- greedy agreement: the share of a greedy continuation of N tokens decoded through the cut
  that matches the exact model's own, counted up to the first divergence (after it the two
  runs continue different texts and agreeing again says nothing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch


def kl_per_position(exact: torch.Tensor, decoded: torch.Tensor) -> torch.Tensor:
    """KL(softmax(exact) || softmax(decoded)) per row of logits ``[T, V]``, in float64."""
    p = torch.log_softmax(exact.double(), -1)
    q = torch.log_softmax(decoded.double(), -1)
    return (p.exp() * (p - q)).sum(-1).clamp_min(0.0)


def prefix_agreement(reference: list[int], got: list[int]) -> float:
    """The share of ``reference`` that ``got`` matches before their first difference."""
    n = 0
    for a, b in zip(reference, got, strict=False):
        if a != b:
            break
        n += 1
    return n / len(reference) if reference else 1.0


@dataclass
class Tally:
    """Quality of a whole evaluation, accumulated prompt by prompt."""

    kls: list[torch.Tensor] = field(default_factory=list)
    top1: list[torch.Tensor] = field(default_factory=list)
    greedy: list[float] = field(default_factory=list)

    def add_logits(self, exact: torch.Tensor, decoded: torch.Tensor) -> None:
        self.kls.append(kl_per_position(exact, decoded))
        self.top1.append((exact.argmax(-1) == decoded.argmax(-1)).double())

    def add_greedy(self, reference: list[int], got: list[int]) -> None:
        self.greedy.append(prefix_agreement(reference, got))

    def metrics(self) -> dict[str, float]:
        kl = torch.cat(self.kls) if self.kls else torch.zeros(1, dtype=torch.float64)
        top1 = torch.cat(self.top1) if self.top1 else torch.ones(1, dtype=torch.float64)
        out = {
            "kl_mean": float(kl.mean()),
            "kl_p99": float(torch.quantile(kl, 0.99)),
            "top1_agreement": float(top1.mean()),
            "greedy_agreement": sum(self.greedy) / len(self.greedy) if self.greedy else 1.0,
        }
        for name, value in out.items():
            if not math.isfinite(value):
                out[name] = math.inf if name.startswith("kl") else 0.0
        return out
