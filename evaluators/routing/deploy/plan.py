"""A deployment plan: what the candidate returns, checked and turned into a fleet here.

The candidate's ``plan()`` returns plain data, once::

    {"classes": [
        {"prompt_tokens": [1, 8192],            # inclusive range of prompt lengths
         "accelerator": "H100", "tp": 4, "pp": 1, "replicas": 3,
         "max_num_batched_tokens": 2048,        # token budget per step
         "max_num_seqs": 256, "chunk": 2048,    # prefill tokens per step of one request
         "block_size": 16},
        {"prompt_tokens": [8193, 131072],       # a class with separate pools:
         "prefill": {<the same engine keys>},   # prefills, then hands the KV over the
         "decode": {<the same engine keys>}},   # target's link to its class's decode pool
    ],
     "router": {"prefix_weight": 0.5}}          # optional, below

An engine may also take ``"kv_host_gib"``: GiB of host memory per instance for the prefix
cache below HBM (vLLM's ``--kv-offloading-size``), within the target's
``host_kv_gib_per_gpu``; blocks HBM drops are kept there (least recently used go first)
and a hit there is read back over the host link. ``router.prefix_weight`` (0 to 64,
default 0) is how many outstanding requests one cached prompt block is worth when the
trusted router picks an instance of a class: 0 is the least loaded instance.

Every number is checked here, on the trusted side, never taken from the candidate's own
arithmetic (:func:`check_plan`): known keys and types; tp divides the model's attention
heads and KV heads and is at most 8 (one node: the measured tables stop there), pp divides
its layers; weights, activations and the KV of one longest request of the class (its
longest prompt plus the target's longest output) fit in an instance; the GPUs of every
pool of every class together stay within the target's budget; the classes cover every
prompt length from 1 to the target's longest prompt exactly once. A plan that breaks a
rule raises :class:`PlanError` with the rule and the numbers.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evaluators.routing.api import RequestInfo, View
from evaluators.routing.deploy.instance import RESERVED_BYTES, activation_bytes, instance_step
from evaluators.routing.deploy.parallel import DeployModel, KVTier
from evaluators.routing.fleet import Fleet, ReplicaSpec
from evaluators.routing.hardware import ACCELERATORS, MEMORY_UTILISATION

ENGINE_KEYS = ("accelerator", "tp", "pp", "replicas", "max_num_batched_tokens", "max_num_seqs",
               "chunk", "block_size", "kv_host_gib")
MAX_PREFIX_WEIGHT = 64.0
BLOCK_SIZES = (8, 16, 32)  # vLLM's choices for CUDA
MAX_TP = 8  # one node; the all-reduce tables are measured up to 8 GPUs
GIB = 1 << 30


class PlanError(ValueError):
    """A plan that breaks a rule; the message says which and with what numbers."""


@dataclass(frozen=True)
class Limits:
    """What the target allows and asks a plan to hold."""

    model: DeployModel
    gpu_budget: int
    accelerators: tuple[str, ...]
    max_prompt_tokens: int
    max_output_tokens: int
    kv_link_gb_s: float
    host_kv_gib_per_gpu: int = 0  # host memory a plan may give the prefix cache, per GPU
    host_link_gb_s: float = 25.0  # host to one GPU (PCIe), for KV read back from the host


@dataclass(frozen=True)
class Pool:
    accelerator: str
    tp: int
    pp: int
    replicas: int
    max_num_batched_tokens: int
    max_num_seqs: int
    chunk: int
    block_size: int
    kv_host_gib: int = 0

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.replicas


@dataclass(frozen=True)
class PlanClass:
    low: int
    high: int
    pools: tuple[tuple[str, Pool], ...]  # (role, pool): ("both", p) or prefill and decode


@dataclass(frozen=True)
class Plan:
    classes: tuple[PlanClass, ...]
    prefix_weight: float = 0.0

    @property
    def gpus(self) -> int:
        return sum(p.gpus for c in self.classes for _, p in c.pools)


def _int(raw: Mapping[str, Any], key: str, where: str, low: int, high: int) -> int:
    if key not in raw:
        raise PlanError(f"{where}: '{key}' is missing")
    v = raw[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise PlanError(f"{where}.{key}: must be an int, not {v!r}"[:200])
    if not low <= v <= high:
        raise PlanError(f"{where}.{key} = {v}: must be in {low}..{high}")
    return v


def _pool(raw: Any, where: str, limits: Limits) -> Pool:
    if not isinstance(raw, Mapping):
        raise PlanError(f"{where}: must be a dict of {', '.join(ENGINE_KEYS)}")
    extra = sorted(str(k) for k in set(raw) - set(ENGINE_KEYS) - {"prompt_tokens"})
    if extra:
        raise PlanError(f"{where}: unknown key {extra[0]!r}; known: {', '.join(ENGINE_KEYS)}")
    acc = raw.get("accelerator")
    if acc not in limits.accelerators:
        raise PlanError(f"{where}.accelerator = {acc!r}: the target allows "
                        f"{list(limits.accelerators)}"[:200])
    m = limits.model
    tp = _int(raw, "tp", where, 1, MAX_TP)
    pp = _int(raw, "pp", where, 1, m.layers)
    if m.heads % tp or m.kv_heads % tp:
        raise PlanError(f"{where}.tp = {tp}: must divide the {m.heads} attention heads and "
                        f"the {m.kv_heads} KV heads of {m.name}")
    if m.layers % pp:
        raise PlanError(f"{where}.pp = {pp}: must divide the {m.layers} layers of {m.name}")
    budget = _int(raw, "max_num_batched_tokens", where, 1, 1 << 17)
    seqs = _int(raw, "max_num_seqs", where, 1, 4096)
    if budget < seqs:
        raise PlanError(f"{where}: max_num_batched_tokens ({budget}) must be at least "
                        f"max_num_seqs ({seqs}) (vLLM's rule: every sequence decodes a token "
                        "each step)")
    chunk = _int(raw, "chunk", where, 1, budget) if "chunk" in raw else budget
    block = _int(raw, "block_size", where, 1, 1 << 10) if "block_size" in raw else 16
    if block not in BLOCK_SIZES:
        raise PlanError(f"{where}.block_size = {block}: must be one of {list(BLOCK_SIZES)}")
    host = 0
    if "kv_host_gib" in raw:
        if not limits.host_kv_gib_per_gpu and raw["kv_host_gib"] != 0:
            raise PlanError(f"{where}.kv_host_gib: the target gives no host memory to the KV "
                            "cache (its host_kv_gib_per_gpu is 0)")
        host = _int(raw, "kv_host_gib", where, 0, limits.host_kv_gib_per_gpu * tp * pp)
    return Pool(str(acc), tp, pp, _int(raw, "replicas", where, 1, limits.gpu_budget),
                budget, seqs, chunk, block, host)


def _fits(pool: Pool, longest: int, where: str, limits: Limits) -> None:
    """Weights, activations and the KV of one longest request fit in one instance."""
    m = limits.model
    gpus = pool.tp * pool.pp
    hbm = ACCELERATORS[pool.accelerator].memory_gb * 1e9 * MEMORY_UTILISATION
    weights = m.weight_bytes / gpus
    act = activation_bytes(m, pool.max_num_batched_tokens, pool.max_num_seqs, pool.tp)
    kv = (longest + pool.block_size) * m.kv_bytes_per_token / gpus
    need = weights + act + RESERVED_BYTES + kv
    if need > hbm:
        raise PlanError(
            f"{where}: does not fit on {gpus} x {pool.accelerator}: per GPU, weights "
            f"{weights / 1e9:.1f} GB + activations {act / 1e9:.2f} GB + reserve "
            f"{RESERVED_BYTES / 1e9:.1f} GB + KV of one longest request ({longest} tokens) "
            f"{kv / 1e9:.1f} GB = {need / 1e9:.1f} GB > {hbm / 1e9:.1f} GB usable")


def _class(raw: Any, i: int, limits: Limits) -> PlanClass:
    where = f"classes[{i}]"
    if not isinstance(raw, Mapping):
        raise PlanError(f"{where}: must be a dict")
    rng = raw.get("prompt_tokens")
    if (not isinstance(rng, list | tuple) or len(rng) != 2
            or any(isinstance(x, bool) or not isinstance(x, int) for x in rng)):
        raise PlanError(f"{where}.prompt_tokens: must be [low, high], two ints, not "
                        f"{rng!r}"[:200])
    low, high = int(rng[0]), int(rng[1])
    if not 1 <= low <= high:
        raise PlanError(f"{where}.prompt_tokens = [{low}, {high}]: need 1 <= low <= high")
    longest = min(high, limits.max_prompt_tokens) + limits.max_output_tokens
    if "prefill" in raw or "decode" in raw:
        extra = sorted(str(k) for k in set(raw) - {"prompt_tokens", "prefill", "decode"})
        if extra:
            raise PlanError(f"{where}: with separate pools only 'prefill' and 'decode' go "
                            f"beside prompt_tokens, not {extra[0]!r}")
        pools = tuple((role, _pool(raw.get(role), f"{where}.{role}", limits))
                      for role in ("prefill", "decode"))
    else:
        pools = (("both", _pool(raw, where, limits)),)
    for role, pool in pools:
        _fits(pool, longest, where if role == "both" else f"{where}.{role}", limits)
    return PlanClass(low, high, pools)


def _coverage(classes: Sequence[PlanClass], top: int) -> None:
    order = sorted(range(len(classes)), key=lambda k: classes[k].low)
    expect = 1
    for k in order:
        c = classes[k]
        if c.low > expect:
            raise PlanError(f"no class serves prompt lengths {expect}..{c.low - 1} (classes "
                            "must cover every prompt length from 1 to "
                            f"{top}, with no gap)")
        if c.low < expect:
            raise PlanError(f"classes overlap at prompt lengths {c.low}.."
                            f"{min(c.high, expect - 1)} (class {k} and the class before it "
                            "in prompt order); a prompt length must have one class")
        expect = c.high + 1
    if expect <= top:
        raise PlanError(f"no class serves prompt lengths {expect}..{top} (the target's "
                        "longest prompt)")


def _prefix_weight(router: Any) -> float:
    if not isinstance(router, Mapping):
        raise PlanError("plan['router'] must be a dict, e.g. {'prefix_weight': 0.5}")
    extra = sorted(str(k) for k in set(router) - {"prefix_weight"})
    if extra:
        raise PlanError(f"router: unknown key {extra[0]!r}; known: 'prefix_weight'")
    w = router.get("prefix_weight", 0.0)
    if isinstance(w, bool) or not isinstance(w, int | float) or not (
            0.0 <= w <= MAX_PREFIX_WEIGHT):
        raise PlanError(f"router.prefix_weight = {w!r}: must be a number in "
                        f"0..{MAX_PREFIX_WEIGHT:g}"[:200])
    return float(w)


def check_plan(raw: Any, limits: Limits) -> Plan:
    """The plan, checked against every rule of the module docstring."""
    if not isinstance(raw, Mapping):
        raise PlanError(f"plan() must return a dict with 'classes', not {type(raw).__name__}")
    extra = sorted(str(k) for k in set(raw) - {"classes", "router"})
    if extra:
        raise PlanError(f"unknown top-level key {extra[0]!r}; known: 'classes', 'router'")
    raw_classes = raw.get("classes")
    if not isinstance(raw_classes, list | tuple) or not raw_classes:
        raise PlanError("plan['classes'] must be a non-empty list")
    if len(raw_classes) > 16:
        raise PlanError(f"{len(raw_classes)} classes: at most 16")
    classes = tuple(_class(c, i, limits) for i, c in enumerate(raw_classes))
    _coverage(classes, limits.max_prompt_tokens)
    plan = Plan(classes, _prefix_weight(raw.get("router", {})))
    if plan.gpus > limits.gpu_budget:
        parts = " + ".join(f"{p.replicas} x {p.tp * p.pp}" for c in classes for _, p in c.pools)
        raise PlanError(f"the plan uses {plan.gpus} GPUs ({parts}, over all classes and "
                        f"pools), more than the target's budget of {limits.gpu_budget}")
    return plan


def build_fleet(plan: Plan, limits: Limits) -> Fleet:
    """One replica per instance, with the deployment step model and its engine settings."""
    replicas: list[ReplicaSpec] = []
    kv_bytes = limits.model.kv_bytes_per_token
    for g, c in enumerate(plan.classes):
        for role, p in c.pools:
            step = instance_step(limits.model, p.accelerator, p.tp, p.pp,
                                 p.max_num_batched_tokens, p.max_num_seqs)
            # host memory below HBM, read back over each GPU's own link
            host = KVTier("host", p.kv_host_gib * GIB / 1e9, limits.host_link_gb_s * p.tp * p.pp)
            for _ in range(p.replicas):
                replicas.append(ReplicaSpec(
                    len(replicas), f"class{g}-{role}", "local", step, role,
                    limits.kv_link_gb_s if role == "prefill" else 0.0,
                    token_budget=p.max_num_batched_tokens, max_seqs=p.max_num_seqs,
                    chunk=p.chunk, kv_pad=p.block_size // 2, group=g,
                    host_kv_tokens=host.capacity_tokens(kv_bytes),
                    host_s_per_token=host.transfer_s(1, kv_bytes)))
    return Fleet(tuple(replicas))


class ClassRouter:
    """The trusted router of a plan: a request goes to its prompt length's class, and there
    to the instance with the fewest outstanding requests (then the fewest queued tokens,
    then the lowest index), less ``prefix_weight`` for each leading block of the prompt an
    instance has cached; a class with separate pools takes it on its prefill pool."""

    def __init__(self, plan: Plan, fleet: Fleet):
        self.weight = plan.prefix_weight
        self.order = sorted(range(len(plan.classes)), key=lambda k: plan.classes[k].low)
        self.highs = [plan.classes[k].high for k in self.order]
        self.entry: dict[int, list[int]] = {}
        for r in fleet.replicas:
            if r.role in ("both", "prefill"):
                self.entry.setdefault(r.group, []).append(r.index)

    def class_of(self, prompt_tokens: int) -> int:
        k = bisect.bisect_left(self.highs, prompt_tokens)
        return self.order[min(k, len(self.order) - 1)]

    def __call__(self, request: RequestInfo, view: View) -> int:
        mine = self.entry[self.class_of(request.prompt_tokens)]
        out, queued = view.outstanding, view.queued_tokens
        if self.weight:
            w, cached = self.weight, view.prefix_blocks
            return min(mine, key=lambda k: (out[k] - w * cached[k], queued[k], k))
        return min(mine, key=lambda k: (out[k], queued[k], k))
