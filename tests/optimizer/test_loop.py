"""End-to-end runs of the loop in a temporary git repository with a toy target."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from optimizer.cli import main
from optimizer.config import load_experiment
from optimizer.loop import run
from optimizer.status import collect_status


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def _branches(repo: Path, prefix: str) -> list[str]:
    out = _git(repo, "for-each-ref", "--format=%(refname:short)", f"refs/heads/{prefix}")
    return out.split()


def test_end_to_end_run(toy_repo: Path) -> None:
    dirty = toy_repo / "targets/function/toy/program.py"
    user_edit = dirty.read_text() + "\n# the user's uncommitted work\n"
    dirty.write_text(user_edit)
    lines: list[str] = []
    cfg = load_experiment(
        toy_repo / "experiments/toy.toml", ["budget.max_candidates=12"], workspace=toy_repo
    )
    summary = run(cfg, say=lines.append)

    (t,) = summary.targets
    assert t.candidates == 12
    assert t.states["VALID"] >= 10
    assert t.seed_value == pytest.approx(13.0)
    assert t.best_value is not None and t.best_value < 8.0  # the search found a real win
    assert t.winner is not None and t.winner["pull_branch"] == "optimizer/pr/toy/toy"

    # git: one branch per candidate, a pull branch of one commit on the base
    assert len(_branches(toy_repo, "optimizer/toy/toy")) == 12
    base = _git(toy_repo, "rev-parse", "main").strip()
    pr = "optimizer/pr/toy/toy"
    assert _git(toy_repo, "rev-list", "--count", f"{base}..{pr}").strip() == "1"
    assert _git(toy_repo, "diff", "--name-only", base, pr).split() == [
        "targets/function/toy/program.py"
    ]
    message = _git(toy_repo, "log", "-1", "--format=%B", pr)
    assert (
        message.splitlines()[0] == f"toy: cost 13 -> {t.best_value:.4g} ({t.winner['candidate']})"
    )
    assert "held-out" in message and "Lineage" in message and t.winner["candidate"] in message
    assert "## Held-out workload (seed -> candidate)" in message and "- cost: 13.5 -> " in message
    assert "state: VALID" in _git(
        toy_repo, "log", "-1", "--format=%B", f"optimizer/toy/toy/{t.winner['candidate']}"
    )
    assert dirty.read_text() == user_edit  # the user's work is untouched

    # Optuna and MLflow agree with git
    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    assert len([x for x in study.trials if x.user_attrs.get("candidate")]) == 12
    assert study.user_attrs["winner"]["candidate"] == t.winner["candidate"]
    status = collect_status(cfg)
    assert status["consistent"]
    assert status["totals"]["candidates"] == status["totals"]["branches"] == 12
    assert status["totals"]["mlflow_runs"] == 12
    from mlflow.tracking import MlflowClient

    client = MlflowClient(cfg.tracking_uri)
    runs = client.search_runs(
        [client.get_experiment_by_name("toy").experiment_id], "tags.`optimizer.candidate` = 'c0002'"
    )
    (r,) = runs
    assert r.data.tags["mlflow.parentRunId"] == summary.parent_run_id
    names = {a.path for a in client.list_artifacts(r.info.run_id)}
    assert {"candidate.diff", "eval.json"} <= names
    assert (cfg.state_dir / "reports" / "toy-toy-pr.md").is_file()
    assert not any((cfg.state_dir / "worktrees").glob("toy/toy/c*"))  # worktrees removed


def test_no_identical_candidate_twice(toy_repo: Path) -> None:
    cfg = load_experiment(
        toy_repo / "experiments/toy.toml", ["budget.max_candidates=25"], workspace=toy_repo
    )
    run(cfg, say=lambda s: None)
    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    hashes = [
        x.user_attrs["content_hash"]
        for x in study.trials
        if x.user_attrs.get("candidate") and x.user_attrs.get("content_hash")
    ]
    assert len(hashes) == len(set(hashes))


def test_status_json_cli(
    toy_repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(toy_repo)
    assert main(["run", "experiments/toy.toml", "--set", "budget.max_candidates=4"]) == 0
    capsys.readouterr()
    assert main(["status", "-e", "experiments/toy.toml", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["totals"]["candidates"] == 4 and data["consistent"]
    # without -e: the experiment whose night ran last here (not the absent nightly.toml)
    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == data
    assert main(["report", "-e", "experiments/toy.toml"]) == 0
    report = toy_repo / ".optimizer/reports/toy/report.md"
    assert "toy" in report.read_text() and list(report.parent.glob("*.png"))


def test_multi_objective_study_keeps_a_pareto_front(toy_repo: Path) -> None:
    cfg = load_experiment(
        toy_repo / "experiments/toy.toml",
        [
            "budget.max_candidates=10",
            'targets.toy.objectives=[{metric="cost"}, {metric="x", direction="maximize"}]',
        ],
        workspace=toy_repo,
    )
    summary = run(cfg, say=lambda s: None)
    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    assert len(study.directions) == 2
    front = study.best_trials
    assert front and all(len(t.values) == 2 for t in front)
    assert summary.targets[0].candidates == 10


def test_outside_git_repo_is_a_clear_error(
    toy_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    os.rename(toy_repo / "experiments", plain / "experiments")
    os.rename(toy_repo / "targets", plain / "targets")
    assert main(["run", str(plain / "experiments/toy.toml")]) == 2
    assert "git" in capsys.readouterr().err


@pytest.mark.slow
def test_sigkill_then_resume_keeps_stores_in_agreement(toy_repo: Path) -> None:
    """Kill a run with SIGKILL mid-way, resume it: nothing evaluated twice, stores agree."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [
        sys.executable,
        "-m",
        "optimizer.cli",
        "run",
        "experiments/toy.toml",
        "--set",
        "budget.max_candidates=200",
    ]
    proc = subprocess.Popen(
        cmd, cwd=toy_repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen = 0
    deadline = time.monotonic() + 90
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "[toy] c" in line:
            seen += 1
        if seen >= 6:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert seen >= 6
    cfg = load_experiment(
        toy_repo / "experiments/toy.toml", ["budget.max_candidates=5"], workspace=toy_repo
    )
    run(cfg, resume=True, say=lambda s: None)
    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    assert not [x for x in study.trials if x.state == optuna.trial.TrialState.RUNNING]
    cands = [x for x in study.trials if x.user_attrs.get("candidate")]
    hashes = [x.user_attrs.get("content_hash") for x in cands if x.user_attrs.get("content_hash")]
    assert len(hashes) == len(set(hashes))
    status = collect_status(cfg)
    assert status["consistent"], status
    t = status["targets"]["toy"]
    assert t["candidates"] == t["mlflow_runs"] >= 11


def test_branches_list_and_prune(
    toy_repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(toy_repo)
    assert main(["run", "experiments/toy.toml", "--set", "budget.max_candidates=5"]) == 0
    capsys.readouterr()
    assert main(["branches", "-e", "experiments/toy.toml"]) == 0
    listed = capsys.readouterr().out.split()
    assert len([b for b in listed if b.startswith("optimizer/toy/toy/c")]) == 5
    assert "optimizer/pr/toy/toy" in listed
    assert main(["branches", "-e", "experiments/toy.toml", "--prune"]) == 0
    assert "deleted 5" in capsys.readouterr().out
    assert _branches(toy_repo, "optimizer/toy") == []
    assert _branches(toy_repo, "optimizer/pr") == ["optimizer/pr/toy/toy"]


def test_a_second_night_continues_the_study(toy_repo: Path) -> None:
    cfg = load_experiment(
        toy_repo / "experiments/toy.toml", ["budget.max_candidates=4"], workspace=toy_repo
    )
    first = run(cfg, say=lambda s: None)
    second = run(cfg, say=lambda s: None)
    assert first.night != second.night
    (t,) = second.targets
    assert t.candidates == 4 and sum(t.states.values()) == 4  # the seed is not evaluated again
    assert t.seed_value == pytest.approx(13.0)
    ids = sorted(_branches(toy_repo, "optimizer/toy/toy"))
    assert ids == [f"optimizer/toy/toy/c{i:04d}" for i in range(1, 9)]
    assert collect_status(cfg)["consistent"]


def _trials_of(cfg) -> list[tuple]:  # type: ignore[no-untyped-def]
    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    return [(t.number, t.state, t.params, t.values, t.user_attrs.get("candidate"),
             t.user_attrs.get("state"), t.user_attrs.get("content_hash"))
            for t in study.trials]


def test_asking_ahead_replays_the_serial_night(toy_repo: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The serial loop asks each trial while the proposal is made (search.AskAhead); for a
    seed, the night is the one asking after the proposal gives, trial for trial."""
    import shutil

    from optimizer import search

    other = tmp_path / "other"
    shutil.copytree(toy_repo, other)
    sets = ["budget.max_candidates=24", "stats.minimize_trials=2"]
    early = load_experiment(toy_repo / "experiments/toy.toml", sets, workspace=toy_repo)
    run(early, say=lambda s: None)
    monkeypatch.setattr(search, "AskAhead", lambda study: None)
    plain = load_experiment(other / "experiments/toy.toml", sets, workspace=other)
    run(plain, say=lambda s: None)
    want = _trials_of(plain)
    assert len([t for t in want if t[4]]) >= 20
    assert _trials_of(early) == want
