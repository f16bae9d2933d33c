"""A night whose Optuna studies live in a real PostgreSQL server (the scale-out store).

The ``postgres_url`` fixture (conftest.py) uses ``OPTIMIZER_TEST_POSTGRES_URL`` when set;
otherwise it starts a throwaway cluster with the machine's PostgreSQL binaries (as the
``postgres`` user when run as root) and skips with the reason when neither is possible.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from optimizer.config import load_experiment
from optimizer.loop import run
from optimizer.status import collect_status


@pytest.mark.slow
def test_night_with_optuna_on_postgresql(toy_repo: Path, postgres_url: str) -> None:
    cfg = load_experiment(
        toy_repo / "experiments/toy.toml",
        ["budget.max_candidates=6", f'search.storage="{postgres_url}"'],
        workspace=toy_repo,
    )
    summary = run(cfg, say=lambda s: None)
    assert summary.targets[0].candidates == 6
    import optuna

    study = optuna.load_study(study_name="toy/toy", storage=postgres_url)
    assert len([t for t in study.trials if t.user_attrs.get("candidate")]) == 6
    status = collect_status(cfg)
    assert status["consistent"] and status["totals"]["candidates"] == 6
