"""Two ``optimizer worker`` processes on a night of two targets (one sqlite Optuna storage,
one sqlite MLflow store and a bare git remote on this machine): every worker searches
every target at once, as ``optimizer run`` with several slots does, rather than each
target in a slice of the night; each target's winner is selected by one worker, once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

import optimizer
from optimizer.claims import Claims

pytestmark = pytest.mark.slow

EXPERIMENT = "pair"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


@pytest.mark.parametrize("slots", [1, 2])  # winners in turn; side by side, a slot each
def test_two_workers_search_both_targets_at_once(
        toy_repo: Path, tmp_path: Path, slow_evaluate: str, experiment_writer,
        toy_target_adder, slots: int) -> None:
    (toy_repo / "targets/function/toy/evaluate.py").write_text(slow_evaluate)
    toy_target_adder(toy_repo, "toy2", evaluate=slow_evaluate)
    experiment_writer(toy_repo, EXPERIMENT, body='[targets.settings.evaluator]\nrepeats = 1\n'
                      '[[targets]]\npath = "targets/function/toy2"\n'
                      '[targets.settings.evaluator]\nrepeats = 1\n')
    _git(toy_repo, "add", "-A")
    _git(toy_repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "two toys")
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(toy_repo), str(remote)], check=True)
    storage_url = f"sqlite:///{tmp_path / 'optuna.db'}"
    flags = ["--storage", storage_url, "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
             "--remote", "origin", "--minutes", "1.2", "--slots", str(slots),
             "--set", "budget.max_candidates=40"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOY_EVAL_S": "0.2",
           "PYTHONPATH": str(Path(optimizer.__file__).resolve().parents[1])}
    procs, logs = [], []
    for i in range(2):
        clone = tmp_path / f"worker{i}"
        subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True)
        logs.append(tmp_path / f"worker{i}.log")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "optimizer.cli", "worker", f"experiments/{EXPERIMENT}.toml",
             *flags], cwd=clone, env=env, stdout=logs[-1].open("w"), stderr=subprocess.STDOUT,
            start_new_session=True))
    try:
        for p in procs:
            assert p.wait(timeout=240) == 0, "\n".join(log.read_text()[-3000:] for log in logs)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
    out = "\n".join(log.read_text() for log in logs)

    storage = optuna.storages.RDBStorage(storage_url)
    claims = Claims(storage)
    starts: dict[str, dict[str, list[float]]] = {}  # worker -> target -> trial start times
    winners = {}
    for target in ("toy", "toy2"):
        study = optuna.load_study(study_name=f"{EXPERIMENT}/{target}", storage=storage)
        trials = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("candidate")]
        payloads = claims.read(study._study_id, [f"trial:{t.number}" for t in trials])
        for t in trials:
            worker = (payloads.get(f"trial:{t.number}") or {}).get("worker")
            if worker and t.datetime_start:
                starts.setdefault(worker, {}).setdefault(target, []).append(
                    t.datetime_start.timestamp())
        rows = claims.prefixed(study._study_id, "winners:")
        assert len(rows) == 1, rows  # one worker selects the target's winner, once
        winners[target] = next(iter(rows.values()))["by"]
        assert out.count(f"[{target}] this worker selects the night's winner") == 1
        assert study.user_attrs.get("winner"), f"{target}: no winner"
    # both workers evaluated both targets' candidates, and side by side: each worker's first
    # candidate of one target began before its last of the other (a night sliced by target
    # would have finished the first target before it began the second)
    assert len(starts) == 2, starts
    for worker, by_target in starts.items():
        assert set(by_target) == {"toy", "toy2"}, (worker, by_target.keys())
        assert min(by_target["toy2"]) < max(by_target["toy"]), worker
        assert min(by_target["toy"]) < max(by_target["toy2"]), worker
    pulls = _git(remote, "for-each-ref", "--format=%(refname:short)",
                 f"refs/heads/optimizer/pr/{EXPERIMENT}/").split()
    assert sorted(pulls) == [f"optimizer/pr/{EXPERIMENT}/toy", f"optimizer/pr/{EXPERIMENT}/toy2"]
