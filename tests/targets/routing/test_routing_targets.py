"""The routing target folder and every baseline policy honour the contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.routing.baselines import load_policy
from evaluators.routing.config import build_fleet_from, build_workload
from evaluators.routing.metrics import compute_metrics
from evaluators.routing.sim import simulate
from optimizer import knobs
from optimizer.edits import evolve_regions
from optimizer.targets import load_target

ROOT = Path(__file__).resolve().parents[3]
BASELINES = sorted((ROOT / "targets/routing/baselines").glob("*.py"))


def test_global_target_loads_with_knobs_inside_the_evolve_block():
    spec = load_target(ROOT / "targets/routing/global", ROOT)
    assert spec.kind == "routing" and spec.noise == "deterministic"
    source = (spec.path / "policy.py").read_text()
    (start, end), = evolve_regions(source)
    found = knobs.parse_knobs(source)
    assert len(found) >= 5
    lines = source.splitlines(keepends=True)
    offsets = [sum(len(x) for x in lines[: k.line - 1]) for k in found]
    assert all(start <= o < end for o in offsets)


@pytest.fixture(scope="module")
def small():
    settings = load_target(ROOT / "targets/routing/global", ROOT).evaluator
    workload = build_workload(settings["workload"]).head(600)
    return workload, build_fleet_from(settings)


@pytest.mark.parametrize("path", BASELINES, ids=[p.stem for p in BASELINES])
def test_every_baseline_routes_validly_and_deterministically(path, small):
    workload, fleet = small
    a = simulate(workload, fleet, load_policy(path), time_policy=True)
    b = simulate(workload, fleet, load_policy(path))
    assert a.decisions == b.decisions
    assert sorted(a.decision_s)[int(0.99 * len(a.decision_s))] < 1e-3
    assert compute_metrics(a)["drops"] == 0


def test_cache_aware_baselines_hit_more_than_round_robin(small):
    workload, fleet = small
    hit = {p.stem: compute_metrics(simulate(workload, fleet, load_policy(p)))["prefix_hit_ratio"]
           for p in BASELINES}
    for name in ("sglang_cache_aware", "llmd_weighted", "preble", "dynamo_kv"):
        assert hit[name] > hit["round_robin"]


SCHEDULERS = sorted((ROOT / "targets/routing/baselines/scheduler").glob("*.py"))


def test_scheduler_target_loads_with_knobs_inside_the_evolve_block():
    spec = load_target(ROOT / "targets/routing/scheduler", ROOT)
    assert spec.kind == "routing" and spec.noise == "deterministic"
    assert spec.evaluator["mode"] == "scheduler" and "held_out_sweep" in spec.evaluator
    source = (spec.path / "policy.py").read_text()
    (start, end), = evolve_regions(source)
    found = knobs.parse_knobs(source)
    assert {k.name for k in found} >= {"CHUNK", "AGE_WEIGHT", "EVICT"}
    lines = source.splitlines(keepends=True)
    assert all(start <= sum(len(x) for x in lines[: k.line - 1]) < end for k in found)


@pytest.fixture(scope="module")
def scheduler_run():
    from evaluators.routing.baselines import runner
    from evaluators.routing.config import build_sim_config, router_path

    settings = load_target(ROOT / "targets/routing/scheduler", ROOT).evaluator
    workload = build_workload(settings["workload"]).head(800)
    return runner("scheduler", workload, build_fleet_from(settings),
                  build_sim_config(settings), router_path(settings))


def test_scheduler_seed_is_first_come_first_served(scheduler_run):
    seed = scheduler_run(ROOT / "targets/routing/scheduler/policy.py")
    fcfs = scheduler_run(ROOT / "targets/routing/baselines/scheduler/fcfs.py")
    assert seed.first_token == fcfs.first_token and seed.finish == fcfs.finish


@pytest.mark.parametrize("path", SCHEDULERS, ids=[p.stem for p in SCHEDULERS])
def test_every_scheduler_baseline_runs_deterministically(path, scheduler_run):
    a, b = scheduler_run(path), scheduler_run(path)
    assert a.finish == b.finish and not any(a.dropped)


def test_best_baseline_of_the_nightly_target_costs_under_10_s():
    import time

    from evaluators.routing.baselines import best_baseline, runner
    from evaluators.routing.config import build_sim_config, build_slo, sweep_cases

    settings = load_target(ROOT / "targets/routing/global", ROOT).evaluator
    fleet, cfg = build_fleet_from(settings), build_sim_config(settings)
    start = time.perf_counter()
    for case in sweep_cases(settings, "sweep"):  # the training set, every workload
        report = best_baseline(ROOT / "targets/routing/baselines",
                               runner("router", build_workload(case.workload), fleet, cfg),
                               build_slo(settings), "ttft_p99_s", True)
        assert report is not None and len(report.metrics) == len(BASELINES)
        # load matters here: a cache- and load-aware router is best, far ahead of the rest
        assert report.best in ("llmd_weighted", "preble", "sglang_cache_aware", "dynamo_kv")
        assert report.metrics["round_robin"]["ttft_p99_s"] > 1.5 * report.best_metrics[
            "ttft_p99_s"]
    assert time.perf_counter() - start < 10.0


TRACES = ROOT.parent / "shared" / "data" / "traces"


def test_held_out_sets_hold_the_real_traces_at_1_4_8x_on_4_and_8_h200():
    from evaluators.routing.config import sweep_cases

    settings = load_target(ROOT / "targets/routing/global", ROOT).evaluator
    train = {c.label for c in sweep_cases(settings, "sweep")}
    held = sweep_cases(settings, "held_out_sweep")
    assert not train & {c.label for c in held}
    real = {c.label for c in held if c.workload.get("kind") == "trace"}
    for trace in ("mooncake-real", "azure-real"):
        for n in (4, 8):
            assert {f"{trace}x{s}@{n}H200" for s in (1, 4, 8)} <= real
    assert all(c.optional for c in held if c.label in real)
    # the families the search never sees
    assert any(c.workload.get("profile") == "azure2023_conversation" for c in held)


@pytest.mark.skipif(not TRACES.is_dir(), reason="no ../shared/data/traces (real traces absent)")
def test_the_real_held_out_windows_are_not_the_profiles_window():
    from evaluators.routing.config import sweep_cases
    from evaluators.routing.profiles import load_profile

    settings = load_target(ROOT / "targets/routing/global", ROOT).evaluator
    for case in sweep_cases(settings, "held_out_sweep"):
        if case.workload.get("kind") != "trace" or case.missing():
            continue
        assert case.workload["start_s"] >= 1800  # the profiles measured seconds 0-1,800
        assert len(build_workload(case.workload)) > 100
    assert "window 0-1800 s" in load_profile("mooncake_conversation").source
