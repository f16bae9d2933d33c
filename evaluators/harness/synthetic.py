"""The project's own synthetic trajectories: a support agent that reads tickets, files and
logs, so that the harness target runs where no recorded data is present (CI, ``make
nightly``).

Everything comes from ``random.Random`` seeded by (seed, task, trial): the same call makes
the same trajectories on every machine. Each task is a user's request about a ticket; the
agent calls tools (``get_ticket``, ``read_file``, ``search_logs``, ``get_user``) whose
results carry ids, paths and numbers, and later calls use values from earlier results
(mostly recent ones, sometimes old ones), so a policy that drops the wrong result pays a
recovery. Results vary in size (about 100 to 1,500 tokens); some reads repeat.
"""

from __future__ import annotations

import json
import random

from evaluators.harness.trajectories import Trajectory, from_messages

_WORDS = ("request handler cache index buffer retry timeout queue worker token session "
          "config batch stream parser socket lease shard replica commit rollback latency "
          "scheduler budget metric window prefix suffix block page record").split()
_NAMES = ("Alva Brook Cyra Dario Elin Farid Greta Hugo Ines Jonas Kaia Lior Mira Nils Oona "
          "Pavel Quinn Rosa Sami Tove").split()

SYSTEM = "\n".join([
    "# Support agent policy",
    "You are the support agent of a software company. You help users with tickets about "
    "their deployments. Look up the ticket, the user and the files and logs it names "
    "before you answer; never guess an id, a path or a number: use the values the tools "
    "return. Confirm every change with the user before you make it.",
    "## Tools",
    "- get_ticket(ticket_id): the ticket, its files and related tickets",
    "- get_user(user_id): the user's profile and deployments",
    "- read_file(path): a file of the user's repository",
    "- search_logs(service, day): log lines of a service on a day",
    "- update_ticket(ticket_id, status, note): change a ticket",
    *[f"Rule {i}: " + " ".join(random.Random(i).choice(_WORDS) for _ in range(14))
      for i in range(24)],
])


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


class _Task:
    def __init__(self, rng: random.Random):
        self.rng = rng
        self.values: list[str] = []  # ids, paths and numbers results have shown, in order
        self.results: dict[str, str] = {}  # a repeated read returns the same content

    def new_id(self, prefix: str) -> str:
        v = f"{prefix}-{self.rng.randint(1000, 99999)}"
        self.values.append(v)
        return v

    def path(self) -> str:
        v = f"src/{self.rng.choice(_WORDS)}/{self.rng.choice(_WORDS)}_{self.rng.randint(1, 99)}.py"
        self.values.append(v)
        return v

    def pick(self) -> str:
        """An earlier value: mostly a recent one, sometimes an old one."""
        if self.rng.random() < 0.7:
            return self.rng.choice(self.values[-6:])
        return self.rng.choice(self.values)

    def body(self, size: int) -> list[str]:
        lines = []
        for _ in range(size):
            if self.rng.random() < 0.12:
                lines.append(f"{_words(self.rng, 3)} = {self.new_id('cfg')}")
            else:
                lines.append(f"{_words(self.rng, 6)} {self.rng.randint(0, 9)}")
        return lines


def _result(task: _Task, tool: str, args: dict[str, str]) -> str:
    key = f"{tool}:{json.dumps(args, sort_keys=True)}"
    if key not in task.results:
        task.results[key] = _fresh(task, tool, args)
    return task.results[key]


def _fresh(task: _Task, tool: str, args: dict[str, str]) -> str:
    rng = task.rng
    size = rng.choice((6, 12, 25, 50, 90))
    out: dict[str, object]
    if tool == "get_ticket":
        out = {"ticket_id": args["ticket_id"], "user_id": task.new_id("usr"),
               "files": [task.path() for _ in range(rng.randint(1, 3))],
               "related": [task.new_id("T") for _ in range(rng.randint(0, 2))],
               "description": " ".join(task.body(size // 3 + 2))}
    elif tool == "get_user":
        out = {"user_id": args["user_id"], "name": rng.choice(_NAMES),
               "deployments": [{"id": task.new_id("dep"), "service": rng.choice(_WORDS),
                                "replicas": rng.randint(2, 64)} for _ in range(3)]}
    elif tool == "read_file":
        out = {"path": args["path"], "lines": task.body(size)}
    else:
        out = {"service": args["service"],
               "lines": [f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} "
                         f"{task.new_id('req')} {_words(rng, 5)}" for _ in range(size)]}
    return json.dumps(out)


def trajectory(seed: int, task_no: int, trial: int) -> Trajectory:
    task = _Task(random.Random(f"{seed}/{task_no}/{trial}"))
    rng = task.rng
    name = rng.choice(_NAMES)
    ticket = task.new_id("T")
    messages: list[dict[str, object]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Hi, I'm {name}. Ticket {ticket} is still open: "
                                    f"{_words(rng, 12)}. Can you look into it?"}]
    steps = rng.randint(6, 16)
    calls = 0
    for step in range(steps):
        if step and rng.random() < 0.2:  # a turn with the user
            messages.append({"role": "assistant",
                             "content": f"I checked {task.pick()}; {_words(rng, 10)}. "
                                        "Shall I go on?"})
            messages.append({"role": "user", "content": f"Yes. {_words(rng, 6)}."})
        tool = "get_ticket" if step == 0 else rng.choice(
            ("get_ticket", "get_user", "read_file", "read_file", "search_logs"))
        values = task.values
        if tool == "get_ticket":
            args = {"ticket_id": ticket if step == 0 else
                    rng.choice([v for v in values if v.startswith("T-")])}
        elif tool == "get_user":
            users = [v for v in values if v.startswith("usr-")]
            args = {"user_id": rng.choice(users) if users else task.pick()}
        elif tool == "read_file":
            paths = [v for v in values if v.startswith("src/")]
            if rng.random() < 0.7 and len(paths) > 1:
                paths = paths[-2:]
            args = {"path": rng.choice(paths) if paths else task.path()}
        else:
            args = {"service": rng.choice(_WORDS), "day": f"2026-11-{rng.randint(1, 30):02d}"}
        calls += 1
        cid = f"c{calls}"
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": cid, "type": "function",
             "function": {"name": tool, "arguments": json.dumps(args)}}]})
        messages.append({"role": "tool", "tool_call_id": cid, "name": tool,
                         "content": _result(task, tool, args)})
    note = f"fixed in {task.pick()}, see {task.pick()}"
    calls += 1
    messages.append({"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{calls}", "type": "function", "function": {
            "name": "update_ticket",
            "arguments": json.dumps({"ticket_id": ticket, "status": "resolved",
                                     "note": note})}}]})
    messages.append({"role": "tool", "tool_call_id": f"c{calls}", "name": "update_ticket",
                     "content": json.dumps({"ticket_id": ticket, "status": "resolved"})})
    messages.append({"role": "assistant",
                     "content": f"Ticket {ticket} is resolved: {note}."})
    return from_messages(f"synthetic-{seed}/task-{task_no}/trial-{trial}",
                         f"synthetic-{seed}/{task_no}", messages)


def generate(seed: int, tasks: int, trials: int) -> list[Trajectory]:
    return [trajectory(seed, t, k) for t in range(tasks) for k in range(trials)]
