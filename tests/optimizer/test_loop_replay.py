"""The serial night replays: one slot, one proposal in flight, the offline proposer and a
seeded toy night evaluate the same candidates in the same order as the recorded night in
``fixtures/serial_night.json`` (recorded with the engine of 2026-12-05, before its loop was
split by job). Set OPTIMIZER_RECORD_SERIAL_NIGHT=1 to record it again after a change that
is meant to change the sequence (and say why in the commit)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import optuna
import pytest

from evaluators.function.toy import add_toy_target, write_experiment
from optimizer.config import load_experiment
from optimizer.loop import run

FIXTURE = Path(__file__).parent / "fixtures" / "serial_night.json"
TARGETS = """
[[targets]]
path = "targets/function/toy"
max_candidates = 14

[[targets]]
path = "targets/function/toy2"
max_candidates = 10
"""


def _sequence(cfg: Any, target: str) -> list[dict[str, Any]]:
    """Every trial of ``target``'s study, in order: what the search asked and what came of
    it (candidate id, parent, proposer, source digest, knob values, state, objectives)."""
    study = optuna.load_study(study_name=f"toy/{target}", storage=cfg.optuna_storage)
    rows = []
    for t in study.trials:
        a = t.user_attrs
        rows.append({
            "trial": t.number,
            "trial_state": t.state.name,
            "params": {k: t.params[k] for k in sorted(t.params)},
            "values": t.values,
            "candidate": a.get("candidate", ""),
            "parent": a.get("parent", ""),
            "proposer": a.get("proposer", ""),
            "summary": a.get("summary", ""),
            "content_hash": a.get("content_hash", ""),
            "structure": a.get("structure", ""),
            "state": a.get("state", ""),
            "reason": a.get("reason", "")[:120],
            "duplicate_of": a.get("duplicate_of", ""),
        })
    return rows


def _night(repo: Path) -> dict[str, Any]:
    add_toy_target(repo, "toy2")
    # the experiment as write_experiment makes it, its one target replaced by two
    exp = write_experiment(repo)
    body = exp.read_text().split("[[targets]]")[0]
    exp.write_text(body + TARGETS)
    cfg = load_experiment(exp, ["budget.max_candidates=0", "stats.minimize_trials=2",
                                "run.slots=1", "proposer.concurrency=1"], workspace=repo)
    summary = run(cfg, say=lambda s: None)
    return {
        "targets": {t.target: {"winner": (t.winner or {}).get("candidate"),
                               "best": t.best_candidate, "candidates": t.candidates}
                    for t in summary.targets},
        "trials": {name: _sequence(cfg, name) for name in ("toy", "toy2")},
    }


def test_the_serial_night_replays_the_recorded_sequence(toy_repo: Path) -> None:
    got = _night(toy_repo)
    if os.environ.get("OPTIMIZER_RECORD_SERIAL_NIGHT"):
        FIXTURE.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    if not FIXTURE.is_file():
        pytest.fail(f"{FIXTURE} is missing: record it with OPTIMIZER_RECORD_SERIAL_NIGHT=1")
    want = json.loads(FIXTURE.read_text())
    assert len([t for t in want["trials"]["toy"] if t["candidate"]]) >= 12  # a real night
    for name in ("toy", "toy2"):
        assert got["trials"][name] == want["trials"][name], name
    assert got["targets"] == want["targets"]
