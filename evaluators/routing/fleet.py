"""A serving fleet: pools of replicas (accelerator, region, price) and network round trips.

Settings form (what ``target.toml``'s ``[evaluator]`` holds)::

    pools  = [{ name = "main", accelerator = "H200", count = 8, region = "us" }]
    rtt_ms = { "us-eu" = 80.0 }          # symmetric; same region is 0 unless given ("us-us")

A request from region ``r`` served in region ``q`` pays the round trip once in its TTFT
and end-to-end latency (request up, first token down).

Disaggregated serving: ``role = "prefill"`` replicas only prefill, then send the KV cache
(prompt tokens x the model's KV bytes per token) over their own link of ``kv_link_gb_s``
GB/s (transfers from one replica queue on its link) to a ``role = "decode"`` replica (or a
``"both"`` one when the fleet has no decode pool); the first token is counted when the KV
has arrived. A decode replica that receives a new request prefills it itself.

Client tier: ``tier = "client"`` is one logical replica standing for every client's own
device: no queue, a request there is served at ``prefill_ms_per_token`` and
``decode_ms_per_token`` with no round trip (``role = "both"``), or prefilled there and
its KV uploaded at ``kv_link_gb_s`` (the uplink) to a server decode replica
(``role = "prefill"``: a client/server split).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evaluators.routing.hardware import ACCELERATORS, StepModel, step_model

_POOL_KEYS = {"name", "accelerator", "count", "region", "usd_per_hour", "launch_us", "role",
              "kv_link_gb_s", "tier", "prefill_ms_per_token", "decode_ms_per_token"}
ROLES = ("both", "prefill", "decode")
CLIENT_KV_CAPACITY = 1 << 40  # a client's device holds its own request: never a KV limit


@dataclass(frozen=True)
class ReplicaSpec:
    index: int
    pool: str
    region: str
    step: Any  # hardware.StepModel, or any object with its interface (deploy/instance.py)
    role: str = "both"  # "prefill" | "decode" | "both"
    kv_link_gb_s: float = 0.0  # KV hand-off bandwidth of a prefill replica (GB/s)
    tier: str = "server"  # or "client"
    # the replica's own engine settings (deployment mode); None: the simulator's SimConfig
    token_budget: int | None = None
    max_seqs: int | None = None
    chunk: int | None = None  # prefill tokens per step of one request
    kv_pad: int = 0  # KV tokens lost per running sequence to its last, partial block
    group: int = -1  # deployment class: a prefill replica hands its KV within its class
    host_kv_tokens: int = 0  # KV tokens of prefix cache in a tier below HBM (host memory)
    host_s_per_token: float = 0.0  # time to bring one token's KV up from that tier

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

    @property
    def disaggregated(self) -> bool:
        return any(r.role == "prefill" or r.tier == "client" for r in self.replicas)


def _client_step(pool: Mapping[str, Any], i: int) -> StepModel:
    for key in ("prefill_ms_per_token", "decode_ms_per_token"):
        if float(pool.get(key, 0.0)) <= 0:
            raise ValueError(f"pools[{i}]: a client tier needs {key} > 0")
    if int(pool.get("count", 1)) != 1:
        raise ValueError(f"pools[{i}]: a client tier is one logical replica (count = 1)")
    # The step model's slots are reused: prefill cost per token and decode cost per step.
    return StepModel(
        accelerator="client", launch_s=0.0,
        mem_base_s=float(pool["decode_ms_per_token"]) * 1e-3, mem_per_kv_token_s=0.0,
        comp_per_token_s=float(pool["prefill_ms_per_token"]) * 1e-3, attn_coef_s=0.0,
        kv_capacity_tokens=CLIENT_KV_CAPACITY, usd_per_hour=float(pool.get("usd_per_hour", 0.0)),
    )


def _check_roles(replicas: Sequence[ReplicaSpec]) -> None:
    servers = [r for r in replicas if r.tier == "server"]
    if not servers:
        raise ValueError("fleet needs at least one server pool besides a client tier")
    if any(r.role == "prefill" for r in replicas) and not any(
        r.role in ("decode", "both") for r in servers
    ):
        raise ValueError("a prefill pool needs a server pool with role 'decode' or 'both' "
                         "to hand its KV to")


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
        tier = str(pool.get("tier", "server"))
        role = str(pool.get("role", "both"))
        link = float(pool.get("kv_link_gb_s", 0.0))
        if tier not in ("server", "client"):
            raise ValueError(f"pools[{i}].tier: {tier!r}; expected 'server' or 'client'")
        if role not in ROLES:
            raise ValueError(f"pools[{i}].role: {role!r}; expected one of {ROLES}")
        if role == "prefill" and link <= 0:
            raise ValueError(f"pools[{i}]: role 'prefill' needs kv_link_gb_s > 0 (the link "
                             "its KV cache leaves by)")
        if tier == "client":
            if role == "decode":
                raise ValueError(f"pools[{i}]: a client tier's role is 'both' or 'prefill'")
            name = str(pool.get("name", f"client-{i}"))
            replicas.append(ReplicaSpec(len(replicas), name, str(pool.get("region", "local")),
                                        _client_step(pool, i), role, link, tier))
            continue
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
            replicas.append(ReplicaSpec(len(replicas), name, region, step, role, link))
    _check_roles(replicas)
    rtt: dict[tuple[str, str], float] = {}
    for key, ms in (rtt_ms or {}).items():
        a, sep, b = key.partition("-")
        if not sep:
            raise ValueError(f"rtt_ms key {key!r} must be 'regionA-regionB'")
        rtt[(a, b)] = rtt[(b, a)] = float(ms) / 1000.0
    return Fleet(tuple(replicas), rtt)
