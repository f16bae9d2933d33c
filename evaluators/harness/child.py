"""Inside the sandbox: the context policy behind a session, asked call after call.

The session entry ``evaluators.harness.child:serve`` of the policy's process (it stands on
the engine's ground floor only: the module loader, not the generic function server). The first
pass of a replay asks the policy once per LLM call, in the order of the calls; a view holds
every earlier segment of the trajectory, and most of them the process was sent with the
call before. So the trusted side sends, per call, only the segments that arrived since its
previous call of the same trajectory, and this handler keeps each trajectory's past and
builds the view from it: fresh copies at every call, so nothing a call does to its view
reaches the next one. The process holds the past only: a trajectory's segments arrive with
the calls that may see them.

The second opinion (a fresh process asked every view again in a shuffled order, whose
answers are only compared with the first pass's) is sent each trajectory's segments first
and then the views by reference, many a request.

Requests: ``{"op": "next", "trajectory": name, "new": [segment, ...], "view": {...}}``
(``view`` without ``segments``; the answer is ``plan(view)`` with the trajectory's segments
so far; ``previous``, the plan of the trajectory's previous call as the trusted side
normalised it, is rebuilt here from this process's own last answer, so it is not sent: the
second opinion is sent the trusted side's and would tell if the two ever differed);
``{"op": "segments", "trajectory": name, "segments": [...]}`` then ``{"op": "views",
"asks": [[name, m, view], ...]}`` (the answers to each view with the trajectory's first
``m`` segments). Any request may carry ``"shared": {...}``, the view keys that are the same
at every call (the tool profile), kept until the next such request.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from evaluators.harness.plan import PlanError, as_wire, check
from optimizer.sandbox.loader import load_module


class PolicyHandler:
    def __init__(self, module: Any):
        self.module = module
        self.past: dict[str, list[dict[str, Any]]] = {}
        self.shared: dict[str, Any] = {}  # view keys the same at every call (the profile)
        self.previous: dict[str, Any] = {}  # trajectory -> its last plan, as rendered

    def _plan(self, segments: list[dict[str, Any]], rest: dict[str, Any]) -> Any:
        plan = getattr(self.module, "plan", None)
        if not callable(plan):
            raise AttributeError("the program defines no function plan()")
        fresh = [dict(s, uses=list(s["uses"])) if "uses" in s else dict(s) for s in segments]
        shared = copy.deepcopy(self.shared)  # a fresh copy too: no memory between calls
        return plan(dict(rest, **shared, segments=fresh))

    @staticmethod
    def _as_rendered(answer: Any, past: list[dict[str, Any]], fresh_from: int,
                     view: dict[str, Any]) -> Any:
        """The plan as the trusted side normalises it (None where it breaks the contract:
        the trusted side stops the replay there)."""
        replies = frozenset(s["id"] for s in past if s["role"] == "assistant")
        try:
            return as_wire(*check(answer, len(past), fresh_from, view["max_breakpoints"],
                                  replies))
        except (PlanError, TypeError, KeyError):
            return None

    def handle(self, request: dict[str, Any]) -> Any:
        op = request.get("op")
        if "shared" in request:
            self.shared = dict(request["shared"])
        if op == "next":  # the first pass: a trajectory's calls in order
            name = str(request["trajectory"])
            past = self.past.setdefault(name, [])
            fresh_from = len(past)  # what the previous call saw: its reply comes next
            past.extend(request["new"])
            view = request["view"]
            if "previous" not in view:  # this process's own last answer, as rendered
                view = dict(view, previous=copy.deepcopy(self.previous.get(name)))
            answer = self._plan(past, view)
            self.previous[name] = self._as_rendered(answer, past, fresh_from, view)
            return answer
        if op == "segments":  # the second opinion: a trajectory's segments, then its views
            self.past[str(request["trajectory"])] = list(request["segments"])
            return None
        if op == "views":
            return [self._plan(self.past[str(name)][:int(m)], rest)
                    for name, m, rest in request["asks"]]
        raise ValueError(f"unknown request {op!r}")


def serve(payload: dict[str, Any], io_dir: Path) -> PolicyHandler:
    """Session entry: the candidate module imported, its ``plan`` served call by call."""
    path = Path.cwd() / str(payload["module"])
    return PolicyHandler(load_module(path, str(payload.get("name", "candidate"))))
