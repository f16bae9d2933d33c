"""The routing target folder and every baseline policy honour the contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.routing.child import load_policy
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
