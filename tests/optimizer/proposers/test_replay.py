"""ReplayProposer: a recorded night replays to the same proposals, and says when it cannot."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from optimizer.config import LLMConfig
from optimizer.errors import ConfigError
from optimizer.proposers._base import ProposalContext
from optimizer.proposers.llm import LLMProposer
from optimizer.proposers.replay import ReplayProposer
from optimizer.records import ArchiveEntry, CandidateState
from optimizer.targets import Objective, TargetSpec


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


fake = _load("fake_openai_server")

PROGRAM = """\
LIMIT = 3

# EVOLVE-BLOCK-START
def pick(loads):
    best = 0
    for i, load in enumerate(loads):
        if load < loads[best]:
            best = i
    return best
# EVOLVE-BLOCK-END
"""


def _answer(old: str, new: str) -> str:
    return (
        f"SUMMARY: {new.strip()}\nrouter.py\n<<<<<<< SEARCH\n{old}=======\n{new}>>>>>>> REPLACE\n"
    )


def _target(name: str, tmp_path: Path) -> TargetSpec:
    return TargetSpec(
        name=name,
        kind="routing",
        path=tmp_path,
        rel_path=f"targets/{name}",
        description="least-loaded routing",
        editable=("router.py",),
        objectives=(Objective("p99_ttft_s"),),
    )


def _ctx(target: TargetSpec, parent_files: dict[str, str], parent_id: str) -> ProposalContext:
    seed = ArchiveEntry("c0000", None, {"router.py": PROGRAM}, {}, CandidateState.VALID)
    parent = ArchiveEntry(parent_id, None, parent_files, {}, CandidateState.VALID)
    return ProposalContext(target=target, parent=parent, seed=seed)


def _record_night(tmp_path: Path) -> tuple[Path, list[Any], list[ProposalContext]]:
    """Two targets interleaved; one good edit, one bad edit, one server failure."""
    a, b = _target("route_a", tmp_path), _target("route_b", tmp_path)
    script = [
        fake.Reply(_answer("    best = 0\n", "    best = len(loads) - 1\n")),
        fake.Reply(_answer("    best = 1\n", "    best = 2\n")),  # no match: rejected
        fake.Reply(status=500),
        fake.Reply(
            _answer("        if load < loads[best]:\n", "        if load <= loads[best]:\n")
        ),
    ]
    contexts = [
        _ctx(a, {"router.py": PROGRAM}, "c0000"),
        _ctx(b, {"router.py": PROGRAM}, "c0000"),
        _ctx(a, {"router.py": PROGRAM}, "c0001"),
        _ctx(b, {"router.py": PROGRAM}, "c0000"),
    ]
    cassette = tmp_path / "night.jsonl"
    with fake.FakeOpenAIServer(script) as server:
        settings = LLMConfig(
            base_url=server.base_url, model="m", max_retries=0, api_key_env="OPTIMIZER_NO_KEY"
        )
        proposer = LLMProposer(settings, cassette=cassette, sleep=lambda s: None)
        proposals = [proposer.propose(ctx) for ctx in contexts]
        proposer.close()
    return cassette, proposals, contexts


def test_replay_reproduces_the_recorded_proposals(tmp_path: Path) -> None:
    cassette, recorded, contexts = _record_night(tmp_path)
    assert [p.rejected is None for p in recorded] == [True, False, False, True]
    replay = ReplayProposer(cassette)
    replayed = [replay.propose(ctx) for ctx in contexts]
    for old, new in zip(recorded, replayed, strict=True):
        assert new.proposer == "replay:m"
        assert dataclasses.replace(new, proposer=old.proposer) == old


def test_replay_rejects_an_exhausted_cassette(tmp_path: Path) -> None:
    cassette, _, contexts = _record_night(tmp_path)
    replay = ReplayProposer(cassette)
    for ctx in contexts:
        replay.propose(ctx)
    extra = replay.propose(contexts[0])
    assert extra.rejected is not None
    assert "exhausted for target 'route_a': it holds 2 call(s), this is call 3" in extra.rejected


def test_replay_rejects_a_diverged_night(tmp_path: Path) -> None:
    cassette, _, contexts = _record_night(tmp_path)
    replay = ReplayProposer(cassette)
    other = _ctx(contexts[0].target, {"router.py": PROGRAM}, "c0042")
    proposal = replay.propose(other)
    assert proposal.rejected is not None and "mismatch at call 1" in proposal.rejected
    assert "'c0000'" in proposal.rejected and "'c0042'" in proposal.rejected


def test_broken_cassette_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"target": "x", "index": 0}) + "\n{not json\n")
    with pytest.raises(ConfigError, match="line 2 is not JSON"):
        ReplayProposer(path)
    with pytest.raises(ConfigError, match="does not exist"):
        ReplayProposer(tmp_path / "missing.jsonl")
