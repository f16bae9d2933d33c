"""Tracker against a real sqlite MLflow store (one store per module: creating it costs ~1 s)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from mlflow.entities import ViewType

from optimizer.errors import WorkspaceError
from optimizer.records import Candidate, CandidateState, EvalResult
from optimizer.tracking import REASON_LIMIT, Tracker


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("state")


def candidate(cid: str, **kw) -> Candidate:
    files = kw.pop("files", {"program.py": f"K = {cid[-1]}\n", "lib/util.py": "U = 1\n"})
    return Candidate(
        id=cid,
        target="topk",
        parent_id=kw.pop("parent_id", None),
        proposer="offline",
        files=files,
        knobs=kw.pop("knobs", {"K": int(cid[-1]), "W": 0.5}),
        content_hash=f"hash{cid}",
        summary=kw.pop("summary", ""),
    )


def log(tracker: Tracker, night: str, cand: Candidate, result: EvalResult, **kw) -> str:
    return tracker.log_candidate(
        parent_run_id=night,
        candidate=cand,
        result=result,
        branch=f"optimizer/exp/topk/{cand.id}",
        commit="ab" * 20,
        trial_number=int(cand.id[1:]) - 1,
        diff=f"--- a/program.py\n+++ b/program.py\n+K = {cand.id}\n",
        **kw,
    )


def artifact_files(tracker: Tracker, run_id: str) -> dict[str, str]:
    root = Path(tracker.client.get_run(run_id).info.artifact_uri.removeprefix("file://"))
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}


def test_a_night_with_candidates(state_dir: Path) -> None:
    tracker = Tracker.local(state_dir, "night-test")
    night = tracker.start_night("2026-11-29", {"budget_candidates": 3}, {"host": "ci"})

    valid = EvalResult(
        state=CandidateState.VALID,
        metrics={"time_s": 0.002, "speedup": 1.25},
        objectives=(0.002,),
        artifacts={"validation.txt": "max rel err 1e-6"},
        cost_s=3.5,
    )
    run_valid = log(
        tracker,
        night,
        candidate("c0001", summary="fuse the two passes"),
        valid,
        prompt="# Task\nmake it fast",
        response="```python\nK = 1\n```",
        eval_log="compiled in 0.4 s\n",
        extra_metrics={"trial_value": 0.002},
    )
    long_reason = "max relative error 3e-2 exceeds 1e-3 at index 17; " * 200
    invalid = EvalResult(state=CandidateState.INVALID, reason=long_reason, stage="correctness")
    run_invalid = log(tracker, night, candidate("c0002", parent_id="c0001"), invalid)
    crashed = EvalResult(state=CandidateState.FAILED, reason="SyntaxError: invalid syntax")
    run_failed = log(tracker, night, candidate("c0003", knobs={}), crashed, response="")

    run = tracker.client.get_run(run_valid)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "topk/c0001"
    assert run.data.params == {
        "knob.K": "1",
        "knob.W": "0.5",
        "proposer": "offline",
        "parent": "none",
        "candidate": "c0001",
    }
    assert run.data.metrics == {
        "time_s": 0.002,
        "speedup": 1.25,
        "objective.0": 0.002,
        "eval_cost_s": 3.5,
        "trial_value": 0.002,
    }
    tags = run.data.tags
    assert tags["mlflow.parentRunId"] == night
    assert tags["optimizer.state"] == "VALID"
    assert tags["optimizer.target"] == "topk"
    assert tags["optimizer.branch"] == "optimizer/exp/topk/c0001"
    assert tags["optimizer.commit"] == "ab" * 20
    assert tags["optimizer.candidate"] == "c0001"
    assert tags["optimizer.trial"] == "0"
    assert tags["mlflow.note.content"] == "fuse the two passes"

    files = artifact_files(tracker, run_valid)
    assert set(files) == {
        "candidate.diff",
        "source/program.py",
        "source/lib/util.py",
        "prompt.md",
        "response.md",
        "eval.json",
        "eval.log",
    }
    assert files["source/program.py"] == "K = 1\n"
    assert files["prompt.md"] == "# Task\nmake it fast"
    assert EvalResult.from_json(json.loads(files["eval.json"])) == valid
    # Artifacts live under the configured root, not in ./mlruns.
    assert (state_dir / "mlartifacts").resolve() in Path(
        run.info.artifact_uri.removeprefix("file://")
    ).parents

    bad = tracker.client.get_run(run_invalid)
    assert bad.info.status == "FAILED"
    assert bad.data.tags["optimizer.state"] == "INVALID"
    assert bad.data.tags["optimizer.reason"] == long_reason[:REASON_LIMIT]
    assert bad.data.tags["optimizer.stage"] == "correctness"
    assert bad.data.params["parent"] == "c0001"

    failed = tracker.client.get_run(run_failed)
    assert failed.info.status == "FAILED"
    assert failed.data.tags["optimizer.reason"] == "SyntaxError: invalid syntax"
    assert not any(k.startswith("knob.") for k in failed.data.params)
    assert set(artifact_files(tracker, run_failed)) == {
        "candidate.diff",
        "source/program.py",
        "source/lib/util.py",
        "eval.json",
    }  # empty prompt, response and log are not written

    runs = tracker.candidate_runs(night)
    assert [(r["candidate"], r["state"], r["status"]) for r in runs] == [
        ("c0001", "VALID", "FINISHED"),
        ("c0002", "INVALID", "FAILED"),
        ("c0003", "FAILED", "FAILED"),
    ]
    assert {r["run_id"] for r in runs} == {run_valid, run_invalid, run_failed}
    assert all(r["target"] == "topk" for r in runs)

    tracker.log_night_metrics(night, {"best_speedup": 1.25, "candidates": 3})
    report = state_dir / "report.md"
    report.write_text("# Night report\n")
    tracker.log_artifact_file(night, report, "reports")
    tracker.end_night(night)
    parent = tracker.client.get_run(night)
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["best_speedup"] == 1.25
    assert parent.data.params == {"budget_candidates": "3"}
    assert parent.data.tags["host"] == "ci"
    assert artifact_files(tracker, night) == {"reports/report.md": "# Night report\n"}


def test_resume_finds_the_night_in_a_new_process(state_dir: Path) -> None:
    first = Tracker.local(state_dir, "resume-test")
    old = first.start_night("2026-11-28", {}, {})
    night = first.start_night("2026-11-29", {}, {})
    first.end_night(night, status="KILLED")

    again = Tracker.local(state_dir, "resume-test")  # a fresh client, as after a restart
    assert again.experiment_id == first.experiment_id
    assert again.find_night("2026-11-29") == night
    assert again.find_night("2026-11-28") == old
    assert again.find_night("2026-11-30") is None
    assert again.find_night("it's") is None  # quotes in names do not break the filter
    again.resume_night(night)
    assert again.client.get_run(night).info.status == "RUNNING"
    # Child runs are never mistaken for a night.
    log(again, night, candidate("c0001"), EvalResult(state=CandidateState.VALID))
    assert again.find_night("2026-11-29") == night


def test_deleted_experiment_is_restored(state_dir: Path) -> None:
    tracker = Tracker.local(state_dir, "deleted-test")
    tracker.client.delete_experiment(tracker.experiment_id)
    again = Tracker.local(state_dir, "deleted-test")
    assert again.experiment_id == tracker.experiment_id
    exp = again.client.get_experiment(again.experiment_id)
    assert exp.lifecycle_stage == "active"
    assert again.client.search_runs([again.experiment_id], run_view_type=ViewType.ALL) == []


def test_local_store_layout_and_ui_command(state_dir: Path) -> None:
    tracker = Tracker.local(state_dir, "ui-test")
    db = state_dir / "mlflow.db"
    assert tracker.uri == f"sqlite:///{db.resolve()}"
    with sqlite3.connect(db) as conn:  # the relaxed journal persisted in the file
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cmd = tracker.ui_command(port=5055)
    assert cmd[1:4] == ["-m", "mlflow", "ui"]
    assert cmd[cmd.index("--backend-store-uri") + 1] == tracker.uri
    root = cmd[cmd.index("--default-artifact-root") + 1]
    assert root == (state_dir / "mlartifacts").resolve().as_uri()
    assert cmd[-4:] == ["--host", "127.0.0.1", "--port", "5055"]


def test_unreachable_server_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    with pytest.raises(WorkspaceError, match="cannot open MLflow experiment 'x' at http://"):
        Tracker("http://127.0.0.1:9", "x", None)


def test_many_knobs_and_metrics_exceed_one_request(state_dir: Path) -> None:
    tracker = Tracker.local(state_dir, "batch-test")
    night = tracker.start_night("n", {f"p{i}": i for i in range(120)}, {})
    knobs = {f"K{i}": i for i in range(150)}  # MLflow takes at most 100 params per request
    metrics = {f"m{i}": float(i) for i in range(1200)}  # and 1000 entries
    run_id = log(
        tracker,
        night,
        candidate("c0001", knobs=knobs),
        EvalResult(state=CandidateState.VALID, metrics=metrics),
    )
    run = tracker.client.get_run(run_id)
    assert {k: v for k, v in run.data.params.items() if k.startswith("knob.")} == {
        f"knob.K{i}": str(i) for i in range(150)
    }
    assert len(run.data.metrics) == 1200 + 1  # plus eval_cost_s
    assert len(tracker.client.get_run(night).data.params) == 120
