"""The routing kind's deployment mode: plan rules, the step model in the simulator, the
capacity bisection, and the evaluator through its contract and a real sandbox."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import pytest

from evaluators import get
from evaluators._base import EvalContext
from evaluators.routing.deploy.capacity import DeploySlo, bisect_capacity, capacity, clip
from evaluators.routing.deploy.export import plan_markdown
from evaluators.routing.deploy.parallel import LLAMA2_70B, parallel_step_model
from evaluators.routing.deploy.plan import (
    ClassRouter,
    Limits,
    PlanError,
    build_fleet,
    check_plan,
)
from evaluators.routing.sim import SimConfig, simulate
from evaluators.routing.workload import SyntheticSpec, synthetic
from optimizer.records import CandidateState
from optimizer.targets import TargetSpec, load_target
from optimizer.testing.evaluators import EvaluatorContract
from tests.evaluators.routing.conftest import candidate

ROOT = Path(__file__).resolve().parents[3]
TARGET = ROOT / "targets/routing/deploy_instance"
LIMITS = Limits(LLAMA2_70B, 16, ("H100",), 16384, 2048, 50.0)


def pool(tp: int = 4, pp: int = 1, replicas: int = 4, budget: int = 2048, **more: Any) -> dict:
    return {"accelerator": "H100", "tp": tp, "pp": pp, "replicas": replicas,
            "max_num_batched_tokens": budget, "max_num_seqs": 256, "block_size": 16, **more}


def one_class(**kw: Any) -> dict:
    return {"classes": [{"prompt_tokens": [1, 16384], **pool(**kw)}]}


# -- plan rules: each broken one is refused, with its reason ---------------------------------
BROKEN = [
    ("tp does not divide the heads", one_class(tp=3), "must divide the 64 attention heads"),
    ("tp beyond one node", one_class(tp=16, replicas=1), "tp = 16: must be in 1..8"),
    ("pp does not divide the layers", one_class(pp=3, replicas=1), "must divide the 80 layers"),
    ("weights and a longest request do not fit", one_class(tp=2, replicas=8),
     "does not fit on 2 x H100"),
    ("more GPUs than the budget, split over classes",
     {"classes": [{"prompt_tokens": [1, 4096], **pool(replicas=3)},
                  {"prompt_tokens": [4097, 16384], **pool(tp=8, replicas=1)}]},
     "uses 20 GPUs (3 x 4 + 1 x 8"),
    ("more GPUs than the budget, split over prefill and decode pools",
     {"classes": [{"prompt_tokens": [1, 16384], "prefill": pool(replicas=2),
                   "decode": pool(replicas=3)}]}, "uses 20 GPUs"),
    ("a gap between classes",
     {"classes": [{"prompt_tokens": [1, 4096], **pool(replicas=2)},
                  {"prompt_tokens": [4200, 16384], **pool(replicas=2)}]},
     "no class serves prompt lengths 4097..4199"),
    ("overlapping classes",
     {"classes": [{"prompt_tokens": [1, 4096], **pool(replicas=2)},
                  {"prompt_tokens": [4000, 16384], **pool(replicas=2)}]},
     "classes overlap at prompt lengths 4000..4096"),
    ("the longest prompts uncovered",
     {"classes": [{"prompt_tokens": [1, 8192], **pool()}]},
     "no class serves prompt lengths 8193..16384"),
    ("no class for the shortest prompts",
     {"classes": [{"prompt_tokens": [2, 16384], **pool()}]}, "prompt lengths 1..1"),
    ("a float where an int belongs", one_class(tp=4.0), "tp: must be an int"),
    ("a bool where an int belongs", one_class(replicas=True), "replicas: must be an int"),
    ("an unknown key", one_class(speculative=True), "unknown key 'speculative'"),
    ("another accelerator", {"classes": [{"prompt_tokens": [1, 16384],
                                          **pool(accelerator="A100")}]}, "the target allows"),
    ("a chunk above the budget", one_class(chunk=4096), "chunk = 4096: must be in 1..2048"),
    ("budget below max sequences", one_class(budget=128), "must be at least max_num_seqs"),
    ("a block size vLLM lacks", one_class(block_size=24), "must be one of [8, 16, 32]"),
    ("not a dict", [1, 2], "must return a dict"),
]


@pytest.mark.parametrize("raw,why", [pytest.param(r, w, id=i) for i, r, w in BROKEN])
def test_a_plan_that_breaks_a_rule_is_refused_with_the_reason(raw: Any, why: str) -> None:
    with pytest.raises(PlanError) as exc:
        check_plan(raw, LIMITS)
    assert why in str(exc.value)


def test_plans_that_keep_every_rule_pass() -> None:
    assert check_plan(one_class(), LIMITS).gpus == 16
    short_on_tp2 = {"classes": [{"prompt_tokens": [1, 2048], **pool(tp=2, replicas=2)},
                                {"prompt_tokens": [2049, 16384], **pool(tp=4, replicas=3)}]}
    assert check_plan(short_on_tp2, LIMITS).gpus == 16  # TP 2 holds 2k + 2k tokens of KV
    pd = {"classes": [{"prompt_tokens": [1, 16384], "prefill": pool(replicas=2),
                       "decode": pool(replicas=2)}]}
    assert check_plan(pd, LIMITS).gpus == 16


# -- the deploy step model is what the simulator runs -------------------------------------------
def test_the_instance_step_model_is_the_parallel_model() -> None:
    fleet = build_fleet(check_plan(one_class(), LIMITS), LIMITS)
    step = fleet.replicas[0].step
    par = parallel_step_model("H100", LLAMA2_70B, tp=4)
    for args in [(64, 0, 256_000, 0), (10, 2038, 40_000, 3000), (0, 512, 0, 0), (1, 0, 9, 0)]:
        assert step.step_s(*args) == pytest.approx(par.step_s(*args), rel=1e-9)


def _small_workload():
    return clip(synthetic(SyntheticSpec(duration_s=30, sessions_per_s=1.0), 5), 16384, 2048)


def test_tp8_and_tp4_give_different_step_times_in_the_simulation() -> None:
    w = _small_workload()
    runs = {}
    for tp in (4, 8):
        plan = check_plan(one_class(tp=tp, replicas=16 // tp), LIMITS)
        fleet = build_fleet(plan, LIMITS)
        assert fleet.replicas[0].step.parallel.tp == tp
        res = simulate(w, fleet, ClassRouter(plan, fleet),
                       SimConfig(kv_bytes_per_token=LLAMA2_70B.kv_bytes_per_token))
        runs[tp] = [f - a for f, a in zip(res.first_token, w.arrival, strict=True)]
        assert not any(res.dropped)
    lone = build_fleet(check_plan(one_class(tp=8, replicas=2), LIMITS), LIMITS).replicas[0]
    four = build_fleet(check_plan(one_class(), LIMITS), LIMITS).replicas[0]
    assert lone.step.prefill_s(2048) < four.step.prefill_s(2048)  # more TP, faster steps
    assert runs[4] != runs[8]


def test_the_class_router_sends_a_request_to_its_class() -> None:
    plan = check_plan({"classes": [{"prompt_tokens": [4097, 16384], **pool(tp=8, replicas=1)},
                                   {"prompt_tokens": [1, 4096], **pool(replicas=2)}]}, LIMITS)
    fleet = build_fleet(plan, LIMITS)
    router = ClassRouter(plan, fleet)
    assert [router.class_of(p) for p in (1, 4096, 4097, 16384)] == [1, 1, 0, 0]
    assert [r.group for r in fleet.replicas] == [0, 1, 1]


# -- the capacity bisection ------------------------------------------------------------------
def test_bisection_finds_the_threshold_within_its_resolution() -> None:
    calls: list[float] = []

    def passes(s: float) -> bool:
        calls.append(s)
        return s <= 3.0

    found = bisect_capacity(passes, 0.5, 8.0, 8)
    resolution = 16.0 ** (1 / 2 ** 8)
    assert 3.0 / resolution <= found <= 3.0
    assert len(calls) == 8 + 2  # the two ends, then one simulation per step
    assert bisect_capacity(lambda s: False, 0.5, 8.0, 8) == 0.0
    assert bisect_capacity(lambda s: True, 0.5, 8.0, 8) == 8.0
    with pytest.raises(ValueError):
        bisect_capacity(passes, 2.0, 1.0, 3)


def test_capacity_per_dollar_on_a_toy_workload() -> None:
    w = _small_workload()
    slo = DeploySlo(ttft_p90_s=2.0, tbt_p99_s=0.2)
    full = capacity(check_plan(one_class(), LIMITS), LIMITS, w, slo, (0.25, 64.0), 6)
    half = capacity(check_plan(one_class(replicas=2), LIMITS), LIMITS, w, slo, (0.25, 64.0), 6)
    assert 0 < half.scale < full.scale < 64.0  # half the fleet serves less traffic...
    assert half.usd_per_hour == pytest.approx(full.usd_per_hour / 2)  # ...for half the price
    assert full.per_usd == pytest.approx(full.rps / full.usd_per_hour)
    assert full.metrics["ttft_p90_all_s"] <= 2.0 and full.metrics["tbt_p99_s"] <= 0.2
    assert [ok for s, ok in full.tried if s == full.scale] == [True]
    assert any(not ok and s > full.scale for s, ok in full.tried)


def test_the_plan_exports_as_vllm_flags_and_router_thresholds() -> None:
    plan = check_plan({"classes": [
        {"prompt_tokens": [1, 2048], **pool(tp=2, replicas=2, budget=512, chunk=256)},
        {"prompt_tokens": [2049, 16384], "prefill": pool(replicas=2, budget=8192),
         "decode": pool(replicas=1)}]}, LIMITS)
    text = plan_markdown(plan, LIMITS)
    assert "prompts of 1 to 2048 tokens" in text and "prompts of 2049 to 16384" in text
    assert ("--tensor-parallel-size 2 --pipeline-parallel-size 1 --max-num-batched-tokens 512 "
            "--max-num-seqs 256 --enable-chunked-prefill --block-size 16") in text
    assert "--long-prefill-token-threshold 256" in text
    assert "--max-num-batched-tokens 8192" in text and "prefill pool" in text


# -- the evaluator through a real sandbox -----------------------------------------------------
FAST = {"evaluator": {"grid": {"tp": [4], "pp": [1], "max_num_batched_tokens": [1024, 2048]},
                      "bisect_steps": 5}}


def _target(overrides: dict[str, Any] | None = None) -> TargetSpec:
    return load_target(TARGET, ROOT, copy.deepcopy(overrides or FAST))


@pytest.fixture(scope="module")
def sandbox(mode_sandbox: Any) -> Any:
    return mode_sandbox


def _evaluate(tmp_path: Path, sandbox: Any, source: str, stage: str = "evaluate"):
    cand, ctx = candidate(tmp_path, sandbox, "plan.py", source)
    ev = get("routing")(_target())
    return ev, getattr(ev, stage)(cand, ctx)


SEED = (TARGET / "plan.py").read_text()


def test_a_broken_plan_is_invalid_through_the_sandbox(tmp_path: Path, sandbox: Any) -> None:
    source = re.sub(r"^REPLICAS = 0", "REPLICAS = 5", SEED, flags=re.M)
    _, res = _evaluate(tmp_path, sandbox, source, "correctness")
    assert res.state is CandidateState.INVALID
    assert "uses 20 GPUs" in res.reason and "budget of 16" in res.reason


def test_a_plan_that_is_not_plain_data_fails_with_the_reason(tmp_path: Path,
                                                              sandbox: Any) -> None:
    source = SEED.replace('    return {"classes": classes}', '    return {"classes": object()}')
    _, res = _evaluate(tmp_path, sandbox, source, "correctness")
    assert res.state is CandidateState.FAILED
    assert "only dict, list, str, int, float" in res.reason


def test_the_held_out_set_and_the_final_check(tmp_path: Path, sandbox: Any) -> None:
    ev, res = _evaluate(tmp_path, sandbox, SEED, "held_out")
    assert res.state is CandidateState.VALID, res.reason
    for label in ("azure-s4", "mooncake-s2"):
        assert res.metrics[f"capacity_per_usd/{label}"] > 0
    assert res.metrics["capacity_per_usd"] == pytest.approx(math.sqrt(
        res.metrics["capacity_per_usd/azure-s4"] * res.metrics["capacity_per_usd/mooncake-s2"]))
    ctx = EvalContext(sandbox=sandbox, seed=0, scratch=tmp_path, io_dir=tmp_path / "io",
                      timeout_s=60)
    final = ev.final_check(tmp_path / "cand", ctx)
    assert final is not None
    assert "vllm serve MODEL --tensor-parallel-size 4" in final.artifacts["evidence.md"]
    assert "| mooncake-s2 | held-out |" in final.artifacts["evidence.md"]
    assert "baselines: the plans sarathi_serve, vllm_default and the best of a grid" in (
        final.artifacts["evidence.md"])


class TestRoutingDeployMode(EvaluatorContract):
    @pytest.fixture(scope="class")
    @classmethod
    def target(cls) -> TargetSpec:
        return _target()

    @pytest.fixture(scope="class")
    @classmethod
    def changed_files(cls, target: TargetSpec) -> dict[str, str]:
        return {"plan.py": re.sub(r"^BUDGET = 2048", "BUDGET = 1024", SEED, flags=re.M)}
