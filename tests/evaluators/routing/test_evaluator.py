"""The routing evaluator end to end through a real sandbox (rlimits isolation)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evaluators import get
from evaluators._base import EvalContext
from optimizer.records import CandidateState
from optimizer.sandbox import Sandbox, SandboxSettings
from optimizer.targets import Objective, TargetSpec

ROOT = Path(__file__).resolve().parents[3]
SEED = (ROOT / "targets/routing/global/policy.py").read_text()
SETTINGS = {
    "workload": {"kind": "synthetic", "seed": 3, "duration_s": 40, "sessions_per_s": 4.0},
    "held_out": {"seed": 4},
    "check_requests": 60,
    "pools": [{"accelerator": "H100", "count": 2}, {"accelerator": "L40S", "count": 2}],
    "max_decision_ms": 5.0,
}


P99 = (Objective("ttft_p99_s"),)


def spec(tmp: Path, objectives=P99, **extra) -> TargetSpec:
    return TargetSpec(name="r", kind="routing", path=tmp, rel_path="r", description="",
                      editable=("policy.py",), objectives=tuple(objectives),
                      noise="deterministic", evaluator={**SETTINGS, **extra})


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxSettings(timeout_s=60, isolation="rlimits")) as sb:
        yield sb


def run(tmp_path: Path, sandbox, source: str, target: TargetSpec | None = None):
    cand = tmp_path / "cand"
    shutil.rmtree(cand, ignore_errors=True)
    cand.mkdir()
    (cand / "policy.py").write_text(source)
    io = tmp_path / "io"
    io.mkdir(exist_ok=True)
    ev = get("routing")(target or spec(tmp_path))
    ctx = EvalContext(sandbox=sandbox, seed=0, scratch=tmp_path, io_dir=io, timeout_s=60)
    return ev, ev.evaluate(cand, ctx), cand, ctx


def test_seed_is_valid_with_metrics_and_diagnostics(tmp_path, sandbox):
    ev, res, cand, ctx = run(tmp_path, sandbox, SEED)
    assert res.state is CandidateState.VALID, res.reason
    assert res.objectives == (res.metrics["ttft_p99_s"],)
    assert res.metrics["ttft_p99_s"] >= res.metrics["ttft_p50_s"] > 0
    assert 0 <= res.metrics["prefix_hit_ratio"] <= 1 and res.metrics["drops"] == 0
    assert "replica" in res.artifacts["routing_train.txt"]
    held = ev.held_out(cand, ctx)
    assert held.ok and held.metrics["ttft_p99_s"] != res.metrics["ttft_p99_s"]


def test_a_policy_that_patches_the_simulator_gains_nothing(tmp_path, sandbox):
    # Inside the sandbox it rewrites the metrics; the trusted side computes its own.
    cheat = SEED.replace("def route(request, view):", (
        "import evaluators.routing.metrics as _m\n"
        "_m.compute_metrics = lambda *a, **k: {'ttft_p99_s': 0.0}\n"
        "def route(request, view):"))
    honest = run(tmp_path, sandbox, SEED)[1]
    patched = run(tmp_path, sandbox, cheat)[1]
    assert patched.ok and patched.metrics["ttft_p99_s"] == honest.metrics["ttft_p99_s"]


@pytest.mark.parametrize("body, why", [
    ("return view.n", "replica index"),
    ("import random\n    return random.randrange(view.n)", "deterministic"),
    ("import time\n    time.sleep(0.01)\n    return 0", "decision time"),
])
def test_broken_policies_are_invalid(tmp_path, sandbox, body, why):
    _, res, _, _ = run(tmp_path, sandbox, f"def route(request, view):\n    {body}\n")
    assert res.state is CandidateState.INVALID and why in res.reason


def test_a_crashing_policy_fails_with_its_error(tmp_path, sandbox):
    _, res, _, _ = run(tmp_path, sandbox, "def route(request, view):\n    return 1 // 0\n")
    assert res.state is CandidateState.FAILED and "ZeroDivisionError" in res.reason


def test_smallest_fleet_and_goodput_objectives(tmp_path, sandbox):
    target = spec(tmp_path, (Objective("min_replicas"), Objective("goodput_rps", "maximize")),
                  fleet_search={"metric": "ttft_p99_s", "max": 5.0})
    _, res, _, _ = run(tmp_path, sandbox, SEED, target)
    assert res.ok, res.reason
    assert 1 <= res.objectives[0] <= 4 and res.objectives[1] == res.metrics["goodput_rps"] > 0


def test_every_measurement_reports_the_best_baseline_of_its_workload(tmp_path, sandbox,
                                                                     monkeypatch):
    import evaluators.routing.evaluator as evaluator_module
    from evaluators.routing.child import load_policy
    from evaluators.routing.config import build_fleet_from, build_workload, held_out_settings
    from evaluators.routing.metrics import compute_metrics
    from evaluators.routing.sim import simulate

    calls = []
    real = evaluator_module.best_baseline
    monkeypatch.setattr(evaluator_module, "best_baseline",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    ev, res, cand, ctx = run(tmp_path, sandbox, SEED)
    held = ev.held_out(cand, ctx)
    again = ev.held_out(cand, ctx)
    assert len(calls) == 2  # once per workload, then cached
    fleet = build_fleet_from(SETTINGS)
    for which, result in (("train", res), ("held_out", held)):
        raw = SETTINGS["workload"] if which == "train" else held_out_settings(SETTINGS)
        workload = build_workload(raw)
        # recomputed independently: every baseline file through the simulator
        p99 = {p.stem: compute_metrics(simulate(workload, fleet, load_policy(p)))["ttft_p99_s"]
               for p in sorted((ROOT / "targets/routing/baselines").glob("*.py"))}
        best = min(p99, key=p99.__getitem__)
        m = result.metrics
        assert result.artifacts["best_baseline"] == best
        assert m["best_baseline_ttft_p99_s"] == pytest.approx(p99[best], rel=1e-12)
        assert m["vs_best_baseline"] == pytest.approx(p99[best] / m["ttft_p99_s"])
        assert best in result.artifacts[f"baselines_{which}.txt"]
    timing = "decision_p99_ms"  # a wall-clock measurement; everything else is exact
    assert {k: v for k, v in again.metrics.items() if k != timing} == {
        k: v for k, v in held.metrics.items() if k != timing}
    assert res.metrics["best_baseline_ttft_p99_s"] != held.metrics["best_baseline_ttft_p99_s"]


def test_baselines_can_be_switched_off(tmp_path, sandbox):
    _, res, _, _ = run(tmp_path, sandbox, SEED, spec(tmp_path, baselines=""))
    assert res.ok and "vs_best_baseline" not in res.metrics
