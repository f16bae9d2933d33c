"""The GPU benchmark scripts run where they are written, so that an H200 run is never spent
on a Python error: the speculative bench's CPU smoke configuration end to end, and the
kernel night script on CPU (no GPU: each seed is validated, nothing is timed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _checkout_copy(tmp_path: Path) -> Path:
    """A copy of the checkout's tracked files without .git (a GPU machine gets the working
    tree: the night scripts must make their own repository)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    work = tmp_path / "work"
    for rel in filter(None, files):
        if (ROOT / rel).is_file():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, work / rel)
    return work


@pytest.mark.slow
def test_speculative_bench_smoke_runs_every_draft_losslessly(tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    subprocess.run([sys.executable, str(ROOT / "bench" / "speculative_h200.py"), "--smoke",
                    "--out", str(out)], check=True, cwd=tmp_path, timeout=300,
                   capture_output=True)
    data = json.loads(out.read_text())
    assert set(data["drafts"]) == {"ngram", "table", "medusa", "independent", "eagle"}
    for name, rec in data["drafts"].items():
        assert all(s["lossless"] for s in rec["sweep"].values()), name
        assert rec["speedup"] > 0
    assert data["cache_check"]["greedy_reference_is_full_forward"]
    assert 0 < data["target_output"]["distinct_token_share"] <= 1
    assert data["drafts"]["table"]["fit_s"] > 0  # fitted, not trained


@pytest.mark.slow
def test_kernel_night_script_exports_what_the_night_kept(tmp_path: Path) -> None:
    work = _checkout_copy(tmp_path)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable}
    # every seed ends PRUNED here, so the night ends when the five seeds are evaluated; the
    # budget only has to be long enough for that on a loaded machine (0.3 min was not, nor
    # was 3 min once the normalisation targets had four starts each under a full test run)
    res = subprocess.run(["bash", "bench/kernels_night_gpu.sh", str(out), "6"], cwd=work,
                         env=env, timeout=900, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    kept = json.loads((out / "kept.json").read_text())
    targets = sorted(p.name for p in (ROOT / "targets" / "kernels").iterdir()
                     if (p / "target.toml").is_file())
    assert sorted(kept) == targets
    for t in targets:  # no GPU, no timing, no winner: each kept program is the seed
        assert kept[t] == "seed"
        assert (out / "kept" / f"{t}.py").read_text() == (
            ROOT / "targets" / "kernels" / t / "kernel.py").read_text()
    assert "all targets done" in (out / "night.log").read_text()
    # the night's per-target figures, as a GPU night's are summarised
    res = subprocess.run([sys.executable, "bench/night_summary.py", "experiments/kernels.toml",
                          "--out", str(out / "summary.json")], cwd=work, env=env, timeout=300,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary) == targets
    for t in targets:
        seed = summary[t]["rows"][0]
        assert seed["proposer"] == "seed" and seed["state"] == "PRUNED"
        assert 0 < seed["own_s"] <= seed["eval_s"] + 1e-9


@pytest.mark.slow
def test_multigpu_script_dry_run_on_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The several-GPU run on two toy targets, without GPUs (``--gpus 2`` forced): both
    nights, then two workers of which one is killed mid-candidate; the checks it makes of
    the stores find nothing wrong."""
    from evaluators.function.toy import (
        SLOW_EVALUATE,
        add_toy_target,
        git,
        make_toy_repo,
        write_experiment,
    )

    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    repo = make_toy_repo(tmp_path / "repo", SLOW_EVALUATE)
    add_toy_target(repo, "toy2", evaluate=SLOW_EVALUATE)
    write_experiment(repo, "pair", body='[targets.settings.evaluator]\nrepeats = 1\n'
                     '[[targets]]\npath = "targets/function/toy2"\n'
                     '[targets.settings.evaluator]\nrepeats = 1\n')
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pair")
    out = tmp_path / "out"
    env = {**os.environ, "TOY_EVAL_S": "0.1"}
    res = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "multigpu_h200.py"), "--repo", str(repo),
         "--experiment", "experiments/pair.toml", "--out", str(out), "--minutes", "0.3",
         "--gpus", "2", "--per-gpu", "1", "--kill-after", "3",
         "--set", "budget.max_candidates=24", "--set", "targets.toy.max_candidates=12",
         "--set", "targets.toy2.max_candidates=12",  # both targets' turns in the serial night
         "--set", "worker.heartbeat_s=1", "--set", "worker.grace_s=3"],  # records each second
        cwd=tmp_path, env=env, timeout=600, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    data = json.loads((out / "multigpu.json").read_text())
    for key, slots in (("one_gpu", 1), ("all_gpus", 2)):
        rec = data["nights"][key]
        assert rec["exit"] == 0 and rec["slots"] == slots, rec["log_tail"]
        assert set(rec["targets"]) == {"toy", "toy2"} and rec["candidates"] > 2
    w = data["workers"]
    assert w["ok"], w["problems"]
    assert w["killed"] and w["killed"]["held"], w["killed"]
    assert w["consistent"] and len(w["candidates_by_worker"]) == 2
    assert sum(len(t["lost"]) for t in w["targets"].values()) >= 1
    assert "throughput ratio" in res.stdout


def test_the_kernel_bench_times_a_nights_own_workloads_and_reads_its_searches() -> None:
    """`bench/kernels_h200.py --night-workloads` times what the night times (each target's
    GPU workloads, not its CPU ones), and `bench/search_table.py` ranks a search."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import kernels_h200
        import search_table
    finally:
        sys.path.remove(str(ROOT / "bench"))
    names = [w[0] for w in kernels_h200.night_workloads(ROOT / "targets/kernels/layernorm")]
    assert names == ["bf16-8192x4096", "bf16-16381x5120-ragged", "fp32-2048x3000-ragged"]
    data = {"search": [
        {"target": "t", "config": "seed", "valid": True, "ms": [2.0, 2.0]},
        {"target": "t", "config": "fast", "valid": True, "ms": [1.0, 1.0]},
        {"target": "t", "config": "broken", "valid": False, "ms": []}]}
    lines = search_table.table(data, top=1)
    assert lines[0] == "t: 2 valid, 1 rejected"
    assert lines[1].endswith("fast") and lines[2].endswith("seed")  # the seed always shown


def test_the_evaluation_cost_bench_runs_where_it_is_written(tmp_path: Path) -> None:
    """`bench/kernels_eval_cost.py` on the CPU: the sandbox starts, the night's preparation
    makes the pools, the seed and a start are evaluated (validated, not timed), and what it
    measured is written per target."""
    out = tmp_path / "cost.json"
    res = subprocess.run([sys.executable, "bench/kernels_eval_cost.py", "--out", str(out),
                          "--targets", "rmsnorm", "--starts", "1"], cwd=ROOT, timeout=600,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    t = json.loads(out.read_text())["targets"]["rmsnorm"]
    assert t["sandbox_start_s"] > 0 and t["prepare_s"] > 0
    assert [e["program"] for e in t["evaluations"]] == ["seed", "variants/chunked.py"]
    for e in t["evaluations"]:
        assert e["state"] == "PRUNED" and "correctness verified" in e["reason"]
        assert e["cost"]["cost_s/check_prep"] < 1.0  # the pools were made beforehand


def test_the_transport_bench_runs_where_it_is_written(tmp_path: Path) -> None:
    """`bench/kernels_transport_cost.py` on the CPU, small: every measured step is there,
    with a rate for each copy and write, and its folders are removed."""
    out = tmp_path / "transport.json"
    res = subprocess.run([sys.executable, "bench/kernels_transport_cost.py", "--out", str(out),
                          "--rows", "64", "--cols", "320", "--reps", "2"], cwd=ROOT,
                         timeout=300, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["bytes"] == 64 * 320 * 2
    steps = {"make_case", "digest", "to_cpu_pageable", "to_cpu_pinned", "write_disk",
             "save_file_disk", "device_to_file_disk"}
    assert steps <= set(data["seconds"])
    assert all(v > 0 for k, v in data["gb_per_s"].items())
    assert not list(ROOT.glob("transport-*"))


def test_the_engine_bench_runs_where_it_is_written(tmp_path: Path) -> None:
    """`bench/speculative_engine.py` on the CPU, tiny target: every step size timed plain
    and as the calibrated engine runs it, and greedy decoding on the engine is eager's."""
    out = tmp_path / "engine.json"
    res = subprocess.run([sys.executable, "bench/speculative_engine.py", "--preset", "tiny",
                          "--cache", str(tmp_path / "cache"), "--prompts", "2", "--n-new", "16",
                          "--ks", "2,4", "--steps", "3", "--out", str(out)], cwd=ROOT,
                         timeout=300, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads(out.read_text())
    assert set(data["steps"]) == {"1", "3", "5"}
    assert all(r["engine_ms"] > 0 and r["engine_padded_ms"] > 0 for r in data["steps"].values())
    assert data["calibration"]["pad_to"] == {}  # nothing padded off a GPU
    assert data["plain_decode"]["greedy_identical"] is True


@pytest.mark.slow
def test_speculative_night_script_prepares_where_it_is_written(tmp_path: Path) -> None:
    """`bench/speculative_night_gpu.sh OUT prepare` on the CPU with the tiny preset: the
    target cached, the engine's table (plain and padded) and the channel's round trip with
    and without a spin, each in its file."""
    work = _checkout_copy(tmp_path)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "PRESET": "tiny", "BOUNDARY_CALLS": "60",
           "ENGINE_ARGS": "--prompts 2 --n-new 16 --ks 2,4 --steps 3"}
    res = subprocess.run(["bash", "bench/speculative_night_gpu.sh", str(out), "prepare"],
                         cwd=work, env=env, timeout=600, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    target = json.loads((out / "target.json").read_text())
    assert target["params"] > 0 and target["final_loss"] > 0
    engine = json.loads((out / "engine.json").read_text())
    assert set(engine["steps"]) == {"1", "3", "5"} and "pad_to" in engine["calibration"]
    for spin in (0, 5):
        rows = json.loads((out / f"boundary-spin{spin}.json").read_text())
        assert rows["spin_ms"] == spin and rows["rows"][0]["median_us"] > 0


@pytest.mark.slow
def test_production_script_prepares_where_it_is_written(tmp_path: Path) -> None:
    """`bench/kernels_production_gpu.sh OUT 6 prepare` on the CPU: every target's seed stands
    in for the night's program, the bench's plan names every rival row (or why a rival
    cannot run), the end-to-end gate passes every seed and torch's op through the Triton
    interpreter, and one result file with a table comes back."""
    work = _checkout_copy(tmp_path)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "WORK": str(tmp_path / "scratch")}
    res = subprocess.run(["bash", "bench/kernels_production_gpu.sh", str(out), "6", "prepare"],
                         cwd=work, env=env, timeout=900, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["result.json", "table.txt"]
    data = json.loads((out / "result.json").read_text())
    targets = sorted(p.name for p in (ROOT / "targets" / "kernels").iterdir()
                     if (p / "target.toml").is_file())
    assert data["stages"]["bench"]["exit"] == 0 and data["stages"]["gate"]["exit"] == 0
    assert sorted(data["night"]["kept"]) == targets
    assert set(data["night"]["kept"].values()) == {"seed"}
    plan = data["bench"]["targets"]
    assert sorted(plan) == targets
    assert "rival:liger" in plan["rmsnorm"]["rival_rows"]
    assert plan["gemm"]["rival_rows"] == [] and plan["gemm"]["rivals"]["liger"]
    gate = data["gate"]["targets"]
    assert sorted(gate) == targets
    for t in targets:
        progs = gate[t]["programs"]
        assert {"night", "seed", "torch"} <= set(progs), t
        for name, p in progs.items():
            assert p["verdict"]["ok"], (t, name, p["verdict"]["reason"])
            assert p["times"] == {}  # no GPU: correctness only
    table = (out / "table.txt").read_text()
    assert "end-to-end gate" in table and res.stdout.rstrip().endswith(table.rstrip()[-40:])
    # a second call (`retime`) takes the kept programs back from this result file
    night = tmp_path / "again"
    res = subprocess.run([sys.executable, "bench/kernels_production.py", "kept", "--result",
                          str(out / "result.json"), "--night", str(night)], cwd=work, env=env,
                         timeout=120, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads((night / "kept.json").read_text()) == data["night"]["kept"]
    for t in targets:
        assert (night / "kept" / f"{t}.py").read_text() == (
            ROOT / "targets" / "kernels" / t / "kernel.py").read_text()
    res = subprocess.run(["bash", "bench/kernels_production_gpu.sh", str(out), "6", "retime"],
                         cwd=work, env=env, timeout=120, capture_output=True, text=True)
    assert res.returncode == 2 and "KEPT_FROM" in res.stderr  # a clear error, exit 2


def test_the_production_table_names_the_fastest_rival_and_the_gates_steps() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import kernels_production
    finally:
        sys.path.remove(str(ROOT / "bench"))
    rows = [{"target": "softmax", "workload": "w", "impl": impl, "ms": ms, "valid": ok}
            for impl, ms, ok in (("seed", 0.1, True), ("night", 0.09, True),
                                 ("rival:liger", 0.12, True), ("rival:quack", 0.05, False),
                                 ("rival:flashinfer", 0.11, True), ("eager", 0.3, True))]
    data = {"bench": {"rows": rows, "rivals_unavailable": {"softmax": {"quack": "no wheel"}}},
            "night": {"kept": {"softmax": "optimizer/pr/kernels/softmax"}},
            "gate": {"targets": {"softmax": {"programs": {
                "night": {"verdict": {"ok": True}, "times": {"decode_ms": 1.0,
                                                            "prefill_ms": 2.0}},
                "seed": {"verdict": {"ok": False, "reason": "greedy token 3"},
                         "times": {}}}}}}}
    lines = kernels_production.table(data)
    row = next(line for line in lines if line.startswith("softmax       w"))
    assert row.split()[2:5] == ["0.0900", "0.1000", "0.3000"]
    assert row.endswith("flashinfer 0.1100")  # the fastest valid rival, not the invalid one
    assert "  softmax quack: no wheel" in lines
    gate = next(line for line in lines if line.startswith("softmax       kept="))
    assert "night ok 1.0000/2.0000" in gate and "seed FAIL -/-" in gate
    assert "  seed: greedy token 3" in lines
