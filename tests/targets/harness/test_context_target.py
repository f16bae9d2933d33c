"""The harness target's seed and baselines, replayed in-process on the synthetic set (they
are our own files): each keeps the plan rules, and each does what its name says."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluators.harness.cache import Rules
from evaluators.harness.evaluator import load_plan
from evaluators.harness.oracle import label
from evaluators.harness.replay import Replay, summarise
from evaluators.harness.synthetic import generate
from evaluators.harness.trajectories import Tokenized

ROOT = Path(__file__).resolve().parents[3]
BASELINES = ROOT / "targets" / "harness" / "baselines"
SEED = ROOT / "targets" / "harness" / "context" / "policy.py"


@pytest.fixture(scope="module")
def trajs():
    return generate(1, 3, 2)


def _run(trajs, path: Path, window: int = 100_000) -> dict[str, float]:
    rules = {"openai": Rules("openai", 2.5, 10.0, 1.25), "anthropic": Rules("anthropic")}
    replay = Replay(Tokenized(trajs), {t.name: label(t) for t in trajs}, rules, window)
    fn = load_plan(path)
    return summarise([replay.trajectory(t, fn) for t in trajs], "openai")


def test_every_baseline_named_in_the_issue_is_a_file() -> None:
    names = {p.stem for p in BASELINES.glob("[a-z]*.py")}
    assert names == {"raw", "last_5", "last_10", "threshold_compaction", "dedupe_reads"}


def test_raw_is_append_only_and_masking_saves_tokens_but_loses_cache(trajs) -> None:
    raw = _run(trajs, BASELINES / "raw.py")
    last5 = _run(trajs, BASELINES / "last_5.py")
    assert raw["recoveries_per_task"] == 0
    assert last5["input_tokens_per_task"] < raw["input_tokens_per_task"]
    assert last5["cache_hit_share"] < raw["cache_hit_share"]
    assert last5["context_tokens_max"] < raw["context_tokens_max"]


def test_last_10_keeps_more_than_last_5(trajs) -> None:
    assert (_run(trajs, BASELINES / "last_10.py")["input_tokens_per_task"]
            > _run(trajs, BASELINES / "last_5.py")["input_tokens_per_task"])


def test_dedupe_stubs_only_repeated_reads(trajs) -> None:
    raw, dd = _run(trajs, BASELINES / "raw.py"), _run(trajs, BASELINES / "dedupe_reads.py")
    assert raw["repeated_reads_per_task"] > 0
    assert dd["input_tokens_per_task"] < raw["input_tokens_per_task"]


def test_threshold_compaction_fires_only_past_80_percent_of_the_window(trajs) -> None:
    roomy = _run(trajs, BASELINES / "threshold_compaction.py", window=100_000)
    tight = _run(trajs, BASELINES / "threshold_compaction.py", window=6_000)
    assert roomy["compactions_per_task"] == 0
    assert tight["compactions_per_task"] > 0
    assert tight["context_tokens_max"] <= 6_000


def test_the_seed_keeps_the_rules_and_needs_no_recovery(trajs) -> None:
    seed = _run(trajs, SEED)
    assert seed["recoveries_per_task"] == 0 and seed["usd_per_task"] > 0
