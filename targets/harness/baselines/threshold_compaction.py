"""Baseline: threshold compaction. When the history passes 80% of the window, everything
between the head (system prompt and first user message) and a tail of recent messages (a
quarter of the window) is replaced by one summary; the summary stays until the next
crossing. Breakpoints after the system prompt, the summary and the last message."""

THRESHOLD = 0.8
TAIL = 0.25


def plan(view):
    segs = view["segments"]
    window = view["window"]
    head = [0] + [s["id"] for s in segs[1:2]]
    prev = view["previous"]
    summary = None
    if prev:
        for it in prev["items"]:
            if it[0] == "summary":
                summary = (it[1], it[2])

    def render(summary):
        items = [[i, "full"] for i in head]
        start = len(head)
        if summary:
            items.append(["summary", summary[0], summary[1]])
            start = summary[1] + 1
        items += [[s["id"], "full"] for s in segs[start:]]
        return items

    def size(items):
        by_id = {s["id"]: s["tokens"] for s in segs}
        total = 0
        for it in items:
            if it[0] == "summary":
                total += 40 + 30 * (it[2] - it[1] + 1)
            else:
                total += by_id[it[0]]
        return total

    items = render(summary)
    if size(items) > THRESHOLD * window:
        tail, start = 0, len(segs)
        prev_m = max((s["id"] for s in segs if s["role"] == "assistant"), default=0)
        while start - 1 > len(head) and tail + segs[start - 1]["tokens"] <= TAIL * window:
            start -= 1
            tail += segs[start]["tokens"]
        start = min(start, prev_m)  # what arrived since the last call stays in full
        if start - 1 >= len(head):
            summary = (len(head), start - 1)
            items = render(summary)
    bps = [0, len(items) - 1]
    if summary:
        bps = [0, len(head), len(items) - 1]
    return {"items": items, "breakpoints": sorted(set(bps))}
