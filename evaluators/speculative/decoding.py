"""Plain and speculative decoding (chain verification), greedy and sampled.

One verification pass is one target forward over ``[last token, d_1 .. d_k]`` on the KV
cache; rejected positions are dropped by truncating the cache. Greedy: drafts are
accepted while they equal the target's argmax, then the target's own token follows, so
the output is the target's greedy output. Sampled: the standard rule (accept ``d_i`` with
probability ``min(1, p(d_i) / q(d_i))``, on rejection sample from ``norm(max(0, p - q))``,
after ``k`` acceptances sample the bonus token from ``p``), so the output distribution
equals the target's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from evaluators.speculative.api import Draft


class DraftContractError(RuntimeError):
    """A draft broke the protocol (wrong count, tokens not chosen by ``pick``)."""


@dataclass
class SpecStats:
    """Counts and times of one or more speculative generations (additive)."""

    k: int
    target_steps: int = 0  # verification passes (each = one target forward)
    tokens: int = 0  # tokens emitted
    drafted: int = 0
    reached: list[int] = field(default_factory=list)  # per draft position: times it was judged
    accepted: list[int] = field(default_factory=list)  # per draft position: times accepted
    draft_s: float = 0.0
    verify_s: float = 0.0
    prefill_s: float = 0.0  # the prompt's forward and the first token (once per prompt)
    total_s: float = 0.0

    def __post_init__(self) -> None:
        self.reached = self.reached or [0] * self.k
        self.accepted = self.accepted or [0] * self.k

    def add(self, other: SpecStats) -> None:
        self.target_steps += other.target_steps
        self.tokens += other.tokens
        self.drafted += other.drafted
        for i in range(self.k):
            self.reached[i] += other.reached[i]
            self.accepted[i] += other.accepted[i]
        self.draft_s += other.draft_s
        self.verify_s += other.verify_s
        self.prefill_s += other.prefill_s
        self.total_s += other.total_s

    @property
    def mean_accepted_len(self) -> float:
        """Tokens per target step (accepted drafts + the target's own token)."""
        return self.tokens / max(1, self.target_steps)

    @property
    def acceptance_rate(self) -> float:
        """Per-token acceptance alpha: accepted over judged positions (geometric MLE)."""
        return sum(self.accepted) / max(1, sum(self.reached))

    def acceptance_per_position(self) -> list[float]:
        return [a / r if r else 0.0 for a, r in zip(self.accepted, self.reached, strict=True)]


def _choose(logits: torch.Tensor, temperature: float, gen: torch.Generator | None) -> int:
    if temperature <= 0:
        return int(logits.argmax())
    probs = torch.softmax(logits.double().cpu() / temperature, -1)  # generators live on CPU
    return int(torch.multinomial(probs, 1, generator=gen))


@torch.no_grad()
def plain_decode(model, prompt: torch.Tensor, n_new: int, *, temperature: float = 0.0,
                 generator: torch.Generator | None = None) -> list[int]:
    """Target-only decoding of ``n_new`` tokens after ``prompt`` ``[P]`` (KV cached)."""
    cache = model.new_cache(1, len(prompt) + n_new + 1)
    logits, _ = model(prompt[None], cache)
    out: list[int] = []
    while True:
        out.append(_choose(logits[0, -1], temperature, generator))
        if len(out) == n_new:
            return out
        logits, _ = model(torch.tensor([[out[-1]]], device=prompt.device), cache)


class _Pick:
    """The loop's ``pick`` for one draft step: chooses a token from the draft's logits (argmax
    when greedy, a sample from the trusted generator when sampling) and records what it
    chose and, when sampling, the draft distribution ``q``. ``take(tok)`` records a token
    chosen by argmax elsewhere (greedy only: a remote draft picks in its own process, and a
    greedy output depends on the drafted tokens alone, never on their logits)."""

    def __init__(self, kk: int, temperature: float, generator: torch.Generator | None):
        self.kk, self.temperature, self.generator = kk, temperature, generator
        self.greedy = temperature <= 0  # pick returns the argmax (see api.py)
        self.chosen: list[int] = []
        self.qs: list[torch.Tensor] = []

    def _room(self) -> None:
        if len(self.chosen) >= self.kk:
            raise DraftContractError(f"draft called pick more than k={self.kk} times")

    def __call__(self, draft_logits: torch.Tensor) -> int:
        self._room()
        tok = _choose(draft_logits.detach(), self.temperature, self.generator)
        if self.temperature > 0:
            self.qs.append(torch.softmax(draft_logits.detach().double().cpu() / self.temperature,
                                         -1))
        self.chosen.append(tok)
        return tok

    def take(self, tok: int) -> int:
        if self.temperature > 0:
            raise DraftContractError("take() records greedy choices only; sampling needs logits")
        self._room()
        self.chosen.append(int(tok))
        return int(tok)


@torch.no_grad()
def speculative_decode(model, draft: Draft, prompt: torch.Tensor, n_new: int, k: int, *,
                       temperature: float = 0.0, generator: torch.Generator | None = None,
                       ) -> tuple[list[int], SpecStats]:
    """Generate ``n_new`` tokens with ``draft`` proposing up to ``k`` per target step."""
    stats = SpecStats(k)
    start = time.perf_counter()
    vocab = int(model.cfg.vocab)
    layers = tuple(draft.feature_layers)
    cache = model.new_cache(1, len(prompt) + n_new + k + 2)
    logits, feats = model(prompt[None], cache, layers)
    first = _choose(logits[0, -1], temperature, generator)
    stats.prefill_s = time.perf_counter() - start
    out = [first]
    draft.reset(torch.cat([prompt, prompt.new_tensor([first])]),
                feats[0] if feats is not None else None)
    while len(out) < n_new:
        kk = min(k, n_new - len(out))
        pick = _Pick(kk, temperature, generator)
        chosen, qs = pick.chosen, pick.qs
        t0 = time.perf_counter()
        drafted = [int(t) for t in draft.propose(kk, pick)]
        t1 = time.perf_counter()
        if drafted != chosen[: len(drafted)] or len(drafted) > kk:
            raise DraftContractError(
                f"draft returned {drafted[:8]} but pick chose {chosen[:8]} (k={kk}); every "
                "drafted token must be the value pick returned, in order"
            )
        if any(not 0 <= t < vocab for t in drafted):
            raise DraftContractError(f"draft proposed a token outside the vocabulary of {vocab}: "
                                     f"{[t for t in drafted if not 0 <= t < vocab][:4]}")
        n_draft = len(drafted)
        inp = torch.tensor([[out[-1], *drafted]], device=prompt.device)
        logits, feats = model(inp, cache, layers)
        row = logits[0]
        n = 0
        if temperature <= 0:
            target_tokens = row.argmax(-1).tolist()
            while n < n_draft and drafted[n] == target_tokens[n]:
                n += 1
            nxt = int(target_tokens[n])
        else:
            p = torch.softmax(row.double().cpu() / temperature, -1)
            nxt = -1
            while n < n_draft:
                d = drafted[n]
                ratio = float(p[n, d] / qs[n][d]) if qs[n][d] > 0 else 0.0
                if float(torch.rand((), generator=generator, dtype=torch.float64)) < ratio:
                    n += 1
                    continue
                resid = (p[n] - qs[n]).clamp_min(0)
                total = float(resid.sum())
                resid = resid / total if total > 0 else p[n]
                nxt = int(torch.multinomial(resid, 1, generator=generator))
                break
            if nxt < 0:
                nxt = int(torch.multinomial(p[n_draft], 1, generator=generator))
        for i in range(min(n + 1, n_draft)):  # judged only if all before it were accepted
            stats.reached[i] += 1
            stats.accepted[i] += i < n
        new = drafted[:n] + [nxt]
        cache.truncate(cache.length - (n_draft - n))
        draft.accept(new, feats[0, : n + 1] if feats is not None else None)
        out.extend(new)
        stats.target_steps += 1
        stats.tokens += len(new)
        stats.drafted += n_draft
        stats.draft_s += t1 - t0
        stats.verify_s += time.perf_counter() - t1
    out = out[:n_new]
    stats.total_s = time.perf_counter() - start
    return out, stats
