"""Every built-in kind runs the evaluator contract (optimizer/testing/evaluators.py); the
classes below only say which target, which states its seed may end in on this machine, and
which changed program to confirm."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from optimizer.records import CandidateState
from optimizer.targets import TargetSpec, load_target
from optimizer.testing.evaluators import EvaluatorContract

ROOT = Path(__file__).resolve().parents[2]


def _target(rel: str, overrides: dict[str, Any] | None = None) -> TargetSpec:
    return load_target(ROOT / rel, ROOT, overrides or {})


def _knob(target: TargetSpec, name: str, value: str) -> dict[str, str]:
    rel = target.editable[0]
    text = (target.path / rel).read_text()
    new, n = re.subn(rf"^{name} = [^#\n]+", f"{name} = {value}  ", text, count=1, flags=re.M)
    assert n == 1, f"no knob {name} in {rel}"
    return {rel: new}


class TestFunctionKind(EvaluatorContract):
    @pytest.fixture(scope="class")
    @classmethod
    def target(cls) -> TargetSpec:
        return _target("targets/function/topk_sampling")

    @pytest.fixture(scope="class")
    @classmethod
    def changed_files(cls, target: TargetSpec) -> dict[str, str]:
        return _knob(target, "ROWS_PER_CHUNK", "8")


class TestFunctionKindDeterministic(EvaluatorContract):
    @pytest.fixture(scope="class")
    @classmethod
    def target(cls) -> TargetSpec:
        return _target("targets/function/prefix_cache")

    @pytest.fixture(scope="class")
    @classmethod
    def changed_files(cls, target: TargetSpec) -> dict[str, str]:
        return _knob(target, "SAMPLE_SIZE", "8")


class TestRoutingKind(EvaluatorContract):
    @pytest.fixture(scope="class")
    @classmethod
    def target(cls) -> TargetSpec:
        return _target("targets/routing/global")

    @pytest.fixture(scope="class")
    @classmethod
    def changed_files(cls, target: TargetSpec) -> dict[str, str]:
        text = (target.path / "policy.py").read_text()
        knob = re.search(r"^([A-Z_]+) = [0-9.]+  # knob: float", text, re.M)
        assert knob is not None
        return _knob(target, knob.group(1), "0.75")


class TestRoutingSchedulerMode(EvaluatorContract):
    @pytest.fixture(scope="class")
    @classmethod
    def target(cls) -> TargetSpec:
        return _target("targets/routing/scheduler")


class TestKernelKind(EvaluatorContract):
    @pytest.fixture(scope="class")
    @classmethod
    def target(cls) -> TargetSpec:
        return _target("targets/kernels/softmax")

    @pytest.fixture(scope="class")
    @classmethod
    def seed_states(cls) -> set[CandidateState]:
        # without a GPU the kernel is checked in Triton's interpreter and not timed
        return {CandidateState.VALID, CandidateState.PRUNED}

    @pytest.fixture(scope="class")
    @classmethod
    def changed_files(cls, target: TargetSpec) -> dict[str, str]:
        text = (target.path / "kernel.py").read_text()
        knob = re.search(r"^(NUM_WARPS) = (\d+)", text, re.M)
        assert knob is not None
        return _knob(target, "NUM_WARPS", "8" if knob.group(2) != "8" else "4")


SPEC_SETTINGS = {"preset": "tiny", "prompts": 2, "prompt_len": 24, "n_new": 32, "ks": [1, 3],
                 "train_s": 1.0, "distill_seqs": 64, "distill_prompt_len": 16,
                 "distill_gen_len": 24, "repeats": 1, "sampling_n": 100, "sampling_k": 2}


class TestSpeculativeKind(EvaluatorContract):
    @pytest.fixture(scope="class")
    @classmethod
    def target(cls, tiny: Any) -> TargetSpec:
        cache = tiny.folder.parent.parent
        return _target("targets/speculative/ngram",
                       {"evaluator": {**SPEC_SETTINGS, "cache_dir": str(cache)}})

    @pytest.fixture(scope="class")
    @classmethod
    def changed_files(cls, target: TargetSpec) -> dict[str, str]:
        text = (target.path / "draft.py").read_text()
        knob = re.search(r"^([A-Z_]+) = (\d+)  # knob: int", text, re.M)
        assert knob is not None
        return _knob(target, knob.group(1), str(int(knob.group(2)) + 1))
