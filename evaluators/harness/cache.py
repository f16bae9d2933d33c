"""Prompt-cache and price rules of two providers, applied to rendered prompts exactly.

A prompt is a list of messages, each a (key, tokens) pair; equal keys mean equal tokens.

- ``openai``: automatic prefix caching. A prompt reuses the longest token prefix it shares
  with an earlier prompt still cached, counted from 1,024 tokens in steps of 128
  (1,024, 1,152, ...); every prompt is cached for ``ttl_s`` after its last use. Cached
  input is billed at ``cached_input`` per million tokens, the rest at ``input``.
- ``anthropic``: explicit breakpoints, at most ``max_breakpoints`` per prompt, each after a
  message. A breakpoint reads the cache when the prefix up to it, or up to one of the
  ``lookback`` messages before it, was written earlier and has not expired (``ttl_s``,
  refreshed by each read); the prefix up to the last breakpoint is written, the tokens
  past what was read billed at ``write_mult`` x input; reads at ``read_mult`` x input;
  prefixes shorter than ``min_cache_tokens`` are never cached.

Output tokens are billed at ``output`` per million. Time advances ``seconds_per_call`` per
call (recorded trajectories carry no clock).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

Message = tuple[Hashable, tuple[int, ...]]


@dataclass(frozen=True)
class Rules:
    provider: str = "anthropic"
    input: float = 3.0  # $ per million input tokens
    output: float = 15.0
    cached_input: float = 1.5  # openai: $ per million cached input tokens
    write_mult: float = 1.25  # anthropic: cache writes, x input
    read_mult: float = 0.1  # anthropic: cache reads, x input
    ttl_s: float = 300.0
    seconds_per_call: float = 10.0
    min_cache_tokens: int = 1024
    step_tokens: int = 128  # openai: cached prefixes grow in these steps
    max_breakpoints: int = 4
    lookback: int = 20


@dataclass
class Charge:
    uncached: int = 0
    cached: int = 0  # read from the cache
    written: int = 0  # anthropic: written to the cache
    output: int = 0

    @property
    def input(self) -> int:
        return self.uncached + self.cached + self.written

    def usd(self, r: Rules) -> float:
        if r.provider == "openai":
            return (self.uncached * r.input + self.cached * r.cached_input
                    + self.output * r.output) / 1e6
        return (self.uncached * r.input + self.cached * r.input * r.read_mult
                + self.written * r.input * r.write_mult + self.output * r.output) / 1e6


def _tokens_in_common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def common_prefix(a: Sequence[Message], b: Sequence[Message]) -> int:
    """Tokens two prompts share from their start."""
    n = 0
    for (ka, ta), (kb, tb) in zip(a, b, strict=False):
        if ka != kb:
            return n + _tokens_in_common(ta, tb)
        n += len(ta)
    return n


class OpenAICache:
    """Prompts are compared by their chains of prefix ids: the i-th id names the exact
    sequence of the first i + 1 message keys (interned, so two prompts have the same id at
    i exactly when their first i + 1 messages are the same), which makes the messages two
    prompts share a binary search; the first message that differs is then compared token
    by token. The result is :func:`common_prefix`'s."""

    def __init__(self, rules: Rules):
        self.rules = rules
        self.ids: dict[tuple[int, Hashable], int] = {}
        # prompt, its prefix ids, tokens up to each message, expires
        self.entries: list[tuple[Sequence[Message], list[int], list[int], float]] = []

    def _chain(self, prompt: Sequence[Message]) -> tuple[list[int], list[int]]:
        ids, ends = [], []
        parent, run = -1, 0
        for key, tokens in prompt:
            parent = self.ids.setdefault((parent, key), len(self.ids))
            run += len(tokens)
            ids.append(parent)
            ends.append(run)
        return ids, ends

    @staticmethod
    def _shared(prompt: Sequence[Message], ids: list[int], ends: list[int],
                other: Sequence[Message], other_ids: list[int]) -> int:
        lo, hi = 0, min(len(ids), len(other_ids))  # lo messages are known to be shared
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if ids[mid - 1] == other_ids[mid - 1]:
                lo = mid
            else:
                hi = mid - 1
        n = ends[lo - 1] if lo else 0
        if lo < len(prompt) and lo < len(other):
            n += _tokens_in_common(prompt[lo][1], other[lo][1])
        return n

    def charge(self, prompt: Sequence[Message], now: float, output: int) -> Charge:
        r = self.rules
        ids, ends = self._chain(prompt)
        total = ends[-1] if ends else 0
        best = 0
        alive = []
        for entry, entry_ids, entry_ends, expires in self.entries:
            if expires < now:
                continue
            n = self._shared(prompt, ids, ends, entry, entry_ids)
            best = max(best, n)
            alive.append((entry, entry_ids, entry_ends,
                          now + r.ttl_s if n >= r.min_cache_tokens else expires))
        cached = best // r.step_tokens * r.step_tokens if best >= r.min_cache_tokens else 0
        cached = min(cached, total)
        alive.append((prompt, ids, ends, now + r.ttl_s))
        self.entries = alive[-64:]
        return Charge(uncached=total - cached, cached=cached, output=output)


class AnthropicCache:
    def __init__(self, rules: Rules):
        self.rules = rules
        self.store: dict[Hashable, float] = {}  # prefix identity -> expires

    def charge(self, prompt: Sequence[Message], breakpoints: Sequence[int], now: float,
               output: int) -> Charge:
        r = self.rules
        ends: list[int] = []
        ids: list[Hashable] = []
        run = 0
        key: Hashable = ()
        for k, t in prompt:
            run += len(t)
            key = hash((key, k))
            ends.append(run)
            ids.append(key)
        total = run
        read, read_at = 0, -1
        for b in breakpoints:
            for p in range(b, max(-1, b - r.lookback - 1), -1):
                if ends[p] < r.min_cache_tokens or ends[p] <= read:
                    continue
                if self.store.get(ids[p], -1.0) >= now:
                    read, read_at = ends[p], p
                    break
        if read_at >= 0:
            self.store[ids[read_at]] = now + r.ttl_s
        top = 0
        for b in breakpoints:
            if ends[b] >= r.min_cache_tokens:
                self.store[ids[b]] = now + r.ttl_s
                top = max(top, ends[b])
        written = max(0, top - read)
        return Charge(uncached=total - max(read, top), cached=read, written=written,
                      output=output)
