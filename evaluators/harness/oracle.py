"""The information-loss oracle: what each call's action needs from earlier content.

Labelled on the trusted side before any policy runs. For the call whose reply is assistant
segment ``m``, the action is the reply's text and its tool-call arguments; its
dependencies are the spans it uses (ids, numbers, dates, names, paths) that appeared
earlier in a tool result, a user message or one of the agent's own earlier replies, and
never in the system prompt. A span is available to the call when the rendered prompt
contains it (whole-word match). The replay charges a recovery for every source segment
whose needed spans are all missing.

Earlier replies count as sources so that a policy which stubs the agent's own old replies
pays for what they carried (a file the agent wrote in a heredoc, a path it named): for a
policy that keeps every reply verbatim, as the baselines do, such a need is always met and
its figures are those of an oracle that looks at tool results and the user only.

This is a proxy for task success: an action that uses a value the model could not have
seen in its prompt would have needed the value fetched again.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from evaluators.harness.trajectories import Trajectory

SOURCES = ("user", "tool", "assistant")  # the roles whose content a later action may need

# ids, numbers, dates, paths: a run of word characters (and . - / : @) with a digit in it
_VALUE = re.compile(r"(?<![\w@./:-])[\w@./:-]*\d[\w@./:-]*")
# a capitalised word, not at a sentence's start: a person's or a place's name
_NAME = re.compile(r"\b[A-Z][a-z]{2,}\b")
_OPENERS = frozenset(".!?:;\n#*->\"'`(")
# Python's own capitalised words (True, None, Exception, ...): code that uses them read
# them nowhere
_LANGUAGE = frozenset(w for w in dir(builtins) if _NAME.fullmatch(w))
_PATH = re.compile(r"(?<![\w/])(?:[\w.-]+/)+[\w.-]+")


@dataclass(frozen=True)
class Need:
    span: str
    sources: tuple[int, ...]  # earlier segments (user, tool or assistant) that contain it


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
    out.update(m.group(0) for m in _NAME.finditer(action)
               if m.group(0) not in _LANGUAGE and not _starts_a_sentence(action, m.start()))
    return out


def _starts_a_sentence(text: str, at: int) -> bool:
    """Whether the word at ``at`` opens the text, a line, a sentence, a comment, a quote or
    an item of a list: there a capital letter says nothing of a name ("But", "THOUGHT:
    Then", "# Check ...", "- Add ...")."""
    i = at - 1
    while i >= 0 and text[i] in " \t":
        i -= 1
    return i < 0 or text[i] in _OPENERS


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
                            if s.role in SOURCES and span in s.text
                            and pat.search(s.text))
            if sources:
                needs.append(Need(span, sources))
        out[m] = tuple(needs)
    return out


def missing(needs: tuple[Need, ...], rendered: Sequence[tuple[Hashable, str]],
            memo: dict[tuple[str, Hashable], bool] | None = None) -> list[Need]:
    """The needs no rendered text contains. ``rendered`` pairs each text with a key that
    names it (the same key, the same text); ``memo`` keeps what a (span, key) search found,
    for the calls of one trajectory, which show the same messages again and again."""
    seen = {} if memo is None else memo

    def shows(span: str, key: Hashable, text: str) -> bool:
        got = seen.get((span, key))
        if got is None:
            got = seen[(span, key)] = span in text and pattern(span).search(text) is not None
        return got

    return [n for n in needs if not any(shows(n.span, k, t) for k, t in rendered)]
