"""Recorded agent trajectories, as the replay sees them: a list of segments (one per chat
message) and the LLM calls among them (each assistant message is the reply to one call whose
prompt is every segment before it, as the policy renders it).

Three sources: tau-bench's recorded gpt-4o airline conversations (MIT, read from the shared
data folder when present), any recorded file of the same shape (``load_recorded``: e.g. a
coding agent's trajectories turned into it by evaluators/harness/convert_swe.py) and the
project's own synthetic set (evaluators/harness/synthetic.py), so that the target runs
anywhere.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluators.harness import tokens as tok

TAUBENCH_FILE = "taubench_gpt-4o-airline.json"
# a text-protocol agent's action in its reply: a fenced block (mini-swe-agent's ```bash)
_FENCED = re.compile(r"```[^\n`]*\n.*?\n```", re.DOTALL)


@dataclass(frozen=True)
class Segment:
    id: int
    role: str  # system, user, assistant, tool
    text: str  # the content as the model sees it (tool calls rendered into it)
    tool: str = ""  # the tool's name (a tool result, or the first call of an assistant turn)
    read: str = ""  # tool name and arguments digest: equal for two identical reads
    action: str = ""  # an assistant turn: what it does (its text and tool-call arguments)
    calls: str = ""  # an assistant turn's tool calls alone, as its text shows them


    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Trajectory:
    name: str  # e.g. "taubench/task-12/trial-3"
    task: str
    segments: tuple[Segment, ...]

    @property
    def calls(self) -> list[int]:
        """Ids of the assistant segments: the call at id m renders segments 0..m-1."""
        return [s.id for s in self.segments if s.role == "assistant" and s.id > 0]


def _read_key(name: str, arguments: str) -> str:
    try:
        args = json.dumps(json.loads(arguments), sort_keys=True)
    except (ValueError, TypeError):
        args = arguments
    return f"{name}:{hashlib.sha256(args.encode()).hexdigest()[:12]}"


def from_messages(name: str, task: str, messages: list[dict[str, Any]],
                  calls_in_text: bool = False) -> Trajectory:
    """A trajectory from OpenAI-style chat messages (tool calls in ``tool_calls``, results
    with ``role = tool``); call ids are dropped (they carry nothing the model uses).

    ``calls_in_text``: the agent wrote its actions into its reply's text (a text-protocol
    agent such as mini-swe-agent's bash block), so the text is the reply verbatim and the
    ``tool_calls`` only name the reads and their arguments."""
    segments: list[Segment] = []
    reads: dict[str, str] = {}  # tool_call_id -> read key
    for i, m in enumerate(messages):
        role = str(m.get("role", ""))
        content = str(m.get("content") or "")
        if role == "assistant":
            calls = m.get("tool_calls") or []
            parts = [content] if content else []
            args_text = []
            first = ""
            for c in calls:
                fn = c.get("function", {})
                fname, fargs = str(fn.get("name", "")), str(fn.get("arguments", ""))
                first = first or fname
                parts.append(f"call {fname}({fargs})")
                args_text.append(fargs)
                reads[str(c.get("id", ""))] = _read_key(fname, fargs)
            text = content if calls_in_text else "\n".join(parts)
            action = content if calls_in_text else "\n".join([content, *args_text])
            own = ("\n".join(_FENCED.findall(content)) if calls_in_text
                   else "\n".join(parts[1 if content else 0:]))
            segments.append(Segment(i, role, text, first, "", action, own))
        elif role == "tool":
            segments.append(Segment(i, role, content, str(m.get("name", "")),
                                    reads.get(str(m.get("tool_call_id", "")), "")))
        elif role in ("system", "user"):
            segments.append(Segment(i, role, content))
        else:
            raise ValueError(f"{name}: message {i} has an unknown role {role!r}")
    return Trajectory(name, task, tuple(segments))


def load_taubench(folder: Path) -> list[Trajectory]:
    """tau-bench's recorded trajectories (``taubench_gpt-4o-airline.json`` in ``folder``)."""
    path = folder / TAUBENCH_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the tau-bench trajectories live in the shared data folder "
            "(../shared/data/harness relative to the repository root); use "
            "workload = \"synthetic\" where it is absent")
    return load_recorded(path, "taubench")


def load_recorded(path: Path, source: str = "") -> list[Trajectory]:
    """A recorded file: a JSON list of ``{"task_id", "trial", "traj": [chat messages]}``
    (tau-bench's shape), with ``calls_in_text: true`` where the agent wrote its actions into
    its replies (evaluators/harness/convert_swe.py writes such files). ``source`` names the
    trajectories (``<source>/task-<id>/trial-<n>``); by default the file's ``source`` field
    of its first record, else the file's stem."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: recorded trajectories are read from the data folder "
            "(data_dir, ../shared/data/harness by default); docs/harness.md says how each "
            "file is made, or use workload = \"synthetic\" where it is absent")
    raw = json.loads(path.read_text())
    out = []
    for rec in raw:
        src = source or str(rec.get("source") or path.stem)
        task, trial = rec["task_id"], int(rec.get("trial", 0))
        out.append(from_messages(f"{src}/task-{task}/trial-{trial}", f"{src}/{task}",
                                 list(rec["traj"]), bool(rec.get("calls_in_text", False))))
    return out


def held_out(task: str, every: int) -> bool:
    """The split by task: an integer task id is held out when ``id % every == every - 1``
    (tau-bench's ids); any other id by the same rule on a digest of its name, so that the
    split of a task never depends on which other tasks a file holds."""
    key = task.rsplit("/", 1)[-1]
    n = int(key) if key.isdigit() else int(hashlib.sha256(key.encode()).hexdigest()[:12], 16)
    return n % every == every - 1


class Tokenized:
    """Content tokens of every segment of a set of trajectories (counted once)."""

    def __init__(self, trajectories: list[Trajectory]):
        self.trajectories = trajectories
        self.content: dict[tuple[str, int], list[int]] = {}
        for t in trajectories:
            for s in t.segments:
                self.content[(t.name, s.id)] = tok.encode(s.text)

    def tokens(self, traj: Trajectory, seg: int) -> list[int]:
        return self.content[(traj.name, seg)]
