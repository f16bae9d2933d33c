"""Claims in Optuna's own tables (optimizer.claims): of workers that claim the same key at
once exactly one wins, on sqlite and on PostgreSQL; candidate ids stay unique; and
``optimizer worker`` without shared stores says what it needs."""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from optimizer.claims import Claims
from optimizer.cli import main
from optimizer.stores import enable_fast_sqlite


def _study_id(url: str, name: str = "exp/toy") -> int:
    storage = optuna.storages.RDBStorage(url)
    return optuna.create_study(storage=storage, study_name=name, load_if_exists=True)._study_id


def _claim_in_process(url: str, study_id: int, digest: str, trial: int, start,
                      answers) -> None:  # type: ignore[no-untyped-def]
    enable_fast_sqlite()
    claims = Claims(optuna.storages.RDBStorage(url))
    start.wait()
    answers.put((trial, *claims.candidate(study_id, digest=digest, trial=trial, first_id=2,
                                          payload={"files": {}})))


def _race(url: str, study_id: int, digests: list[str]) -> list[tuple[int, bool, str]]:
    """Each digest claimed by a process of its own, all released at once."""
    ctx = multiprocessing.get_context("spawn")
    start, answers = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_claim_in_process, args=(url, study_id, d, i, start, answers))
             for i, d in enumerate(digests)]
    for p in procs:
        p.start()
    start.set()
    out = [answers.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    return sorted(out)


def _check_one_winner(claims: Claims, study_id: int, results: list[tuple[int, bool, str]],
                      digest: str) -> None:
    winners = [(trial, cid) for trial, won, cid in results if won]
    assert len(winners) == 1, results
    trial, cid = winners[0]
    # every loser names the winner's candidate; the rows say who holds what
    assert {c for _, won, c in results if not won} == {cid}
    rows = claims.read(study_id, [f"content:{digest}", f"id:{cid}", f"trial:{trial}"])
    assert rows[f"content:{digest}"] == {"trial": trial, "candidate": cid}
    assert rows[f"id:{cid}"] == {"trial": trial}
    assert rows[f"trial:{trial}"]["candidate"] == cid


def test_two_threads_claiming_one_key_on_sqlite(tmp_path: Path) -> None:
    enable_fast_sqlite()
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study_id = _study_id(url)
    claims = Claims(optuna.storages.RDBStorage(url))
    def claim(who: int, key: str, barrier: threading.Barrier, won: list[bool]) -> None:
        barrier.wait()
        won.append(claims.take(study_id, key, {"by": who}))

    for round_ in range(20):
        barrier = threading.Barrier(2)
        won: list[bool] = []
        threads = [threading.Thread(target=claim, args=(i, f"winners:night-{round_}",
                                                        barrier, won)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(won) == [False, True]
    assert len(claims.prefixed(study_id, "winners:")) == 20


def test_processes_claiming_the_same_program_on_sqlite(tmp_path: Path) -> None:
    enable_fast_sqlite()
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study_id = _study_id(url)
    claims = Claims(optuna.storages.RDBStorage(url))
    _check_one_winner(claims, study_id, _race(url, study_id, ["same"] * 4), "same")
    # different programs at once: each gets an id of its own
    results = _race(url, study_id, [f"p{i}" for i in range(4)])
    assert all(won for _, won, _ in results)
    ids = [cid for _, _, cid in results]
    assert len(set(ids)) == 4 and "c0002" not in ids  # c0002 went to "same"


def test_ids_skip_those_other_workers_took(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study_id = _study_id(url)
    claims = Claims(optuna.storages.RDBStorage(url))
    assert claims.candidate(study_id, digest="a", trial=0, first_id=1, payload={},
                            seed=True) == (True, "c0001")
    assert claims.candidate(study_id, digest="b", trial=1, first_id=2, payload={}) == (
        True, "c0002")
    # a worker that has not seen c0002 yet tries it first, and takes the next free id
    assert claims.candidate(study_id, digest="c", trial=2, first_id=2, payload={}) == (
        True, "c0003")
    assert claims.candidate(study_id, digest="", trial=3, first_id=2, payload={}) == (
        True, "c0004")  # a rejected proposal: an id, no content
    assert claims.candidate(study_id, digest="b", trial=4, first_id=5, payload={}) == (
        False, "c0002")
    # the re-run of a lost candidate takes its content over
    assert claims.candidate(study_id, digest="b", trial=5, first_id=5, payload={},
                            rerun=True) == (True, "c0005")
    assert claims.read(study_id, ["content:b"])["content:b"] == {"trial": 5,
                                                                 "candidate": "c0005"}


@pytest.mark.slow
def test_processes_claiming_the_same_program_on_postgresql(postgres_url: str) -> None:
    study_id = _study_id(postgres_url, f"claims/{uuid.uuid4().hex[:8]}")  # a database shared
    claims = Claims(optuna.storages.RDBStorage(postgres_url))
    _check_one_winner(claims, study_id, _race(postgres_url, study_id, ["same"] * 4), "same")
    results = _race(postgres_url, study_id, [f"p{i}" for i in range(4)])
    assert all(won for _, won, _ in results)
    assert len({cid for _, _, cid in results}) == 4


@pytest.mark.parametrize(("missing", "named"), [
    ("storage", "search.storage"), ("tracking", "tracking.uri"), ("remote", "vcs.push")])
def test_a_worker_without_shared_stores_says_what_it_needs(
        toy_repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        missing: str, named: str) -> None:
    monkeypatch.chdir(toy_repo)
    flags = {"storage": ["--storage", f"sqlite:///{toy_repo}/shared.db"],
             "tracking": ["--tracking-uri", "http://127.0.0.1:9"],
             "remote": ["--remote", "origin"]}
    args = [a for k, v in flags.items() if k != missing for a in v]
    assert main(["worker", "experiments/toy.toml", *args]) == 2
    err = capsys.readouterr().err
    assert named in err and "optimizer worker" in err
    if missing == "storage":
        assert "postgresql" in err and "sqlite" in err  # several machines, and one
    assert not (toy_repo / ".optimizer" / "optuna.db").exists()  # nothing written


def _open_in_process(url: str, tries: int, start, answers) -> None:  # type: ignore[no-untyped-def]
    from optimizer.worker import open_storage

    start.wait()
    try:
        open_storage(url, 1, 3, tries=tries)
        answers.put("ok")
    except Exception as exc:  # noqa: BLE001 - the answer is the error's text
        answers.put(str(exc)[:300])


def test_workers_starting_at_once_on_a_new_database_all_open_it(tmp_path: Path) -> None:
    # six workers create a new sqlite file's tables at the same moment: the ones that lose
    # the race ("table ... already exists", "UNIQUE constraint failed: alembic_version")
    # open it again and find the tables made
    url = f"sqlite:///{tmp_path / 'new.db'}"
    ctx = multiprocessing.get_context("spawn")
    start, answers = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_open_in_process, args=(url, 5, start, answers))
             for _ in range(6)]
    for p in procs:
        p.start()
    time.sleep(3.0)  # every process imported and waiting
    start.set()
    got = [answers.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert got == ["ok"] * 6, got


def test_a_trial_that_never_had_a_heartbeat_is_stale_after_the_grace(tmp_path: Path) -> None:
    """A worker killed between creating a trial and its first heartbeat leaves it RUNNING
    without one; Optuna never calls such a trial stale, so the other workers would wait for
    it (a target's winner until the night's end). The shared storage does, once it has seen
    it unbeaten for longer than the grace period."""
    from optimizer.worker import SharedStorage

    url = f"sqlite:///{tmp_path}/night.db"
    ours = SharedStorage(url, heartbeat_s=1, grace_s=1)
    study_id = optuna.create_study(storage=ours, study_name="exp/toy")._study_id
    orphan = optuna.storages.RDBStorage(url).create_new_trial(study_id)  # never beaten
    other = SharedStorage(url, heartbeat_s=1, grace_s=1)
    alive = other.create_new_trial(study_id)  # another worker's, beaten at creation
    assert ours._get_stale_trial_ids(study_id) == []  # the orphan is only seen, not yet lost
    time.sleep(1.3)
    other.record_heartbeat(alive)  # its worker beats on
    assert ours._get_stale_trial_ids(study_id) == [orphan]
    assert optuna.storages.RDBStorage(url, heartbeat_interval=1, grace_period=1) \
        ._get_stale_trial_ids(study_id) == []  # what Optuna alone finds
    ours.set_trial_state_values(orphan, TrialState.FAIL)
    assert ours._get_stale_trial_ids(study_id) == [] and ours._unbeaten == {}
