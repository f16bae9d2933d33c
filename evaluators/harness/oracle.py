"""The information-loss oracle: what each call's action needs from earlier content.

Labelled on the trusted side before any policy runs. For the call whose reply is assistant
segment ``m``, the action is the reply's text and its tool-call arguments; its
dependencies are the spans it uses (ids, numbers, dates, names, paths) that appeared
earlier in a tool result or a user message and never in the system prompt. A span is
available to the call when the rendered prompt contains it (whole-word match). The
replay charges a recovery for every source segment whose needed spans are all missing.

This is a proxy for task success: an action that uses a value the model could not have
seen in its prompt would have needed the value fetched again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from evaluators.harness.trajectories import Trajectory

# ids, numbers, dates, paths: a run of word characters (and . - / : @) with a digit in it
_VALUE = re.compile(r"(?<![\w@./:-])[\w@./:-]*\d[\w@./:-]*")
_NAME = re.compile(r"\b[A-Z][a-z]{2,}\b")  # a capitalised word: a person's or a place's name
_PATH = re.compile(r"(?<![\w/])(?:[\w.-]+/)+[\w.-]+")


@dataclass(frozen=True)
class Need:
    span: str
    sources: tuple[int, ...]  # earlier segments (user or tool) that contain it


@lru_cache(maxsize=65536)
def pattern(span: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w])" + re.escape(span) + r"(?![\w])")


def spans(action: str) -> set[str]:
    out: set[str] = set()
    for m in _VALUE.finditer(action):
        s = m.group(0).strip(".-:/@")
        if len(s) >= 3:
            out.add(s)
    out.update(m.group(0) for m in _PATH.finditer(action))
    out.update(m.group(0) for m in _NAME.finditer(action))
    return out


def label(traj: Trajectory) -> dict[int, tuple[Need, ...]]:
    """Each call (its assistant segment's id) -> what its action needs from earlier."""
    system = " ".join(s.text for s in traj.segments if s.role == "system")
    out: dict[int, tuple[Need, ...]] = {}
    for m in traj.calls:
        seg = traj.segments[m]
        needs = []
        for span in sorted(spans(seg.action)):
            pat = pattern(span)
            if span in system and pat.search(system):
                continue
            sources = tuple(s.id for s in traj.segments[:m]
                            if s.role in ("user", "tool") and span in s.text
                            and pat.search(s.text))
            if sources:
                needs.append(Need(span, sources))
        out[m] = tuple(needs)
    return out


def missing(needs: tuple[Need, ...], rendered: list[str]) -> list[Need]:
    """The needs no rendered text contains."""
    return [n for n in needs
            if not any(n.span in t and pattern(n.span).search(t) for t in rendered)]
