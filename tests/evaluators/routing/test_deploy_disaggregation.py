"""Prefill/decode disaggregation in Splitwise's setting: traffic that comes and goes (the
Azure code profile), workloads that mix families, Vidur's processed traces, the decode
step's KV read on H100 and A100, and the target routing/deploy_disaggregation."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evaluators import get
from evaluators.routing.config import SettingsError, _check_workload, build_workload
from evaluators.routing.deploy.evaluator import DeployEvaluator
from evaluators.routing.deploy.instance import instance_step
from evaluators.routing.deploy.parallel import LLAMA2_70B, parallel_step_model
from evaluators.routing.profiles import QUANTILES, TraceProfile, generate, load_profile
from evaluators.routing.workload import Workload, load_trace, merge
from optimizer.records import CandidateState
from optimizer.targets import load_target
from tests.evaluators.routing.conftest import candidate

ROOT = Path(__file__).resolve().parents[3]
TARGET = ROOT / "targets/routing/deploy_disaggregation"


def _bench_module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# -- traffic that comes and goes ------------------------------------------------------------
def test_idle_periods_are_measured_from_the_gaps() -> None:
    bench = _bench_module("routing_trace_profile")
    t = np.array([0.0, 0.1, 0.2, 10.0, 10.1, 30.0])  # active 0.2 s, 0.1 s and 0 s
    got = bench.idle_periods(t, idle_gap_s=2.0)
    assert got["idle_gap_s"] == 2.0
    assert got["on_rate_rps"] == pytest.approx(6 / 0.3, rel=1e-3)
    assert min(got["on_s_q"]) == 0.0 and max(got["on_s_q"]) == pytest.approx(0.2)
    assert min(got["off_s_q"]) == pytest.approx(9.8) and max(got["off_s_q"]) == pytest.approx(
        19.9)
    assert got["burst_cv"] == 0.0  # the gaps within active periods are all 0.1 s


def test_the_code_profile_comes_and_goes_at_its_measured_rate() -> None:
    p = load_profile("azure2023_code")
    assert p.idle_gap_s > 0 and p.on_rate_rps > p.rate_rps
    rates, idle = [], []
    for seed in range(6):
        w = generate(p, seed, 1800.0)
        gaps = np.diff(np.asarray(w.arrival))
        rates.append(len(w) / 1800.0)
        idle.append(gaps[gaps > p.idle_gap_s].sum() / 1800.0)
    # the trace's window: 3.21 req/s, idle about 70% of the time
    assert np.mean(rates) == pytest.approx(p.rate_rps, rel=0.25)
    assert 0.5 < np.mean(idle) < 0.85
    scaled = generate(p, 0, 1800.0, rate_scale=2.0)
    assert len(scaled) > 1.5 * len(generate(p, 0, 1800.0))


def test_a_profile_with_idle_gaps_needs_its_periods() -> None:
    q = tuple(float(i) for i in range(len(QUANTILES)))
    with pytest.raises(ValueError, match="idle_gap_s > 0 needs"):
        TraceProfile("x", "s", 1.0, 1.0, q, q, idle_gap_s=2.0, on_rate_rps=3.0)
    TraceProfile("x", "s", 1.0, 1.0, q, q, idle_gap_s=2.0, on_rate_rps=3.0, on_s_q=q,
                 off_s_q=q)


# -- Vidur's traces and mixed workloads ------------------------------------------------------
def test_vidurs_processed_traces_load_by_their_header(tmp_path: Path) -> None:
    path = tmp_path / "splitwise_code.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                    "0.5,1024,7\n0.0,300,12\n")
    w = load_trace(path)
    assert w.arrival == (0.0, 0.5) and w.prompt == (300, 1024) and w.output == (12, 7)
    assert w.blocks[1] == (0, 1) and w.blocks[0] == ()  # private blocks of 512 tokens


def _w(name: str, arrival: tuple[float, ...], blocks: tuple[tuple[int, ...], ...],
       block_tokens: int = 512) -> Workload:
    n = len(arrival)
    return Workload(name, arrival, (512,) * n, (8,) * n, blocks, tuple(range(n)),
                    ("local",) * n, block_tokens)


def test_a_mix_interleaves_its_parts_and_keeps_their_prefixes_apart() -> None:
    a = _w("a", (0.0, 2.0), ((0, 1), (0, 1, 2)))
    b = _w("b", (1.0, 3.0), ((0,), (0, 5)))
    m = merge([a, b], "a+b")
    assert m.arrival == (0.0, 1.0, 2.0, 3.0)
    assert m.blocks[0] == (0, 1) and m.blocks[2] == (0, 1, 2)  # a keeps its shared prefix
    assert m.blocks[1][0] == m.blocks[3][0] and not set(m.blocks[1]) & {0, 1, 2}
    assert len(set(m.session)) == 4
    with pytest.raises(ValueError, match="one block size"):
        merge([a, _w("c", (0.0,), ((0,),), block_tokens=16)], "x")


def test_the_workload_table_takes_a_mix_and_refuses_a_bad_one() -> None:
    part = {"kind": "profile", "profile": "azure2023_conversation", "seed": 1,
            "duration_s": 30}
    w = build_workload({"kind": "mix", "parts": [part, {**part, "seed": 2, "rate_scale": 2.0}]})
    one = build_workload(part)
    two = build_workload({**part, "seed": 2, "rate_scale": 2.0})
    assert len(w) == len(one) + len(two)
    later = build_workload({"kind": "mix", "parts": [part, {**part, "seed": 2, "at_s": 30}]})
    assert later.arrival[len(one):] == tuple(t + 30 for t in build_workload(
        {**part, "seed": 2}).arrival)  # the second part follows the first
    for raw, where in [({"kind": "mix"}, "w.parts"), ({"kind": "mix", "parts": []}, "w.parts"),
                       ({"kind": "mix", "parts": [{**part, "at_s": -1}]}, "w.parts[0].at_s"),
                       ({"kind": "mix", "parts": [{**part, "at_s": True}]}, "w.parts[0].at_s"),
                       ({"kind": "mix", "parts": [part], "seed": 1}, "w.seed"),
                       ({"kind": "mix", "parts": [{"kind": "mix", "parts": [part]}]},
                        "w.parts[0].kind"),
                       ({"kind": "mix", "parts": [{**part, "seeds": 3}]}, "w.parts[0].seeds")]:
        with pytest.raises(SettingsError) as err:
            _check_workload(raw, "w")
        assert err.value.key == where


# -- the decode step's KV read ---------------------------------------------------------------
@pytest.mark.parametrize("tp", [4, 8])
def test_an_h100_decodes_long_contexts_faster_than_an_a100(tp: int) -> None:
    steps = {acc: instance_step(LLAMA2_70B, acc, tp, 1, 2048, 256) for acc in ("H100", "A100")}
    for batch in (1, 16, 64, 256):
        for context in (512, 2048, 8192):
            kv = batch * context
            if kv > steps["H100"].kv_capacity_tokens:
                continue
            h, a = (steps[acc].step_s(batch, 0, kv, 0) for acc in ("H100", "A100"))
            assert h < a, (tp, batch, context, h, a)


def test_the_kv_read_is_the_memory_roofline_split_over_the_kv_heads() -> None:
    m = parallel_step_model("H100", LLAMA2_70B, tp=4)
    one = m.kv_read_s(1_000_000, LLAMA2_70B.layers)
    assert m.kv_read_s(2_000_000, LLAMA2_70B.layers) == pytest.approx(2 * one)
    # 1M tokens x 320 KiB over 4 GPUs at 3.35 TB/s and hardware.py's efficiency (0.89)
    assert one == pytest.approx(1e6 * LLAMA2_70B.kv_bytes_per_token / (4 * 3.35e12 * 0.89),
                                rel=0.02)
    assert parallel_step_model("H100", LLAMA2_70B, tp=8).kv_read_s(
        1_000_000, LLAMA2_70B.layers) == pytest.approx(one / 2)


# -- the target ------------------------------------------------------------------------------
# a smaller grid and a coarser bisection: the figures are compared with each other only
FAST = {"evaluator": {"grid": {"tp": [4], "pp": [1], "max_num_batched_tokens": [512]},
                      "bisect_steps": 5}}


def test_the_targets_baselines_are_splitwise_distserve_and_the_defaults() -> None:
    ev = DeployEvaluator(load_target(TARGET, ROOT, FAST))
    plans = ev.baseline_plans
    assert {"vllm_default", "sarathi_serve", "splitwise_hh", "splitwise_ha",
            "distserve"} <= set(plans)
    ha = plans["splitwise_ha"].classes[0].pools
    assert [(role, p.accelerator, p.tp) for role, p in ha] == [("prefill", "H100", 8),
                                                               ("decode", "A100", 8)]
    assert all(p.gpus == 16 for p in plans.values())


def test_the_targets_seed_and_separate_pools_through_the_sandbox(tmp_path: Path,
                                                                 mode_sandbox: Any) -> None:
    ev = get("routing")(load_target(TARGET, ROOT, FAST))
    cand, ctx = candidate(tmp_path, mode_sandbox, "plan.py", (TARGET / "plan.py").read_text())
    base = ev.evaluate(cand, ctx)
    assert base.state is CandidateState.VALID, base.reason
    start = (TARGET / "starts/separate_pools.py").read_text()
    cand, ctx = candidate(tmp_path, mode_sandbox, "plan.py", start)
    even = ev.evaluate(cand, ctx)
    assert even.state is CandidateState.VALID, even.reason
    # three prefill instances and the one decode instance the GPUs left hold serve the mix
    # at a tight TBT: more than twice the seed's capacity per dollar (vLLM's 2,048-token
    # steps stretch TBT), and more than the start's even split
    split = re.sub(r"^PREFILL_REPLICAS = 2", "PREFILL_REPLICAS = 3", start, flags=re.M)
    split = re.sub(r"^PREFILL_BUDGET = 4096", "PREFILL_BUDGET = 2048", split, flags=re.M)
    cand, ctx = candidate(tmp_path, mode_sandbox, "plan.py", split)
    res = ev.evaluate(cand, ctx)
    assert res.state is CandidateState.VALID, res.reason
    assert res.metrics["gpus"] == 16
    assert res.metrics["capacity_per_usd"] > 2 * base.metrics["capacity_per_usd"]
    assert res.metrics["capacity_per_usd"] > even.metrics["capacity_per_usd"]
    assert res.metrics["tbt_p99_s"] <= 0.1
