"""The worked example of docs/adding-a-kind.md, run as a user would: a kind defined in a
package of one's own, registered by entry point, evaluated through `optimizer run`, with no
engine file edited (the example's code is the code the document shows)."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import evaluators
from optimizer.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples"
DOC = ROOT / "docs" / "adding-a-kind.md"


def _blocks(text: str) -> dict[str, str]:
    """Fenced blocks of the document that name their file: ```python title="path"."""
    return {m.group(1): m.group(2) for m in re.finditer(
        r'```\w+ title="([^"]+)"\n(.*?)```', text, re.S)}


def test_the_document_shows_the_example_code_as_it_is() -> None:
    blocks = _blocks(DOC.read_text())
    for rel in ("stopseq_kind/__init__.py", "stopseq_target/target.toml",
                "stopseq_target/program.py"):
        assert blocks.get(f"docs/examples/{rel}") == (EXAMPLE / rel).read_text(), rel


@pytest.fixture
def installed_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example package 'installed' the way pip leaves it: the package and its
    dist-info with the entry point, on sys.path."""
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE / "stopseq_kind", site / "stopseq_kind")
    info = site / "stopseq_kind-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: stopseq-kind\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[inference_optimizer.kinds]\nstopseq = stopseq_kind:StopSeqEvaluator\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield site
    evaluators._REGISTERED.pop("stopseq", None)
    sys.modules.pop("stopseq_kind", None)


@pytest.mark.slow
def test_a_kind_of_ones_own_runs_through_optimizer_run(
        installed_kind: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert "stopseq" not in evaluators.BUILTIN_KINDS and "stopseq" in evaluators.kinds()
    assert evaluators.get("stopseq").__module__ == "stopseq_kind"
    ws = tmp_path / "ws"
    shutil.copytree(EXAMPLE / "stopseq_target", ws / "targets" / "stopseq" / "demo")
    (ws / "experiments").mkdir()
    (ws / "experiments" / "demo.toml").write_text(
        'name = "demo"\n[budget]\nminutes = 2\nmax_candidates = 5\n'
        '[[targets]]\npath = "targets/stopseq/demo"\n')
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=ws, check=True)
    monkeypatch.chdir(ws)
    assert main(["run", "experiments/demo.toml", "--json"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.rindex("\n{\n") + 1:])
    (target,) = summary["targets"]
    assert target["candidates"] == 5 and target["states"].get("VALID", 0) >= 1, target
    assert target["seed_value"] > 0
    assert main(["status", "-e", "experiments/demo.toml", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["consistent"], status
