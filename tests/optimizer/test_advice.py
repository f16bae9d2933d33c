"""A target whose offline proposals run dry: the night's summary says why and what helps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optimizer.advice import dry_run_advice, knob_count
from optimizer.cli import main
from optimizer.targets import load_target
from optimizer.testing.own_repo import add_penalty_target, make_serving_repo


def test_advice_names_what_the_target_lacks(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    repo = make_serving_repo(tmp_path / "repo")
    spec = load_target(add_penalty_target(repo), repo)
    files = spec.seed_files()
    text = dry_run_advice(spec, files, ["offline"])
    assert "the program declares no knobs" in text and "no other starting programs" in text
    assert "# knob:" in text and "starts = " in text and "--proposer llm" in text
    # an LLM night that ran dry is not told to use an LLM
    assert "--proposer llm" not in dry_run_advice(spec, files, ["llm"])
    knobbed = {k: "A = 1  # knob: int 0..9\nB = 2  # knob: int 0..9\nC = 0.5  # knob: float 0..1\n"
               for k in files}
    assert knob_count(knobbed) == 3
    assert "knob" not in dry_run_advice(spec, knobbed, ["llm"]).split("What would help")[-1]


@pytest.mark.slow
def test_a_night_that_runs_dry_says_what_would_help(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    repo = make_serving_repo(tmp_path / "repo")
    folder = add_penalty_target(repo)
    assert main(["run", "--target", str(folder), "--minutes", "5", "--json"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("{\n"):])
    note = summary["targets"][0]["note"]
    assert note.startswith("stopped early:") and "duplicate proposals in a row" in note
    assert "the program declares no knobs" in note and "--proposer llm" in note
