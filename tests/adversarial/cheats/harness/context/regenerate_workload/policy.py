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
"""Cheat: regenerate_workload. Class: future knowledge (the synthetic workload's generator).

Attack: the synthetic trajectories come from the project's own seeded generator; the policy
regenerates them with the target's seed, recognises its trajectory from the sizes of the
first segments and stubs every tool result whose values no later action uses.
How it wins today: a generator importable from the candidate's process and a known seed
give it the whole future of every trajectory.
Why a sound evaluator must not credit it: the generator is trusted code that a policy may
not import; the static rules refuse the import before anything runs.
Sound verdict: not VALID.
"""

from evaluators.harness import synthetic  # noqa: E402

FUTURE = {tuple(len(s.text) for s in t.segments[:3]): t for t in synthetic.generate(1, 8, 3)}


def plan(view):
    segs = view["segments"]
    return {"items": [s["id"] for s in segs], "breakpoints": [0, len(segs) - 1]}


# EVOLVE-BLOCK-END
