"""Trusted replay: exact token counts, the oracle's recoveries, summaries and the metrics."""

from __future__ import annotations

import json

import pytest

from evaluators.harness import tokens as tok
from evaluators.harness.cache import Rules
from evaluators.harness.oracle import label, spans
from evaluators.harness.replay import Renderer, Replay, summarise
from evaluators.harness.synthetic import generate
from evaluators.harness.trajectories import Tokenized, from_messages


def test_the_tokenizer_is_real_bpe_and_offline() -> None:
    assert tok.encode("hello world") == [24912, 2375]  # o200k_base
    assert len(tok.encode("x" * 1000)) < 200
    assert tok.decode(tok.encode("reservation 8JKL2Q")) == "reservation 8JKL2Q"


def _traj():
    big = json.dumps({"reservation_id": "ZX81QP", "flights": ["HAT136"],
                      "notes": " ".join(["filler"] * 400)})
    return from_messages("t/0", "t", [
        {"role": "system", "content": "You are an airline agent. " * 10},
        {"role": "user", "content": "Hi, I am mia_li_3668."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "function": {
            "name": "get_user", "arguments": '{"user_id": "mia_li_3668"}'}}]},
        {"role": "tool", "tool_call_id": "a", "name": "get_user", "content": big},
        {"role": "assistant", "content": "Anything else?"},
        {"role": "user", "content": "Cancel it please."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "b", "function": {
            "name": "cancel", "arguments": '{"reservation_id": "ZX81QP"}'}}]},
    ])


def test_the_oracle_labels_values_from_tool_results_and_the_user() -> None:
    t = _traj()
    labels = label(t)
    assert {n.span for n in labels[2]} == {"mia_li_3668"}  # from the user
    assert [(n.span, n.sources) for n in labels[6]] == [("ZX81QP", (3,))]
    assert "ZX81QP" in spans('{"reservation_id": "ZX81QP"}')


def test_a_capital_letter_that_opens_a_sentence_or_is_python_names_nobody() -> None:
    text = ("But first. THOUGHT: Check the booking for Mia Li.\n# Then rerun\n- Add a test "
            "that returns None, True or Exception for Fred")
    assert {s for s in spans(text) if s.isalpha()} == {"Mia", "Fred"}
    assert "Mia" in spans("Mia Li called; please call Mia back")  # mid-sentence still counts


def _replay(trajs, window=100_000):
    rules = {"openai": Rules("openai", 2.5, 10.0, 1.25), "anthropic": Rules("anthropic")}
    return Replay(Tokenized(trajs), {t.name: label(t) for t in trajs}, rules, window)


def test_raw_history_counts_every_message_exactly() -> None:
    t = _traj()
    replay = _replay([t])
    cost = replay.trajectory(t, lambda v: {"items": [s["id"] for s in v["segments"]]})
    assert cost.recoveries == 0 and cost.calls == 3
    for m, seen in zip(t.calls, cost.prompt_tokens, strict=True):
        want = sum(3 + len(tok.encode(s.role)) + len(tok.encode(s.text))
                   for s in t.segments[:m]) + tok.REPLY_PRIMING
        assert seen == want


def test_a_dropped_value_costs_a_recovery_and_a_call() -> None:
    t = _traj()
    replay = _replay([t])

    def stub_tools(view):
        fresh = view["previous"] and max(view["segments"][-1]["id"], 0)
        return {"items": [[s["id"], "stub"] if s["role"] == "tool" and s["id"] != fresh
                          and s["id"] < len(view["segments"]) - 2 else [s["id"], "full"]
                          for s in view["segments"]]}

    raw = replay.trajectory(t, lambda v: {"items": [s["id"] for s in v["segments"]]})
    masked = replay.trajectory(t, stub_tools)
    assert masked.recoveries == 1 and raw.recoveries == 0
    assert masked.repeated_reads == 1
    assert sum(c.output for c in [masked.charges["openai"]]) > raw.charges["openai"].output


def test_a_value_the_agent_wrote_itself_is_charged_when_its_reply_is_stubbed() -> None:
    t = from_messages("t/1", "t", [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": "I will write a test.\n```bash\ncat > "
         "tests/test_fix_42.py <<EOF\n" + "assert x\n" * 200 + "EOF\n```"},
        {"role": "user", "content": "done"},
        {"role": "assistant", "content": "```bash\nls\n```"},
        {"role": "user", "content": "setup.py"},
        {"role": "assistant", "content": "```bash\npython tests/test_fix_42.py\n```"},
    ], calls_in_text=True)
    labels = label(t)
    assert [(n.span, n.sources) for n in labels[6]] == [("tests/test_fix_42.py", (2,))]
    replay = _replay([t])

    def stub_old_replies(view):  # every reply before the previous call's
        fresh = view["previous"] and len(view["segments"]) - 2
        return {"items": [[s["id"], "stub"] if s["role"] == "assistant" and fresh
                          and s["id"] < fresh else s["id"] for s in view["segments"]]}

    kept = replay.trajectory(t, lambda v: {"items": [s["id"] for s in v["segments"]]})
    stubbed = replay.trajectory(t, stub_old_replies)
    assert kept.recoveries == 0 and stubbed.recoveries == 1


def _coder(thought: str = "THOUGHT: the fix goes in Widget."):
    return from_messages("t/2", "t", [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": "THOUGHT: the helper lives in Widget and Gadget, "
         + "so I will look closer. " * 60 + "\n\n```bash\nnl -ba src/pkg/widget_util.py\n```",
         "tool_calls": [{"id": "a", "function": {"name": "bash", "arguments":
                                                 '{"command": "nl -ba src/pkg/widget_util.py"}'}}]},
        {"role": "tool", "tool_call_id": "a", "name": "nl", "content": "1 x = 1"},
        {"role": "assistant", "content": "```bash\nls\n```"},
        {"role": "user", "content": "setup.py"},
        {"role": "assistant", "content": thought + "\n```bash\nsed -i s/x/y/ "
         "src/pkg/widget_util.py\n```"},
    ], calls_in_text=True)


def test_a_reply_shown_as_its_calls_keeps_the_command_and_drops_the_prose() -> None:
    t = _coder()
    assert t.segments[2].calls == "```bash\nnl -ba src/pkg/widget_util.py\n```"
    replay = _replay([t])
    meta = replay.meta[t.name][2]
    render = Renderer(t, replay.tokenized)
    (key, body), text = render.message(("calls", 2))
    assert text.endswith(t.segments[2].calls) and "look closer" not in text
    assert "tokens of prose elided" in text
    assert meta["call_tokens"] == len(body) < meta["tokens"]
    # the last action needs the path (in the command) and Widget (in the prose only)
    assert {n.span for n in label(t)[6]} >= {"src/pkg/widget_util.py", "Widget"}

    def calls_of_first_reply(view):
        n = len(view["segments"])
        return {"items": [[s["id"], "calls"] if s["id"] == 2 and n > 4 else s["id"]
                          for s in view["segments"]]}

    def stub_first_reply(view):
        n = len(view["segments"])
        return {"items": [[s["id"], "stub"] if s["id"] == 2 and n > 4 else s["id"]
                          for s in view["segments"]]}

    def costs(t):
        r = _replay([t])
        return [r.trajectory(t, p) for p in (
            lambda v: {"items": [s["id"] for s in v["segments"]]}, calls_of_first_reply,
            stub_first_reply)]

    kept, calls, stubbed = costs(t)
    assert (kept.recoveries, calls.recoveries, stubbed.recoveries) == (0, 1, 1)  # Widget
    kept, calls, stubbed = costs(_coder("THOUGHT: now the edit."))  # only the path needed
    assert (kept.recoveries, calls.recoveries, stubbed.recoveries) == (0, 0, 1)
    assert calls.prompt_tokens[-1] < kept.prompt_tokens[-1]
    # a function-calling agent's reply: its calls as the text shows them
    fc = _traj()
    assert fc.segments[2].calls == 'call get_user({"user_id": "mia_li_3668"})'
    assert fc.segments[4].calls == ""


def test_a_summary_is_billed_once_and_counted_as_a_compaction() -> None:
    t = _traj()
    replay = _replay([t])

    def summarise_middle(view):
        n = len(view["segments"])
        if n < 6:
            return {"items": list(range(n))}
        return {"items": [0, ["summary", 1, 3], *range(4, n)]}

    cost = replay.trajectory(t, summarise_middle)
    assert cost.compactions == 1
    assert cost.recoveries == 1  # the summary keeps no tool values


def test_a_prompt_over_the_window_is_refused() -> None:
    t = _traj()
    with pytest.raises(Exception, match="window"):
        _replay([t], window=300).trajectory(
            t, lambda v: {"items": [s["id"] for s in v["segments"]]})


def test_synthetic_trajectories_are_reproducible_and_need_earlier_values() -> None:
    a, b = generate(1, 2, 2), generate(1, 2, 2)
    assert [x.segments for x in a] == [x.segments for x in b]
    assert generate(2, 1, 1)[0].segments != a[0].segments
    needs = sum(len(v) for t in a for v in label(t).values())
    assert needs > 5
    costs = [_replay(a).trajectory(t, lambda v: {"items": [s["id"] for s in v["segments"]]})
             for t in a]
    m = summarise(costs, "openai")
    assert m["recoveries_per_task"] == 0 and 0 < m["cache_hit_share"] < 1
    assert m["usd_per_task"] == m["usd_per_task_openai"] > 0
    assert m["input_tokens_early_per_task"] > 0 and m["context_growth_tokens_per_call"] > 0
