"""A serving fleet: pools of replicas (accelerator, region, price) and network round trips.

Settings form (what ``target.toml``'s ``[evaluator]`` holds)::

    pools  = [{ name = "main", accelerator = "H200", count = 8, region = "us" }]
    rtt_ms = { "us-eu" = 80.0 }          # symmetric; same region is 0 unless given ("us-us")

A request from region ``r`` served in region ``q`` pays the round trip once in its TTFT
and end-to-end latency (request up, first token down).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evaluators.routing.hardware import ACCELERATORS, StepModel, step_model

_POOL_KEYS = {"name", "accelerator", "count", "region", "usd_per_hour", "launch_us"}


@dataclass(frozen=True)
class ReplicaSpec:
    index: int
    pool: str
    region: str
    step: StepModel

    @property
    def accelerator(self) -> str:
        return self.step.accelerator

    @property
    def usd_per_hour(self) -> float:
        return self.step.usd_per_hour


@dataclass(frozen=True)
class Fleet:
    replicas: tuple[ReplicaSpec, ...]
    rtt_s: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.replicas)

    def rtt(self, client: str, server: str) -> float:
        return self.rtt_s.get((client, server), 0.0)

    def usd_per_hour(self) -> float:
        return sum(r.usd_per_hour for r in self.replicas)

    def first(self, n: int) -> Fleet:
        """The first ``n`` replicas (pool order): smallest-fleet search shrinks this way."""
        return Fleet(self.replicas[:n], self.rtt_s)


def build_fleet(
    pools: Sequence[Mapping[str, Any]], rtt_ms: Mapping[str, float] | None = None
) -> Fleet:
    """Build a fleet from pool tables; errors name the pool and the key to fix."""
    if not pools:
        raise ValueError(
            "fleet needs at least one pool, e.g. pools = [{accelerator='H200', count=8}]"
        )
    replicas: list[ReplicaSpec] = []
    for i, pool in enumerate(pools):
        unknown = set(pool) - _POOL_KEYS
        if unknown:
            raise ValueError(
                f"pools[{i}]: unknown key(s) {sorted(unknown)}; allowed {sorted(_POOL_KEYS)}"
            )
        acc = str(pool.get("accelerator", "H200"))
        if acc not in ACCELERATORS:
            raise ValueError(
                f"pools[{i}].accelerator: {acc!r} unknown; known {sorted(ACCELERATORS)}"
            )
        count = int(pool.get("count", 1))
        if count < 1:
            raise ValueError(f"pools[{i}].count must be >= 1")
        kwargs: dict[str, Any] = {}
        if "usd_per_hour" in pool:
            kwargs["usd_per_hour"] = float(pool["usd_per_hour"])
        if "launch_us" in pool:
            kwargs["launch_s"] = float(pool["launch_us"]) * 1e-6
        step = step_model(acc, **kwargs)
        name = str(pool.get("name", f"{acc.lower()}-{i}"))
        region = str(pool.get("region", "local"))
        for _ in range(count):
            replicas.append(ReplicaSpec(len(replicas), name, region, step))
    rtt: dict[tuple[str, str], float] = {}
    for key, ms in (rtt_ms or {}).items():
        a, sep, b = key.partition("-")
        if not sep:
            raise ValueError(f"rtt_ms key {key!r} must be 'regionA-regionB'")
        rtt[(a, b)] = rtt[(b, a)] = float(ms) / 1000.0
    return Fleet(tuple(replicas), rtt)
