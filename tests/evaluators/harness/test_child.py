"""The policy's session: views rebuilt from the segments sent so far, never shared."""

from __future__ import annotations

import types

import pytest

from evaluators.harness.child import PolicyHandler


def _handler(seen: list) -> PolicyHandler:
    def plan(view):
        seen.append(view)
        if view["segments"]:
            view["segments"][0]["uses"].append(99)  # a policy that scribbles on its view
        view["segments"].append({"id": -1})
        return [s["id"] for s in view["segments"]]

    return PolicyHandler(types.SimpleNamespace(plan=plan))


SEGS = [{"id": i, "role": "tool", "uses": [i - 1] if i else []} for i in range(5)]


def test_each_call_sees_the_segments_sent_so_far_in_fresh_copies() -> None:
    seen: list = []
    h = _handler(seen)
    a = h.handle({"op": "next", "trajectory": "t", "new": SEGS[:2], "view": {"call": 0}})
    b = h.handle({"op": "next", "trajectory": "t", "new": SEGS[2:4], "view": {"call": 1}})
    other = h.handle({"op": "next", "trajectory": "u", "new": SEGS[:1], "view": {"call": 0}})
    assert a == [0, 1, -1] and b == [0, 1, 2, 3, -1] and other == [0, -1]
    assert seen[1]["call"] == 1 and seen[1]["segments"][0]["uses"] == [99]  # its own scribble
    assert SEGS[0]["uses"] == []  # nothing a call did reached the record or the next call


def test_the_second_opinion_asks_views_by_reference() -> None:
    seen: list = []
    h = _handler(seen)
    assert h.handle({"op": "segments", "trajectory": "t", "segments": SEGS}) is None
    got = h.handle({"op": "views", "asks": [["t", 3, {"call": 1}], ["t", 1, {"call": 0}]]})
    assert got == [[0, 1, 2, -1], [0, -1]]
    assert [v["call"] for v in seen] == [1, 0]
    with pytest.raises(ValueError, match="unknown request"):
        h.handle({"op": "call", "fn": "plan", "args": [{"segments": []}]})
    with pytest.raises(AttributeError, match="no function plan"):
        PolicyHandler(types.SimpleNamespace()).handle({"op": "next", "trajectory": "t", "new": [],
                                                       "view": {}})


def test_the_previous_plan_rebuilt_in_the_session_is_the_trusted_sides() -> None:
    """The first pass does not send ``previous``: the session rebuilds it from the policy's
    own last answer, normalised as the trusted side normalises it."""
    from pathlib import Path

    from evaluators.harness import HarnessEvaluator
    from optimizer.sandbox.loader import load_module
    from optimizer.targets import load_target

    root = Path(__file__).resolve().parents[3]
    target = load_target(root / "targets/harness/context", root,
                         {"evaluator": {"workload": "synthetic"}})
    replay = HarnessEvaluator(target).replay("train")
    seed = load_module(root / "targets/harness/context/policy.py", "seed_policy")
    knobs = {"KEEP_RECENT": 2, "KEEP_REPLIES": 2, "CALLS_MAX": 2000, "CALLS_HEAD": 16,
             "BREAKPOINTS": "masked+last", "REFRESH_EVERY": 3}
    seen: list = []

    def plan(view):
        seen.append(view["previous"])
        for k, v in knobs.items():
            setattr(seed, k, v)
        return seed.plan(view)

    h = PolicyHandler(types.SimpleNamespace(plan=plan))
    for t in replay.tokenized.trajectories[:3]:
        trusted: list = []
        sent = [0]

        def decide(view, t=t, sent=sent, trusted=trusted):
            trusted.append(view["previous"])
            new, sent[0] = view["segments"][sent[0]:], len(view["segments"])
            rest = {k: v for k, v in view.items() if k not in ("segments", "previous")}
            return h.handle({"op": "next", "trajectory": t.name, "new": new, "view": rest})

        seen.clear()
        replay.trajectory(t, decide)
        assert seen == trusted and any(p and any(i[1] == "calls" for i in p["items"])
                                       for p in seen)
