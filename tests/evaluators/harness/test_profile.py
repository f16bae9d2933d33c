"""The tool profile: learned from the training runs only, shown on every split."""

from __future__ import annotations

from pathlib import Path

from evaluators.harness import HarnessEvaluator
from evaluators.harness.cache import Rules
from evaluators.harness.oracle import label
from evaluators.harness.profile import tool_profile
from evaluators.harness.replay import Replay
from evaluators.harness.trajectories import Tokenized, from_messages
from optimizer.targets import load_target

ROOT = Path(__file__).resolve().parents[3]


def _run(name: str, late: bool):
    """A view of a file (``nl``) whose line a later edit uses, ``late`` or at once, and a
    listing (``ls``) nothing uses."""
    msgs = [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix it."},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "v", "function": {
                "name": "nl", "arguments": '{"path": "a.py"}'}}]},
            {"role": "tool", "tool_call_id": "v", "name": "nl", "content": "4117 x = compute()"}]
    for i in range(5 if late else 0):
        msgs += [{"role": "assistant", "content": "", "tool_calls": [{"id": f"l{i}", "function": {
                     "name": "ls", "arguments": f'{{"dir": "d{i}"}}'}}]},
                 {"role": "tool", "tool_call_id": f"l{i}", "name": "ls", "content": f"f{i}.txt"}]
    msgs.append({"role": "assistant", "content": "", "tool_calls": [{"id": "e", "function": {
        "name": "edit", "arguments": '{"line": 4117}'}}]})
    return from_messages(name, name, msgs)


def _profile(trajs, **kw):
    labels = {t.name: label(t) for t in trajs}
    sizes = Replay(Tokenized(trajs), labels, {"openai": Rules("openai", 2.5, 10.0, 1.25)},
                   100_000, tools={}).meta
    return tool_profile(trajs, labels, sizes, **kw)


def test_a_tool_the_agent_comes_back_to_is_told_from_one_it_leaves() -> None:
    trajs = [_run(f"r{i}", late=i % 2 == 0) for i in range(4)]
    prof = _profile(trajs, min_results=1, min_trajectories=1)
    assert prof["nl"]["results"] == 4 and prof["nl"]["used"] == 1.0
    assert prof["nl"]["used_late"] == 0.5  # the two runs with five calls in between
    assert prof["ls"]["used"] == 0.0 and prof["ls"]["results"] == 10
    assert prof["nl"]["tokens"] > 0


def test_a_rare_tool_is_left_out() -> None:
    trajs = [_run(f"r{i}", late=True) for i in range(3)]
    assert set(_profile(trajs, min_results=4, min_trajectories=1)) == {"ls"}  # 15 and 3
    assert _profile(trajs, min_results=1, min_trajectories=4) == {}


def test_every_split_sees_the_profile_of_the_training_runs() -> None:
    target = load_target(ROOT / "targets/harness/context", ROOT,
                         {"evaluator": {"workload": "synthetic"}})
    ev = HarnessEvaluator(target)
    train, held = ev.replay("train"), ev.replay("held_out")
    assert train.tools and held.tools == train.tools
    own = tool_profile(held.tokenized.trajectories, held.labels, held.meta)
    assert own != train.tools  # held-out tasks are not what the profile describes
    view = held.view(held.tokenized.trajectories[0], 0, 2, None)
    assert view["tools"] == train.tools
