"""`optimizer import-kernelbench` then `optimizer evaluate` on the imported target."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from optimizer.cli import main

PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 1000)]


def get_init_inputs():
    return []
"""

TRITON_RELU = """
import torch
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
BLOCK = 1024  # knob: choices=[256, 512, 1024]


@triton.jit
def _relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        _relu[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK)
        return y
# EVOLVE-BLOCK-END
"""


def test_imported_problem_is_validated_like_a_built_in_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "19_ReLU.py").write_text(textwrap.dedent(PROBLEM))
    assert main(["import-kernelbench", "19_ReLU.py"]) == 0
    folder = tmp_path / "targets/kernels/19_relu"
    assert (folder / "target.toml").is_file() and (folder / "reference.py").is_file()
    capsys.readouterr()

    # the generated seed is the reference's torch code: rejected until written in Triton
    assert main(["evaluate", str(folder), "--json"]) == 1
    seed = json.loads(capsys.readouterr().out)
    assert seed["state"] == "REJECTED" and "Triton" in seed["reason"]

    rewrite = tmp_path / "kernel.py"
    rewrite.write_text(TRITON_RELU)
    assert main(["evaluate", str(folder), str(rewrite), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "PRUNED" and "correctness verified" in data["reason"]


def test_missing_problem_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import-kernelbench", str(tmp_path / "nope.py")]) == 2
    assert "no such KernelBench problem file" in capsys.readouterr().err


LOG_SOFTMAX = Path(__file__).resolve().parents[1] / "adversarial" / "imported" / "log_softmax"


@pytest.mark.slow
def test_an_imported_problem_validates_with_the_stress_its_reference_supports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log-softmax kernel without the max subtraction is right on the problem's own inputs
    (randn * 4) and overflows past 88: the imported target keeps large offsets and wide
    ranges (its reference is finite and well conditioned there), so it is INVALID on the
    CPU at every evaluation; the kernel that subtracts the max passes."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "24_LogSoftmax.py").write_text((LOG_SOFTMAX / "problem.py").read_text())
    assert main(["import-kernelbench", "24_LogSoftmax.py"]) == 0
    folder = tmp_path / "targets/kernels/24_logsoftmax"
    toml = (folder / "target.toml").read_text()
    assert '"offset"' in toml and '"wide"' in toml and "neginf_mask = " in toml, toml
    capsys.readouterr()

    unstable = LOG_SOFTMAX / "cheats" / "no_max_subtraction" / "kernel.py"
    for _ in range(2):  # every evaluation meets every distribution kept
        assert main(["evaluate", str(folder), str(unstable), "--json"]) == 1
        data = json.loads(capsys.readouterr().out)
        assert data["state"] == "INVALID", data["reason"]
        assert "'offset'" in data["reason"] or "'wide'" in data["reason"], data["reason"]

    assert main(["evaluate", str(folder), str(LOG_SOFTMAX / "honest" / "kernel.py")]) == 1
    out = capsys.readouterr().out
    assert "PRUNED (no GPU: correctness verified" in out, out
    assert "validated with the distributions normal, uniform, offset, wide" in out, out
    assert "dropped: neginf_mask (" in out, out


def test_a_problem_file_with_a_byte_order_mark_imports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Editors on Windows save UTF-8 with a byte-order mark: it is dropped, not a traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "19_ReLU.py").write_bytes(b"\xef\xbb\xbf" + textwrap.dedent(PROBLEM).encode())
    assert main(["import-kernelbench", "19_ReLU.py"]) == 0, capsys.readouterr().err
    reference = (tmp_path / "targets/kernels/19_relu/reference.py").read_bytes()
    assert not reference.startswith(b"\xef\xbb\xbf")
