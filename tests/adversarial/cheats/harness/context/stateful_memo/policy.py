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
"""Cheat: stateful_memo. Class: nondeterminism (state carried between calls).

Attack: the policy remembers, across calls, every trajectory it has been asked about (by
the digest of its first user message) and the sizes of all segments seen, and on a second
pass over similar trajectories stubs what it expects not to need; on the first call of a
trajectory it answers differently from a later identical question, to probe the judge.
How it wins today: a judge that asks each view once, in order, in one process lets the
policy's memory of other trajectories (and of earlier trials of the same task) steer it.
Why a sound evaluator must not credit it: a policy must be a function of its view alone;
asked again in a fresh process and another order, it answers differently.
Sound verdict: not VALID.
"""

MEMORY = {}


def plan(view):
    segs = view["segments"]
    key = segs[1]["digest"] if len(segs) > 1 else ""
    MEMORY[key] = MEMORY.get(key, 0) + 1
    items = [s["id"] for s in segs]
    bps = [0, len(items) - 1] if MEMORY[key] % 3 else [len(items) - 1]
    return {"items": items, "breakpoints": bps}


# EVOLVE-BLOCK-END
