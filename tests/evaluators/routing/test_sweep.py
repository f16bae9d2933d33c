"""Sweeps: trace profiles, the training and held-out sets, the objective and the table."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from evaluators import get
from evaluators._base import EvalContext
from evaluators.routing.config import SettingsError, check_settings, sweep_cases
from evaluators.routing.profiles import QUANTILES, generate, load_profile
from evaluators.routing.sweep import Row, losses, score, table, worst_row
from optimizer.records import CandidateState
from optimizer.sandbox import Sandbox, SandboxSettings
from optimizer.targets import Objective, TargetSpec

ROOT = Path(__file__).resolve().parents[3]
TRACES = ROOT.parent / "shared" / "data" / "traces"
SEED = (ROOT / "targets/routing/global/policy.py").read_text()


# -- profiles ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mooncake_conversation", "azure2023_conversation"])
def test_a_profile_generates_its_own_figures(name):
    p = load_profile(name)
    w = generate(p, seed=3, duration_s=3000 / p.rate_rps)
    assert generate(p, seed=3, duration_s=3000 / p.rate_rps) == w  # seeded
    assert len(w) / w.duration_s == pytest.approx(p.rate_rps, rel=0.15)
    median = float(np.median(w.prompt))
    assert median == pytest.approx(p.input_q[10], rel=0.15)
    assert float(np.median(w.output)) == pytest.approx(max(p.output_q[10], 1), rel=0.15)
    if p.shared_blocks:
        assert all(b[: p.shared_blocks] == tuple(range(p.shared_blocks))
                   for b in w.blocks if len(b) >= p.shared_blocks)
    # rate scaling: the same figures, more requests per second
    fast = generate(p, seed=3, duration_s=3000 / p.rate_rps / 4, rate_scale=4)
    assert len(fast) / fast.duration_s == pytest.approx(4 * p.rate_rps, rel=0.2)


def test_the_mooncake_profile_shares_prefixes_like_its_trace():
    p = load_profile("mooncake_conversation")
    assert p.shared_blocks == 1 and 0.2 < p.follow_share < 0.5
    w = generate(p, seed=1, duration_s=1800)
    seen, follow = set(), 0
    for b in w.blocks:
        if len(b) > 1 and b[:2] in seen:
            follow += 1
        seen.update(b[:k] for k in range(1, len(b) + 1))
    assert follow / len(w) == pytest.approx(p.follow_share, abs=0.08)


@pytest.mark.skipif(not (TRACES / "mooncake_conversation.jsonl").is_file(),
                    reason="the Mooncake trace is not in ../shared/data/traces")
def test_the_shipped_mooncake_profile_is_what_the_trace_measures():
    import sys
    sys.path.insert(0, str(ROOT / "bench"))
    from routing_trace_profile import measure

    from evaluators.routing.workload import load_trace

    shipped = load_profile("mooncake_conversation")
    w = load_trace(TRACES / "mooncake_conversation.jsonl").window(0, 1800)
    again = measure(w, shipped.name, "x")
    assert again.input_q == shipped.input_q and again.follow_share == shipped.follow_share
    assert len(QUANTILES) == len(again.follow_gap_q)


# -- settings ------------------------------------------------------------------------------
BASE = {"workload": {"kind": "synthetic", "seed": 3, "duration_s": 20, "sessions_per_s": 4.0},
        "pools": [{"accelerator": "H100", "count": 2}, {"accelerator": "L40S", "count": 2}]}


def test_a_sweep_expands_families_times_rate_scales():
    cases = sweep_cases({**BASE, "sweep": [
        {"name": "chat", "rate_scales": [1, 2]},
        {"name": "mc", "kind": "profile", "profile": "mooncake_conversation", "seed": 1,
         "duration_s": 30, "rate_scales": [0.5], "pools": [{"accelerator": "H200",
                                                             "count": 4}]}]}, "sweep")
    assert [c.label for c in cases] == ["chatx1", "chatx2", "mcx0.5@4H200"]
    assert cases[0].workload["seed"] == 3 and cases[1].workload["rate_scale"] == 2.0
    assert cases[2].pools == [{"accelerator": "H200", "count": 4}]


@pytest.mark.parametrize("entry,key", [
    ({"rate_scales": []}, "sweep[0].rate_scales"),
    ({"rate_scales": [0]}, "sweep[0].rate_scales"),
    ({"rate_scale": 2}, "sweep[0].rate_scale"),
    ({"kind": "trace", "path": "x.jsonl", "optional": True}, "sweep[0].optional"),
    ({"kind": "profile", "profile": "m", "sessions_per_s": 2}, "sweep[0].sessions_per_s"),
    ({"pools": [{"accelerator": "B999", "count": 1}]}, "sweep[0].pools"),
])
def test_bad_sweep_entries_are_refused_with_their_key(entry, key):
    with pytest.raises(SettingsError) as err:
        check_settings({**BASE, "sweep": [entry]})
    assert err.value.key == key


def test_an_absent_optional_trace_is_skipped_and_said_so():
    case, = sweep_cases({**BASE, "held_out_sweep": [
        {"name": "gone", "kind": "trace", "path": "../nowhere/t.jsonl", "optional": True}]},
        "held_out_sweep")
    assert "not found" in case.missing()


# -- the objective and the table -----------------------------------------------------------
def row(v: float, spread: float = 0.5, which: str = "held-out", name: str = "w") -> Row:
    return Row(which, name, "f", 10, "ttft_p99_s", True, 1.0 / v, "llmd", 1.0, spread)


def test_a_loss_on_one_workload_is_not_bought_back_by_the_average():
    even = score([1.1] * 6)["vs_baselines"]
    lopsided = score([2.0] * 5 + [0.5])  # a 2x loss on one, 2x wins on five
    assert lopsided["vs_baselines_gmean"] > 1  # the plain mean would call it a win
    assert lopsided["vs_baselines"] < 1 < even
    assert score([1.2, 1.3])["vs_baselines"] == pytest.approx(math.sqrt(1.2 * 1.3))


def test_verdicts_ties_and_the_worst_row():
    rows = [row(1.3, name="a"), row(0.9, spread=0.03, name="tie"), row(0.8, name="lost"),
            row(0.5, which="training", name="t")]
    assert [r.verdict for r in rows[:3]] == ["win", "tie (baselines within 5%)", "LOSS"]
    assert [r.workload for r in losses(rows)] == ["lost"]  # training rows never fail it
    assert worst_row(rows).workload == "lost"
    text = table(rows)
    # training first; within a set the worst row first
    assert text.index("| training | t |") < text.index("| held-out | lost |") < text.index(
        "| held-out | a |")
    assert text.count("\n") == 2 + len(rows)


# -- through the evaluator -----------------------------------------------------------------
SWEEP = {**BASE,
         "sweep": [{"name": "chat", "rate_scales": [1.0, 2.0]}],
         "held_out_sweep": [
             {"name": "chat-s4", "seed": 4, "rate_scales": [1.5]},
             {"name": "azure", "kind": "profile", "profile": "azure2023_conversation",
              "seed": 2, "duration_s": 20, "rate_scales": [4.0]},
             {"name": "real", "kind": "trace", "optional": True,
              "path": "../nowhere/trace.jsonl", "rate_scales": [1.0]}],
         "max_decision_ms": 5.0}


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxSettings(timeout_s=60, isolation="rlimits")) as sb:
        yield sb


def _target(tmp: Path) -> TargetSpec:
    return TargetSpec(name="r", kind="routing", path=tmp, rel_path="r", description="",
                      editable=("policy.py",),
                      objectives=(Objective("vs_baselines", "maximize"),),
                      noise="deterministic", evaluator=SWEEP)


def _cand(tmp: Path, source: str) -> Path:
    cand = tmp / f"cand{abs(hash(source)) % 10_000}"
    shutil.rmtree(cand, ignore_errors=True)
    cand.mkdir()
    (cand / "policy.py").write_text(source)
    return cand


def test_the_objective_spans_the_sweep_and_the_final_check_writes_the_table(tmp_path,
                                                                            sandbox,
                                                                            monkeypatch):
    ev = get("routing")(_target(tmp_path))
    io = tmp_path / "io"
    ctx = EvalContext(sandbox=sandbox, seed=0, scratch=tmp_path, io_dir=io, timeout_s=60)
    res = ev.evaluate(_cand(tmp_path, SEED), ctx)
    assert res.state is CandidateState.VALID, res.reason
    v = [res.metrics["vs_best_baseline/chatx1"], res.metrics["vs_best_baseline/chatx2"]]
    assert res.objectives == (pytest.approx(score(v)["vs_baselines"]),)
    assert "| training | chatx2 |" in res.artifacts["sweep_train.md"]
    held = ev.held_out(_cand(tmp_path, SEED), ctx)
    assert held.ok and "vs_best_baseline/azurex4" in held.metrics
    assert "not run: trace ../nowhere/trace.jsonl not found" in held.artifacts[
        "sweep_held_out.md"]
    # round robin loses to the cache- and load-aware baselines on the held-out set: the
    # check names the first workload it lost and runs no more
    rr = (ROOT / "targets/routing/baselines/round_robin.py").read_text()
    bad = ev.final_check(_cand(tmp_path, rr), ctx)
    assert bad.state is CandidateState.INVALID and "workload chat-s4x1.5 " in bad.reason
    assert "stops at the first loss; 2 held-out workload(s) not run" in bad.reason
    assert "LOSS" in bad.artifacts["evidence.md"]

    # where nothing is lost the table has every workload of both sets, absent ones said so
    import evaluators.routing.evaluator as evaluator_module
    monkeypatch.setattr(evaluator_module, "losses", lambda rows: [])
    final = ev.final_check(_cand(tmp_path, SEED), ctx)
    assert final.ok and "held-out workloads won" in final.reason
    table_text = final.artifacts["evidence.md"]
    for label in ("chatx1", "chatx2", "chat-s4x1.5", "azurex4", "realx1"):
        assert f"| {label} |" in table_text
