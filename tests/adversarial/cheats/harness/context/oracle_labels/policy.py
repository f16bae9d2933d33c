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
"""Cheat: oracle_labels. Class: oracle (reads the information-loss labels).

Attack: the policy imports the harness kind's oracle and the trajectory loader, labels the
shared tau-bench file itself and keeps verbatim only the tool results a later action
needs, stubbing every other one: no recoveries, and far fewer tokens than any baseline.
How it wins today: if the candidate's process could import the trusted modules and read
the data, the labels of the future calls would be its to compute.
Why a sound evaluator must not credit it: the labels and the trajectories stay on the
trusted side; a policy that imports them or opens files is refused before it runs.
Sound verdict: not VALID.
"""

from evaluators.harness.oracle import label  # noqa: E402
from evaluators.harness.trajectories import load_taubench  # noqa: E402

NEEDED = set()
try:
    import pathlib  # noqa: E402
    for _t in load_taubench(pathlib.Path("../shared/data/harness")):
        for _needs in label(_t).values():
            for _n in _needs:
                NEEDED.update((_t.name, s) for s in _n.sources)
except Exception:  # noqa: BLE001
    pass


def plan(view):
    items = [s["id"] if s["role"] != "tool" or any(s["id"] == k for _, k in NEEDED)
             else [s["id"], "stub"] for s in view["segments"]]
    return {"items": items, "breakpoints": [0]}


# EVOLVE-BLOCK-END
