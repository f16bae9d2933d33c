"""The identical prefix of successive prompts on a real target, through the real builder."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from optimizer.edits import apply_edits, parse_edits
from optimizer.proposers.prompt import worked_example

ROOT = Path(__file__).resolve().parents[3]


def _bench() -> Any:
    path = ROOT / "bench" / "prompt_cache_share.py"
    spec = importlib.util.spec_from_file_location("prompt_cache_share", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _bench()


def test_a_simulated_night_keeps_80_percent_of_each_prompt_cached() -> None:
    """The issue's bar: at least 80% of successive calls' prompt tokens are a shared prefix."""
    target = next(t for t in bench.all_targets(ROOT) if t.name == "softmax")
    night = bench.simulate(target, calls=24, seed=1)
    row = bench.measure(night)
    assert row["calls"] == 24 and not all(night.parent_kept)  # the parent did change
    assert row["prefix_share_mean"] >= 0.80, row
    assert row["cache_hit_share"] >= 0.75, row
    # the system message is the same bytes in every prompt
    assert all(
        p[: night.system_chars] == night.prompts[0][: night.system_chars] for p in night.prompts
    )


def test_prefix_share_and_provider_cache_counting() -> None:
    a = "x" * 8000
    b = a[:6000] + "y" * 2000
    assert bench.common_prefix(a, b) == 6000
    assert bench.prefix_shares([a, b]) == [0.75]
    # 1,500 shared tokens: whole 128-token blocks only, and nothing under 1,024 tokens
    assert bench.cached_tokens(b, [a]) == 1408
    assert bench.cached_tokens("z" * 4000, ["z" * 4000 + "q"]) == 0  # 1,000 tokens: too short


def test_the_worked_example_applies_to_every_built_in_seed() -> None:
    for target in bench.all_targets(ROOT):
        seed = target.seed_files()
        example = worked_example(target, seed)
        assert example, target.name  # every built-in seed has a knob to re-range
        assert apply_edits(seed, parse_edits(example, target.editable)) != seed
