"""Three ``optimizer worker`` processes share one night, with real parts: a throwaway
PostgreSQL cluster (Optuna), a real MLflow tracking server and a bare git remote, each
worker in its own clone. One worker is SIGKILLed while it evaluates a candidate: that
candidate ends FAILED ("worker lost") in every store and runs again, once, on another
worker. Every candidate has one trial, one MLflow run and one branch on the remote; no
program is evaluated twice; the night has one pull branch for its winner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

import optimizer
from optimizer.claims import Claims
from optimizer.config import load_experiment
from optimizer.records import WORKER_LOST
from optimizer.status import collect_status
from optimizer.testing import servers
from optimizer.testing.workers import freeze_a_holder

pytestmark = pytest.mark.slow

EXPERIMENT = "shared"
PER_WORKER = 28  # candidates each worker evaluates at most: three give the night 60 or more


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def tracking_server(tmp_path: Path) -> Iterator[str]:
    with servers.mlflow_server(tmp_path / "mlflow-server") as uri:
        yield uri


def _victim(storage: optuna.storages.RDBStorage, claims: Claims,
            procs: dict[int, subprocess.Popen[bytes]]) -> tuple[int, set[int]] | None:
    """(pid, trial numbers) of a worker that has evaluated 8 candidates and holds one with a
    program, frozen (SIGSTOP) so that what it holds cannot change before it is killed; else
    None."""
    try:
        wsid = storage.get_study_id_from_name(f"{EXPERIMENT}:workers")
        study_id = storage.get_study_id_from_name(f"{EXPERIMENT}/toy")
    except KeyError:
        return None
    workers = {key.split(":", 1)[1]: v for key, v in claims.prefixed(wsid, "worker:").items()
               if v.get("candidates", 0) >= 8 and v["pid"] in procs}
    frozen = freeze_a_holder(storage, claims, [study_id], workers)
    if frozen is None:
        return None
    wid, held = frozen
    return workers[wid]["pid"], {n for _sid, n in held}


def test_three_workers_share_a_night_and_one_is_killed(
        toy_repo: Path, tmp_path: Path, postgres_url: str, tracking_server: str,
        noting_evaluate: str, experiment_writer) -> None:
    (toy_repo / "targets/function/toy/evaluate.py").write_text(noting_evaluate)
    # one evaluate() per evaluation; heartbeats each second, a worker silent 3 s is lost
    experiment_writer(toy_repo, EXPERIMENT, body="[targets.settings.evaluator]\nrepeats = 1\n"
                      "[worker]\nheartbeat_s = 1\ngrace_s = 3\n")
    _git(toy_repo, "add", "-A")
    _git(toy_repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "shared toy")
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(toy_repo), str(remote)], check=True)
    clones = [tmp_path / f"worker{i}" for i in range(3)]
    for clone in clones:
        subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True)
    programs = tmp_path / "programs.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOY_EVAL_S": "0.3",
           "TOY_EVAL_PROGRAMS": str(programs),
           "PYTHONPATH": str(Path(optimizer.__file__).resolve().parents[1])}
    flags = ["--storage", postgres_url, "--tracking-uri", tracking_server, "--remote", "origin",
             "--minutes", "4", "--set", f"budget.max_candidates={PER_WORKER}"]
    procs: dict[int, subprocess.Popen[bytes]] = {}
    logs = [tmp_path / f"worker{i}.log" for i in range(3)]
    started = time.monotonic()
    try:
        for clone, log in zip(clones, logs, strict=True):
            proc = subprocess.Popen(
                [sys.executable, "-m", "optimizer.cli", "worker",
                 f"experiments/{EXPERIMENT}.toml", *flags],
                cwd=clone, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                start_new_session=True)
            procs[proc.pid] = proc
        storage = optuna.storages.RDBStorage(postgres_url)
        claims = Claims(storage)
        while (victim := _victim(storage, claims, procs)) is None:
            assert all(p.poll() is None for p in procs.values()), "a worker ended first:\n" + (
                "\n".join(log.read_text()[-3000:] for log in logs))
            assert time.monotonic() - started < 120, "no worker got to 8 candidates"
            time.sleep(0.05)
        pid, held = victim
        os.killpg(pid, signal.SIGKILL)
        procs[pid].wait()
        for p in procs.values():
            if p.pid != pid:
                assert p.wait(timeout=240) == 0, "\n".join(log.read_text()[-3000:]
                                                           for log in logs)
    finally:
        for p in procs.values():
            servers.stop_group(p)
    took = time.monotonic() - started
    out = "\n".join(log.read_text() for log in logs)

    study = optuna.load_study(study_name=f"{EXPERIMENT}/toy", storage=postgres_url)
    trials = study.get_trials(deepcopy=False)
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    cands = [t for t in trials if t.user_attrs.get("candidate")]
    ids = [t.user_attrs["candidate"] for t in cands]
    assert len(ids) == len(set(ids)), Counter(ids).most_common(3)  # ids unique across workers
    assert len(ids) >= 60, (len(ids), took)
    by_id = {t.user_attrs["candidate"]: t for t in cands}

    # the candidates the killed worker held (the one it evaluated, and the evaluated ones
    # it had not recorded yet): FAILED (worker lost) and each re-run once, elsewhere
    lost = [t for t in cands if t.user_attrs.get("reason") == WORKER_LOST]
    assert held <= {t.number for t in lost}, (held, [t.number for t in lost])
    payloads = claims.read(study._study_id, [f"trial:{t.number}" for t in cands])
    killed = {payloads[f"trial:{t.number}"]["worker"] for t in lost}
    assert len(killed) == 1, killed  # nothing of the living workers was lost
    for t in lost:
        cid = t.user_attrs["candidate"]
        assert t.state == TrialState.FAIL and t.user_attrs["state"] == "FAILED"
        assert f"{cid} FAILED: {WORKER_LOST}" in out
        reruns = [r for r in cands
                  if r.user_attrs.get("summary", "").startswith(f"re-run of {cid} ")]
        assert len(reruns) == 1, [r.user_attrs for r in reruns]
        assert reruns[0].user_attrs["content_hash"] == t.user_attrs["content_hash"]
        assert reruns[0].user_attrs["state"] in ("VALID", "INVALID")
        assert payloads[f"trial:{reruns[0].number}"]["worker"] not in killed
    lost_ids = {t.user_attrs["candidate"] for t in lost}

    # one program, one candidate: of workers proposing the same content (the seed and
    # every start, proposed by all three) one evaluates it and the others record duplicates
    hashes = Counter(t.user_attrs["content_hash"] for t in cands
                     if t.user_attrs.get("content_hash"))
    assert {h for h, n in hashes.items() if n > 1} == {
        t.user_attrs["content_hash"] for t in lost}
    assert [t.user_attrs["candidate"] for t in cands if t.user_attrs["proposer"] == "seed"] == [
        "c0001"]
    dups = [t for t in trials if t.user_attrs.get("state") == "DUPLICATE"]
    assert any(t.user_attrs["duplicate_of"] == "c0001" for t in dups)

    # every evaluation of the search is of a candidate, none twice (confirmations aside)
    noted = [json.loads(line) for line in programs.read_text().splitlines()]
    evaluated = Counter(Path(p).parts[Path(p).parts.index("worktrees") + 3] for p, _ in noted
                        if "_confirm" not in p)  # .../worktrees/<experiment>/toy/<id>/...
    assert max(evaluated.values()) == 1, evaluated.most_common(3)
    assert {c for c, t in by_id.items() if t.user_attrs["state"] == "VALID"} <= set(evaluated)

    # git: one branch per candidate with a program, on the remote; none left RUNNING
    refs = _git(remote, "for-each-ref", "--format=%(refname:short)%00%(contents)%00",
                f"refs/heads/optimizer/{EXPERIMENT}/toy/").split("\0")
    states = {ref.strip().rsplit("/", 1)[1]: next(
        (line.split(": ", 1)[1] for line in msg.splitlines() if line.startswith("state: ")), "?")
        for ref, msg in zip(refs[0::2], refs[1::2], strict=False)}
    assert set(states) == {c for c, t in by_id.items() if t.user_attrs.get("branch")}
    assert "RUNNING" not in states.values()
    assert {states[c] for c in lost_ids} == {"FAILED"}

    # MLflow: one run per candidate, the lost one's FAILED
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_server)
    exp = client.get_experiment_by_name(EXPERIMENT)
    runs = client.search_runs([exp.experiment_id], "tags.`optimizer.candidate` != ''",
                              max_results=1000)
    assert sorted(r.data.tags["optimizer.candidate"] for r in runs) == sorted(ids)
    for run in runs:
        if run.data.tags["optimizer.candidate"] in lost_ids:
            assert run.data.tags["optimizer.state"] == "FAILED"
            assert run.info.status == "FAILED"

    # the winner: selected and published once, its pull branch on the remote
    assert len(claims.prefixed(study._study_id, "winners:")) == 1
    assert out.count("this worker selects the night's winner") == 1
    pulls = _git(remote, "for-each-ref", "--format=%(refname:short)",
                 f"refs/heads/optimizer/pr/{EXPERIMENT}/").split()
    winner = study.user_attrs.get("winner")
    assert winner and pulls == [winner["pull_branch"]], (pulls, winner)

    # optimizer status: the stores agree; the three workers, the killed one lost
    cfg = load_experiment(clones[0] / f"experiments/{EXPERIMENT}.toml", [
        f'search.storage="{postgres_url}"', f'tracking.uri="{tracking_server}"',
        'vcs.push="origin"'], workspace=clones[0])
    status = collect_status(cfg)
    assert status["consistent"], status["targets"]
    assert status["pull_branches"] == pulls
    workers = status["workers"]
    assert len(workers) == 3
    (dead,) = [w for w in workers if w["pid"] == pid]
    assert not dead["alive"] and dead["phase"] != "done"
    assert all(w["phase"] == "done" for w in workers if w["pid"] != pid)
