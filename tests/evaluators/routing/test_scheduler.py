"""Scheduler hooks in the simulator and the evaluator's scheduler mode."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evaluators import get
from evaluators._base import EvalContext
from evaluators.routing.fleet import build_fleet
from evaluators.routing.hardware import step_model
from evaluators.routing.sched import DecisionError, Hooks, replay_hooks
from evaluators.routing.sim import SimConfig, simulate
from evaluators.routing.workload import SyntheticSpec, Workload, synthetic
from optimizer.records import CandidateState
from optimizer.sandbox import Sandbox, SandboxSettings
from optimizer.targets import Objective, TargetSpec

ROOT = Path(__file__).resolve().parents[3]
SEED = (ROOT / "targets/routing/scheduler/policy.py").read_text()
H100x2 = build_fleet([{"accelerator": "H100", "count": 2}])
KV_TIGHT = SimConfig(kv_capacity_tokens=40_000)


def first(request, view):
    return 0


def least(request, view):
    return min(range(view.n), key=view.outstanding.__getitem__)


def fixed(arrivals: list[float], prompts: list[int], output: int = 1) -> Workload:
    n = len(arrivals)
    return Workload("fixed", tuple(arrivals), tuple(prompts), (output,) * n, ((),) * n,
                    tuple(range(n)), ("local",) * n, 512)


@pytest.fixture(scope="module")
def pressed():
    return synthetic(SyntheticSpec(duration_s=30, sessions_per_s=6, output_median=600), seed=2)


def test_vllm_default_hooks_reproduce_the_built_in_scheduler(pressed):
    hooks = Hooks(lambda q, r: 0, lambda q, r: r.token_budget, lambda run, r: len(run) - 1,
                  record=True)
    plain = simulate(pressed, H100x2, least, KV_TIGHT)
    hooked = simulate(pressed, H100x2, least, KV_TIGHT, hooks=hooks)
    assert sum(plain.preempted) > 0 and hooks.log is not None and hooks.log["evict"]
    assert hooked.first_token == plain.first_token and hooked.finish == plain.finish


def test_prefill_chunk_sets_the_step_count():
    m = step_model("H100")
    one = build_fleet([{"accelerator": "H100"}])
    for chunk in (1024, 4096):
        hooks = Hooks(None, lambda q, r, c=chunk: c, None)
        res = simulate(fixed([0.0], [4096]), one, first, SimConfig(token_budget=8192),
                       hooks=hooks)
        steps = 4096 / chunk  # fluid steps at the midpoint context, as in the lone prefill
        assert res.first_token[0] == pytest.approx(steps * m.step_s(0, chunk, 0, 2048),
                                                   rel=1e-9)


def test_schedule_picks_the_next_prefill():
    # one replica busy with a long prompt; three arrive meanwhile, shortest picked first
    one = build_fleet([{"accelerator": "H100"}])
    w = fixed([0.0, 0.01, 0.02, 0.03], [8000, 3000, 1000, 2000])
    shortest = Hooks(lambda q, r: min(range(len(q)), key=lambda i: q[i].prompt_tokens),
                     None, None)
    res = simulate(w, one, first, hooks=shortest)
    order = sorted(range(4), key=res.first_token.__getitem__)
    assert order == [0, 2, 3, 1]
    assert sorted(range(4), key=simulate(w, one, first).first_token.__getitem__) == [0, 1, 2, 3]


def test_evict_preempts_the_chosen_sequence(pressed):
    chosen: list[int] = []

    def oldest(running, replica):
        chosen.append(running[0].id)
        assert all(r.context_tokens > 0 for r in running)
        return 0

    res = simulate(pressed, H100x2, least, KV_TIGHT, hooks=Hooks(None, None, oldest))
    assert chosen and all(res.preempted[i] > 0 for i in chosen)
    # the hook is skipped only when one sequence runs: it is then the victim anyway
    assert sum(res.preempted) >= len(chosen)


@pytest.mark.parametrize("hooks, why", [
    (Hooks(lambda q, r: len(q), None, None), "schedule"),
    (Hooks(None, lambda q, r: 0, None), "chunk_size"),
    (Hooks(None, lambda q, r: 512.0, None), "int"),
])
def test_bad_hook_answers_are_decision_errors(hooks, why):
    w = fixed([0.0, 0.0, 0.0], [3000, 1000, 2000])
    with pytest.raises(DecisionError, match=why):
        simulate(w, build_fleet([{"accelerator": "H100"}]), first, hooks=hooks)


def test_a_recorded_log_replays_exactly_and_a_forged_one_is_caught(pressed):
    import importlib.util
    spec = importlib.util.spec_from_file_location("seed_sched", ROOT /
                                                  "targets/routing/scheduler/policy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rec = Hooks.from_module(module, record=True)
    live = simulate(pressed, H100x2, least, KV_TIGHT, hooks=rec)
    assert rec.log is not None
    again = replay_hooks(rec.log)
    assert simulate(pressed, H100x2, least, KV_TIGHT, hooks=again).finish == live.finish
    assert again.leftovers() == ""
    short = {**rec.log, "chunk_size": rec.log["chunk_size"][:-1]}
    with pytest.raises(DecisionError, match="only"):
        simulate(pressed, H100x2, least, KV_TIGHT, hooks=replay_hooks(short))
    longer = replay_hooks({**rec.log, "evict": rec.log["evict"] + [0]})
    simulate(pressed, H100x2, least, KV_TIGHT, hooks=longer)
    assert longer.leftovers() == "1 evict() answers"


# -- the evaluator in scheduler mode, through a real sandbox ---------------------------
SETTINGS = {
    "mode": "scheduler",
    "workload": {"kind": "synthetic", "seed": 3, "duration_s": 40, "sessions_per_s": 3.0},
    "held_out": {"seed": 4},
    "pools": [{"accelerator": "L40S", "count": 1}],
    "sim": {"token_budget": 8192},
    "max_decision_ms": 5.0,
}


def spec(tmp: Path, **extra) -> TargetSpec:
    return TargetSpec(name="s", kind="routing", path=tmp, rel_path="s", description="",
                      editable=("policy.py",),
                      objectives=(Objective("slo_attainment", "maximize"),),
                      noise="deterministic", evaluator={**SETTINGS, **extra})


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxSettings(timeout_s=60, isolation="rlimits")) as sb:
        yield sb


def run(tmp_path: Path, sandbox, source: str):
    cand = tmp_path / "cand"
    shutil.rmtree(cand, ignore_errors=True)
    cand.mkdir()
    (cand / "policy.py").write_text(source)
    io = tmp_path / "io"
    io.mkdir(exist_ok=True)
    ev = get("routing")(spec(tmp_path))
    ctx = EvalContext(sandbox=sandbox, seed=0, scratch=tmp_path, io_dir=io, timeout_s=60)
    return ev, ev.evaluate(cand, ctx), cand, ctx


def test_scheduler_seed_is_valid_and_compared_with_the_scheduler_baselines(tmp_path, sandbox):
    ev, res, cand, ctx = run(tmp_path, sandbox, SEED)
    assert res.ok, res.reason
    m = res.metrics
    assert res.objectives == (m["slo_attainment"],)
    assert res.artifacts["best_baseline"] in {"fcfs", "sarathi", "shortest_first",
                                              "longest_prefix"}
    assert m["vs_best_baseline"] == pytest.approx(m["slo_attainment"]
                                                  / m["best_baseline_slo_attainment"])
    held = ev.held_out(cand, ctx)
    assert held.ok and held.metrics["slo_attainment"] != m["slo_attainment"]


def test_patching_the_simulator_in_the_sandbox_gains_nothing(tmp_path, sandbox):
    cheat = SEED.replace("def schedule(queue, replica):", (
        "import evaluators.routing.hardware as _h\n"
        "_h.StepModel.step_s = lambda *a: 1e-9\n"
        "import evaluators.routing.metrics as _m\n"
        "_m.compute_metrics = lambda *a, **k: {'slo_attainment': 1.0}\n"
        "def schedule(queue, replica):"))
    honest = run(tmp_path, sandbox, SEED)[1]
    patched = run(tmp_path, sandbox, cheat)[1]
    assert patched.ok and patched.metrics["slo_attainment"] == honest.metrics["slo_attainment"]


@pytest.mark.parametrize("old, new, why", [
    ("return max(1, min(chunk, replica.token_budget))", "return 0", "chunk_size"),
    ("return max(1, min(chunk, replica.token_budget))",
     "import random\n    return random.choice([512, 1024, 2048])", "deterministic"),
])
def test_broken_schedulers_are_invalid(tmp_path, sandbox, old, new, why):
    assert old in SEED
    _, res, _, _ = run(tmp_path, sandbox, SEED.replace(old, new))
    assert res.state is CandidateState.INVALID and why in res.reason


ORACLE = """
import sys as _sys


def _oracle():
    frame = _sys._getframe(1)
    while frame is not None:
        names = frame.f_locals
        if {"output", "gen"} & set(names) or "reps" in names:
            raise RuntimeError(f"found the simulator's locals: {sorted(names)[:8]}")
        frame = frame.f_back
"""


def test_hooks_find_nothing_of_the_simulator(tmp_path, sandbox):
    # the hooks are called from the child's request handler, not from the simulator
    source = SEED.replace("def schedule(queue, replica):\n",
                          ORACLE + "\n\ndef schedule(queue, replica):\n    _oracle()\n")
    honest = run(tmp_path, sandbox, SEED)[1]
    _, res, _, _ = run(tmp_path, sandbox, source)
    assert res.state is CandidateState.VALID, res.reason
    assert res.metrics["slo_attainment"] == honest.metrics["slo_attainment"]


def test_late_nondeterminism_of_a_hook_is_caught(tmp_path, sandbox):
    old = "    return max(1, min(chunk, replica.token_budget))"
    new = ("    if request.id >= 120:\n        import random\n"
           "        return random.SystemRandom().choice([512, 1024, 2048])\n" + old)
    _, res, _, _ = run(tmp_path, sandbox, SEED.replace(old, new))
    assert res.state is CandidateState.INVALID and res.stage == "performance"
    assert "hook call" in res.reason and "deterministic" in res.reason


def test_a_hook_that_raises_is_failed_with_the_call_named(tmp_path, sandbox):
    old = "def evict(running, replica):\n"
    source = SEED.replace("def chunk_size(request, replica):\n",
                          "def chunk_size(request, replica):\n    if request.id == 40:\n"
                          "        raise KeyError('chunk')\n")
    assert old in source
    _, res, _, _ = run(tmp_path, sandbox, source)
    assert res.state is CandidateState.FAILED and "chunk_size() failed on replica 0" in res.reason
    assert "KeyError" in res.reason
