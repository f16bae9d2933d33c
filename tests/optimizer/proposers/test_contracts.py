"""Every built-in proposer runs the proposer contract (optimizer/testing/proposers.py)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from optimizer.config import LLMConfig
from optimizer.proposers import OfflineProposer
from optimizer.proposers._base import ProposalContext, Proposer
from optimizer.proposers.llm import LLMProposer
from optimizer.proposers.replay import ReplayProposer
from optimizer.records import ArchiveEntry, CandidateState, Proposal
from optimizer.targets import Objective, TargetSpec
from optimizer.testing.proposers import ProposerContract

_spec = importlib.util.spec_from_file_location(
    "fake_openai_server", Path(__file__).with_name("fake_openai_server.py"))
assert _spec is not None and _spec.loader is not None
fake = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = fake
_spec.loader.exec_module(fake)

PROGRAM = '''"""Outside the block: 3 * 4 < 20 must never change."""

SCALE = 2.5 * 4

# EVOLVE-BLOCK-START
BLOCK = 4  # knob: int 1..64 log
WEIGHT = 0.5  # knob: float 0.0..4.0


def score(x, n=10):
    total = 0.0
    for i in range(1, n):
        if i < n - 2 and x >= 0.25:
            total += x * 1.5 - i / 3 + BLOCK
    return total * WEIGHT
# EVOLVE-BLOCK-END


def outside(y):
    return y * 7 - 1 if y > 3 else y // 2
'''

TARGET = TargetSpec(name="toy", kind="function", path=Path("/nonexistent/toy"),
                    rel_path="targets/function/toy", description="a toy score",
                    editable=("program.py",), objectives=(Objective("cost"),))


def _entry(cid: str, files: dict[str, str], objective: float = 1.0) -> ArchiveEntry:
    return ArchiveEntry(cid, None, files, {"BLOCK": 4, "WEIGHT": 0.5}, CandidateState.VALID,
                        metrics={"cost": objective}, objectives=(objective,))


def _contexts(n: int = 10) -> list[ProposalContext]:
    seed = _entry("c0001", {"program.py": PROGRAM})
    return [ProposalContext(target=TARGET, parent=seed, seed=seed, rng_seed=0, iteration=i)
            for i in range(n)]


def _hostile() -> list[ProposalContext]:
    broken = PROGRAM.replace("# EVOLVE-BLOCK-END\n", "")  # unbalanced markers
    empty = PROGRAM.split("# EVOLVE-BLOCK-START")[0] + "# EVOLVE-BLOCK-START\n# EVOLVE-BLOCK-END\n"
    seed = _entry("c0001", {"program.py": PROGRAM})
    return [ProposalContext(target=TARGET, parent=_entry(cid, {"program.py": text}), seed=seed,
                            iteration=i)
            for i, (cid, text) in enumerate((("c0002", broken), ("c0003", empty)))]


class TestOfflineProposer(ProposerContract):
    @pytest.fixture
    def make_proposer(self) -> Callable[[int], Proposer]:
        return lambda seed: OfflineProposer(seed)

    @pytest.fixture
    def contexts(self) -> Sequence[ProposalContext]:
        return _contexts()

    @pytest.fixture
    def hostile_contexts(self) -> Sequence[ProposalContext]:
        return _hostile()


def _answer(search: str, replace: str) -> str:
    return (f"SUMMARY: a change\nprogram.py\n<<<<<<< SEARCH\n{search}=======\n{replace}"
            ">>>>>>> REPLACE\n")


SCRIPT = [
    lambda: fake.Reply(_answer("            total += x * 1.5 - i / 3 + BLOCK\n",
                               "            total += x * 1.25 - i / 3 + BLOCK\n")),
    lambda: fake.Reply(_answer("SCALE = 2.5 * 4\n", "SCALE = 3.0 * 4\n")),  # outside a block
    lambda: fake.Reply("I would rather not."),  # no edit at all
    lambda: fake.Reply(status=500),  # the endpoint fails
    lambda: fake.Reply(raw=b"{not json"),
    lambda: fake.Reply(_answer("    return total * WEIGHT\n", "    return total * WEIGHT * 2\n")),
]


class _ServedLLM(Proposer):
    """An LLM proposer on its own scripted server, stopped on close."""

    def __init__(self, seed: int):
        self.server = fake.FakeOpenAIServer([make() for make in SCRIPT] * 3).__enter__()
        settings = LLMConfig(base_url=self.server.base_url, model="m", max_retries=0,
                             api_key_env="OPTIMIZER_TEST_NO_SUCH_KEY", timeout_s=5.0)
        self.inner = LLMProposer(settings, seed=seed, sleep=lambda s: None)
        self.name = self.inner.name

    def propose(self, context: ProposalContext) -> Proposal:
        return self.inner.propose(context)

    def close(self) -> None:
        self.inner.close()
        self.server.__exit__(None, None, None)


class TestLLMProposer(ProposerContract):
    @pytest.fixture
    def make_proposer(self) -> Callable[[int], Proposer]:
        return _ServedLLM

    @pytest.fixture
    def contexts(self) -> Sequence[ProposalContext]:
        return _contexts(len(SCRIPT))


class TestReplayProposer(ProposerContract):
    @pytest.fixture
    def cassette(self, tmp_path: Path) -> Path:
        path = tmp_path / "night.jsonl"
        served = _ServedLLM(0)
        served.inner.close()
        settings = LLMConfig(base_url=served.server.base_url, model="m", max_retries=0,
                             api_key_env="OPTIMIZER_TEST_NO_SUCH_KEY", timeout_s=5.0)
        recorder = LLMProposer(settings, cassette=path, seed=0, sleep=lambda s: None)
        for ctx in _contexts(len(SCRIPT)):
            recorder.propose(ctx)
        recorder.close()
        served.server.__exit__(None, None, None)
        return path

    @pytest.fixture
    def make_proposer(self, cassette: Path) -> Callable[[int], Any]:
        return lambda seed: ReplayProposer(cassette)

    @pytest.fixture
    def contexts(self) -> Sequence[ProposalContext]:
        return _contexts(len(SCRIPT))

    @pytest.fixture
    def hostile_contexts(self) -> Sequence[ProposalContext]:
        return _contexts(2)  # the cassette is exhausted: rejected with a reason, not raised
