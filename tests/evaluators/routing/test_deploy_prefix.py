"""Prefix reuse in deployment plans: the router's prefix weight, a host-memory KV tier below
each instance's HBM prefix cache (plan rules, fleet, simulator, export), and profile
workloads whose follow-ups continue a covering parent."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from evaluators import get
from evaluators.routing.api import RequestInfo, View
from evaluators.routing.config import build_workload
from evaluators.routing.deploy.capacity import beyond_resolution
from evaluators.routing.deploy.evaluator import DeployEvaluator
from evaluators.routing.deploy.export import plan_markdown
from evaluators.routing.deploy.parallel import LLAMA2_70B
from evaluators.routing.deploy.plan import (
    GIB,
    ClassRouter,
    Limits,
    PlanError,
    build_fleet,
    check_plan,
)
from evaluators.routing.fleet import Fleet, ReplicaSpec
from evaluators.routing.hardware import step_model
from evaluators.routing.profiles import generate, load_profile
from evaluators.routing.sim import SimConfig, simulate
from evaluators.routing.workload import Workload, prefix_reuse
from optimizer.errors import ConfigError
from optimizer.records import CandidateState
from optimizer.targets import load_target
from tests.evaluators.routing.conftest import candidate

ROOT = Path(__file__).resolve().parents[3]
TARGET = ROOT / "targets/routing/deploy_mooncake"
LIMITS = Limits(LLAMA2_70B, 16, ("H100",), 16384, 2048, 50.0, host_kv_gib_per_gpu=128,
                host_link_gb_s=25.0)
NO_HOST = Limits(LLAMA2_70B, 16, ("H100",), 16384, 2048, 50.0)


def plan(host: Any = 0, router: Any = None, tp: int = 4) -> dict:
    raw: dict[str, Any] = {"classes": [{
        "prompt_tokens": [1, 16384], "accelerator": "H100", "tp": tp, "pp": 1,
        "replicas": 16 // tp, "max_num_batched_tokens": 2048, "max_num_seqs": 256,
        "block_size": 16, "kv_host_gib": host}]}
    if router is not None:
        raw["router"] = router
    return raw


# -- plan rules ------------------------------------------------------------------------------
BROKEN = [
    ("host memory over the target's per-GPU offer", LIMITS, plan(host=513),
     "kv_host_gib = 513: must be in 0..512"),
    ("host memory where the target offers none", NO_HOST, plan(host=64),
     "the target gives no host memory to the KV cache"),
    ("host memory as a float", LIMITS, plan(host=64.0), "kv_host_gib: must be an int"),
    ("a router that is not a dict", LIMITS, plan(router=1.0), "plan['router'] must be a dict"),
    ("an unknown router key", LIMITS, plan(router={"affinity": 1}),
     "router: unknown key 'affinity'"),
    ("a negative weight", LIMITS, plan(router={"prefix_weight": -1}),
     "prefix_weight = -1: must be a number in 0..64"),
    ("an infinite weight", LIMITS, plan(router={"prefix_weight": math.inf}),
     "prefix_weight = inf"),
    ("a NaN weight", LIMITS, plan(router={"prefix_weight": math.nan}), "prefix_weight = nan"),
    ("a bool weight", LIMITS, plan(router={"prefix_weight": True}), "prefix_weight = True"),
]


@pytest.mark.parametrize(("limits", "raw", "why"), [b[1:] for b in BROKEN],
                         ids=[b[0] for b in BROKEN])
def test_a_plan_that_breaks_a_prefix_rule_is_refused(limits: Limits, raw: Any,
                                                     why: str) -> None:
    with pytest.raises(PlanError, match=re.escape(why)):
        check_plan(raw, limits)


def test_a_host_tier_becomes_the_replicas_host_tokens_and_read_time() -> None:
    checked = check_plan(plan(host=256, router={"prefix_weight": 2}), LIMITS)
    assert checked.prefix_weight == 2.0
    fleet = build_fleet(checked, LIMITS)
    kv = LLAMA2_70B.kv_bytes_per_token
    for r in fleet.replicas:
        assert r.host_kv_tokens == int(256 * GIB // kv)
        # four GPUs, each with its own 25 GB/s link to the host
        assert r.host_s_per_token == pytest.approx(kv / (4 * 25e9))
    # no tier and no weight: the plan of the deploy_instance target, as before
    bare = check_plan(plan(host=0), NO_HOST)
    assert bare.prefix_weight == 0.0
    assert all(r.host_kv_tokens == 0 for r in build_fleet(bare, NO_HOST).replicas)


def _view(outstanding: list[int], cached: list[int]) -> View:
    v = View()
    v.outstanding, v.prefix_blocks, v.queued_tokens = outstanding, cached, [0] * 4
    return v


def test_the_router_weighs_cached_blocks_against_outstanding_requests() -> None:
    req = RequestInfo(0, 0.0, 4096, (1, 2, 3, 4, 5, 6, 7, 8), 0, "local")
    for weight, expect in ((0.0, 0), (0.3, 0), (1.0, 2)):
        checked = check_plan(plan(router={"prefix_weight": weight}), LIMITS)
        router = ClassRouter(checked, build_fleet(checked, LIMITS))
        # instance 0 is idle; instance 2 has 3 requests more and the prompt's 8 blocks
        assert router(req, _view([1, 2, 4, 3], [0, 0, 8, 0])) == expect, weight


def test_the_export_asks_for_the_offload_and_describes_the_router() -> None:
    checked = check_plan(plan(host=256, router={"prefix_weight": 1.5}), LIMITS)
    text = plan_markdown(checked, LIMITS)
    assert "--kv-offloading-backend native --kv-offloading-size 256" in text
    assert "less 1.5 for each leading block of the prompt the instance has cached" in text
    assert "--kv-offloading" not in plan_markdown(check_plan(plan(), LIMITS), LIMITS)


# -- the simulator's host tier ---------------------------------------------------------------
def _three_requests() -> Workload:
    """A (blocks 0-7), then B (20-29) pushing A's oldest blocks out of a 12-block HBM cache,
    then C with A's prompt again; each arrives after the one before has finished."""
    blocks = (tuple(range(8)), tuple(range(20, 30)), tuple(range(8)))
    return Workload("three", (0.0, 10.0, 20.0), (128, 160, 128), (2, 2, 2), blocks,
                    (0, 1, 2), ("local",) * 3, block_tokens=16)


def _run(host_tokens: int, host_s: float):
    spec = ReplicaSpec(0, "p", "local", step_model("H200"), host_kv_tokens=host_tokens,
                       host_s_per_token=host_s)
    return simulate(_three_requests(), Fleet((spec,)), lambda r, v: 0,
                    SimConfig(kv_capacity_tokens=200))


def test_blocks_hbm_drops_are_found_again_in_the_host_tier() -> None:
    bare = _run(0, 0.0)
    assert bare.cached[2] == 0  # A's first blocks left the HBM cache: no leading hit
    tiered = _run(16 * 64, 0.0)
    # the 6 blocks B pushed out are A's first 6: a leading run of 96 tokens in the tier
    assert tiered.cached[2] == 96
    assert tiered.host_hit_tokens == [96]
    assert tiered.first_token[2] < bare.first_token[2]  # less to prefill


def test_a_host_hit_waits_for_its_read() -> None:
    free, paid = _run(16 * 64, 0.0), _run(16 * 64, 1e-3)
    assert paid.first_token[2] - free.first_token[2] == pytest.approx(96 * 1e-3, rel=1e-6)
    assert paid.first_token[:2] == free.first_token[:2]


def test_a_tier_too_small_keeps_only_the_latest_dropped_blocks() -> None:
    res = _run(16 * 2, 0.0)  # two blocks: A's blocks 4 and 5, not its leading ones
    assert res.cached[2] == 0 and res.host_hit_tokens == [0]


# -- profile workloads: follow-ups continue a covering parent --------------------------------
def test_covering_parents_raise_the_mooncake_profiles_reuse_and_keep_its_arrivals() -> None:
    profile = load_profile("mooncake_conversation")
    latest = generate(profile, 3, 600)
    covering = generate(profile, 3, 600, parents="covering")
    assert covering.arrival == latest.arrival
    assert covering.output == latest.output
    # measured on 2026-12-07: 0.21 against 0.16 (the trace's own windows: 0.26-0.29)
    assert prefix_reuse(covering) > prefix_reuse(latest) * 1.25
    with pytest.raises(ValueError, match="parents must be one of"):
        generate(profile, 3, 60, parents="oldest")


def test_the_workload_table_takes_parents_and_refuses_another_value() -> None:
    w = build_workload({"kind": "profile", "profile": "mooncake_conversation", "seed": 3,
                        "duration_s": 60, "parents": "covering"})
    assert len(w) > 0
    with pytest.raises(ConfigError, match="parents"):
        DeployEvaluator(load_target(TARGET, ROOT,
                                    {"evaluator": {"workload": {"parents": "oldest"}}}))


# -- the target, through the sandbox ---------------------------------------------------------
# a smaller grid and a coarser bisection: the figures are compared with each other only
FAST = {"evaluator": {"grid": {"tp": [4], "pp": [1], "max_num_batched_tokens": [2048]},
                      "bisect_steps": 5}}


def test_the_targets_seed_and_a_prefix_plan_through_the_sandbox(tmp_path: Path,
                                                                mode_sandbox: Any) -> None:
    sandbox = mode_sandbox
    ev = get("routing")(load_target(TARGET, ROOT, FAST))
    seed = (TARGET / "plan.py").read_text()
    cand, ctx = candidate(tmp_path, sandbox, "plan.py", seed)
    base = ev.evaluate(cand, ctx)
    assert base.state is CandidateState.VALID, base.reason
    assert base.metrics["host_hit_ratio"] == 0.0
    tuned = re.sub(r"^HOST_GIB_PER_GPU = 0", "HOST_GIB_PER_GPU = 64",
                   re.sub(r"^PREFIX_WEIGHT = 0.0", "PREFIX_WEIGHT = 1.0", seed, flags=re.M),
                   flags=re.M)
    cand, ctx = candidate(tmp_path, sandbox, "plan.py", tuned)
    res = ev.evaluate(cand, ctx)
    assert res.state is CandidateState.VALID, res.reason
    assert res.metrics["host_hit_ratio"] > 0.02
    assert res.metrics["prefix_hit_ratio"] > base.metrics["prefix_hit_ratio"] + 0.05


def test_a_held_out_loss_of_one_bisection_step_is_within_the_resolution() -> None:
    # the azure-s4 bracket of deploy_mooncake: 0.125..16 in 8 steps; the final check's
    # slack is the widest bracket's step. Two plans whose bisections end one step apart:
    step = (16 / 0.125) ** (1 / 2 ** 8)
    low = 0.125 * step ** 100
    assert not beyond_resolution(low / (low * step), step)  # one step: a tie
    assert beyond_resolution(low / (low * step * step), step)  # two steps: a loss
    assert not beyond_resolution(1.0, step) and not beyond_resolution(1.2, step)


def test_prefix_reuse_counts_leading_blocks_within_the_cache() -> None:
    w = _three_requests()  # 128, 160 and 128 prompt tokens; C repeats A's 8 blocks
    assert prefix_reuse(w) == pytest.approx(128 / 416)
    assert prefix_reuse(w, 16 * 12) == 0.0  # B pushed A's first blocks out


def test_baselines_come_from_several_folders_and_a_name_twice_is_refused() -> None:
    ev = DeployEvaluator(load_target(TARGET, ROOT, FAST))
    assert {"vllm_default", "sarathi_serve", "prefix_aware"} <= set(ev.baseline_plans)
    twice = {"evaluator": {"baselines": ["targets/routing/deploy_instance/baselines"] * 2}}
    with pytest.raises(ConfigError, match="two baseline plans named"):
        DeployEvaluator(load_target(TARGET, ROOT, twice))
