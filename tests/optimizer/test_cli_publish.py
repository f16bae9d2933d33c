"""`optimizer publish`: pull branches pushed to a bare remote, PR bodies written, the forge
command printed (and run with --open)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from optimizer.cli import main
from optimizer.publish import evidence_table
from optimizer.testing.own_repo import (
    add_penalty_target,
    git,
    make_serving_repo,
    vectorised_penalty,
)
from optimizer.vcs import Workspace

MESSAGE = """penalty: time_s 0.004 -> 0.0002, 20.00x faster (c0007)

Candidate c0007 of experiment 'nightly' (night 20261205-0900) improves `time_s` of target
`penalty` over its seed.

## Evidence
- 20.00x faster (95% CI 18.1x..22.3x, paired bootstrap of 15 runs each)
- Validation: passed every stage of the `function` evaluator.

## Metrics (seed -> candidate)
- time_s: 0.004 -> 0.0002

## Lineage
- c0007 (llm): vectorised the penalty
- c0001 (seed): -
"""


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    repo = make_serving_repo(tmp_path / "repo")
    folder = add_penalty_target(repo)
    with Workspace(repo, experiment="nightly", state_dir=repo / ".optimizer") as ws:
        ws.make_pull_branch("penalty", str(folder.relative_to(repo)),
                            {"../../serving/sampling/penalty.py": vectorised_penalty()}, MESSAGE)
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "forge.git")], check=True)
    git(repo, "remote", "add", "origin", str(tmp_path / "forge.git"))
    monkeypatch.chdir(repo)
    return repo


def test_publish_pushes_the_pull_branches_and_writes_the_body(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # neither gh nor glab
    assert main(["publish"]) == 0
    out = capsys.readouterr().out
    branch = "optimizer/pr/nightly/penalty"
    assert f"pushed {branch} to origin" in out and "no gh or glab here" in out
    remote = git(tmp_path / "forge.git", "log", "-1", "--format=%B", branch)
    assert remote.strip() == MESSAGE.strip()  # the PR text is the commit message
    pushed = git(tmp_path / "forge.git", "show", f"{branch}:serving/sampling/penalty.py")
    assert pushed == vectorised_penalty()  # the user's file, changed in place
    body = (repo / ".optimizer/reports/pr/nightly-penalty.md").read_text()
    assert body.startswith("# penalty: time_s 0.004 -> 0.0002, 20.00x faster (c0007)")
    assert "| time_s | 0.004 | 0.0002 | 0.05x |" in body
    assert "serving/sampling/penalty.py | " in body  # the diff's summary
    assert "```diff" in body and "np.broadcast_to" in body
    assert "optimizer evaluate targets/penalty" in body
    assert f"git fetch origin {branch}" in body
    assert "## Lineage" in body and "vectorised the penalty" in body


def test_publish_prints_and_runs_the_gh_command(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "gh.log"
    (bin_dir / "gh").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\n')
    (bin_dir / "gh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    assert main(["publish", "--base", "main"]) == 0
    out = capsys.readouterr().out
    assert "open it: gh pr create --head optimizer/pr/nightly/penalty --title " in out
    assert "--body-file" in out and "--base main" in out
    assert not log.exists()  # printed, not run
    assert main(["publish", "--base", "main", "--open"]) == 0
    argv = log.read_text().splitlines()
    assert argv[:4] == ["pr", "create", "--head", "optimizer/pr/nightly/penalty"]
    assert argv[argv.index("--title") + 1].startswith("penalty: time_s")


def test_publish_without_a_remote_or_branches_is_exit_2(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["publish", "--remote", "nope"]) == 2
    assert "no git remote named 'nope'" in capsys.readouterr().err
    assert main(["publish", "--experiment", "other"]) == 2
    assert "no pull branches of experiment 'other'" in capsys.readouterr().err


def test_evidence_table_reads_the_metrics_section() -> None:
    table = evidence_table(MESSAGE + "\n## Metrics (seed -> candidate)\n- cost: 2 -> 1\n")
    assert "| time_s | 0.004 | 0.0002 | 0.05x |" in table and "| cost | 2 | 1 | 0.5x |" in table
    assert evidence_table("title\n\nno metrics\n") == ""
