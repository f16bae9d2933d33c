"""A night killed (SIGKILL) after a candidate's tell, before the background writer finished
its MLflow run: ``--resume`` finishes that run from the pending record, so every
candidate ends with one trial, one MLflow run (params, metrics, diff) and one branch, and
no pending record is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest

from optimizer.config import load_experiment
from optimizer.loop import run
from optimizer.status import collect_status

# the night, in a child process, SIGKILLs itself at the writer's KILL_AT-th candidate run:
# "before" it wrote anything of the run, or "after" the run is complete but before the
# pending record is deleted and the folder removed
CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from optimizer import tracking

    KILL_AT, WHERE = int(sys.argv[1]), sys.argv[2]
    plain = tracking.Tracker.finish_candidate_steps  # what the writer runs
    calls = [0]

    def finish(self, run_id, **kw):
        calls[0] += 1
        if calls[0] == KILL_AT and WHERE == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.1)  # a store behind the loop: the writer lags
        yield from plain(self, run_id, **kw)
        if calls[0] == KILL_AT:
            os.kill(os.getpid(), signal.SIGKILL)

    tracking.Tracker.finish_candidate_steps = finish
    from optimizer.cli import main
    sys.exit(main(["run", "experiments/toy.toml", "--set", "budget.max_candidates=30",
                   "--set", "stats.minimize_trials=0"]))
""")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


@pytest.mark.parametrize("where", ["before", "after"])
def test_killed_before_the_writer_finished_the_run(toy_repo: Path, where: str) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-c", CHILD, "6", where], cwd=toy_repo, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    cfg = load_experiment(toy_repo / "experiments/toy.toml",
                          ["budget.max_candidates=3", "stats.minimize_trials=0"],
                          workspace=toy_repo)
    pending = cfg.state_dir / "pending"
    left = sorted(p.stem for p in pending.rglob("*.json"))
    assert left, "the kill left no pending record: the test no longer tests its window"
    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    told = {t.user_attrs["candidate"]: t for t in study.trials
            if t.user_attrs.get("candidate") and t.state.is_finished()}
    assert set(left) <= set(told)  # the pending ones were told before the kill

    run(cfg, resume=True, say=lambda s: None)

    assert not list(pending.rglob("*.json"))
    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    by_id: dict[str, optuna.trial.FrozenTrial] = {}
    for t in study.trials:
        if t.user_attrs.get("candidate"):
            assert t.user_attrs["candidate"] not in by_id  # one trial per candidate
            by_id[t.user_attrs["candidate"]] = t
    for cid in left:  # what the killed night told stays as told
        assert by_id[cid].state == told[cid].state
        assert by_id[cid].user_attrs["state"] == told[cid].user_attrs["state"]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(cfg.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("toy").experiment_id],
                              "tags.`optimizer.candidate` != ''", max_results=1000)
    run_of = {}
    for r in runs:
        cid = r.data.tags["optimizer.candidate"]
        assert cid not in run_of, f"{cid} has two MLflow runs"
        run_of[cid] = r
    assert set(run_of) == set(by_id)
    branches = set(_git(toy_repo, "for-each-ref", "--format=%(refname:lstrip=5)",
                        "refs/heads/optimizer/toy/toy/").split())
    for cid, t in by_id.items():
        r = run_of[cid]
        state = t.user_attrs["state"]
        assert t.user_attrs["mlflow_run_id"] == r.info.run_id
        assert r.data.tags["optimizer.state"] == state
        assert r.info.status == ("FINISHED" if state == "VALID" else "FAILED"), cid
        assert "eval_cost_s" in r.data.metrics and "proposer" in r.data.params
        if t.user_attrs.get("branch"):
            assert cid in branches
            assert r.data.tags["optimizer.commit"] == t.user_attrs["commit"]
            names = {a.path for a in client.list_artifacts(r.info.run_id)}
            assert "candidate.diff" in names, (cid, names)
        if state == "VALID":
            assert r.data.metrics["cost"] == t.user_attrs["metrics"]["cost"]
            assert {k.removeprefix("knob.") for k in r.data.params if k.startswith("knob.")} \
                == set(t.params)
    assert branches == {c for c, t in by_id.items() if t.user_attrs.get("branch")}
    assert "RUNNING" not in _git(toy_repo, "log", "--format=%B", "--branches=optimizer/*")
    assert not any((cfg.state_dir / "worktrees/toy/toy").glob("c*"))
    status = collect_status(cfg)
    assert status["consistent"], status
