import math

import numpy as np
import pytest

from optimizer.stats import (
    SpeedupCI,
    exact_improvement,
    paired_bootstrap_speedup,
    relative_gain,
    spread,
)


def _times(rng: np.random.Generator, n: int, median: float, noise: float) -> np.ndarray:
    # Multiplicative (log-normal) noise keeps times positive and the true median exact.
    return median * np.exp(rng.normal(0.0, noise, n))


def test_true_20pct_speedup_with_5pct_noise_is_significant():
    rng = np.random.default_rng(7)
    base = _times(rng, 30, 1.0, 0.05)
    cand = _times(rng, 30, 1.0 / 1.2, 0.05)
    ci = paired_bootstrap_speedup(base, cand)
    assert 1.1 < ci.speedup < 1.3
    assert ci.low < ci.speedup < ci.high
    assert ci.n == 30 and ci.confidence == 0.95
    assert ci.significant(0.05)
    # The same data does not support a gain larger than the truth by a wide margin.
    assert not ci.significant(0.5)


def test_point_estimate_is_ratio_of_medians():
    base = [3.0, 1.0, 2.0, 10.0]
    cand = [1.0, 0.5, 2.0, 1.0]
    ci = paired_bootstrap_speedup(base, cand)
    assert ci.speedup == pytest.approx(np.median(base) / np.median(cand))
    ci_max = paired_bootstrap_speedup(base, cand, minimize=False)
    assert ci_max.speedup == pytest.approx(np.median(cand) / np.median(base))


def test_identical_distributions_false_positive_rate_stays_near_alpha():
    n_runs = 300
    hits = 0
    for s in range(n_runs):
        rng = np.random.default_rng(10_000 + s)
        base = _times(rng, 30, 1.0, 0.05)
        cand = _times(rng, 30, 1.0, 0.05)
        hits += paired_bootstrap_speedup(base, cand, seed=s, n_boot=1000).significant(0.0)
    # One-sided error of a 95% two-sided interval is 2.5% in theory (measured 2.3% over
    # 400 seeds); allow binomial slack above 1 - confidence.
    assert hits / n_runs <= 0.07


def test_interval_covers_true_ratio_in_most_seeds():
    n_runs = 200
    covered = 0
    for s in range(n_runs):
        rng = np.random.default_rng(20_000 + s)
        base = _times(rng, 30, 2.0, 0.08)
        cand = _times(rng, 30, 2.0 / 1.2, 0.08)
        ci = paired_bootstrap_speedup(base, cand, seed=s, n_boot=1000)
        covered += ci.low <= 1.2 <= ci.high
    # Nominal 95%; measured 96% over 400 seeds. A loose bound catches a broken interval.
    assert covered / n_runs >= 0.85


def test_maximize_direction():
    rng = np.random.default_rng(3)
    base = 100.0 * np.exp(rng.normal(0, 0.03, 20))  # tokens/s
    cand = 125.0 * np.exp(rng.normal(0, 0.03, 20))
    up = paired_bootstrap_speedup(base, cand, minimize=False)
    assert up.speedup == pytest.approx(1.25, rel=0.05)
    assert up.significant(0.1)
    # Read as times, the same numbers say the candidate is slower.
    down = paired_bootstrap_speedup(base, cand, minimize=True)
    assert down.speedup == pytest.approx(1 / 1.25, rel=0.05)
    assert down.high < 1.0
    assert not down.significant(0.0)


def test_pairs_are_resampled_together():
    # A drift shared by both sides of each pair (clock boost, noisy neighbour) is far larger
    # than the effect; resampling pairs cancels it, resampling each side alone cannot.
    rng = np.random.default_rng(11)
    drift = np.exp(rng.normal(0, 0.3, 40))
    base = 1.0 * drift * np.exp(rng.normal(0, 0.005, 40))
    cand = (1.0 / 1.1) * drift * np.exp(rng.normal(0, 0.005, 40))
    paired = paired_bootstrap_speedup(base, cand)
    assert paired.significant(0.05)

    boot = np.random.default_rng(0)
    i = boot.integers(0, 40, (2000, 40))
    j = boot.integers(0, 40, (2000, 40))
    unpaired = np.median(base[i], axis=1) / np.median(cand[j], axis=1)
    lo, hi = np.quantile(unpaired, [0.025, 0.975])
    assert (paired.high - paired.low) < 0.5 * (hi - lo)
    assert lo < 1.05  # the unpaired interval could not have called this a win


def test_same_seed_same_interval():
    rng = np.random.default_rng(5)
    base, cand = _times(rng, 12, 1.0, 0.1), _times(rng, 12, 0.9, 0.1)
    a = paired_bootstrap_speedup(base, cand, seed=42)
    b = paired_bootstrap_speedup(base, cand, seed=42)
    assert a == b
    assert isinstance(a, SpeedupCI)
    assert "x (95% CI" in str(a)


@pytest.mark.parametrize(
    ("base", "cand", "match"),
    [
        ([1.0, 1.0, 1.0], [1.0, 1.0], "same interleaved repetitions"),
        ([1.0, 1.0], [1.0, 1.0], "at least 3"),
        ([1.0, 0.0, 1.0], [1.0, 1.0, 1.0], r"baseline\[1\]"),
        ([1.0, 1.0, 1.0], [1.0, -2.0, 1.0], r"candidate\[1\]"),
        ([1.0, 1.0, 1.0], [1.0, float("nan"), 1.0], "finite positive"),
    ],
)
def test_input_errors(base, cand, match):
    with pytest.raises(ValueError, match=match):
        paired_bootstrap_speedup(base, cand)


def test_bad_confidence_and_n_boot():
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap_speedup([1, 2, 3], [1, 2, 3], confidence=1.0)
    with pytest.raises(ValueError, match="n_boot"):
        paired_bootstrap_speedup([1, 2, 3], [1, 2, 3], n_boot=10)


def test_exact_improvement():
    # 1.0 -> 0.9 s is an 11.1% speedup.
    assert exact_improvement(1.0, 0.9, minimize=True, min_gain=0.1)
    assert not exact_improvement(1.0, 0.9, minimize=True, min_gain=0.12)
    # Exactly at the margin is not an improvement, even with float round-off.
    assert not exact_improvement(1.0, 1.0 / 1.05, minimize=True, min_gain=0.05)
    assert not exact_improvement(1.0, 1.0, minimize=True, min_gain=0.0)
    assert exact_improvement(100.0, 120.0, minimize=False, min_gain=0.05)
    assert not exact_improvement(100.0, 120.0, minimize=True, min_gain=0.0)
    # Costs that reach zero or go negative fall back to a difference relative to |baseline|.
    assert exact_improvement(2.0, 0.0, minimize=True, min_gain=0.5)
    assert exact_improvement(-10.0, -12.0, minimize=True, min_gain=0.1)
    assert not exact_improvement(-10.0, -10.5, minimize=True, min_gain=0.1)
    assert not exact_improvement(0.0, 0.0, minimize=True, min_gain=0.0)
    with pytest.raises(ValueError, match="min_gain"):
        exact_improvement(1.0, 0.5, minimize=True, min_gain=-0.1)
    with pytest.raises(ValueError, match="finite"):
        exact_improvement(1.0, math.inf, minimize=True, min_gain=0.0)


def test_relative_gain_matches_speedup_scale():
    assert relative_gain(1.0, 0.8, minimize=True) == pytest.approx(0.25)
    assert relative_gain(100.0, 80.0, minimize=False) == pytest.approx(-0.2)
    assert relative_gain(0.0, 1.0, minimize=True) == -math.inf


def test_spread():
    s = spread([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median"] == 3.0
    assert s["iqr"] == pytest.approx(2.0)
    assert s["rel_iqr"] == pytest.approx(2.0 / 3.0)
    assert (s["min"], s["max"], s["n"]) == (1.0, 100.0, 5)
    assert math.isnan(spread([-1.0, 0.0, 1.0])["rel_iqr"])
    with pytest.raises(ValueError, match="non-empty"):
        spread([])
    with pytest.raises(ValueError, match="NaN"):
        spread([1.0, float("inf")])
