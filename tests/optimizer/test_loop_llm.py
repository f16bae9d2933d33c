"""A night with the LLM proposer against a local OpenAI-compatible server (real HTTP)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from optimizer.config import load_experiment
from optimizer.loop import run


def _fake() -> Any:
    path = Path(__file__).parent / "proposers" / "fake_openai_server.py"
    spec = importlib.util.spec_from_file_location("fake_openai_server_loop", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fake = _fake()
Reply = fake.Reply


def _edit(search: str, replace: str, summary: str = "tune") -> str:
    return (
        f"SUMMARY: {summary}\nprogram.py\n<<<<<<< SEARCH\n{search}=======\n{replace}"
        ">>>>>>> REPLACE\n"
    )


GOOD_OFFSET = _edit(
    "    return abs(X - 7) + 10 * abs(Y - 0.3) + 1.0\n",
    "    return abs(X - 7) + 10 * abs(Y - 0.3) + 0.25\n",
    "smaller constant",
)
RERANGE = _edit("X = 1  # knob: int 0..20\n", "X = 7  # knob: int 5..9\n", "narrow X")
NO_MATCH = _edit("    return abs(X - 8)\n", "    return 0\n")
OUTSIDE = (
    'SUMMARY: doc\nprogram.py\n<<<<<<< SEARCH\n"""Toy program: cost is lowest at X = 7,'
    ' Y = 0.3."""\n=======\n"""Changed."""\n>>>>>>> REPLACE\n'
)

PRICES = [
    "proposer.llm.price_input_per_m=1.25",
    "proposer.llm.price_cached_input_per_m=0.125",
    "proposer.llm.price_output_per_m=10.0",
]


def _config(repo: Path, server: Any, extra: list[str]):
    return load_experiment(
        repo / "experiments/toy.toml",
        [
            "proposer.kind=llm",
            f'proposer.llm.base_url="{server.base_url}"',
            'proposer.llm.model="fake-model"',
            'proposer.llm.api_key_env="NO_SUCH_KEY_VAR"',
            "proposer.llm.max_retries=2",
            "proposer.llm.timeout_s=3.0",
            "proposer.llm.retry_base_s=0.01",
            "proposer.llm.retry_max_s=0.05",
            *PRICES,
            *extra,
        ],
        workspace=repo,
    )


def test_llm_night_survives_errors_and_stops_only_on_budget(toy_repo: Path) -> None:
    script = [
        Reply(GOOD_OFFSET),
        Reply(NO_MATCH),
        Reply(status=429, headers={"Retry-After": "0"}),
        Reply(RERANGE),
        Reply(status=500),
        Reply(OUTSIDE),
        Reply(raw=b"{not json"),
        Reply(""),
        Reply(GOOD_OFFSET.replace("0.25", "0.5")),
    ]
    with fake.FakeOpenAIServer(script) as server:
        cfg = _config(toy_repo, server, ["budget.max_candidates=8"])
        summary = run(cfg, say=lambda s: None)
    (t,) = summary.targets
    assert summary.stop_reason.startswith("candidate budget")
    assert t.candidates == 8
    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    by_id = {
        x.user_attrs["candidate"]: x.user_attrs
        for x in study.trials
        if x.user_attrs.get("candidate")
    }
    reasons = [a["reason"] for a in by_id.values() if a["state"] == "REJECTED"]
    assert any("closest" in r for r in reasons), reasons
    assert any("outside" in r for r in reasons), reasons
    assert any("empty answer" in r for r in reasons), reasons
    valid_llm = [a for a in by_id.values() if a["state"] == "VALID" and a["proposer"] != "seed"]
    assert len(valid_llm) >= 2  # the good edits and the re-ranged knob became candidates
    # the best uses the new constant: 13 - 1 + 0.25 at the seed's knobs, or better
    assert t.best_value is not None and t.best_value <= 12.25
    # MLflow's OpenAI tracing recorded the chat calls that got an answer
    from mlflow.tracking import MlflowClient

    client = MlflowClient(cfg.tracking_uri)
    exp = client.get_experiment_by_name("toy")
    traces = client.search_traces(locations=[exp.experiment_id])
    assert len(traces) >= 5


def test_usd_budget_stops_the_night(toy_repo: Path) -> None:
    # distinct good edits; the server answers 500 once the script is used up
    script = [Reply(GOOD_OFFSET.replace("0.25", f"{i / 100:.2f}")) for i in range(1, 60)]
    budget = 0.0565  # the first call is estimated at 12k in / 4k out tokens: $0.055
    with fake.FakeOpenAIServer(script) as server:
        cfg = _config(toy_repo, server, [f"budget.usd={budget}", "budget.max_candidates=200"])
        summary = run(cfg, say=lambda s: None)
        usages = list(server.usages)
    assert summary.stop_reason.startswith("USD budget")
    spent = sum(
        (
            (u["prompt_tokens"] - u["prompt_tokens_details"]["cached_tokens"]) * 1.25
            + u["prompt_tokens_details"]["cached_tokens"] * 0.125
            + u["completion_tokens"] * 10.0
        )
        / 1e6
        for u in usages
    )
    per_call = spent / len(usages)
    assert spent <= budget  # the estimate of the call in flight kept it under budget
    assert spent > budget - 2 * per_call  # and it did not stop early
    assert len(usages) < len(script)
    report = next((cfg.state_dir / "reports").glob("toy-*-llm-usage.json"))
    import json

    data = json.loads(report.read_text())
    assert data["usd"] == pytest.approx(spent, abs=1e-6)  # the report rounds to micro-dollars
    assert len(list((cfg.state_dir / "cassettes").glob("toy-*.jsonl"))) == 1
