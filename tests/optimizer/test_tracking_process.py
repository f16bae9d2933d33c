"""TrackerProcess: the Tracker's calls done by a child process, against a real sqlite store."""

from __future__ import annotations

from pathlib import Path

import pytest

from optimizer.errors import WorkspaceError
from optimizer.records import Candidate, CandidateState, EvalResult
from optimizer.tracking import Tracker
from optimizer.tracking_process import LOCAL_CALLS, TrackerProcess, tracker_for


def test_every_store_call_of_the_tracker_goes_to_the_process() -> None:
    public = {n for n, m in vars(Tracker).items() if callable(m) and not n.startswith("_")}
    assert public  # the check below would pass on nothing
    inherited = {n for n in public - LOCAL_CALLS if n not in vars(TrackerProcess)}
    assert not inherited, f"these would run in the engine with no MLflow client: {inherited}"


def test_a_candidate_recorded_through_the_process_is_read_back_in_the_engine(
        tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = TrackerProcess(uri, "proc", tmp_path / "artifacts")
    try:
        night = tracker.start_night("n1", {"budget": 3}, {"host": "ci"})
        assert tracker.find_night("n1") == night
        cand = Candidate(id="c0001", target="toy", parent_id=None, proposer="offline",
                         files={"program.py": "X = 1\n"}, knobs={"X": 1}, content_hash="h1")
        run_id = tracker.start_candidate(parent_run_id=night, candidate=cand,
                                         branch="optimizer/proc/toy/c0001", trial_number=0)
        result = EvalResult(CandidateState.VALID, "", "performance", metrics={"cost": 2.5},
                            objectives=(2.5,))
        steps = list(tracker.finish_candidate_steps(run_id, candidate=cand, result=result,
                                                    commit="ab" * 20, diff="+X = 1\n"))
        assert steps == [None]
        tracker.end_night(night)
        runs = tracker.candidate_runs(night)
        assert [(r["candidate"], r["state"], r["status"]) for r in runs] == [
            ("c0001", "VALID", "FINISHED")]
    finally:
        tracker.close()
    here = Tracker(uri, "proc", tmp_path / "artifacts")  # what the process wrote, read here
    run = here.client.get_run(run_id)
    assert run.data.metrics["cost"] == 2.5 and run.data.params["knob.X"] == "1"
    assert here.client.get_run(night).info.status == "FINISHED"


def test_its_errors_reach_the_engine_and_a_closed_one_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the child's environment
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    with pytest.raises(WorkspaceError, match="cannot open MLflow experiment 'x' at http://"):
        TrackerProcess("http://127.0.0.1:9", "x")
    tracker = TrackerProcess(f"sqlite:///{tmp_path / 'mlflow.db'}", "proc")
    with pytest.raises(Exception, match="(?i)run"):  # MLflow's own error, carried over
        tracker.end_night("0" * 32)
    proc = tracker._proc
    tracker.close()
    assert proc is not None and proc.returncode == 0  # it ended on its own
    with pytest.raises(WorkspaceError, match="closed"):
        tracker.log_night_metrics("0" * 32, {"x": 1.0})


def test_a_night_of_one_slot_keeps_the_plain_tracker(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    one = tracker_for(uri, "proc", None, 1)
    assert type(one) is Tracker
    two = tracker_for(uri, "proc", None, 2)
    try:
        assert isinstance(two, TrackerProcess) and two.experiment_id == one.experiment_id
    finally:
        two.close()
