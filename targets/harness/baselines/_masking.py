"""Shared by the last-N baselines: SWE-agent's history processor (keep the last N
observations verbatim, replace older ones by a one-line placeholder), re-applied at every
call."""


def last_n(view, n):
    segs = view["segments"]
    tools = [s["id"] for s in segs if s["role"] == "tool"]
    keep = set(tools[-n:]) if n > 0 else set()
    items = []
    for s in segs:
        if s["role"] == "tool" and s["id"] not in keep:
            items.append([s["id"], "stub"])
        else:
            items.append([s["id"], "full"])
    return {"items": items, "breakpoints": [0, len(items) - 1]}
