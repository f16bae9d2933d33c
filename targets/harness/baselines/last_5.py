"""Baseline: the last 5 observations verbatim (SWE-agent's history processor): tool results
older than the last 5 are replaced by a one-line placeholder, re-applied at every call;
breakpoints after the system prompt and the last message."""

N = 5


def plan(view):
    segs = view["segments"]
    tools = [s["id"] for s in segs if s["role"] == "tool"]
    keep = set(tools[-N:])
    items = [[s["id"], "stub"] if s["role"] == "tool" and s["id"] not in keep
             else [s["id"], "full"] for s in segs]
    return {"items": items, "breakpoints": [0, len(items) - 1]}
