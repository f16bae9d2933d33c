"""The loop with several evaluation slots and proposals in flight: nothing is lost or
done twice, the stores agree, evaluations overlap, timings on one device never do."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import optuna
import pytest

from optimizer import slots as slot_plan
from optimizer.config import load_experiment
from optimizer.loop import run
from optimizer.proposers.offline import OfflineProposer
from optimizer.records import Proposal
from optimizer.status import collect_status


class SlowProposer(OfflineProposer):
    """The offline proposer, taking ``latency_s`` per proposal like a remote model."""

    def __init__(self, latency_s: float):
        super().__init__(seed=0)
        self.latency_s = latency_s
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    def propose(self, context):  # type: ignore[no-untyped-def]
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(self.latency_s)
            return super().propose(context)
        finally:
            with self._lock:
                self.in_flight -= 1


def _intervals(log: Path) -> list[tuple[float, float]]:
    return sorted(tuple(json.loads(line)) for line in log.read_text().splitlines())


def _overlaps(spans: list[tuple[float, float]]) -> int:
    return sum(1 for a, b in zip(spans, spans[1:], strict=False) if b[0] < a[1])


def _timed_repo(toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                evaluate: str) -> Path:
    import subprocess

    (toy_repo / "targets/function/toy/evaluate.py").write_text(evaluate)
    # the whole evaluate() is the timed phase, as in a target that times its program
    # (a deterministic target's evaluations would otherwise hold no timing lock)
    toml = toy_repo / "targets/function/toy/target.toml"
    toml.write_text(toml.read_text() + '\n[evaluator]\ntimed = "evaluate"\n')
    subprocess.run(["git", "-C", str(toy_repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qam", "timed toy"], check=True)
    monkeypatch.setenv("TOY_EVAL_LOG", str(tmp_path / "evals.jsonl"))
    return toy_repo


def test_two_slots_and_proposals_in_flight_lose_nothing(
        toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        slow_evaluate: str) -> None:
    repo = _timed_repo(toy_repo, tmp_path, monkeypatch, slow_evaluate)
    monkeypatch.setenv("TOY_EVAL_S", "0.3")
    # two cores, whatever this machine has: each slot pinned to one
    monkeypatch.setattr(slot_plan.os, "sched_getaffinity", lambda pid: {0, 1})
    cfg = load_experiment(repo / "experiments/toy.toml",
                          ["budget.max_candidates=14", "run.slots=2", "proposer.concurrency=3"],
                          workspace=repo)
    proposer = SlowProposer(0.3)
    summary = run(cfg, proposer=proposer, say=lambda s: None)

    (t,) = summary.targets
    assert t.candidates == 14
    assert proposer.most_in_flight >= 2, "proposals were made one at a time"
    spans = _intervals(tmp_path / "evals.jsonl")
    assert _overlaps(spans) >= 1, f"no two evaluations overlapped: {spans}"
    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    assert not [x for x in study.trials if x.state == optuna.trial.TrialState.RUNNING]
    cands = [x for x in study.trials if x.user_attrs.get("candidate")]
    ids = [x.user_attrs["candidate"] for x in cands]
    assert len(ids) == len(set(ids)) == 14
    hashes = [x.user_attrs["content_hash"] for x in cands if x.user_attrs.get("content_hash")]
    assert len(hashes) == len(set(hashes))
    status = collect_status(cfg)
    assert status["consistent"], status
    assert status["totals"]["candidates"] == status["totals"]["branches"] == 14
    assert status["totals"]["mlflow_runs"] == 14
    assert t.winner is not None  # winners are still selected after the slots stop


def test_slots_on_one_device_never_time_at_once(
        toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        slow_evaluate: str) -> None:
    """Three slots on one core share its timing lock: evaluate() (the timed phase of the
    function kind) never runs twice at once, while the proposals still overlap."""
    repo = _timed_repo(toy_repo, tmp_path, monkeypatch, slow_evaluate)
    monkeypatch.setenv("TOY_EVAL_S", "0.2")
    monkeypatch.setattr(slot_plan.os, "sched_getaffinity", lambda pid: {0})
    cfg = load_experiment(repo / "experiments/toy.toml",
                          ["budget.max_candidates=8", "run.slots=3", "proposer.concurrency=3"],
                          workspace=repo)
    proposer = SlowProposer(0.2)
    run(cfg, proposer=proposer, say=lambda s: None)
    spans = _intervals(tmp_path / "evals.jsonl")
    assert len(spans) >= 8
    assert _overlaps(spans) == 0, spans
    assert proposer.most_in_flight >= 2


def test_concurrency_is_faster_than_the_serial_loop(
        toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        slow_evaluate: str) -> None:
    """Proposal latency hidden behind evaluations: 10 candidates at 0.4 s of proposal and
    0.3 s of evaluation each take well under the serial loop's time."""
    repo = _timed_repo(toy_repo, tmp_path, monkeypatch, slow_evaluate)
    monkeypatch.setenv("TOY_EVAL_S", "0.3")
    monkeypatch.setattr(slot_plan.os, "sched_getaffinity", lambda pid: {0, 1})
    walls = {}
    for name, sets in (("serial", []), ("concurrent", ["run.slots=2", "proposer.concurrency=4"])):
        cfg = load_experiment(repo / "experiments/toy.toml",
                              ["budget.max_candidates=10", f"state_dir=.opt-{name}",
                               "stats.minimize_trials=0", *sets], workspace=repo)
        t0 = time.monotonic()
        summary = run(cfg, proposer=SlowProposer(0.4), say=lambda s: None)
        walls[name] = time.monotonic() - t0
        assert summary.targets[0].candidates == 10, (name, summary)
    assert walls["concurrent"] < 0.75 * walls["serial"], walls


def test_a_rejected_or_duplicate_proposal_in_flight_is_recorded_once(
        toy_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Proposers that keep proposing the same program: one candidate, the rest duplicates
    (in flight or not), and the target stops after the duplicate streak."""

    class Same(OfflineProposer):
        def propose(self, context):  # type: ignore[no-untyped-def]
            time.sleep(0.05)
            return Proposal("same", context.parent.id, dict(context.seed.files), "same again",
                            fixed_knobs={"X": 3, "Y": 0.5})

    monkeypatch.setattr(slot_plan.os, "sched_getaffinity", lambda pid: {0, 1})
    cfg = load_experiment(toy_repo / "experiments/toy.toml",
                          ["budget.max_candidates=50", "run.slots=2", "proposer.concurrency=4",
                           "stats.minimize_trials=0"],
                          workspace=toy_repo)
    summary = run(cfg, proposer=Same(), say=lambda s: None)
    (t,) = summary.targets
    assert t.candidates == 2  # the seed and the one program
    assert "duplicate proposals in a row" in t.note
    # the streak stops the target; what was in flight at the stop still ends as duplicates
    streak = int(t.note.split("stopped early: ")[1].split()[0])
    assert 40 <= streak <= 40 + 2 and t.duplicates >= streak  # + the two slots' last ones
    status = collect_status(cfg)
    assert status["consistent"], status


def test_the_seed_and_the_starts_are_evaluated_side_by_side(
        toy_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        slow_evaluate: str) -> None:
    """With three slots a target's seed and its two starts run at once; proposals wait for
    the seed's verdict (they need a measured seed to improve on)."""
    import subprocess

    target = toy_repo / "targets/function/toy"
    for i, x in enumerate((5, 6)):
        (target / "variants").mkdir(exist_ok=True)
        (target / "variants" / f"v{i}.py").write_text(
            (target / "program.py").read_text().replace("X = 1  #", f"X = {x}  #"))
    (target / "target.toml").write_text((target / "target.toml").read_text()
                                        + 'starts = ["variants/v0.py", "variants/v1.py"]\n')
    subprocess.run(["git", "-C", str(toy_repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(toy_repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qm", "starts"], check=True)
    repo = _timed_repo(toy_repo, tmp_path, monkeypatch, slow_evaluate)
    monkeypatch.setenv("TOY_EVAL_S", "0.5")
    monkeypatch.setattr(slot_plan.os, "sched_getaffinity", lambda pid: {0, 1, 2})
    cfg = load_experiment(repo / "experiments/toy.toml",
                          ["budget.max_candidates=6", "run.slots=3", "proposer.concurrency=2",
                           "stats.minimize_trials=0"], workspace=repo)
    summary = run(cfg, proposer=SlowProposer(0.05), say=lambda s: None)
    assert summary.targets[0].candidates == 6
    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    by_id = {t.user_attrs["candidate"]: t for t in study.trials if t.user_attrs.get("candidate")}
    first = sorted(by_id.values(), key=lambda t: t.datetime_start)[:3]
    assert {t.user_attrs["proposer"] for t in first} == {"seed", "start"}
    seed = by_id["c0001"]  # the seed's id, whichever was admitted first
    assert seed.user_attrs["proposer"] == "seed"
    starts = [t for t in by_id.values() if t.user_attrs["proposer"] == "start"]
    assert len(starts) == 2
    assert all(t.datetime_start < seed.datetime_complete for t in starts)  # beside the seed
    later = [t for t in by_id.values() if t.user_attrs["proposer"] not in ("seed", "start")]
    assert later and all(t.datetime_start >= seed.datetime_complete for t in later)
