"""Cheats on imported problems: a KernelBench problem imported with `optimizer
import-kernelbench`, then a cheating kernel for it through `optimizer evaluate`.

Each folder under imported/<problem>/ holds the problem file (``problem.py``), an honest
rewrite (``honest/kernel.py``) and cheats (``cheats/<cheat>/kernel.py``, documented like
the suite's other cheats: ``Cheat:``, ``Attack:``, ``Sound verdict:``). An imported target
validates with the stress its own reference supports (evaluators.numerics.screen), so a
kernel that is right only on inputs like the problem's is caught on the CPU, and on a GPU
(where the same distributions validate and the honest kernel is timed: VALID)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optimizer.cli import main

HERE = Path(__file__).resolve().parent


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


HAVE_CUDA = _cuda()
PROBLEMS = sorted(p.parent for p in (HERE / "imported").glob("*/problem.py"))
CHEATS = sorted((HERE / "imported").glob("*/cheats/*/kernel.py"))


def _import(problem: Path, dest: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert main(["import-kernelbench", str(problem / "problem.py"), "--dest", str(dest),
                 "--name", problem.name]) == 0
    capsys.readouterr()
    return dest / problem.name


def _evaluate(folder: Path, kernel: Path, capsys: pytest.CaptureFixture[str],
              *extra: str) -> dict:
    main(["evaluate", str(folder), str(kernel), "--json", *extra])
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):])


@pytest.mark.slow
@pytest.mark.parametrize("cheat", CHEATS, ids=[f"{c.parents[2].name}/{c.parent.name}"
                                              for c in CHEATS])
def test_an_imported_problems_cheat_is_caught(
        cheat: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    problem = cheat.parents[2]
    doc = cheat.read_text()
    assert f"Cheat: {cheat.parent.name}. Class: " in doc and "Sound verdict: not VALID" in doc
    folder = _import(problem, tmp_path, capsys)
    honest = _evaluate(folder, problem / "honest" / "kernel.py", capsys)
    if HAVE_CUDA:  # timed on the GPU: an honest kernel is VALID there
        assert honest["state"] == "VALID", honest
    else:  # the CPU checks correctness only
        assert honest["state"] == "PRUNED" and "correctness verified" in honest["reason"], honest
    data = _evaluate(folder, cheat, capsys)
    assert data["state"] in ("INVALID", "REJECTED", "FAILED"), (
        f"{cheat}: {data['state']}: the attack worked ({data['reason'][:300]})")


@pytest.mark.slow
def test_the_unstable_log_softmax_is_right_on_gentle_inputs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What the cheat relies on: validated only with inputs like the problem's own
    (normal, uniform, negative: what imports used to keep), it passes."""
    problem = HERE / "imported" / "log_softmax"
    folder = _import(problem, tmp_path, capsys)
    gentle = 'evaluator.distributions=["normal", "uniform", "negative"]'
    data = _evaluate(folder, problem / "cheats" / "no_max_subtraction" / "kernel.py", capsys,
                     "--set", gentle)
    if HAVE_CUDA:
        assert data["state"] == "VALID", data
    else:
        assert data["state"] == "PRUNED" and "correctness verified" in data["reason"], data
