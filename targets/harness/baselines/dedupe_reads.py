"""Baseline: dedupe of repeated reads. A tool result whose read (the same tool with the same
arguments) is repeated later is stubbed: only the latest copy stays verbatim."""


def plan(view):
    segs = view["segments"]
    latest = {}
    for s in segs:
        if s["role"] == "tool" and s["read"]:
            latest[s["read"]] = s["id"]
    items = []
    for s in segs:
        stale = s["role"] == "tool" and s["read"] and latest[s["read"]] != s["id"]
        items.append([s["id"], "stub" if stale else "full"])
    return {"items": items, "breakpoints": [0, len(items) - 1]}
