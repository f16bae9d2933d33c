"""Baseline: raw append-only history. Every segment verbatim, a cache breakpoint after the
system prompt and after the last message (the cache-friendly default of agent loops)."""


def plan(view):
    items = [s["id"] for s in view["segments"]]
    return {"items": items, "breakpoints": [0, len(items) - 1]}
