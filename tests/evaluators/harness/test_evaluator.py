"""The harness kind through the evaluator contract and its own rules: static refusals,
plans that return text or read the future, state between calls, the recovery bound, the
held-out workload and the tau-bench split."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from optimizer.errors import ConfigError
from optimizer.records import CandidateState
from optimizer.targets import TargetSpec, load_target
from optimizer.testing.evaluators import EvaluatorContract
from optimizer.workbench import Workbench

ROOT = Path(__file__).resolve().parents[3]
TARGET = "targets/harness/context"
DATA = ROOT.parent / "shared" / "data" / "harness"


def _target(overrides: dict | None = None) -> TargetSpec:
    return load_target(ROOT / TARGET, ROOT, overrides or {})


def _knob(target: TargetSpec, name: str, value: str) -> dict[str, str]:
    text = (target.path / "policy.py").read_text()
    new, n = re.subn(rf"^{name} = [^#\n]+", f"{name} = {value}  ", text, count=1, flags=re.M)
    assert n == 1
    return {"policy.py": new}


def _block(target: TargetSpec, code: str) -> dict[str, str]:
    """policy.py with the EVOLVE-BLOCK's plan() replaced by ``code``."""
    text = (target.path / "policy.py").read_text()
    head, _, rest = text.partition("# EVOLVE-BLOCK-START\n")
    _, _, tail = rest.partition("# EVOLVE-BLOCK-END")
    return {"policy.py": f"{head}# EVOLVE-BLOCK-START\n{code}\n# EVOLVE-BLOCK-END{tail}"}


class TestHarnessKind(EvaluatorContract):
    @pytest.fixture(scope="class")
    @classmethod
    def target(cls) -> TargetSpec:
        return _target()

    @pytest.fixture(scope="class")
    @classmethod
    def changed_files(cls, target: TargetSpec) -> dict[str, str]:
        return _knob(target, "BREAKPOINTS", '"last"')


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory):
    with Workbench(_target(), state_dir=tmp_path_factory.mktemp("harness")) as wb:
        yield wb


RAW = '''
def plan(view):
    return {"items": [s["id"] for s in view["segments"]], "breakpoints": [0]}
'''


def test_raw_history_is_valid_and_costs_what_the_raw_baseline_costs(bench: Workbench) -> None:
    res = bench.evaluate(_block(bench.target, RAW))
    assert res.state is CandidateState.VALID, res.reason
    assert res.metrics["recoveries_per_task"] == 0
    assert res.metrics["usd_per_task"] > res.metrics["best_baseline_usd_per_task"] * 0.99
    assert "raw" in res.artifacts["baselines_train.txt"]


def test_a_policy_that_masks_too_much_is_invalid_by_its_recoveries(bench: Workbench) -> None:
    res = bench.evaluate(_knob(bench.target, "KEEP_RECENT", "1"))
    assert res.state is CandidateState.INVALID, res.reason
    assert "recoveries per task" in res.reason


@pytest.mark.parametrize(("code", "words"), [
    ('def plan(view):\n    return {"items": [0, "the user id is mia_li_3668"]}', "never text"),
    ('def plan(view):\n    n = len(view["segments"])\n'
     '    return {"items": list(range(n + 1))}', "only the past"),
])
def test_text_or_the_future_is_invalid(bench: Workbench, code: str, words: str) -> None:
    res = bench.evaluate(_block(bench.target, code))
    assert res.state is CandidateState.INVALID, res.reason
    assert words in res.reason


@pytest.mark.parametrize("code", [
    "import os\n" + RAW,
    "from evaluators.harness import synthetic\n" + RAW,
    RAW + "\nDATA = open('../shared/data/harness/README.md').read()\n",
    RAW + "\ndef peek():\n    return plan.__globals__\n",
])
def test_reaching_beyond_the_view_is_rejected(bench: Workbench, code: str) -> None:
    res = bench.evaluate(_block(bench.target, code))
    assert res.state is CandidateState.REJECTED, res.reason


STATEFUL = '''
SEEN = []


def plan(view):
    SEEN.append(view["call"])
    items = [s["id"] for s in view["segments"]]
    return {"items": items, "breakpoints": [0] if len(SEEN) % 2 else [len(items) - 1]}
'''


def test_state_carried_between_calls_is_invalid(bench: Workbench) -> None:
    res = bench.evaluate(_block(bench.target, STATEFUL))
    assert res.state is CandidateState.INVALID, res.reason
    assert "function of its view alone" in res.reason


def test_held_out_runs_on_another_workload(bench: Workbench) -> None:
    train = bench.evaluate()
    held = bench.confirm(None)
    assert held.ok and held.stage == "held_out", held.reason
    assert held.metrics["tasks"] != train.metrics["tasks"]
    assert held.metrics["best_baseline_usd_per_task"] > 0


def test_a_misspelt_setting_is_a_config_error() -> None:
    from evaluators.harness import HarnessEvaluator
    with pytest.raises(ConfigError, match="unknown key"):
        HarnessEvaluator(_target({"evaluator": {"windw": 1000}}))
    with pytest.raises(ConfigError, match="provider"):
        HarnessEvaluator(_target({"evaluator": {"provider": "acme"}}))


@pytest.mark.skipif(not (DATA / "taubench_gpt-4o-airline.json").is_file(),
                    reason="tau-bench trajectories absent (../shared/data/harness)")
def test_taubench_is_split_by_task() -> None:
    from evaluators.harness import HarnessEvaluator
    ev = HarnessEvaluator(_target({"evaluator": {"workload": "taubench", "window": 128000}}))
    train, held = ev.trajectories("train"), ev.trajectories("held_out")
    assert len(train) + len(held) == 200 and len(held) == 40
    assert not {t.task for t in train} & {t.task for t in held}
