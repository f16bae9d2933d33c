"""Capacity per dollar: how much of a trace's traffic a plan serves within the SLO.

The highest arrival-rate scale ``s`` of a workload (the same requests arriving ``s`` times
faster) at which the fleet keeps TTFT p90 and TBT p99 within the SLO, found by bisection
in log space between the target's ``scale_range`` in ``steps`` simulations (plus the two
ends), divided by the fleet's price: requests per second served per dollar an hour.

Assumption: meeting the SLO is monotone in the scale (more load never helps). The fluid
simulator has no per-token times, so TBT p99 is the 99th percentile over requests of their
mean time between tokens (the routing metrics' ``tpot_p99_s``). A dropped request counts
as missing the TTFT SLO.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from evaluators.routing.deploy.plan import ClassRouter, Limits, Plan, build_fleet
from evaluators.routing.metrics import compute_metrics
from evaluators.routing.sim import SimConfig, SimResult, simulate
from evaluators.routing.workload import Workload


@dataclass(frozen=True)
class DeploySlo:
    ttft_p90_s: float = 2.0
    tbt_p99_s: float = 0.2


def bisect_capacity(passes: Callable[[float], bool], low: float, high: float,
                    steps: int) -> float:
    """The highest scale in ``[low, high]`` that passes, to a factor of
    ``(high / low) ** (1 / 2**steps)``: 0 when even ``low`` fails, ``high`` when it passes."""
    if not 0 < low < high or steps < 0:
        raise ValueError(f"need 0 < low < high and steps >= 0, got {low}, {high}, {steps}")
    if not passes(low):
        return 0.0
    if passes(high):
        return high
    for _ in range(steps):
        mid = math.sqrt(low * high)
        if passes(mid):
            low = mid
        else:
            high = mid
    return low


def beyond_resolution(ratio: float, resolution: float) -> bool:
    """Whether a plan at ``ratio`` times another's capacity loses to it by more than the
    bisection's ``resolution`` (its step as a factor). Two bisections that end one step
    apart give a ratio of exactly one step, which is within it: the float test allows for
    the rounding of that ratio."""
    return ratio * resolution < 1.0 - 1e-9


def clip(workload: Workload, max_prompt: int, max_output: int) -> Workload:
    """Prompts and outputs cut to the target's longest (a plan is checked against them)."""
    from dataclasses import replace

    bt = workload.block_tokens
    prompt = tuple(min(p, max_prompt) for p in workload.prompt)
    blocks = tuple(b[:p // bt] for b, p in zip(workload.blocks, prompt, strict=True))
    return replace(workload, prompt=prompt, output=tuple(min(o, max_output)
                                                         for o in workload.output),
                   blocks=blocks)


@dataclass
class Capacity:
    """The capacity of one plan on one workload and the metrics at that load."""

    scale: float
    rps: float
    usd_per_hour: float
    gpus: int
    metrics: dict[str, float]
    tried: list[tuple[float, bool]] = field(default_factory=list)

    @property
    def per_usd(self) -> float:
        return self.rps / self.usd_per_hour


def _meets(metrics: dict[str, float], slo: DeploySlo) -> bool:
    return (metrics["ttft_p90_all_s"] <= slo.ttft_p90_s
            and metrics["tpot_p99_s"] <= slo.tbt_p99_s)


def deploy_metrics(res: SimResult, gpus: int) -> dict[str, float]:
    """The routing metrics, TTFT p90 with drops counted as misses, and GPU-hours per
    million tokens served."""
    m = compute_metrics(res)
    w = res.workload
    served = ~np.asarray(res.dropped, dtype=bool)
    ttft = np.asarray(res.first_token) - np.asarray(w.arrival)
    ttft = np.where(served, ttft, np.inf)
    m["ttft_p90_all_s"] = float(np.percentile(ttft, 90)) if len(w) else math.nan
    tokens = float(np.asarray(w.prompt)[served].sum() + np.asarray(w.output)[served].sum())
    span = max(res.end_s - (w.arrival[0] if len(w) else 0.0), 1e-9)
    m["gpu_hours_per_mtok"] = gpus * span / 3600.0 / max(tokens / 1e6, 1e-12)
    m["tbt_p99_s"] = m["tpot_p99_s"]
    # prefix hits by tier: prefix_hit_ratio counts both, host_hit_ratio the host's part
    prompt = float(np.asarray(w.prompt)[served].sum())
    m["host_hit_ratio"] = sum(res.host_hit_tokens or ()) / max(prompt, 1.0)
    return m


def capacity(plan: Plan, limits: Limits, workload: Workload, slo: DeploySlo,
             scale_range: tuple[float, float], steps: int) -> Capacity:
    """Bisect the rate scale of ``workload`` on the fleet ``plan`` builds."""
    fleet = build_fleet(plan, limits)
    router = ClassRouter(plan, fleet)
    config = SimConfig(kv_bytes_per_token=limits.model.kv_bytes_per_token)
    seen: dict[float, dict[str, float]] = {}
    tried: list[tuple[float, bool]] = []

    def passes(scale: float) -> bool:
        res = simulate(workload.scale_rate(scale), fleet, router, config)
        seen[scale] = deploy_metrics(res, plan.gpus)
        ok = _meets(seen[scale], slo)
        tried.append((scale, ok))
        return ok

    scale = bisect_capacity(passes, scale_range[0], scale_range[1], steps)
    at = scale if scale > 0 else scale_range[0]
    span = max(workload.arrival[-1] - workload.arrival[0], 1e-9) if len(workload) > 1 else 1.0
    return Capacity(scale, scale * len(workload) / span, fleet.usd_per_hour(), plan.gpus,
                    seen[at], tried)
