"""What the routing modes' tests share: a sandbox of rlimits, and one candidate file
evaluated through it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evaluators._base import EvalContext
from optimizer.sandbox import Sandbox, SandboxSettings


@pytest.fixture(scope="module")
def mode_sandbox() -> Iterator[Sandbox]:
    with Sandbox(SandboxSettings(timeout_s=60, isolation="rlimits")) as sb:
        yield sb


def candidate(tmp_path: Path, sandbox: Any, name: str,
              source: str) -> tuple[Path, EvalContext]:
    """``source`` as the candidate's ``name`` in a fresh folder, and a context to evaluate
    it in ``sandbox``."""
    cand = tmp_path / "cand"
    shutil.rmtree(cand, ignore_errors=True)
    cand.mkdir()
    (cand / name).write_text(source)
    return cand, EvalContext(sandbox=sandbox, seed=0, scratch=tmp_path,
                             io_dir=tmp_path / "io", timeout_s=60)
