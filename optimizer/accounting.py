"""Token and money accounting of LLM calls.

Prices are USD per million tokens, as providers quote them. Cached prompt tokens are part
of ``prompt_tokens`` (OpenAI reports them in ``usage.prompt_tokens_details.cached_tokens``)
and are charged at the cached price instead of the input price.

The engine keeps one :class:`Ledger` per night: it records every proposal's
:class:`~optimizer.records.Usage`, marks accepted improvements, checks the USD budget with
``ledger.usd + ledger.estimate_next_usd(target)`` before each proposal, and logs
``summary()`` at the end.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optimizer.records import Usage

# Assumed size of a first call when nothing has been measured yet: a 12k-token prompt and a
# 4k-token answer (reasoning included); after one call the ledger uses measured figures.
_FIRST_PROMPT_TOKENS = 12_000
_FIRST_COMPLETION_TOKENS = 4_000


@dataclass(frozen=True)
class Prices:
    """USD per million tokens."""

    input_per_m: float = 0.0
    cached_input_per_m: float = 0.0
    output_per_m: float = 0.0

    def usd(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> float:
        cached = min(max(cached_tokens, 0), max(prompt_tokens, 0))
        uncached = max(prompt_tokens, 0) - cached
        return (
            uncached * self.input_per_m
            + cached * self.cached_input_per_m
            + max(completion_tokens, 0) * self.output_per_m
        ) / 1e6


@dataclass
class _Tally:
    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0
    improvements: int = 0

    def add(self, usage: Usage) -> None:
        self.calls += max(usage.calls, 1)
        self.prompt_tokens += usage.prompt_tokens
        self.cached_tokens += usage.cached_tokens
        self.completion_tokens += usage.completion_tokens
        self.usd += usage.usd

    def as_dict(self) -> dict[str, Any]:
        tokens = self.prompt_tokens + self.completion_tokens
        return {
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "usd": round(self.usd, 6),
            "cache_hit_share": (
                self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0
            ),
            "improvements": self.improvements,
            "tokens_per_improvement": tokens / self.improvements if self.improvements else None,
            "usd_per_improvement": self.usd / self.improvements if self.improvements else None,
        }


def add_usage(a: Usage, b: Usage) -> Usage:
    """Sum two usages (the model of the later one wins when both name one)."""
    return Usage(
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        cached_tokens=a.cached_tokens + b.cached_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        usd=a.usd + b.usd,
        calls=a.calls + b.calls,
        model=b.model or a.model,
    )


class Ledger:
    """Totals per night, per target, per candidate and per model; thread-safe."""

    def __init__(
        self,
        prices: Prices | None = None,
        *,
        first_call_usd: float | None = None,
        window: int = 8,
    ) -> None:
        self._prices = prices or Prices()
        self._first_call_usd = first_call_usd
        self._window = max(1, window)
        self._lock = threading.Lock()
        self._night = _Tally()
        self._targets: dict[str, _Tally] = {}
        self._candidates: dict[str, _Tally] = {}
        self._models: dict[str, _Tally] = {}
        self._recent: dict[str, list[float]] = {}

    def record(self, target: str, usage: Usage, *, candidate: str | None = None) -> None:
        """Add one proposal's usage (zero-token usages of offline proposers are skipped)."""
        if usage.calls == 0 and usage.prompt_tokens == 0 and usage.completion_tokens == 0:
            return
        with self._lock:
            self._night.add(usage)
            self._targets.setdefault(target, _Tally()).add(usage)
            if candidate is not None:
                self._candidates.setdefault(candidate, _Tally()).add(usage)
            if usage.model:
                self._models.setdefault(usage.model, _Tally()).add(usage)
            per_call = usage.usd / max(usage.calls, 1)
            recent = self._recent.setdefault(target, [])
            recent.append(per_call)
            del recent[: -self._window]

    def mark_improvement(
        self, target: str, *, candidate: str | None = None, model: str | None = None
    ) -> None:
        """Count an accepted improvement (for tokens and USD per improvement)."""
        with self._lock:
            self._night.improvements += 1
            self._targets.setdefault(target, _Tally()).improvements += 1
            if candidate is not None:
                self._candidates.setdefault(candidate, _Tally()).improvements += 1
            if model:
                self._models.setdefault(model, _Tally()).improvements += 1

    @property
    def usd(self) -> float:
        with self._lock:
            return self._night.usd

    def estimate_next_usd(self, target: str | None = None) -> float:
        """A cautious estimate of the next call: the dearest recent call plus recent growth.

        Recent calls of ``target`` if there are any, else of any target; before the first
        call, ``first_call_usd`` or a 12k-in/4k-out call at the configured prices. Prompts
        grow within a feedback epoch (the log is append-only), so the next call can cost
        more than any before it: the largest rise between successive calls of ``target``
        is added.
        """
        with self._lock:
            recent = self._recent.get(target or "", [])
            rises = [b - a for a, b in zip(recent, recent[1:], strict=False)]
            if not recent:
                recent = [x for values in self._recent.values() for x in values[-self._window :]]
            if recent:
                return max(recent) + max([0.0, *rises])
        if self._first_call_usd is not None:
            return self._first_call_usd
        return self._prices.usd(_FIRST_PROMPT_TOKENS, 0, _FIRST_COMPLETION_TOKENS)

    def summary(self) -> dict[str, Any]:
        """JSON-able totals: night-wide figures plus per_target, per_candidate, per_model."""

        def table(tallies: Mapping[str, _Tally]) -> dict[str, Any]:
            return {key: tally.as_dict() for key, tally in sorted(tallies.items())}

        with self._lock:
            out = self._night.as_dict()
            out["per_target"] = table(self._targets)
            out["per_candidate"] = table(self._candidates)
            out["per_model"] = table(self._models)
            return out
