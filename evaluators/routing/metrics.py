"""Metrics and diagnostics of a simulation, computed on the trusted side only.

Latencies include the client's network round trip. TTFT = first token - arrival + rtt;
TPOT = (last - first token) / (output - 1) for outputs longer than one token; e2e =
last token - arrival + rtt. Goodput counts requests per second that met both SLOs.
Imbalance is the largest replica's prefill+decode token share over the mean share.
Cost per million tokens is the fleet's price over the simulated span divided by the
prompt and output tokens served.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evaluators.routing.sim import SimResult


@dataclass(frozen=True)
class Slo:
    ttft_s: float = 2.0
    tpot_s: float = 0.1


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else float("nan")


def compute_metrics(res: SimResult, slo: Slo | None = None) -> dict[str, float]:
    slo = slo or Slo()
    w = res.workload
    arrival = np.asarray(w.arrival, dtype=float)
    output = np.asarray(w.output, dtype=float)
    prompt = np.asarray(w.prompt, dtype=float)
    first = np.asarray(res.first_token, dtype=float)
    last = np.asarray(res.finish, dtype=float)
    rtt = np.asarray(res.rtt, dtype=float)
    served = ~np.asarray(res.dropped, dtype=bool)
    ttft = (first - arrival + rtt)[served]
    e2e = (last - arrival + rtt)[served]
    multi = served & (output > 1)
    tpot = ((last - first)[multi]) / (output[multi] - 1)
    span = max(res.end_s - (w.arrival[0] if len(w) else 0.0), 1e-9)
    out_served = output[served]
    tp = np.zeros(served.sum())
    idx = out_served > 1
    tp[idx] = ((last - first)[served][idx]) / (out_served[idx] - 1)
    ok_tpot = tp <= slo.tpot_s
    good = int(((ttft <= slo.ttft_s) & ok_tpot).sum())
    work = np.asarray(res.prefill_tokens) + np.asarray(res.decode_tokens)
    tokens = float(prompt[served].sum() + output[served].sum())
    usd = res.fleet.usd_per_hour() * span / 3600.0
    return {
        "ttft_p50_s": _pct(ttft, 50),
        "ttft_p90_s": _pct(ttft, 90),
        "ttft_p99_s": _pct(ttft, 99),
        "ttft_mean_s": float(ttft.mean()) if ttft.size else float("nan"),
        "tpot_p50_s": _pct(tpot, 50),
        "tpot_p99_s": _pct(tpot, 99),
        "e2e_p50_s": _pct(e2e, 50),
        "e2e_p99_s": _pct(e2e, 99),
        "throughput_tok_s": float(output[served].sum()) / span,
        "goodput_rps": good / span,
        "slo_attainment": good / max(len(w), 1),
        "prefix_hit_ratio": float(
            np.asarray(res.cached)[served].sum() / max(prompt[served].sum(), 1)
        ),
        "drops": float((~served).sum()),
        "preemptions": float(sum(res.preempted)),
        "imbalance": float(work.max() / work.mean()) if work.mean() > 0 else 1.0,
        "usd_per_mtok": usd / max(tokens / 1e6, 1e-12),
        "requests": float(len(w)),
        "replicas": float(len(res.fleet)),
    }


def diagnostics(res: SimResult, top: int = 3) -> str:
    """A few lines for the next prompt: hot replicas, queues, who got the slow requests."""
    w = res.workload
    n = len(res.fleet)
    span = max(res.end_s, 1e-9)
    served = ~np.asarray(res.dropped, dtype=bool)
    dec = np.asarray(res.decisions)
    ttft = np.asarray(res.first_token) - np.asarray(w.arrival) + np.asarray(res.rtt)
    work = np.asarray(res.prefill_tokens) + np.asarray(res.decode_tokens)
    lines = [f"{len(w)} requests on {n} replicas over {span:.0f} s; "
             f"{int((~served).sum())} dropped, {sum(res.preempted)} preemptions"]
    order = np.argsort(-work)[:top]
    for k in order:
        mine = served & (dec == k)
        p99 = float(np.percentile(ttft[mine], 99)) if mine.any() else float("nan")
        lines.append(
            f"replica {k} ({res.fleet.replicas[k].accelerator}/{res.fleet.replicas[k].region}): "
            f"{int((dec == k).sum())} requests, {work[k] / work.sum():.1%} of tokens, "
            f"busy {res.busy_s[k] / span:.0%}, mean queue {res.queue_area[k] / span:.2f}, "
            f"max queue {res.max_queue[k]}, p99 TTFT {p99:.2f} s"
        )
    if served.any():
        slow = np.argsort(-np.where(served, ttft, -np.inf))[:top]
        lines.append("slowest first tokens: " + "; ".join(
            f"req {i} ({w.prompt[i]} prompt tokens, {res.cached[i]} cached) -> replica "
            f"{dec[i]}: {ttft[i]:.2f} s" for i in slow))
    return "\n".join(lines)
