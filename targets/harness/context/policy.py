"""Context policy of an agent harness: what each LLM call's prompt shows of the history.

``plan(view) -> {"items": [...], "breakpoints": [...]}`` is called once per LLM call of a
recorded agent trajectory. ``view``: ``call`` (this call's index in the trajectory),
``segments`` (the past only, in order: dicts with ``id``, ``role`` (system, user, assistant,
tool), ``tool`` (a tool result's tool), ``read`` (tool and arguments digest: equal for two
identical reads), ``digest`` (of the content), ``tokens`` (its size as a message),
``uses`` (a past reply: the earlier segments whose values its action used),
``call_tokens`` (a reply: its size shown as its tool calls alone)), ``tools`` (what the
agent's recorded training runs say of each tool: ``results``, ``tokens`` (mean size),
``used`` and ``used_late`` (the share of its results a later action used, at all and 4 or
more calls after they arrived)), ``previous`` (the plan of the previous call, as it was
rendered, or None), ``window``, ``max_breakpoints``, ``min_cache_tokens``.

Items are references, never text: ``id`` or ``[id, "full"]`` verbatim, ``[id, "stub"]`` a
one-line placeholder, ``[id, "head", n]`` the first n tokens, ``[id, "calls"]`` a reply's
tool calls without its prose, ``["summary", a, b]`` one
summary of segments a..b written by the harness (it costs one summarising call). Item 0 is
the system segment verbatim; segments that arrived since the previous call are shown in
full or as a head; ids increase; ``breakpoints`` (at most 4) are item positions that end
an explicit cache prefix. The harness renders the prompt, bills it under the provider's
cache rules (a changed prefix is re-billed from the first change on) and charges a
recovery (a re-read and one more call) wherever the prompt lacks a value a later action
uses. Deterministic, a function of ``view`` alone, within a few milliseconds.
"""

# EVOLVE-BLOCK-START
KEEP_RECENT = 40  # knob: int 1..40 log
MASK_MIN_TOKENS = 0  # knob: int 0..2000 step 50
MASK_MODE = "stub"  # or "head": HEAD_TOKENS of each masked result
HEAD_TOKENS = 64
REFRESH_EVERY = 1  # knob: int 1..16
DEDUPE = True  # a result whose identical read came later is masked
BREAKPOINTS = "system+last"  # or "last", "masked+last" (breakpoint caching only)
KEEP_REPLIES = 200  # knob: int 1..200 log
REPLY_MIN_TOKENS = 0
REPLY_MODE = "head"  # or "stub"
KEEP_USED = 0  # knob: int 0..40
KEEP_REVISITED = 0  # knob: int 0..40
REVISIT_SHARE = 0.2  # knob: float 0.0..0.5
CALLS_MAX = 0  # knob: int 0..2000 step 50
CALLS_HEAD = 2000  # knob: int 8..2000 log


def plan(view):
    segs = view["segments"]
    calls = [s["id"] for s in segs if s["role"] == "assistant" and s["id"] > 0]
    # The masking is recomputed only every REFRESH_EVERY calls, from the history as it was
    # then: between two refreshes the prompt only grows, so its prefix stays cached.
    frozen_call = view["call"] // REFRESH_EVERY * REFRESH_EVERY
    boundary = calls[frozen_call] if frozen_call < len(calls) else len(segs)
    older = [s for s in segs[:boundary] if s["role"] == "tool"]
    masked = {s["id"] for s in older[:max(0, len(older) - KEEP_RECENT)]
              if s["tokens"] >= MASK_MIN_TOKENS}
    # Results of the tools this agent comes back to (in its training runs, REVISIT_SHARE or
    # more of their results were used 4 or more calls later): the last KEEP_REVISITED stay.
    if KEEP_REVISITED:
        tools = view["tools"]
        back = [s for s in older
                if tools.get(s["tool"], {}).get("used_late", 0.0) >= REVISIT_SHARE]
        masked.difference_update(s["id"] for s in back[max(0, len(back) - KEEP_REVISITED):])
    # The agent's own older replies, beyond the last KEEP_REPLIES, by the same rule.
    replies = [s for s in segs[:boundary] if s["role"] == "assistant" and s["id"] > 0]
    old_replies = {s["id"] for s in replies[:max(0, len(replies) - KEEP_REPLIES)]
                   if s["tokens"] >= REPLY_MIN_TOKENS}
    # What the last KEEP_USED replies used stays verbatim: what was needed lately is likely
    # needed again.
    for s in replies[max(0, len(replies) - KEEP_USED):] if KEEP_USED else ():
        masked.difference_update(s["uses"])
        old_replies.difference_update(s["uses"])
    if DEDUPE:
        latest = {}
        for s in older:
            if s["read"]:
                latest[s["read"]] = s["id"]
        masked |= {s["id"] for s in older if s["read"] and latest[s["read"]] != s["id"]}
    items = []
    last_masked = 0
    for s in segs:
        mode = MASK_MODE if s["id"] in masked else REPLY_MODE if s["id"] in old_replies else ""
        # an old reply whose tool calls alone are small keeps them (their first CALLS_HEAD
        # tokens), its prose cut
        if s["id"] in old_replies and s["call_tokens"] <= CALLS_MAX:
            mode = "calls"
        if mode:
            last_masked = len(items)
            items.append([s["id"], "head", HEAD_TOKENS] if mode == "head"
                         else [s["id"], "calls", CALLS_HEAD] if mode == "calls"
                         else [s["id"], mode])
        else:
            items.append([s["id"], "full"])
    end = len(items) - 1
    if BREAKPOINTS == "last":
        bps = [end]
    elif BREAKPOINTS == "system+last":
        bps = [0, end]
    else:
        bps = [0, last_masked, end]
    return {"items": items, "breakpoints": sorted(set(bps))}


# EVOLVE-BLOCK-END
