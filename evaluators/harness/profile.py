"""What the harness has learned of its agent's tools from recorded runs: per tool, how many
results it returned, their size, and how often a later action came back to one.

A harness team computes this from its logs, the way the seed documents ask ("tool-result
growth", "repeated file reads"): a coding agent returns to a line-numbered file view when
it edits by line number, rarely to a directory listing. The profile is computed once, from
the **training** trajectories only (the oracle's labels of their calls: which earlier result
each action used), and shown to the policy in every view, on the training and the held-out
tasks alike, so that on held-out tasks it is knowledge from other runs, never of the task
at hand. A tool enters the profile only with at least ``MIN_RESULTS`` results in at least
``MIN_TRAJECTORIES`` trajectories: a rare tool's rate would describe one run, not the agent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from evaluators.harness.oracle import Need
from evaluators.harness.trajectories import Trajectory

MIN_RESULTS = 20
MIN_TRAJECTORIES = 5
LATE = 4  # calls after its arrival from which a use counts as late


def tool_profile(trajectories: Iterable[Trajectory],
                 labels: Mapping[str, Mapping[int, tuple[Need, ...]]],
                 sizes: Mapping[str, list[dict[str, Any]]], min_results: int = MIN_RESULTS,
                 min_trajectories: int = MIN_TRAJECTORIES) -> dict[str, dict[str, float]]:
    """``{tool: {"results", "tokens", "used", "used_late"}}``: the number of its results,
    their mean size in tokens, and the share of them that a later action used (each
    needed value counted at the latest message that carried it) at all and ``LATE`` or
    more calls after the result arrived. ``sizes``: each trajectory's segment metadata
    (``tokens`` per segment), as the replay shows it."""
    results: dict[str, int] = {}
    tokens: dict[str, int] = {}
    used: dict[str, int] = {}
    late: dict[str, int] = {}
    runs: dict[str, set[str]] = {}
    for t in trajectories:
        calls = t.calls
        arrived: dict[int, int] = {}  # tool result id -> the calls made before it
        n = 0
        for s in t.segments:
            if s.role == "assistant" and s.id > 0:
                n += 1
            elif s.role == "tool" and s.tool:
                arrived[s.id] = n
                results[s.tool] = results.get(s.tool, 0) + 1
                tokens[s.tool] = tokens.get(s.tool, 0) + int(sizes[t.name][s.id]["tokens"])
                runs.setdefault(s.tool, set()).add(t.name)
        ages: dict[int, int] = {}  # tool result id -> the latest age at which it was used
        for c, m in enumerate(calls):
            for need in labels.get(t.name, {}).get(m, ()):
                src = max(need.sources)
                if src in arrived:
                    ages[src] = max(ages.get(src, 0), c - arrived[src])
        for sid, age in ages.items():
            tool = t.segments[sid].tool
            used[tool] = used.get(tool, 0) + 1
            if age >= LATE:
                late[tool] = late.get(tool, 0) + 1
    return {tool: {"results": float(k), "tokens": round(tokens[tool] / k, 1),
                   "used": round(used.get(tool, 0) / k, 4),
                   "used_late": round(late.get(tool, 0) / k, 4)}
            for tool, k in sorted(results.items())
            if k >= min_results and len(runs[tool]) >= min_trajectories}
