"""Simulator self-checks: closed forms, conservation, monotonicity, a published figure."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest

from evaluators.routing.fleet import build_fleet
from evaluators.routing.hardware import step_model
from evaluators.routing.metrics import compute_metrics
from evaluators.routing.sim import DecisionError, SimConfig, simulate
from evaluators.routing.workload import SyntheticSpec, Workload, load_mooncake, synthetic

TRACES = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "traces"
MOONCAKE = TRACES / "mooncake_conversation.jsonl"


def round_robin():
    state = [0]

    def route(request, view):
        state[0] += 1
        return state[0] % view.n

    return route


def fixed(n: int, arrivals: list[float], prompt: int, output: int = 1) -> Workload:
    return Workload("fixed", tuple(arrivals), (prompt,) * n, (output,) * n, ((),) * n,
                    tuple(range(n)), ("local",) * n, 512)


H200 = build_fleet([{"accelerator": "H200", "count": 1}])


def service_s(prompt: int) -> float:
    res = simulate(fixed(1, [0.0], prompt), H200, round_robin())
    return res.first_token[0]


def test_lone_prefill_matches_the_step_model():
    # fluid steps: 2000 tokens are 2000/2048 of a full-budget step at mid-prefill context
    m = step_model("H200")
    assert service_s(2000) == pytest.approx(2000 / 2048 * m.step_s(0, 2048, 0, 1000), rel=1e-9)
    # a 16k prompt: 8 chunks, attention growing with the context already computed
    assert service_s(16384) == pytest.approx(8 * m.step_s(0, 2048, 0, 8192), rel=1e-9)
    # the H200 calibration: ~33k prefill tokens/s at 2k tokens
    assert 2000 / service_s(2000) == pytest.approx(33_000, rel=0.08)


def test_deterministic_arrivals_never_wait_below_capacity():
    s = service_s(1500)
    n = 400
    res = simulate(fixed(n, [i * 1.25 * s for i in range(n)], 1500), H200, round_robin())
    ttft = np.array(res.first_token) - np.arange(n) * 1.25 * s
    assert np.allclose(ttft, s, rtol=1e-9)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_poisson_arrivals_match_md1_waiting_time(rho):
    s = service_s(1500)
    n = 30_000
    arr = np.cumsum(np.random.default_rng(3).exponential(s / rho, n)).tolist()
    res = simulate(fixed(n, arr, 1500), H200, round_robin())
    wait = float(np.mean(np.array(res.first_token) - np.array(arr))) - s
    md1 = rho * s / (2 * (1 - rho))  # Pollaczek-Khinchine, deterministic service
    assert wait == pytest.approx(md1, rel=0.08)


def test_tokens_and_requests_are_conserved():
    w = synthetic(SyntheticSpec(duration_s=60, sessions_per_s=3), seed=5)
    fleet = build_fleet([{"accelerator": "H100", "count": 3}])
    res = simulate(w, fleet, round_robin())
    assert not any(res.dropped) and sum(res.preempted) == 0
    assert all(math.isfinite(f) for f in res.finish)
    served_prefill = sum(p - c for p, c in zip(w.prompt, res.cached, strict=True))
    assert sum(res.prefill_tokens) == pytest.approx(served_prefill, rel=1e-6)
    assert sum(res.decode_tokens) == pytest.approx(sum(o - 1 for o in w.output), rel=1e-6)
    for i in range(len(w)):
        assert res.first_token[i] >= w.arrival[i]
        assert res.finish[i] >= res.first_token[i]


def test_kv_exhaustion_preempts_and_still_finishes_everything():
    w = synthetic(SyntheticSpec(duration_s=30, sessions_per_s=6, output_median=600), seed=2)
    fleet = build_fleet([{"accelerator": "H100", "count": 2}])
    res = simulate(w, fleet, round_robin(), SimConfig(kv_capacity_tokens=40_000))
    assert sum(res.preempted) > 0
    served = [i for i in range(len(w)) if not res.dropped[i]]
    assert all(math.isfinite(res.finish[i]) for i in served)
    decoded = sum(w.output[i] - 1 for i in served)
    assert sum(res.decode_tokens) == pytest.approx(decoded, rel=0.01)


def test_requests_that_cannot_fit_are_dropped_and_counted():
    w = fixed(3, [0.0, 0.1, 0.2], 5000, output=100)
    res = simulate(w, H200, round_robin(), SimConfig(kv_capacity_tokens=5050))
    assert res.dropped == [True, True, True]
    assert compute_metrics(res)["drops"] == 3.0


def test_more_replicas_never_hurt_round_robin():
    w = synthetic(SyntheticSpec(duration_s=120, sessions_per_s=4), seed=11)
    p99 = []
    for n in (2, 4, 8):
        res = simulate(w, build_fleet([{"accelerator": "L40S", "count": n}]), round_robin())
        p99.append(compute_metrics(res)["ttft_p99_s"])
    assert p99[0] >= p99[1] >= p99[2]


def test_same_decisions_give_the_same_result_and_bad_ones_are_refused():
    w = synthetic(SyntheticSpec(duration_s=30), seed=1)
    fleet = build_fleet([{"accelerator": "H200", "count": 2}])
    a = simulate(w, fleet, round_robin())
    b = simulate(w, fleet, round_robin())
    assert a.first_token == b.first_token and a.finish == b.finish
    with pytest.raises(DecisionError, match="replica index"):
        simulate(w, fleet, lambda r, v: 2)
    with pytest.raises(DecisionError):
        simulate(w, fleet, lambda r, v: 1.0)


def test_synthetic_workload_is_seeded_and_windows_rebase():
    spec = SyntheticSpec(duration_s=60)
    assert synthetic(spec, 4) == synthetic(spec, 4)
    assert synthetic(spec, 4).arrival != synthetic(spec, 5).arrival
    w = synthetic(spec, 4).window(20, 40)
    assert w.arrival[0] == 0.0 and w.arrival[-1] < 20.0


@pytest.mark.skipif(not MOONCAKE.is_file(), reason=f"trace {MOONCAKE} not present")
def test_mooncake_round_robin_hit_ratio_matches_the_trace_readme():
    # trace README: round-robin over 4/8/16 replicas, infinite cache: 19.6%/13.9%/10.1%
    w = load_mooncake(MOONCAKE)
    cfg = SimConfig(kv_capacity_tokens=10**12)
    for n, want in ((4, 0.196), (8, 0.139), (16, 0.101)):
        res = simulate(w, build_fleet([{"accelerator": "H200", "count": n}]), round_robin(), cfg)
        assert compute_metrics(res)["prefix_hit_ratio"] == pytest.approx(want, abs=0.003)


@pytest.mark.skipif(not MOONCAKE.is_file(), reason=f"trace {MOONCAKE} not present")
def test_mooncake_hour_on_8_h200_simulates_within_3_s():
    w = load_mooncake(MOONCAKE)
    fleet = build_fleet([{"accelerator": "H200", "count": 8}])
    start = time.process_time()
    res = simulate(w, fleet, round_robin())
    assert time.process_time() - start < 3.0
    assert len(res.decisions) == 12_031 and not any(res.dropped)


def test_round_trip_of_a_remote_region_is_paid_once_in_ttft():
    fleet = build_fleet([{"accelerator": "H200", "count": 1, "region": "us"},
                         {"accelerator": "H200", "count": 1, "region": "eu"}], {"us-eu": 80})
    w = fixed(1, [0.0], 1000)
    w = Workload("r", w.arrival, w.prompt, w.output, w.blocks, w.session, ("us",), 512)
    near = simulate(w, fleet, lambda r, v: 0)
    far = simulate(w, fleet, lambda r, v: 1)
    gap = compute_metrics(far)["ttft_p50_s"] - compute_metrics(near)["ttft_p50_s"]
    assert gap == pytest.approx(0.080)
