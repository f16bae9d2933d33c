"""The coinfer codec kind runs the evaluator contract (optimizer/testing/evaluators.py) on
the tiny target, cut after its first block, in both modes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from optimizer.targets import TargetSpec, load_target
from optimizer.testing.evaluators import EvaluatorContract

ROOT = Path(__file__).resolve().parents[3]
SMALL = {"preset": "tiny", "layer": 1, "prompts": 4, "prompt_len": 32, "n_new": 8}


class TestCoinferCodecKind(EvaluatorContract):
    @pytest.fixture(scope="class")
    @classmethod
    def target(cls) -> TargetSpec:
        return load_target(ROOT / "targets" / "coinfer" / "codec", ROOT, {"evaluator": SMALL})

    @pytest.fixture(scope="class")
    @classmethod
    def workbench_options(cls, tiny: Any) -> dict[str, Any]:
        return {"cache_dir": tiny.folder.parent.parent}  # the model, hidden from the codec

    @pytest.fixture(scope="class")
    @classmethod
    def changed_files(cls, target: TargetSpec) -> dict[str, str]:
        text = (target.path / "codec.py").read_text()
        new, n = re.subn(r"^BITS = \d+", "BITS = 7", text, count=1, flags=re.M)
        assert n == 1
        return {"codec.py": new}


@pytest.mark.slow
class TestCoinferKVCodecKind(TestCoinferCodecKind):
    """The kv mode (targets/coinfer/codec_kv): the same contract, the front block's KV."""

    @pytest.fixture(scope="class")
    @classmethod
    def target(cls) -> TargetSpec:
        return load_target(ROOT / "targets" / "coinfer" / "codec_kv", ROOT, {"evaluator": SMALL})
