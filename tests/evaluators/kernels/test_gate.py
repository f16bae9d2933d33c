"""The end-to-end gate (evaluators/kernels/gate.py) on the CPU: a kernel in its op's place in
a small Llama-shaped model, decoded greedily by the trusted engine through the Triton
interpreter, judged against the same model in float64."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evaluators._base import EvalContext
from evaluators.kernels import KernelEvaluator, gate
from optimizer.records import CandidateState
from optimizer.sandbox import Sandbox, SandboxSettings
from optimizer.targets import load_target

ROOT = Path(__file__).resolve().parents[3]
TARGETS = ROOT / "targets" / "kernels"

# RMSNorm's seed with a tile chosen for one-row launches, half the row: wrong only where a
# launch has a single row, which every decode step is and no workload of the target is
# (rows 6 and 3 on the CPU, 2048 to 16381 on a GPU)
ONE_ROW_WRONG = (TARGETS / "rmsnorm" / "kernel.py").read_text().replace(
    "                               BLOCK=triton.next_power_of_2(n_cols), num_warps=NUM_WARPS)",
    "                               BLOCK=_block(n_rows, n_cols), num_warps=NUM_WARPS)",
).replace(
    "def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:",
    "def _block(n_rows: int, n_cols: int) -> int:\n"
    "    block = triton.next_power_of_2(n_cols)\n"
    "    return block // 2 if n_rows == 1 else block  # a single row: a narrower tile\n\n\n"
    "def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:",
)


_IN_A_FRESH_PROCESS = (
    "import json, sys\n"
    "from pathlib import Path\n"
    "from evaluators.kernels import gate\n"
    "res = gate.run_in_process(Path(sys.argv[1]), sys.argv[2], 'cpu', int(sys.argv[3]), 1e-5,\n"
    "                          time_it=False)\n"
    "print(json.dumps(res))\n"
)


def _gate(target: str, program: str, seed: int = 5) -> dict:
    """The gate in a fresh interpreter, as a night runs it in a process of its own: in the
    test run's process, state that earlier tests left in the Triton interpreter made every
    seed fail with "Cannot call @triton.jit'd outside of the scope of a kernel"."""
    out = subprocess.run([sys.executable, "-c", _IN_A_FRESH_PROCESS, str(TARGETS / target),
                          program, str(seed)], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_wrong_kernel_differs_from_the_seed_only_in_its_tile() -> None:
    seed = (TARGETS / "rmsnorm" / "kernel.py").read_text()
    assert ONE_ROW_WRONG != seed and "_block(n_rows, n_cols)" in ONE_ROW_WRONG


@pytest.mark.parametrize("target", sorted(gate.SLOTS))
def test_every_seed_passes_the_gate(target: str) -> None:
    res = _gate(target, str(TARGETS / target / "kernel.py"))
    v = res["verdict"]
    assert v["ok"], v["reason"]
    assert v["steps"] == gate.CPU_SHAPE.steps and v["logits_error"] <= v["bound"]
    assert "greedy tokens identical" in v["reason"]
    assert res["times"] == {}  # no GPU: nothing timed


def test_a_kernel_wrong_only_on_one_row_is_rejected(tmp_path: Path) -> None:
    prog = tmp_path / "kernel.py"
    prog.write_text(ONE_ROW_WRONG)
    v = _gate("rmsnorm", str(prog))["verdict"]
    assert not v["ok"]
    assert "greedy token" in v["reason"] or "logits" in v["reason"], v["reason"]


def test_torch_op_in_the_model_is_the_float64_models_within_rounding() -> None:
    v = _gate("softmax", "reference")["verdict"]
    assert v["ok"] and v["logits_error"] < 1e-6  # float32 rounding, the bound's scale


def test_the_judge_refuses_answers_of_the_wrong_form() -> None:
    shape = gate.shape_for("cpu", "rmsnorm")
    ref = TARGETS / "rmsnorm" / "reference.py"
    logits = torch.zeros(shape.steps, shape.vocab)
    few = gate.judge("rmsnorm", ref, shape, 1, "cpu", [0] * (shape.steps - 1), logits, None,
                     1e-5)
    assert not few.ok and "not 8" in few.reason
    out = gate.judge("rmsnorm", ref, shape, 1, "cpu", [shape.vocab] * shape.steps, logits,
                     None, 1e-5)
    assert not out.ok and "outside the vocabulary" in out.reason


def test_the_judge_rejects_logits_off_by_more_than_the_bound() -> None:
    """The right tokens with logits nudged past the bound: rejected on the logits."""
    shape = gate.shape_for("cpu", "rmsnorm")
    ref_path = TARGETS / "rmsnorm" / "reference.py"
    model = gate.install(gate.build_on("rmsnorm", shape, 3, "cpu", torch.float32), "rmsnorm",
                         gate.op_class("reference", "rmsnorm", ref_path))
    tokens, logits, _ = gate.decode(model, gate.prompt_ids(shape, 3, "cpu"), shape.steps,
                                    graphs=False)
    ok = gate.judge("rmsnorm", ref_path, shape, 3, "cpu", tokens, logits, None, 1e-5)
    assert ok.ok, ok.reason
    nudged = logits * (1 + 1e-3)
    bad = gate.judge("rmsnorm", ref_path, shape, 3, "cpu", tokens, nudged, None, 1e-5)
    assert not bad.ok and "over the bound" in bad.reason and math.isfinite(bad.logits_error)


def test_gain_line_names_each_rival() -> None:
    line = gate.gain_line({"candidate": {"decode_ms": 1.0, "prefill_ms": 4.0},
                           "seed": {"decode_ms": 1.1, "prefill_ms": 4.0}})
    assert line.startswith("decode step 1 ms (1.100x against seed)")
    assert gate.gain_line({"candidate": {}}) == "not timed (no GPU)"


def _final_check(tmp_path: Path, source: str) -> object:
    spec = load_target(TARGETS / "rmsnorm", ROOT)
    cand = tmp_path / "cand"
    cand.mkdir(parents=True)
    (cand / "kernel.py").write_text(source)
    io = tmp_path / "io"
    io.mkdir()
    with Sandbox(SandboxSettings(timeout_s=180)) as sandbox:
        ctx = EvalContext(sandbox, seed=11, scratch=tmp_path / "s", io_dir=io, device="cpu",
                          timeout_s=180, cache_dir=tmp_path / "cache")
        evaluator = KernelEvaluator(spec)
        check = evaluator.correctness(cand, ctx)
        return check, evaluator.final_check(cand, ctx)


@pytest.mark.slow
def test_the_final_check_before_a_pull_branch_runs_the_gate(tmp_path: Path) -> None:
    """The kernel wrong on one row passes the target's own checks and every case of the
    night's pools, and is stopped by the gate in the final check; the seed passes, and the
    reason (which the pull branch's text carries) says what the gate checked."""
    check, final = _final_check(tmp_path / "wrong", ONE_ROW_WRONG)
    assert check.state is CandidateState.VALID, check.reason
    assert final is not None and final.state is CandidateState.INVALID
    assert "end-to-end gate" in final.reason and "validation" not in final.reason
    check, final = _final_check(tmp_path / "seed", (TARGETS / "rmsnorm" / "kernel.py")
                                .read_text())
    assert final is not None and final.state is CandidateState.VALID, final.reason
    assert "end-to-end gate: greedy tokens identical over 8 steps" in final.reason
    assert "Triton interpreter" in final.reason and "not timed (no GPU)" in final.reason
