"""Statistics for deciding whether a candidate really beats its baseline.

Two kinds of evidence, matching a target's ``noise`` setting:

- ``"timing"``: repeated, interleaved measurements of baseline and candidate. Repetition
  ``i`` of both ran back to back under the same machine conditions, so the pairs are
  resampled together (:func:`paired_bootstrap_speedup`); a win needs the lower end of the
  confidence interval above ``1 + min_gain``.
- ``"deterministic"``: a simulator gives the same number every time, so a single comparison
  with a relative margin decides (:func:`exact_improvement`); held-out confirmation guards
  against overfitting elsewhere.

Only numpy is used, so evaluators on a bare GPU machine can import this module too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Relative slack for exact comparisons: float noise from summing a simulated trace in a
# different order is around 1e-15 relative; this is far above that and far below any gain
# anyone would call real.
_EXACT_EPS = 1e-9


@dataclass(frozen=True)
class SpeedupCI:
    """A speedup (> 1 means the candidate is better) with a bootstrap confidence interval."""

    speedup: float  # ratio of medians, oriented so that larger is better
    low: float
    high: float
    n: int  # number of pairs
    confidence: float

    def significant(self, min_gain: float) -> bool:
        """True when even the pessimistic end of the interval beats ``1 + min_gain``."""
        return self.low > 1.0 + min_gain

    def __str__(self) -> str:
        pct = round(self.confidence * 100)
        return f"{self.speedup:.3f}x ({pct}% CI {self.low:.3f}-{self.high:.3f}, n={self.n})"


def _as_positive_array(values: Sequence[float], name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a flat sequence of numbers, got shape {arr.shape}")
    bad = ~np.isfinite(arr) | (arr <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{name}[{i}] = {arr[i]!r}: every measurement must be a finite positive number "
            "(times, throughputs); a failed repetition belongs in the candidate's state, "
            "not in its samples"
        )
    return arr


def paired_bootstrap_speedup(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    minimize: bool = True,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
) -> SpeedupCI:
    """Speedup of ``candidate`` over ``baseline`` with a paired percentile bootstrap CI.

    ``baseline[i]`` and ``candidate[i]`` must come from the same (interleaved) repetition.
    The point estimate is the ratio of medians: ``median(baseline) / median(candidate)``
    when minimizing (times), the inverse when maximizing (throughputs), so larger is always
    better. The interval resamples whole pairs with replacement ``n_boot`` times and takes
    the central ``confidence`` percentiles of the resampled ratio; a drift shared by both
    sides of a pair (clock boost, a noisy neighbour) therefore cancels instead of widening
    the interval.
    """
    b = _as_positive_array(baseline, "baseline")
    c = _as_positive_array(candidate, "candidate")
    if b.shape != c.shape:
        raise ValueError(
            f"baseline has {b.size} samples but candidate has {c.size}: the bootstrap "
            "resamples pairs, so both must come from the same interleaved repetitions"
        )
    if b.size < 3:
        raise ValueError(
            f"only {b.size} pair(s): at least 3 are needed for a confidence interval "
            "(raise the evaluator's repetitions)"
        )
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if n_boot < 100:
        raise ValueError(f"n_boot must be at least 100 for stable percentiles, got {n_boot}")

    num, den = (b, c) if minimize else (c, b)
    point = float(np.median(num) / np.median(den))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, b.size, size=(n_boot, b.size))
    ratios = np.median(num[idx], axis=1) / np.median(den[idx], axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
    return SpeedupCI(
        speedup=point, low=float(low), high=float(high), n=int(b.size), confidence=confidence
    )


def relative_gain(baseline: float, candidate: float, *, minimize: bool) -> float:
    """How much better ``candidate`` is than ``baseline``, as a fraction (0.25 = 25%).

    For positive values this is the speedup minus one (``baseline/candidate - 1`` when
    minimizing), the same scale :meth:`SpeedupCI.significant` uses. When either value is
    zero or negative (a cost that can reach zero, a signed score) a ratio means nothing, so
    the difference relative to ``|baseline|`` is used instead; a zero baseline then gives
    ``+inf``/``-inf``/``0``.
    """
    if not (math.isfinite(baseline) and math.isfinite(candidate)):
        raise ValueError(
            f"relative gain needs finite values, got baseline={baseline!r}, candidate={candidate!r}"
        )
    if baseline > 0 and candidate > 0:
        return baseline / candidate - 1.0 if minimize else candidate / baseline - 1.0
    diff = (baseline - candidate) if minimize else (candidate - baseline)
    if baseline == 0:
        return math.copysign(math.inf, diff) if diff else 0.0
    return diff / abs(baseline)


def exact_improvement(
    baseline: float, candidate: float, *, minimize: bool, min_gain: float
) -> bool:
    """Whether a deterministic measurement beats the baseline by more than ``min_gain``."""
    if min_gain < 0:
        raise ValueError(f"min_gain must be >= 0, got {min_gain!r}")
    return relative_gain(baseline, candidate, minimize=minimize) > min_gain + _EXACT_EPS


def spread(samples: Sequence[float]) -> dict[str, float]:
    """Median, IQR, relative IQR (IQR / |median|), min, max and count of some samples.

    ``rel_iqr`` is ``nan`` when the median is zero.
    """
    arr = np.asarray(samples, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError("spread needs a non-empty flat sequence of numbers")
    if not np.isfinite(arr).all():
        raise ValueError("spread: samples contain NaN or Inf")
    q1, med, q3 = np.quantile(arr, [0.25, 0.5, 0.75])
    iqr = float(q3 - q1)
    return {
        "median": float(med),
        "iqr": iqr,
        "rel_iqr": iqr / abs(float(med)) if med != 0 else math.nan,
        "min": float(arr.min()),
        "max": float(arr.max()),
        "n": int(arr.size),
    }
