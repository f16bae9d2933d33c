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


def test_a_problem_file_with_a_byte_order_mark_imports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Editors on Windows save UTF-8 with a byte-order mark: it is dropped, not a traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "19_ReLU.py").write_bytes(b"\xef\xbb\xbf" + textwrap.dedent(PROBLEM).encode())
    assert main(["import-kernelbench", "19_ReLU.py"]) == 0, capsys.readouterr().err
    reference = (tmp_path / "targets/kernels/19_relu/reference.py").read_bytes()
    assert not reference.startswith(b"\xef\xbb\xbf")
