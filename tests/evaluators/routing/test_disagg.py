"""Prefill/decode pools with a KV hand-off link, and the client tier: closed forms."""

from __future__ import annotations

import math

import pytest

from evaluators.routing.fleet import build_fleet
from evaluators.routing.hardware import ModelShape, step_model
from evaluators.routing.metrics import compute_metrics
from evaluators.routing.sim import simulate
from evaluators.routing.workload import SyntheticSpec, Workload, synthetic

KV = ModelShape().kv_bytes_per_token  # 128 KiB per token for Llama-3-8B


def fixed(arrivals: list[float], prompt: int, output: int) -> Workload:
    n = len(arrivals)
    return Workload("fixed", tuple(arrivals), (prompt,) * n, (output,) * n, ((),) * n,
                    tuple(range(n)), ("us",) * n, 512)


def to(k: int):
    return lambda request, view: k


PD = [{"accelerator": "H200", "count": 1, "role": "prefill", "kv_link_gb_s": 50.0},
      {"accelerator": "H200", "count": 1, "role": "decode"}]


def test_kv_transfer_time_is_added_to_ttft():
    w = fixed([0.0], 2000, 50)
    colocated = simulate(w, build_fleet([{"accelerator": "H200"}]), to(0))
    split = simulate(w, build_fleet(PD), to(0))
    transfer = 2000 * KV / 50e9  # 5.2 ms for 2,000 tokens at 50 GB/s
    assert split.transfer_s[0] == pytest.approx(transfer, rel=1e-12)
    assert split.first_token[0] == pytest.approx(colocated.first_token[0] + transfer, rel=1e-9)
    # the decode replica runs the 49 remaining tokens alone
    assert split.decode_tokens == pytest.approx([0.0, 49.0])
    assert split.prefill_tokens == pytest.approx([2000.0, 0.0])
    assert split.finish[0] - split.first_token[0] == pytest.approx(
        colocated.finish[0] - colocated.first_token[0], rel=0.01)


def test_transfers_queue_on_the_prefill_replicas_link():
    pools = [{**PD[0], "kv_link_gb_s": 1.0}, PD[1]]
    res = simulate(fixed([0.0, 0.0], 2000, 10), build_fleet(pools), to(0))
    one = 2000 * KV / 1e9  # 0.26 s, longer than the second prefill (~0.06 s)
    assert res.first_token[1] - res.first_token[0] == pytest.approx(one, rel=1e-9)
    assert res.transfer_s[1] > one  # it waited for the link


def test_a_decode_replica_that_gets_a_new_request_prefills_it():
    res = simulate(fixed([0.0], 1000, 5), build_fleet(PD), to(1))
    assert res.transfer_s == [0.0] and res.prefill_tokens == pytest.approx([0.0, 1000.0])


def test_disaggregated_fleet_conserves_tokens_and_requests():
    w = synthetic(SyntheticSpec(duration_s=40, sessions_per_s=3), seed=9)
    pools = [{**PD[0], "count": 2}, {**PD[1], "count": 2}]
    res = simulate(w, build_fleet(pools), lambda r, v: r.id % 2)
    assert not any(res.dropped) and all(math.isfinite(f) for f in res.finish)
    served_prefill = sum(p - c for p, c in zip(w.prompt, res.cached, strict=True))
    assert sum(res.prefill_tokens) == pytest.approx(served_prefill, rel=1e-6)
    assert sum(res.decode_tokens) == pytest.approx(sum(o - 1 for o in w.output), rel=1e-6)
    assert sum(res.decode_tokens[:2]) == 0  # prefill replicas never decode
    assert compute_metrics(res)["ttft_p99_s"] > 0


CLIENT = {"tier": "client", "prefill_ms_per_token": 2.0, "decode_ms_per_token": 40.0,
          "region": "us"}


def test_client_tier_serves_in_closed_form_without_queue_or_round_trip():
    fleet = build_fleet([CLIENT, {"accelerator": "H100", "region": "eu"}], {"us-eu": 80})
    res = simulate(fixed([0.0, 0.0, 0.5], 1500, 20), fleet, to(0))
    for i, t in enumerate((0.0, 0.0, 0.5)):  # simultaneous requests do not wait
        assert res.first_token[i] - t == pytest.approx(1500 * 2e-3, rel=1e-12)
        assert res.finish[i] - res.first_token[i] == pytest.approx(19 * 40e-3, rel=1e-12)
    assert res.rtt == [0.0, 0.0, 0.0]
    m = compute_metrics(res)
    assert m["ttft_p50_s"] == pytest.approx(3.0) and fleet.replicas[0].usd_per_hour == 0.0


def test_client_prefill_and_upload_then_server_decode():
    client = {**CLIENT, "role": "prefill", "kv_link_gb_s": 0.05}  # a 50 MB/s uplink
    fleet = build_fleet([client, {"accelerator": "H100", "region": "eu"}], {"us-eu": 80})
    res = simulate(fixed([0.0], 400, 30), fleet, to(0))
    upload = 400 * KV / 0.05e9  # 1.05 s for 400 tokens of KV
    assert res.first_token[0] == pytest.approx(400 * 2e-3 + upload, rel=1e-12)
    assert res.transfer_s[0] == pytest.approx(upload, rel=1e-12)
    assert res.rtt == [0.08]  # tokens stream from the server in the other region
    assert res.decode_tokens == pytest.approx([0.0, 29.0])
    m = step_model("H100")
    assert res.finish[0] - res.first_token[0] == pytest.approx(29 * m.step_s(1, 0, 415, 0),
                                                               rel=0.01)


@pytest.mark.parametrize("pools, why", [
    ([{"role": "prefill"}, {"role": "decode"}], "kv_link_gb_s"),
    ([{"role": "prefill", "kv_link_gb_s": 10}], "decode"),
    ([{"role": "sideways"}], "role"),
    ([CLIENT], "server pool"),
    ([{**CLIENT, "count": 3}, {}], "count = 1"),
    ([{**CLIENT, "decode_ms_per_token": 0}, {}], "decode_ms_per_token"),
])
def test_bad_pool_settings_say_what_to_fix(pools, why):
    with pytest.raises(ValueError, match=why):
        build_fleet(pools)
