"""SIGKILL with candidates in flight in the concurrent loop, then ``--resume``: every
admitted candidate ends in one finished trial, one MLflow run and one branch, none is
lost, no program is evaluated twice, and the stores agree (the serial loop's version is
``test_sigkill_then_resume_keeps_stores_in_agreement`` in test_loop.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

from optimizer import recording
from optimizer.cli import main
from optimizer.config import load_experiment
from optimizer.loop import run
from optimizer.status import collect_status


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def _branch_states(repo: Path, target: str = "toy") -> dict[str, str]:
    """Candidate id -> the state its branch's message says: RUNNING while in flight, "?"
    for a branch just made (still at the base commit)."""
    prefix = f"optimizer/toy/{target}/"
    out = _git(repo, "for-each-ref", "--format=%(refname:short)%00%(contents)%00",
               f"refs/heads/{prefix}")
    parts = out.split("\0")
    states = {}
    for ref, message in zip(parts[0::2], parts[1::2], strict=False):
        state = next((line.split(": ", 1)[1] for line in message.splitlines()
                      if line.startswith("state: ")), "?")
        states[ref.strip().removeprefix(prefix)] = state
    return states


def _kill_with_candidates_in_flight(repo: Path, env: dict[str, str], log: Path,
                                    targets: tuple[str, ...] = ("toy",)) -> None:
    """Run the night in a process group of its own; SIGKILL the group once earlier
    candidates are recorded and at least two are in flight (RUNNING branches), of every
    one of ``targets``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "optimizer.cli", "run", "experiments/toy.toml",
         "--set", "budget.max_candidates=200"],
        cwd=repo, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    try:
        while True:
            by_target = {t: _branch_states(repo, t) for t in targets}
            states = {f"{t}/{c}": s for t, of in by_target.items() for c, s in of.items()}
            running = [c for c, s in states.items() if s == "RUNNING"]
            recorded = [c for c, s in states.items() if s not in ("RUNNING", "?")]
            if (len(running) >= 2 and len(recorded) >= 3
                    and all("RUNNING" in of.values() for of in by_target.values())):
                break
            assert proc.poll() is None, f"the night ended first:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"no two in flight: {states}\n{log.read_text()}"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_sigkill_with_candidates_in_flight_then_resume(
        toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        noting_evaluate: str, experiment_writer, capsys: pytest.CaptureFixture[str]) -> None:
    (toy_repo / "targets/function/toy/evaluate.py").write_text(noting_evaluate)
    # one evaluate() call per evaluation (not the kind's default of three), two slots,
    # four proposals in flight
    experiment_writer(toy_repo, body="[targets.settings.evaluator]\nrepeats = 1\n"
                      "[run]\nslots = 2\n[proposer]\nconcurrency = 4\n")
    _git(toy_repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "slow toy")
    programs = tmp_path / "programs.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOY_EVAL_S": "1.0",
           "TOY_EVAL_PROGRAMS": str(programs)}
    _kill_with_candidates_in_flight(toy_repo, env, tmp_path / "killed.log")

    cfg = load_experiment(toy_repo / "experiments/toy.toml", workspace=toy_repo)
    killed = _killed_night(cfg, "toy", at_least=2)
    _resume(toy_repo, monkeypatch, capsys, programs, [killed])
    _check_resumed(cfg, toy_repo, killed, programs, more=6)


def test_sigkill_with_several_targets_in_flight_then_resume(
        toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        noting_evaluate: str, toy_target_adder, capsys: pytest.CaptureFixture[str]) -> None:
    """The shared night of two targets killed with candidates of both in flight: each
    target's candidates are finished as for one target, the resumed night goes on with
    both, no program of either is evaluated twice."""
    (toy_repo / "targets/function/toy/evaluate.py").write_text(noting_evaluate)
    toy_target_adder(toy_repo, "toy2", noting_evaluate)
    (toy_repo / "experiments/toy.toml").write_text(textwrap.dedent("""
        name = "toy"
        seed = 1
        [budget]
        minutes = 3
        [search]
        n_startup_trials = 4
        [run]
        slots = 2
        [proposer]
        concurrency = 4
        [[targets]]
        path = "targets/function/toy"
        [targets.settings.evaluator]
        repeats = 1
        [[targets]]
        path = "targets/function/toy2"
        share = 0.8
        [targets.settings.evaluator]
        repeats = 1
    """))
    _git(toy_repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "two toys")
    programs = tmp_path / "programs.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOY_EVAL_S": "1.0",
           "TOY_EVAL_PROGRAMS": str(programs)}
    _kill_with_candidates_in_flight(toy_repo, env, tmp_path / "killed.log", ("toy", "toy2"))

    cfg = load_experiment(toy_repo / "experiments/toy.toml", workspace=toy_repo)
    killed = [_killed_night(cfg, name, at_least=1) for name in ("toy", "toy2")]
    _resume(toy_repo, monkeypatch, capsys, programs, killed)
    for one in killed:
        _check_resumed(cfg, toy_repo, one, programs, more=1)
    totals = collect_status(cfg)["totals"]
    assert totals["candidates"] >= sum(len(k.ids) for k in killed) + 6


@dataclasses.dataclass
class _KilledNight:
    target: str
    ids: set[str]  # the candidates the killed night had admitted
    told: dict[str, str]  # left RUNNING with a complete record: the state it recorded
    in_flight: set[str]  # the others left RUNNING


def _killed_night(cfg: Any, target: str, at_least: int) -> _KilledNight:
    study = optuna.load_study(study_name=f"toy/{target}", storage=cfg.optuna_storage)
    left = [t for t in study.trials
            if t.state == optuna.trial.TrialState.RUNNING and t.user_attrs.get("candidate")]
    assert len(left) >= at_least, [t.user_attrs for t in left]
    # killed after its record was complete (only the tell lost): told what it recorded;
    # any other is interrupted, and marked FAILED everywhere
    told = {t.user_attrs["candidate"]: t.user_attrs["state"] for t in left
            if t.user_attrs.get("mlflow_run_id")
            and t.user_attrs.get("state") not in ("RUNNING", "PENDING")}
    return _KilledNight(
        target, {t.user_attrs["candidate"] for t in study.trials if t.user_attrs.get("candidate")},
        told, {t.user_attrs["candidate"] for t in left} - set(told))


def _resume(repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            programs: Path, killed: list[_KilledNight]) -> None:
    """Resume to completion: six more candidates, faster evaluations."""
    monkeypatch.chdir(repo)
    monkeypatch.setenv("TOY_EVAL_S", "0.1")
    monkeypatch.setenv("TOY_EVAL_PROGRAMS", str(programs))
    assert main(["run", "experiments/toy.toml", "--resume",
                 "--set", "budget.max_candidates=6"]) == 0
    out = capsys.readouterr().out
    for night in killed:
        for cid in night.in_flight:
            assert f"[{night.target}] {cid} marked FAILED" in out, out


def _check_resumed(cfg: Any, repo: Path, killed: _KilledNight, programs: Path,
                   more: int) -> None:
    """One target after the resumed night: every candidate of the killed night finished in
    one trial, one MLflow run and one branch; none evaluated twice; ``more`` new ones."""
    target = killed.target
    study = optuna.load_study(study_name=f"toy/{target}", storage=cfg.optuna_storage)
    trials = [t for t in study.trials if t.user_attrs.get("candidate")]
    ids = [t.user_attrs["candidate"] for t in trials]
    # one finished trial per candidate, none left RUNNING; nothing admitted was lost
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    assert len(ids) == len(set(ids)), sorted(ids)
    assert killed.ids <= set(ids) and len(ids) >= len(killed.ids) + more
    by_id = {t.user_attrs["candidate"]: t for t in trials}
    for cid in killed.in_flight:
        assert by_id[cid].state == optuna.trial.TrialState.FAIL
        assert by_id[cid].user_attrs["state"] == "FAILED"
        assert by_id[cid].user_attrs["reason"].startswith("interrupted")
        assert by_id[cid].user_attrs["mlflow_run_id"]
    for cid, state in killed.told.items():
        assert by_id[cid].user_attrs["state"] == state
        assert by_id[cid].state.is_finished()
    hashes = [t.user_attrs["content_hash"] for t in trials if t.user_attrs.get("content_hash")]
    assert len(hashes) == len(set(hashes))

    # no program evaluated twice, across both runs; each evaluation is of a candidate's
    folder = cfg.state_dir / "worktrees" / "toy" / target
    noted = [json.loads(line) for line in programs.read_text().splitlines()]
    noted = [(p, d) for p, d in noted if Path(p).is_relative_to(folder)]
    paths = [p for p, _ in noted]
    digests = [d for _, d in noted]
    assert len(paths) == len(set(paths)) and len(digests) == len(set(digests)), noted
    evaluated = {Path(p).relative_to(folder).parts[0] for p in paths}
    assert evaluated <= set(ids)
    assert {c for c, t in by_id.items() if t.user_attrs["state"] == "VALID"} <= evaluated

    # git: one branch per candidate with code, none left RUNNING; MLflow: one run each
    states = _branch_states(repo, target)
    assert "RUNNING" not in states.values(), states
    assert set(states) == {c for c, t in by_id.items() if t.user_attrs.get("branch")}
    for cid in killed.in_flight:
        assert states[cid] == "FAILED"
    for cid, state in killed.told.items():
        assert states[cid] == state
    status = collect_status(cfg)
    assert status["consistent"], status
    t = status["targets"][target]
    assert t["candidates"] == t["mlflow_runs"] == len(ids)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(cfg.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("toy").experiment_id],
                              f"tags.`optimizer.target` = '{target}'", max_results=1000)
    run_ids = [r.data.tags["optimizer.candidate"] for r in runs
               if r.data.tags.get("optimizer.candidate")]
    assert sorted(run_ids) == sorted(ids)  # exactly one run per candidate
    assert not any(folder.glob("c*"))  # worktrees removed


class _Killed(BaseException):
    """Stands for SIGKILL at one chosen point: nothing of the candidate after it runs."""


def test_killed_between_the_mlflow_run_and_the_trial_leaves_one_run(
        toy_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window the SIGKILL test above hits at random (the concurrent loop's recorder is
    logging in MLflow while the slots evaluate): the candidate's MLflow run is logged, its
    trial does not name it yet, its worktree is still there. ``--resume`` marks it FAILED
    with one run (not the killed night's and a second one) and removes the worktree."""
    plain = recording.write_attrs

    def write_attrs(trial, record, **kw):  # type: ignore[no-untyped-def]
        if record.candidate == "c0003" and record.mlflow_run_id:
            raise _Killed
        plain(trial, record, **kw)

    monkeypatch.setattr(recording, "write_attrs", write_attrs)
    cfg = load_experiment(toy_repo / "experiments/toy.toml",
                          ["budget.max_candidates=5", "stats.minimize_trials=0"],
                          workspace=toy_repo)
    with pytest.raises(_Killed):
        run(cfg, say=lambda s: None)
    assert (cfg.state_dir / "worktrees/toy/toy/c0003").is_dir()
    monkeypatch.setattr(recording, "write_attrs", plain)
    run(cfg, resume=True, say=lambda s: None)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(cfg.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("toy").experiment_id],
                              "tags.`optimizer.candidate` = 'c0003'")
    (one,) = runs
    assert one.data.tags["optimizer.state"] == "FAILED"
    assert one.data.tags["optimizer.reason"].startswith("interrupted")
    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    (trial,) = [t for t in study.trials if t.user_attrs.get("candidate") == "c0003"]
    assert trial.user_attrs["mlflow_run_id"] == one.info.run_id
    assert trial.state == optuna.trial.TrialState.FAIL
    assert not any((cfg.state_dir / "worktrees/toy/toy").glob("c*"))
    status = collect_status(cfg)
    assert status["consistent"], status
    assert status["totals"]["candidates"] == status["totals"]["mlflow_runs"]
