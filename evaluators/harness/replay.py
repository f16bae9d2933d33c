"""Trusted replay: a context policy's plans rendered into prompts and billed exactly.

For every LLM call of a recorded trajectory (each assistant message), the policy is shown
the past (segment metadata, never the future, never the oracle's labels) and returns a
plan (evaluators/harness/plan.py). This module renders the plan into the prompt's messages,
counts its tokens (evaluators/harness/tokens.py), bills it under both providers' cache rules
(evaluators/harness/cache.py), and checks it against the oracle (evaluators/harness/oracle.py):
for each earlier segment whose needed spans the prompt lacks, a recovery is charged (one
more call on the rendered context that asks for the content again, then the content is
added to this call's prompt). Summaries cost one summarising call the first time each is
shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evaluators.harness import tokens as tok
from evaluators.harness.cache import AnthropicCache, Charge, Message, OpenAICache, Rules
from evaluators.harness.oracle import Need, missing
from evaluators.harness.plan import Item, PlanError, as_wire, check
from evaluators.harness.profile import tool_profile
from evaluators.harness.trajectories import Segment, Tokenized, Trajectory

PHASES = ("early", "middle", "late")
SUMMARY_HEAD = 24  # tokens of each user or assistant message a summary keeps
SUMMARY_ASK = "Summarise the conversation so far for your own later use."


def calls_text(seg: Segment, content_tokens: int, keep: int | None = None) -> str:
    """A reply shown as its tool calls alone (``[id, "calls"]``): a note of the prose cut,
    then the calls as its text showed them, or their first ``keep`` tokens and a note of
    that cut (``[id, "calls", keep]``)."""
    calls = tok.encode(seg.calls)
    cut = max(0, content_tokens - len(calls))
    note = f"[reply {seg.id}: {cut} tokens of prose elided]"
    if not seg.calls:
        return note
    if keep is not None and keep < len(calls):
        return f"{note}\n{tok.decode(calls[:keep])}\n[... {len(calls) - keep} more tokens cut]"
    return f"{note}\n{seg.calls}"


class WindowError(PlanError):
    """A rendered prompt larger than the model's window."""


@dataclass
class TrajectoryCost:
    name: str
    calls: int = 0
    usd: dict[str, float] = field(default_factory=dict)
    charges: dict[str, Charge] = field(default_factory=dict)  # provider -> summed charge
    phase_input: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    prompt_tokens: list[int] = field(default_factory=list)  # each call's rendered prompt
    recoveries: int = 0
    compactions: int = 0
    repeated_reads: int = 0


class Renderer:
    """Messages of one trajectory's items (tokens and text), made once per item."""

    def __init__(self, traj: Trajectory, tokenized: Tokenized):
        self.traj = traj
        self.tokenized = tokenized
        self.cache: dict[Item, tuple[Message, str]] = {}
        self.call_sizes: dict[int, int] = {}

    def content(self, sid: int) -> list[int]:
        return self.tokenized.tokens(self.traj, sid)

    def call_size(self, sid: int) -> int:
        """Tokens of a reply's calls (as ``[id, "calls"]`` shows them, without the note)."""
        if sid not in self.call_sizes:
            self.call_sizes[sid] = len(tok.encode(self.traj.segments[sid].calls))
        return self.call_sizes[sid]

    def stub_text(self, sid: int) -> str:
        s = self.traj.segments[sid]
        what = f"{s.tool} result" if s.role == "tool" and s.tool else f"{s.role} message"
        return f"[{what} {sid} elided: {len(self.content(sid))} tokens]"

    def summary_text(self, a: int, b: int) -> str:
        lines = [f"Summary of messages {a}-{b}:"]
        for s in self.traj.segments[a:b + 1]:
            if s.role == "tool":
                lines.append(f"- {self.stub_text(s.id)}")
            else:
                lines.append(f"- {s.role}: {tok.decode(self.content(s.id)[:SUMMARY_HEAD])}")
        return "\n".join(lines)

    def message(self, item: Item) -> tuple[Message, str]:
        if item[0] == "head" and item[2] >= len(self.content(item[1])):
            item = ("full", item[1])
        elif item[0] == "calls" and len(item) == 3 and item[2] >= self.call_size(item[1]):
            item = ("calls", item[1])  # the same text, so the same message for the cache
        got = self.cache.get(item)
        if got is not None:
            return got
        kind = item[0]
        if kind == "summary":
            text = self.summary_text(item[1], item[2])
            role, body = "user", tok.encode(text)
        else:
            seg = self.traj.segments[item[1]]
            role = seg.role
            if kind == "full":
                text, body = seg.text, self.content(seg.id)
            elif kind == "stub":
                text = self.stub_text(seg.id)
                body = tok.encode(text)
            elif kind == "calls":
                text = calls_text(seg, len(self.content(seg.id)),
                                  item[2] if len(item) == 3 else None)
                body = tok.encode(text)
            else:
                n = item[2]
                full = self.content(seg.id)
                text = tok.decode(full[:n])
                body = full[:n] + tok.encode(f"\n[... {len(full) - n} more tokens cut]")
        out = ((item, tok.message_tokens(role, body)), text)
        self.cache[item] = out
        return out

    def extra(self, key: Any, role: str, text: str) -> Message:
        return (key, tok.message_tokens(role, tok.encode(text)))


Decide = Callable[[dict[str, Any]], Any]


class Replay:
    """Replays trajectories under a policy (``decide(view) -> plan``), billing every call."""

    def __init__(self, tokenized: Tokenized, labels: dict[str, dict[int, tuple[Need, ...]]],
                 rules: dict[str, Rules], window: int,
                 tools: dict[str, dict[str, float]] | None = None):
        self.tokenized = tokenized
        self.labels = labels
        self.rules = rules  # provider name -> its rules (both providers are billed)
        self.window = window
        self.max_breakpoints = min(r.max_breakpoints for r in rules.values())
        self.meta: dict[str, list[dict[str, Any]]] = {}
        for t in tokenized.trajectories:
            # what each past reply used: the segment each of its needed values was last
            # read from (the oracle's labels of calls already made: the past, as a harness
            # that reads its agent's actions knows it)
            uses = {m: sorted({max(n.sources) for n in needs})
                    for m, needs in labels.get(t.name, {}).items()}
            self.meta[t.name] = [self._meta(t, s, uses.get(s.id, [])) for s in t.segments]
        # what was learned of the agent's tools from the training runs (profile.py); the
        # training replay's own when none is given
        self.tools = tools if tools is not None else tool_profile(
            tokenized.trajectories, labels, self.meta)

    def _meta(self, t: Trajectory, s: Segment, uses: list[int]) -> dict[str, Any]:
        """What a policy sees of one segment: never its text. A reply also shows its size
        as ``[id, "calls"]`` would render it (``call_tokens``)."""
        content = len(self.tokenized.tokens(t, s.id))
        out: dict[str, Any] = {"id": s.id, "role": s.role, "tool": s.tool, "read": s.read,
                               "digest": s.digest,
                               "tokens": content + 3 + len(tok.encode(s.role)), "uses": uses}
        if s.role == "assistant":
            out["call_tokens"] = len(tok.encode(calls_text(s, content))) + 3 + len(
                tok.encode(s.role))
        return out

    def view(self, traj: Trajectory, call: int, m: int, previous: dict[str, Any] | None,
             ) -> dict[str, Any]:
        return {"call": call, "segments": self.meta[traj.name][:m], "previous": previous,
                "tools": self.tools, "window": self.window,
                "max_breakpoints": self.max_breakpoints,
                "min_cache_tokens": min(r.min_cache_tokens for r in self.rules.values())}

    def trajectory(self, traj: Trajectory, decide: Decide,
                   record: list[tuple[dict[str, Any], Any]] | None = None) -> TrajectoryCost:
        render = Renderer(traj, self.tokenized)
        caches = {name: (OpenAICache(r) if r.provider == "openai" else AnthropicCache(r))
                  for name, r in self.rules.items()}
        cost = TrajectoryCost(traj.name, usd=dict.fromkeys(self.rules, 0.0),
                              charges={name: Charge() for name in self.rules})
        seconds = next(iter(self.rules.values())).seconds_per_call
        clock = [0]
        summaries: set[tuple[int, int]] = set()
        shown: dict[tuple[str, Any], bool] = {}  # the oracle's searches, by span and item
        seen_reads: set[str] = set()
        for s in traj.segments:
            if s.read:
                if s.read in seen_reads and s.role == "tool":
                    cost.repeated_reads += 1
                seen_reads.add(s.read)

        def bill(prompt: list[Message], bps: tuple[int, ...], output: int, phase: str) -> None:
            now = clock[0] * seconds
            clock[0] += 1
            for name, cache in caches.items():
                if isinstance(cache, OpenAICache):
                    ch = cache.charge(prompt, now, output)
                else:
                    ch = cache.charge(prompt, bps, now, output)
                cost.usd[name] += ch.usd(self.rules[name])
                acc = cost.charges[name]
                acc.uncached += ch.uncached
                acc.cached += ch.cached
                acc.written += ch.written
                acc.output += ch.output
            cost.phase_input[phase] += sum(len(t) for _, t in prompt)

        calls = traj.calls
        replies = frozenset(s.id for s in traj.segments if s.role == "assistant")
        previous: dict[str, Any] | None = None
        prev_m = 0
        labels = self.labels[traj.name]
        for c, m in enumerate(calls):
            phase = PHASES[min(2, 3 * c // max(1, len(calls)))]
            view = self.view(traj, c, m, previous)
            raw = decide(view)
            if record is not None:
                record.append((view, raw))
            try:
                items, bps = check(raw, m, prev_m, self.max_breakpoints, replies)
            except PlanError as exc:
                raise PlanError(f"{traj.name}, call {c}: {exc}") from None
            rendered = [render.message(it) for it in items]
            prompt = [msg for msg, _ in rendered]
            size = sum(len(t) for _, t in prompt) + tok.REPLY_PRIMING
            if size > self.window:
                raise WindowError(f"{traj.name}, call {c}: the rendered prompt has {size} "
                                  f"tokens, over the {self.window}-token window")
            for it in items:
                if it[0] == "summary" and (it[1], it[2]) not in summaries:
                    summaries.add((it[1], it[2]))
                    cost.compactions += 1
                    ask = [render.message(("full", 0))[0],
                           *(render.message(("full", s))[0] for s in range(it[1], it[2] + 1)),
                           render.extra(("ask-summary",), "user", SUMMARY_ASK)]
                    out = len(render.message(it)[0][1])
                    bill(ask, (), out, phase)
            needs = labels.get(m, ())
            lost = missing(needs, [(msg[0], text) for msg, text in rendered], shown)
            for source in sorted({max(n.sources) for n in lost}):
                recall = render.extra(("recall", source), "assistant",
                                      f"call recall(message={source})")
                bill(prompt + [recall], bps, len(recall[1]), phase)  # the call that asks
                prompt = prompt + [recall, render.message(("full", source))[0]]
                cost.recoveries += 1
                cost.repeated_reads += 1
            out_tokens = len(render.message(("full", m))[0][1])
            bill(prompt, bps, out_tokens, phase)
            cost.prompt_tokens.append(sum(len(t) for _, t in prompt) + tok.REPLY_PRIMING)
            cost.calls += 1
            previous = as_wire(items, bps)
            prev_m = m
        return cost


def summarise(costs: list[TrajectoryCost], primary: str) -> dict[str, float]:
    """The workload's metrics: $ per task under each provider (the primary one as
    ``usd_per_task``), cache-hit share, input tokens per task and by phase, context growth,
    repeated reads, recoveries and compactions per task."""
    n = max(1, len(costs))
    out: dict[str, float] = {"tasks": float(len(costs))}
    for name in costs[0].usd if costs else ():
        out[f"usd_per_task_{name}"] = sum(c.usd[name] for c in costs) / n
        ch = [c.charges[name] for c in costs]
        total_in = sum(x.input for x in ch)
        out[f"cache_hit_share_{name}"] = sum(x.cached for x in ch) / max(1, total_in)
    out["usd_per_task"] = out.get(f"usd_per_task_{primary}", float("nan"))
    out["cache_hit_share"] = out.get(f"cache_hit_share_{primary}", float("nan"))
    if costs:
        ch = [c.charges[primary] for c in costs]
        out["input_tokens_per_task"] = sum(x.input for x in ch) / n
        out["output_tokens_per_task"] = sum(x.output for x in ch) / n
        out["cache_write_tokens_per_task"] = sum(x.written for x in ch) / n
    for p in PHASES:
        out[f"input_tokens_{p}_per_task"] = sum(c.phase_input[p] for c in costs) / n
    growth = [(c.prompt_tokens[-1] - c.prompt_tokens[0]) / (len(c.prompt_tokens) - 1)
              for c in costs if len(c.prompt_tokens) > 1]
    out["context_growth_tokens_per_call"] = sum(growth) / max(1, len(growth))
    out["context_tokens_max"] = float(max((max(c.prompt_tokens, default=0) for c in costs),
                                          default=0))
    out["calls_per_task"] = sum(c.calls for c in costs) / n
    out["recoveries_per_task"] = sum(c.recoveries for c in costs) / n
    out["compactions_per_task"] = sum(c.compactions for c in costs) / n
    out["repeated_reads_per_task"] = sum(c.repeated_reads for c in costs) / n
    return out
