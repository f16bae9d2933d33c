"""The plan contract: references to past segments, never text, never the future."""

from __future__ import annotations

import pytest

from evaluators.harness.plan import PlanError, as_wire, check


def test_a_plan_normalises_and_round_trips() -> None:
    items, bps = check({"items": [0, [1, "stub"], [2, "head", 5], ["summary", 3, 4], 5, 6],
                        "breakpoints": [5, 0]}, past=7, fresh_from=5, max_breakpoints=4)
    assert items == (("full", 0), ("stub", 1), ("head", 2, 5), ("summary", 3, 4),
                     ("full", 5), ("full", 6))
    assert bps == (0, 5)
    assert check(as_wire(items, bps), 7, 5, 4) == (items, bps)


@pytest.mark.parametrize(("plan", "words"), [
    ({"items": [0, "the user's id is 42"]}, "never text"),
    ({"items": [0, [1, "Here is a summary I wrote"]]}, "never text"),
    ({"items": [0, 1, 2, 3]}, "not in the past"),
    ({"items": [0, ["summary", 1, 9]]}, "not in the past"),
    ({"items": [0, 2, 1]}, "out of order"),
    ({"items": [[0, "stub"], 1, 2]}, "system segment"),
    ({"items": [0, 1]}, "arrived since the previous call"),
    ({"items": [0, 1, 2], "breakpoints": [0, 1, 2, 0.5]}, "integer"),
    ({"items": [0, 1, 2], "text": "hello"}, "unknown keys"),
    ("just text", "must return a dict"),
    ({"items": [0, 1, True]}, "integer"),
])
def test_bad_plans_say_what_is_wrong(plan: object, words: str) -> None:
    with pytest.raises(PlanError, match=words):
        check(plan, past=3, fresh_from=2, max_breakpoints=4)


def test_at_most_the_providers_breakpoints() -> None:
    with pytest.raises(PlanError, match="at most 4"):
        check({"items": [0, 1, 2, 3, 4], "breakpoints": [0, 1, 2, 3, 4]}, 5, 4, 4)


def test_a_reply_may_be_shown_as_its_calls_alone_and_nothing_else_may() -> None:
    items, bps = check({"items": [0, [1, "calls"], 2], "breakpoints": [2]}, past=3,
                       fresh_from=2, max_breakpoints=4, replies=frozenset({1}))
    assert items == (("full", 0), ("calls", 1), ("full", 2))
    assert check(as_wire(items, bps), 3, 2, 4, frozenset({1})) == (items, bps)
    with pytest.raises(PlanError, match="not one"):
        check({"items": [0, [1, "calls"], 2]}, 3, 2, 4, replies=frozenset({2}))
    with pytest.raises(PlanError, match="arrived since the previous call"):
        check({"items": [0, [1, "calls"]]}, 2, 1, 4, replies=frozenset({1}))
