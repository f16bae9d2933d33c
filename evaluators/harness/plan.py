"""What a context policy returns, and the rules a plan must keep.

``plan(view) -> {"items": [...], "breakpoints": [...]}``. ``items`` lists the prompt's
messages in order, each a *reference* to past content, never text:

- ``id`` or ``[id, "full"]``: segment ``id`` verbatim;
- ``[id, "stub"]``: a one-line placeholder naming the segment's tool and size;
- ``[id, "head", n]``: the segment's first ``n`` tokens (n >= 1) and a note of the cut;
- ``[id, "calls"]``: an assistant segment's tool calls alone (a text-protocol agent's fenced
  command blocks), its prose replaced by a note of the cut; ``[id, "calls", n]``: the
  calls' first ``n`` tokens;
- ``["summary", a, b]``: one summary of segments ``a..b`` that the trusted side writes
  (extractive: each message's first tokens, tool results reduced to placeholders); the
  first prompt that shows a given summary pays for one summarising call.

Segments left out are dropped. Rules: ids are past segments (``0 <= id < len(segments)``)
in increasing order, each used once; item 0 is the system segment verbatim; every segment
that arrived since the previous call is shown in full or as a head. ``breakpoints`` (at most
``max_breakpoints``) are item positions after which an explicit cache breakpoint sits.
"""

from __future__ import annotations

from typing import Any

MODES = ("full", "stub", "head", "calls")


class PlanError(ValueError):
    """A plan that breaks the contract (the candidate is INVALID)."""


Item = tuple[Any, ...]  # ("full", id) ("stub", id) ("head", id, n) ("calls", id[, n])
#                        ("summary", a, b)


def _int(x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise PlanError(f"{what} must be an integer segment reference, got {type(x).__name__} "
                        f"{str(x)[:60]!r} (a plan returns references to segments, never text)")
    return x


def check(plan: Any, past: int, fresh_from: int, max_breakpoints: int,
          replies: frozenset[int] | None = None) -> tuple[tuple[Item, ...], tuple[int, ...]]:
    """The plan normalised (items, breakpoints); PlanError says what is wrong.

    ``past``: the call sees segments ``0..past-1``; ``fresh_from``: the first segment that
    arrived since the previous call; ``replies``: the assistant segments (the only ones with
    calls to keep), when known."""
    if not isinstance(plan, dict):
        raise PlanError(f"plan() must return a dict with 'items' and 'breakpoints', got "
                        f"{type(plan).__name__}")
    extra = set(plan) - {"items", "breakpoints"}
    if extra:
        raise PlanError(f"plan has unknown keys {sorted(map(str, extra))[:4]}: only 'items' "
                        "and 'breakpoints'")
    raw_items = plan.get("items")
    if not isinstance(raw_items, (list, tuple)) or not raw_items:
        raise PlanError("plan['items'] must be a non-empty list of segment references")
    items: list[Item] = []
    last = -1
    for pos, raw in enumerate(raw_items):
        where = f"item {pos}"
        ids, item = _item(raw, where, replies)
        for sid in ids:
            if sid >= past:
                raise PlanError(f"{where}: segment {sid} is not in the past (this call sees "
                                f"segments 0..{past - 1}): a policy sees only the past")
            if sid < 0:
                raise PlanError(f"{where}: segment {sid} does not exist")
        if ids[0] <= last:
            raise PlanError(f"{where}: segment {ids[0]} out of order or repeated (items "
                            "follow the history's order, each segment once)")
        last = ids[1]
        items.append(item)
    if items[0] != ("full", 0):
        raise PlanError("item 0 must be the system segment verbatim (0 or [0, 'full'])")
    shown = {it[1] for it in items if it[0] in ("full", "head")}
    lost = [s for s in range(fresh_from, past) if s not in shown]
    if lost:
        raise PlanError(f"segment {lost[0]} arrived since the previous call and is not shown "
                        "(new segments are shown in full or as a head)")
    return tuple(items), _breakpoints(plan.get("breakpoints", []), max_breakpoints,
                                      len(items))


def _item(raw: Any, where: str, replies: frozenset[int] | None
          ) -> tuple[tuple[int, int], Item]:
    """One item of a plan normalised: the segments it spans (first, last) and the item."""
    item: Item
    if isinstance(raw, (list, tuple)):
        if not raw:
            raise PlanError(f"{where}: empty reference")
        if raw[0] == "summary":
            if len(raw) != 3:
                raise PlanError(f"{where}: a summary is ['summary', first, last]")
            a, b = _int(raw[1], where), _int(raw[2], where)
            if not a <= b:
                raise PlanError(f"{where}: summary range {a}..{b} is empty")
            ids, item = (a, b), ("summary", a, b)
        else:
            sid = _int(raw[0], where)
            mode = raw[1] if len(raw) > 1 else "full"
            if not isinstance(mode, str) or mode not in MODES:
                raise PlanError(f"{where}: mode must be one of {', '.join(MODES)}, got "
                                f"{str(mode)[:60]!r} (a plan returns references, never "
                                "text)")
            if mode == "head":
                if len(raw) != 3:
                    raise PlanError(f"{where}: a head is [id, 'head', n_tokens]")
                n = _int(raw[2], where)
                if n < 1:
                    raise PlanError(f"{where}: a head keeps at least one token")
                item = ("head", sid, n)
            elif mode == "calls":
                if replies is not None and sid not in replies:
                    raise PlanError(f"{where}: [id, 'calls'] keeps an assistant message's "
                                    f"tool calls; segment {sid} is not one")
                if len(raw) > 3:
                    raise PlanError(f"{where}: calls are [id, 'calls'] or [id, 'calls', "
                                    "n_tokens]")
                item = ("calls", sid)
                if len(raw) == 3:
                    n = _int(raw[2], where)
                    if n < 1:
                        raise PlanError(f"{where}: a cut keeps at least one token")
                    item = ("calls", sid, n)
            else:
                if len(raw) > 2:
                    raise PlanError(f"{where}: [id, {mode!r}] takes nothing more")
                item = (mode, sid)
            ids = (sid, sid)
    else:
        sid = _int(raw, where)
        ids, item = (sid, sid), ("full", sid)
    return ids, item


def _breakpoints(raw_bp: Any, max_breakpoints: int, n_items: int) -> tuple[int, ...]:
    """A plan's cache breakpoints normalised: sorted item positions, each once."""
    if not isinstance(raw_bp, (list, tuple)):
        raise PlanError("plan['breakpoints'] must be a list of item positions")
    bps = sorted({_int(b, "a breakpoint") for b in raw_bp})
    if len(bps) > max_breakpoints:
        raise PlanError(f"{len(bps)} cache breakpoints; at most {max_breakpoints}")
    if bps and not (0 <= bps[0] and bps[-1] < n_items):
        raise PlanError(f"breakpoints {bps} must be item positions 0..{n_items - 1}")
    return tuple(bps)


def as_wire(items: tuple[Item, ...], bps: tuple[int, ...]) -> dict[str, Any]:
    """A normalised plan as the policy's own format (shown back as ``view['previous']``)."""
    out: list[Any] = []
    for it in items:
        if it[0] == "summary":
            out.append(["summary", it[1], it[2]])
        elif it[0] in ("head", "calls") and len(it) == 3:
            out.append([it[1], it[0], it[2]])
        else:
            out.append([it[1], it[0]])
    return {"items": out, "breakpoints": list(bps)}
