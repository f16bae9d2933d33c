"""The TP/PP step model (evaluators/routing/deploy): calibration gates and shipped tables.

The gates compare the model with Splitwise's measured Llama-2-70B prompt and token times
(``../shared/data/deploy/splitwise_perf_model.csv``) and skip where that data is absent;
the other tests use only what the project ships (tables.json).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from evaluators.routing.deploy import calibration as cal
from evaluators.routing.deploy import tables as tb
from evaluators.routing.deploy.parallel import (
    LLAMA2_70B,
    LLAMA3_8B,
    KVTier,
    parallel_step_model,
)
from evaluators.routing.hardware import step_model

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT.parent / "shared" / "data" / "deploy"
needs_data = pytest.mark.skipif(
    not (DATA / cal.SPLITWISE_FILE).exists(),
    reason=f"measured profiles absent: {DATA / cal.SPLITWISE_FILE} (see docs/deploy.md)",
)


@cache
def _summary() -> dict[str, dict[str, float]]:
    return cal.summary(cal.errors(cal.load_points(DATA)))


# --- calibration gates (issue #35, item 6) ---------------------------------------------


@needs_data
def test_data_covers_both_gpus_and_three_tp_degrees():
    points = cal.load_points(DATA)
    assert {(p.gpu, p.tp) for p in points} == {
        (g, t) for g in ("H100", "A100") for t in (2, 4, 8)
    }
    assert min(p.prompt for p in points) == 128 and max(p.prompt for p in points) == 8192
    assert {p.batch for p in points} == {1, 2, 4, 8, 16, 32, 64}


@needs_data
def test_prompt_time_median_error_at_most_10_percent():
    assert _summary()["all"]["prompt_median"] <= 0.10


@needs_data
def test_prompt_time_p90_error_at_most_20_percent():
    # 17.7% (bench/results/deploy-calibration-2026-12-07.json); 20.5% before the fit left
    # out the two measurements it misses by more than 100%
    assert _summary()["all"]["prompt_p90"] <= 0.20


@needs_data
def test_token_time_median_error_at_most_10_percent():
    assert _summary()["all"]["token_median"] <= 0.10


@needs_data
def test_token_time_p90_error_at_most_20_percent():
    assert _summary()["all"]["token_p90"] <= 0.20


@needs_data
def test_shipped_tables_match_the_data():
    from evaluators.routing.deploy import derive

    rebuilt = derive.derive(DATA)
    shipped = tb.tables()
    for key in ("mlp", "all_reduce", "send_recv"):
        assert rebuilt[key] == shipped[key], key


@needs_data
def test_shipped_constants_are_the_fit_and_it_leaves_out_only_what_it_misses_twofold():
    points = cal.load_points(DATA)
    shipped = json.loads(tb.TABLES_PATH.read_text())["calibration"]
    for gpu in ("H100", "A100"):
        mine = [p for p in points if p.gpu == gpu]
        fitted = cal.fit(mine)
        assert np.allclose(fitted.as_tuple(), [shipped[tb.profile_of(gpu)][k]
                                               for k in cal.FEATURES], rtol=1e-6, atol=1e-12)
        missed = [(p.tp, p.batch, p.prompt) for p in mine
                  if not 0.0 < cal.predict(p, fitted)[0] / p.prompt_s < 2.0]
        assert missed == [(2, 64, 512)], (gpu, missed)  # the runs 12x under their neighbours


# --- shipped tables and model arithmetic (no shared data needed) ------------------------


def test_tables_name_their_sources():
    sources = json.loads(tb.TABLES_PATH.read_text())["sources"]
    assert "microsoft/vidur" in sources["vidur"] and "MIT" in sources["vidur"]
    assert "splitwise-sim" in sources["splitwise"]


def test_more_tensor_parallelism_lowers_the_mlp_side_time():
    for profile in ("h100", "a100"):
        for tokens in (1, 64, 512, 4096, 8192):
            times = [tb.mlp_layer_ms(profile, tokens, tp) for tp in (1, 2, 4, 8)]
            assert times == sorted(times, reverse=True), (profile, tokens, times)
            assert times[0] > 2.5 * times[-1] or tokens < 64


def test_collectives_grow_with_message_size_and_cross_node_is_slower():
    for profile in ("h100", "a100"):
        for tp in (2, 4, 8):
            assert tb.all_reduce_ms(profile, 64 << 20, tp) > 3 * tb.all_reduce_ms(
                profile, 1 << 20, tp
            )
        assert tb.all_reduce_ms(profile, 1 << 20, 1) == 0.0
        assert tb.send_recv_ms(profile, 64 << 20, same_node=False) > 5 * tb.send_recv_ms(
            profile, 64 << 20
        )


def test_tp1_pp1_is_close_to_the_calibrated_roofline():
    """One H100 serving Llama-3-8B: no collectives, times near hardware.py's roofline."""
    m = parallel_step_model("H100", LLAMA3_8B, tp=1)
    roof = step_model("H100")
    assert m.features(2048, 1, 0.0, 32)[4] == 0.0  # no all-reduce on one GPU
    # prefill: the roofline's fitted GEMM efficiency (0.568) is a lower bound on the time
    # of measured kernels plus an engine's overheads
    assert 1.0 <= m.prefill_s(2048) / roof.prefill_s(2048) <= 1.5
    floor = LLAMA3_8B.weight_bytes / 3.35e12  # weights read once per decode step
    assert floor < m.step_s(1, 0, 2048, 0) < 3 * floor


def test_reproduces_published_splitwise_points_from_shipped_constants():
    """A few of Splitwise's measured medians (perf_model.csv), no shared data needed."""
    # (gpu, tp, prompt tokens, batch, measured prompt ms, measured token ms)
    published = [
        ("H100", 8, 512, 1, 53.4, 29.8),
        ("H100", 4, 2048, 1, 200.7, 29.8),
        ("H100", 2, 512, 16, 1192.0, 42.0),
        ("A100", 8, 1024, 1, 154.5, 45.0),
    ]
    for gpu, tp, prompt, batch, prompt_ms, token_ms in published:
        p = cal.Point(gpu, tp, prompt, 128, batch, prompt_ms * 1e-3, token_ms * 1e-3)
        pr, tk = cal.predict(p)
        assert abs(pr / p.prompt_s - 1) < 0.25, (p, pr)
        assert abs(tk / p.token_s - 1) < 0.10, (p, tk)


def test_pipeline_adds_bubbles_and_hops():
    pp1 = parallel_step_model("H100", LLAMA2_70B, tp=4)
    pp2 = parallel_step_model("H100", LLAMA2_70B, tp=4, pp=2, micro_batches=1)
    assert pp2.bubble == pytest.approx(0.5)
    # one micro-batch: the two stages run one after the other, plus the hop between them
    decode = pp2.step_s(32, 0, 32 * 1024, 0)
    stage = pp2.stage_s(32, 32, 32 * 1024, 0.0, 0.0)
    assert decode == pytest.approx(2 * stage + pp2.hop_s(32))
    assert decode > pp1.step_s(32, 0, 32 * 1024, 0)
    # m micro-batches through pp stages: (m + pp - 1) stage times of one micro-batch
    pp4 = parallel_step_model("H100", LLAMA2_70B, tp=2, pp=4, micro_batches=8)
    assert pp4.bubble == pytest.approx(3 / 11)
    t = pp4.step_s(64, 0, 64 * 2048, 0)
    stage = pp4.stage_s(8, 8, 8 * 2048, 0.0, 0.0)
    assert t == pytest.approx(11 * stage + 3 * pp4.hop_s(8))
    # across nodes the hops are slower
    far = parallel_step_model("H100", LLAMA2_70B, tp=4, pp=2, same_node=False)
    assert far.hop_s(4096) > pp2.hop_s(4096)


def test_kv_tier_capacity_and_bandwidth():
    host = KVTier("host", capacity_gb=512.0, bandwidth_gb_s=25.0)
    per_token = LLAMA2_70B.kv_bytes_per_token
    assert per_token == 2 * 80 * 8 * 128 * 2  # 320 KiB
    assert host.capacity_tokens(per_token) == int(512e9 // per_token)
    assert host.transfer_s(10_000, per_token) == pytest.approx(10_000 * per_token / 25e9)
    m = parallel_step_model("H100", LLAMA2_70B, tp=4, kv_tier=host)
    assert m.tier_capacity_tokens() == host.capacity_tokens(per_token)
    assert m.tier_fetch_s(1000) == pytest.approx(0.0131072)
    with pytest.raises(ValueError):
        parallel_step_model("H100", LLAMA2_70B, tp=4).tier_fetch_s(1)


def test_capacity_price_and_interface():
    m = parallel_step_model("H100", LLAMA2_70B, tp=4)
    free = 4 * 80e9 * 0.9 - LLAMA2_70B.weight_bytes
    assert m.kv_capacity_tokens == int(free // LLAMA2_70B.kv_bytes_per_token)
    assert m.usd_per_hour == pytest.approx(4 * 2.90)
    assert m.prefill_s(1000) == m.step_s(0, 1000, 0, 0)
    assert m.step_s(0, 0, 0, 0) == 0.0
    # longer context costs more attention; more decoding sequences cost more
    assert m.step_s(0, 512, 0, 4096) > m.step_s(0, 512, 0, 0)
    assert m.step_s(64, 0, 64 * 1024, 0) > m.step_s(1, 0, 1024, 0)
    with pytest.raises(ValueError, match="does not fit"):
        parallel_step_model("H100", LLAMA2_70B, tp=1)
    with pytest.raises(KeyError):
        parallel_step_model("L40S", LLAMA3_8B)


def test_fit_recovers_known_constants():
    """The least-squares fit returns the constants that generated a synthetic data set."""
    truth = cal.Calibration(1.2e-4, 2e-5, 1.5e-4, 1.1, 1.7, 2.0, 1e-7, 1.2e-2)
    points = []
    for tp in (2, 4, 8):
        for prompt, batch in [(128, 1), (512, 1), (2048, 1), (8192, 1), (512, 8), (512, 32)]:
            p = cal.Point("H100", tp, prompt, 128, batch, 1.0, 1.0)
            pr, tk = cal.predict(p, truth)
            points.append(cal.Point("H100", tp, prompt, 128, batch, pr, tk))
    fitted = cal.fit(points)
    assert np.allclose(fitted.as_tuple(), truth.as_tuple(), rtol=0.02)
