"""Measure a request trace's figures (a TraceProfile) and write them as JSON.

    .venv/bin/python bench/routing_trace_profile.py \
        ../shared/data/traces/mooncake_conversation.jsonl --end-s 1800 \
        --name mooncake_conversation --source "Mooncake FAST'25 release, conversation_trace.jsonl"
    .venv/bin/python bench/routing_trace_profile.py \
        ../shared/data/deploy/vidur_splitwise_code.csv --end-s 1800 --idle-gap-s 2 \
        --name azure2023_code --source "Azure LLM inference trace 2023 ..., code, ..."

The trace is read, not shipped: only the figures
(evaluators/routing/trace_profiles/<name>.json) are committed, and
evaluators/routing/profiles.py draws workloads that match them.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from evaluators.routing.profiles import PROFILES, QUANTILES, TraceProfile  # noqa: E402
from evaluators.routing.workload import Workload, load_trace  # noqa: E402


def _q(values: list[float] | np.ndarray) -> tuple[float, ...]:
    return tuple(round(float(v), 4) for v in np.quantile(np.asarray(values, float), QUANTILES))


def idle_periods(t: np.ndarray, idle_gap_s: float) -> dict[str, object]:
    """Traffic that comes and goes: a gap over ``idle_gap_s`` ends an active period. The
    active periods' and idle gaps' lengths, the rate while active and the CV of the gaps
    within active periods."""
    gaps = np.diff(t)
    idle = gaps > idle_gap_s
    cuts = np.nonzero(idle)[0]
    first, last = np.r_[0, cuts + 1], np.r_[cuts, len(t) - 1]
    on = t[last] - t[first]
    inner = gaps[~idle]
    return {"idle_gap_s": idle_gap_s,
            "on_rate_rps": round(float(len(t) / max(on.sum(), 1e-9)), 4),
            "on_s_q": _q(on), "off_s_q": _q(gaps[idle]) if idle.any() else _q([idle_gap_s]),
            "burst_cv": round(float(inner.std() / inner.mean()), 4)}


def measure(w: Workload, name: str, source: str, idle_gap_s: float = 0.0) -> TraceProfile:
    t = np.asarray(w.arrival, float)
    gaps = np.diff(t)
    # leading blocks (almost) every request shares: a system prompt
    shared = 0
    while True:
        heads = Counter(b[: shared + 1] for b in w.blocks if len(b) > shared)
        top = heads.most_common(1)
        if not top or top[0][1] < 0.95 * len(w):
            break
        shared += 1
    # longest prefix each request shares with an earlier one, beyond the shared blocks
    seen: dict[tuple[int, ...], float] = {}
    fracs, since = [], []
    for i, b in enumerate(w.blocks):
        k, when = 0, 0.0
        while k < len(b) and b[: k + 1] in seen:
            k += 1
            when = seen[b[:k]]
        if k > shared:
            fracs.append(k / len(b))
            since.append(t[i] - when)
        for j in range(1, len(b) + 1):
            seen[b[:j]] = t[i]
    follow = len(fracs) / max(len(w), 1)
    periods = idle_periods(t, idle_gap_s) if idle_gap_s > 0 else {}
    profile = TraceProfile(
        name=name, source=source, rate_rps=round(len(w) / max(w.duration_s, 1e-9), 4),
        burst_cv=round(float(gaps.std() / gaps.mean()), 4) if len(gaps) > 1 else 1.0,
        input_q=_q(w.prompt), output_q=_q(w.output), block_tokens=w.block_tokens,
        shared_blocks=shared, follow_share=round(follow, 4),
        follow_frac_q=_q(fracs) if fracs else (), follow_gap_q=_q(since) if since else (),
    )
    return dataclasses.replace(profile, **periods) if periods else profile


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", type=Path)
    ap.add_argument("--start-s", type=float, default=0.0)
    ap.add_argument("--end-s", type=float, default=float("inf"))
    ap.add_argument("--name", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--idle-gap-s", type=float, default=0.0,
                    help="traffic that comes and goes: a gap over this ends an active period "
                         "(0: one renewal process)")
    args = ap.parse_args()
    if not args.trace.is_file():
        print(f"trace {args.trace} not found (traces are not part of the project)")
        return 2
    w = load_trace(args.trace).window(args.start_s, args.end_s)
    source = f"{args.source}; window {args.start_s:g}-{args.end_s:g} s, {len(w)} requests"
    profile = measure(w, args.name, source, args.idle_gap_s)
    out = args.out or PROFILES / f"{args.name}.json"
    out.write_text(profile.to_json())
    print(profile.to_json(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
