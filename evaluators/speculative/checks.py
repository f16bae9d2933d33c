"""Trusted checks of speculative outputs against the target, and the speedup model.

- :func:`first_divergence`: compares a greedy output with the target-only greedy output; at
  a mismatch it re-scores the output teacher-forced, so that a flip between two logits that
  tie to ``tie_tol`` (a k+1-token forward and a 1-token forward round differently) is not
  called a loss of losslessness, while any real departure is.
- :func:`cache_divergence`: the target's KV-cache decoding against its own full forward.
- :func:`chi_square_check`: the sampled output's token counts at one position against the
  target's exact distribution there, with a fixed false-alarm rate ``alpha``.
- :func:`expected_speedup`: ``(1 - a^(k+1)) / ((1 - a)(k c + 1))`` (Leviathan et al. 2023).
- :func:`modelled_speedup`: the same from measured tokens per step, draft cost and the
  verification's cost (``v``: a k+1-token pass over a 1-token step; 1.2-1.5 replayed as a
  CUDA graph on an H200, where the formula's ``v = 1`` overstates a speedup).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import torch


@torch.no_grad()
def first_divergence(model, prompt: torch.Tensor, got: list[int], ref: list[int],
                     tie_tol: float) -> tuple[int, int, int, float] | None:
    """None when ``got`` is the target's greedy output; else (position, got, wanted, gap)."""
    if len(got) != len(ref):
        return (min(len(got), len(ref)), -1, -1, float("inf"))
    j = next((i for i, (a, b) in enumerate(zip(got, ref, strict=True)) if a != b), None)
    if j is None:
        return None
    seq = torch.cat([prompt, torch.tensor(got, dtype=torch.int64, device=prompt.device)])[None]
    logits, _ = model(seq)
    rows = logits[0, len(prompt) - 1 : len(prompt) - 1 + len(got)].double().cpu()
    for i in range(j, len(got)):
        best = int(rows[i].argmax())
        gap = float(rows[i, best] - rows[i, got[i]])
        if gap > tie_tol:
            return (i, got[i], best, gap)
    return None


@torch.no_grad()
def cache_divergence(model, prompt: torch.Tensor, out: list[int],
                     tie_tol: float) -> tuple[int, int, int, float] | None:
    """None when ``out`` (decoded on the KV cache) is the greedy choice of the target's full
    forward at every position; else (position, token, full-forward token, logit gap).

    Both the reference and the speculative outputs are decoded on the cache, so a cache path
    that computes something else than the full forward (a device's attention kernel with a
    mask, say) would pass the losslessness check unseen while the drafts, trained on
    full-forward features, are fed different ones at decoding.
    """
    seq = torch.cat([prompt, torch.tensor(out, dtype=torch.int64, device=prompt.device)])
    logits, _ = model(seq[None])
    rows = logits[0, len(prompt) - 1 : len(prompt) - 1 + len(out)].double().cpu()
    best = rows.argmax(-1)
    gaps = rows.gather(1, best[:, None])[:, 0] - rows[torch.arange(len(out)), torch.tensor(out)]
    bad = (gaps > tie_tol).nonzero()
    if len(bad) == 0:
        return None
    i = int(bad[0, 0])
    return (i, out[i], int(best[i]), float(gaps[i]))


@torch.no_grad()
def target_marginals(model, prompt: torch.Tensor, temperature: float,
                     chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact distributions of the first and second sampled tokens after ``prompt``."""
    logits, _ = model(prompt[None])
    p1 = torch.softmax(logits[0, -1].double().cpu() / temperature, -1)
    vocab = p1.shape[0]
    p2 = torch.zeros(vocab, dtype=torch.float64)
    for lo in range(0, vocab, chunk):
        xs = torch.arange(lo, min(vocab, lo + chunk))
        seqs = torch.cat([prompt.expand(len(xs), -1), xs[:, None].to(prompt.device)], 1)
        lg, _ = model(seqs)
        p2 += p1[xs] @ torch.softmax(lg[:, -1].double().cpu() / temperature, -1)
    return p1, p2


def chi_square_check(counts: torch.Tensor, probs: torch.Tensor, alpha: float,
                     min_expected: float = 5.0) -> tuple[bool, float, float, int]:
    """Pearson's test; cells expected below ``min_expected`` are pooled.

    Returns (passed, statistic, threshold, degrees of freedom). The threshold is the
    chi-square quantile at ``1 - alpha`` (Wilson-Hilferty; within 1% of exact for df >= 3).
    """
    n = float(counts.sum())
    expected = probs.double() * n
    big = expected >= min_expected
    obs = [float(c) for c in counts[big]]
    exp = [float(e) for e in expected[big]]
    rest_o, rest_e = float(counts[~big].sum()), float(expected[~big].sum())
    if rest_e >= min_expected:
        obs.append(rest_o)
        exp.append(rest_e)
    elif obs:
        i = min(range(len(exp)), key=exp.__getitem__)
        obs[i] += rest_o
        exp[i] += rest_e
    df = len(obs) - 1
    if df < 1:
        return True, 0.0, float("inf"), 0
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp, strict=True))
    z = NormalDist().inv_cdf(1 - alpha)
    h = 2 / (9 * df)
    threshold = df * (1 - h + z * math.sqrt(h)) ** 3
    return stat <= threshold, stat, threshold, df


def modelled_speedup(tokens_per_step: float, drafted_per_step: float, c: float,
                     v: float, prefill: float = 0.0) -> float:
    """Speedup a decode should show from its acceptance and its measured costs: tokens per
    target step over the step's cost in target-only steps (``drafted_per_step`` draft steps
    at ``c`` each, plus one verification at ``v``). ``prefill`` is the prompt's forward
    over the target-only decode's steps (``n_new`` of them): both decodes pay it once, so
    it damps the speedup of a draft that needs few verification passes. What the measured
    speedup lacks against the result is the loop's own time outside those parts."""
    per_token = (drafted_per_step * c + v) / max(tokens_per_step, 1e-12)
    return (1 + prefill) / max(prefill + per_token, 1e-12)


def expected_speedup(alpha: float, k: int, c: float) -> float:
    """Speedup predicted from per-token acceptance ``alpha``, ``k`` drafts, cost ratio ``c``."""
    tokens = k + 1 if alpha >= 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
    return tokens / (k * c + 1)
