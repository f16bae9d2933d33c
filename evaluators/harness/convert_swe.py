"""mini-swe-agent trajectories (``*.traj.json``) turned into the harness's recorded file.

A coding agent's run is the workload the harness needs for long contexts: file views,
greps and test logs pile up in an append-only history. mini-swe-agent (MIT,
SWE-agent/mini-swe-agent; trajectory_format ``mini-swe-agent-1``) records each run as chat
messages: the system prompt, the task (the issue and the instructions), then the model's
replies, each with one ```bash block, and the observations (``<returncode>..</returncode>``
and the output) as user messages. The harness reads them as:

- the system message and the task: ``system`` and ``user``, verbatim;
- each reply: ``assistant``, its text verbatim (``calls_in_text``), its command as a
  ``bash`` tool call (the read key: two identical commands are one repeated read);
- the message that answers a reply with exactly one command (its output, a timeout, the
  final diff): a ``tool`` result named after the command's program (``cat``, ``sed``,
  ``grep``, ``python``...: what a policy may tell apart), verbatim;
- any other user message (a format error after a reply without exactly one command):
  ``user``.

Nothing else of the run is kept (the model's hidden reasoning, costs, the environment).
The sample is deterministic: instances ordered by a digest of their id, the first
``--limit`` taken, so the split by task (evaluators/harness/trajectories.held_out) holds for
any sample size.

    python -m evaluators.harness.convert_swe SRC_DIR --out FILE [--limit N] [--source NAME]

SRC_DIR is searched recursively for ``*.traj.json`` (one per SWE-bench instance).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

# mini-swe-agent's own rule for an action: a ```bash fenced block
_BLOCK = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
_SKIP = {"cd", "export", "source", "set", "env", "timeout", "time", "sudo", "nohup"}
_CONNECT = {"&&", "||", ";", "|"}


def actions(text: str) -> list[str]:
    """The bash commands of one reply, as the agent parsed them."""
    return [m.strip() for m in _BLOCK.findall(text)]


def program(command: str) -> str:
    """The program a command runs, for the tool's name: the first word that is not a shell
    preamble (``cd /testbed && ``, ``export X=1;``, ``timeout 60``), its path dropped."""
    lines = [ln for ln in command.split("\n") if ln.strip() and not ln.lstrip().startswith("#")]
    first = lines[0] if lines else ""
    try:
        words = shlex.split(first, posix=True)
    except ValueError:
        words = first.split()
    skip_args = False
    for w in words:
        if w in _CONNECT or w.endswith(";"):
            skip_args = False
            w = w.rstrip(";")
            if not w:
                continue
        if skip_args:
            continue
        if "=" in w and not w.startswith(("-", "/", ".")) and w.split("=", 1)[0].isidentifier():
            continue  # VAR=value before a command
        name = w.rsplit("/", 1)[-1]
        if name in _SKIP:
            skip_args = name in ("cd", "export", "source", "set")
            continue
        if re.fullmatch(r"[\w.+-]+", name) and not name[0].isdigit():
            return name
    return "bash"


def convert(data: dict[str, Any], source: str) -> dict[str, Any]:
    """One ``.traj.json`` as a recorded entry (``task_id``, ``trial``, ``traj``)."""
    if data.get("trajectory_format") != "mini-swe-agent-1":
        raise ValueError(f"not a mini-swe-agent-1 trajectory: "
                         f"{data.get('trajectory_format')!r}")
    out: list[dict[str, Any]] = []
    pending: tuple[str, str] | None = None  # the last reply's call id and program
    for i, m in enumerate(data["messages"]):
        role, content = str(m["role"]), m["content"]
        if not isinstance(content, str):  # content parts: keep their text
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if role == "assistant":
            cmds = actions(content)
            msg: dict[str, Any] = {"role": "assistant", "content": content}
            pending = None
            if len(cmds) == 1:
                call = f"call_{i}"
                msg["tool_calls"] = [{"id": call, "type": "function", "function": {
                    "name": "bash", "arguments": json.dumps({"command": cmds[0]})}}]
                pending = (call, program(cmds[0]))
            out.append(msg)
        elif role == "user" and pending is not None:
            out.append({"role": "tool", "tool_call_id": pending[0], "name": pending[1],
                        "content": content})
            pending = None
        elif role in ("system", "user"):
            out.append({"role": role, "content": content})
        else:
            raise ValueError(f"message {i} has an unknown role {role!r}")
    info = data.get("info") or {}
    return {"task_id": str(data["instance_id"]), "trial": 0, "source": source,
            "calls_in_text": True, "exit_status": info.get("exit_status"), "traj": out}


def order_key(instance: str) -> str:
    return hashlib.sha256(instance.encode()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="a folder of *.traj.json files (searched recursively)")
    ap.add_argument("--out", type=Path, required=True, help="the recorded file to write")
    ap.add_argument("--limit", type=int, default=0,
                    help="keep the first N instances in digest order (0: all)")
    ap.add_argument("--source", default="swe", help="the trajectories' name prefix")
    args = ap.parse_args(argv)
    files = sorted(args.src.rglob("*.traj.json"))
    if not files:
        print(f"no *.traj.json under {args.src}", file=sys.stderr)
        return 2
    by_id = {}
    for f in files:
        data = json.loads(f.read_text())
        by_id[str(data["instance_id"])] = data
    keep = sorted(by_id, key=order_key)
    if args.limit > 0:
        keep = keep[:args.limit]
    records = [convert(by_id[k], args.source) for k in keep]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(records))
    n = sum(1 for r in records for m in r["traj"] if m["role"] == "assistant")
    print(f"{len(records)} trajectories, {n} replies -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
