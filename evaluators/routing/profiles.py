"""Trace families as figures: a real trace's measured statistics, and a generator that
draws workloads matching them (the trace itself is not part of the project).

A :class:`TraceProfile` holds what ``bench/routing_trace_profile.py`` measures on a trace:
its request rate and the burstiness of its arrivals (coefficient of variation of the
gaps), the prompt and output lengths as 21 quantiles (0, 5, ..., 100%), and how prompts
share prefixes: how many leading blocks every request shares (a system prompt), the share
of requests that continue an earlier prompt, how much of their prompt that earlier prompt
covers, and how long before it arrived. :func:`generate` draws a workload of those
figures for a seed, a duration and a rate scale; the profiles derived from the traces in
``../shared/data/traces/`` are kept in ``trace_profiles/*.json`` beside this module, each
naming its source and the window it was measured on.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from evaluators.routing.workload import Workload

PROFILES = Path(__file__).with_name("trace_profiles")
QUANTILES = tuple(i / 20 for i in range(21))


@dataclass(frozen=True)
class TraceProfile:
    name: str
    source: str  # where the figures come from (trace, release, window)
    rate_rps: float
    burst_cv: float
    input_q: tuple[float, ...]  # prompt tokens at QUANTILES
    output_q: tuple[float, ...]  # output tokens at QUANTILES
    block_tokens: int = 512
    shared_blocks: int = 0  # leading blocks every request shares (a system prompt)
    follow_share: float = 0.0  # requests that continue an earlier request's prompt
    follow_frac_q: tuple[float, ...] = ()  # their shared blocks / their blocks, at QUANTILES
    follow_gap_q: tuple[float, ...] = ()  # seconds since that earlier request, at QUANTILES
    # traffic that comes and goes (bench/routing_trace_profile.py --idle-gap-s): a gap over
    # idle_gap_s ends an active period; active periods last on_s_q seconds and idle ones
    # off_s_q, arrivals come at on_rate_rps while active (gaps of CV burst_cv), none idle
    idle_gap_s: float = 0.0  # 0: one active period (a renewal process at rate_rps)
    on_rate_rps: float = 0.0
    on_s_q: tuple[float, ...] = ()
    off_s_q: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        for col in ("input_q", "output_q"):
            if len(getattr(self, col)) != len(QUANTILES):
                raise ValueError(f"profile {self.name!r}: {col} needs {len(QUANTILES)} values")
        if self.idle_gap_s > 0 and (self.on_rate_rps <= 0 or len(self.on_s_q) != len(QUANTILES)
                                    or len(self.off_s_q) != len(QUANTILES)):
            raise ValueError(f"profile {self.name!r}: idle_gap_s > 0 needs on_rate_rps > 0, "
                             f"on_s_q and off_s_q ({len(QUANTILES)} values each)")
        if self.follow_share > 0 and (len(self.follow_frac_q) != len(QUANTILES)
                                      or len(self.follow_gap_q) != len(QUANTILES)):
            raise ValueError(f"profile {self.name!r}: follow_share > 0 needs follow_frac_q "
                             f"and follow_gap_q ({len(QUANTILES)} values each)")

    def to_json(self) -> str:
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)}, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> TraceProfile:
        raw = json.loads(text)
        known = {f.name for f in fields(cls)}
        extra = sorted(set(raw) - known)
        if extra:
            raise ValueError(f"unknown profile key(s) {extra}; allowed {sorted(known)}")
        for k in ("input_q", "output_q", "follow_frac_q", "follow_gap_q", "on_s_q", "off_s_q"):
            if k in raw:
                raw[k] = tuple(float(v) for v in raw[k])
        return cls(**raw)


def load_profile(name: str) -> TraceProfile:
    path = PROFILES / f"{name}.json"
    if not path.is_file():
        known = sorted(p.stem for p in PROFILES.glob("*.json"))
        raise ValueError(f"profile {name!r}: no such profile; known {known}")
    return TraceProfile.from_json(path.read_text())


def _draw(rng: np.random.Generator, q: tuple[float, ...], n: int) -> np.ndarray:
    """Inverse-CDF draws, linear between the quantiles."""
    return np.interp(rng.random(n), QUANTILES, q)


def _renewal(rng: np.random.Generator, rate: float, cv: float, duration_s: float) -> np.ndarray:
    """Arrival times in [0, duration_s) with gamma gaps of mean 1/rate and CV ``cv``."""
    shape = 1.0 / max(cv, 1e-3) ** 2
    n_guess = int(duration_s * rate * 1.5) + 16
    arrival = np.cumsum(rng.gamma(shape, 1.0 / (rate * shape), n_guess))
    return arrival[arrival < duration_s]


def _arrivals(profile: TraceProfile, rng: np.random.Generator, duration_s: float,
              rate_scale: float) -> np.ndarray:
    """One renewal process at the profile's rate; or, for traffic that comes and goes,
    active periods (a renewal process at the active rate) between idle ones, their lengths
    drawn from the measured quantiles and the same at every rate scale (more load is more
    traffic while active, not longer activity)."""
    if profile.idle_gap_s <= 0:
        return _renewal(rng, profile.rate_rps * rate_scale, profile.burst_cv, duration_s)
    parts, t = [], 0.0
    while t < duration_s:
        on = max(float(_draw(rng, profile.on_s_q, 1)[0]), 1e-3)
        parts.append(t + _renewal(rng, profile.on_rate_rps * rate_scale, profile.burst_cv,
                                  min(on, duration_s - t)))
        t += on + max(float(_draw(rng, profile.off_s_q, 1)[0]), profile.idle_gap_s)
    return np.concatenate(parts)


PARENTS = ("latest", "covering")
SEARCH_BACK = 256  # earlier requests a "covering" follow-up looks through for its parent


def generate(profile: TraceProfile, seed: int, duration_s: float, rate_scale: float = 1.0,
             name: str | None = None, parents: str = "latest") -> Workload:
    """A workload of ``profile``'s figures: ``duration_s`` seconds at ``rate_scale`` times
    its rate; the same seed gives the same requests.

    ``parents``: which earlier prompt a follow-up continues. ``"latest"``: the latest
    request at least the drawn gap ago, its share of the follow-up cut to that prompt's
    length (prompt lengths are drawn independently, so a short parent covers less than the
    drawn share). ``"covering"``: the latest such request whose prompt is long enough for
    the drawn share (looking back through at most 256 requests), so the shares follow the
    measured quantiles. On the Mooncake profile an unbounded cache serves 0.22-0.25 of the
    prompt tokens with ``"covering"`` and 0.16-0.18 with ``"latest"``, against 0.28-0.30
    in the trace's own windows (docs/deploy.md, bench/routing_profile_reuse.py)."""
    if rate_scale <= 0 or duration_s <= 0:
        raise ValueError("duration_s and rate_scale must be positive")
    if parents not in PARENTS:
        raise ValueError(f"parents must be one of {PARENTS}, not {parents!r}")
    rng = np.random.default_rng(seed)
    arrival = _arrivals(profile, rng, duration_s, rate_scale)
    n = len(arrival)
    bt = profile.block_tokens
    prompts = np.maximum(1, _draw(rng, profile.input_q, n).astype(int))
    outputs = np.maximum(1, _draw(rng, profile.output_q, n).astype(int))
    follow = rng.random(n) < profile.follow_share
    fracs = _draw(rng, profile.follow_frac_q, n) if profile.follow_share > 0 else np.zeros(n)
    # an earlier prompt seen this long ago at the scaled rate: gaps shrink with the load
    gaps = (_draw(rng, profile.follow_gap_q, n) / rate_scale if profile.follow_share > 0
            else np.zeros(n))
    shared = tuple(range(profile.shared_blocks))
    next_id = profile.shared_blocks
    blocks: list[tuple[int, ...]] = []
    session: list[int] = []
    times = arrival.tolist()
    for i in range(n):
        full = int(prompts[i]) // bt
        prefix: tuple[int, ...] = shared[:full]
        sid = i
        if follow[i] and i > 0:
            # the latest request at least the drawn gap ago (the first one early in a run)
            j = max(0, bisect.bisect_right(times, times[i] - gaps[i], 0, i) - 1)
            want = max(profile.shared_blocks + 1, int(round(fracs[i] * full)))
            if parents == "covering":
                j = next((c for c in range(j, max(-1, j - SEARCH_BACK), -1)
                          if len(blocks[c]) >= want), j)
            if len(blocks[j]) > profile.shared_blocks:
                k = min(len(blocks[j]), want)
                if k > len(prefix):
                    prefix, sid = blocks[j][:k], session[j]
                    full = max(full, k)
                    prompts[i] = max(int(prompts[i]), k * bt)
        fresh = full - len(prefix)
        blocks.append(prefix + tuple(range(next_id, next_id + fresh)))
        next_id += fresh
        session.append(sid)
    label = name or f"{profile.name}-s{seed}x{rate_scale:g}"
    return Workload(name=label, arrival=tuple(times), prompt=tuple(int(p) for p in prompts),
                    output=tuple(int(o) for o in outputs), blocks=tuple(blocks),
                    session=tuple(session), region=("local",) * n, block_tokens=bt)
