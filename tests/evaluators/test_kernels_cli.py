"""Kernel targets through `optimizer evaluate`: the engine's warm sandbox with torch and
triton preloaded, Triton's interpreter on CPU (set before the zygote imports triton)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optimizer.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["softmax", "gemm"])
def test_seed_kernel_is_correct_and_timing_is_skipped_without_gpu(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["evaluate", str(ROOT / "targets/kernels" / name), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1  # PRUNED is not VALID
    assert data["state"] == "PRUNED" and "correctness verified" in data["reason"]
    # the CPU workloads' errors, and where the time went; nothing was timed on a GPU
    errors = {k: v for k, v in data["metrics"].items() if k.startswith("norm_err/")}
    assert errors and all(k.startswith("norm_err/cpu-") for k in errors)
    assert all(k.startswith(("norm_err/", "stage_s/", "cost_s/")) for k in data["metrics"])
    assert max(errors.values()) < 1e-2


def test_all_zero_softmax_is_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seed = (ROOT / "targets/kernels/softmax/kernel.py").read_text()
    stored = "y.to(y_ptr.dtype.element_ty)"
    assert stored in seed
    zeros = seed.replace(stored, "(y * 0.0).to(y_ptr.dtype.element_ty)")
    cand = tmp_path / "kernel.py"
    cand.write_text(zeros)
    code = main(["evaluate", str(ROOT / "targets/kernels/softmax"), str(cand), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and data["state"] == "INVALID", data["reason"][:300]
