"""The LLM proposer: chat completions on any OpenAI-compatible endpoint.

One call per proposal. The prompt is two messages: a system message that is byte-identical
for every call on one target (rules, edit format, knob syntax, the evaluator's contract for
the target's kind, the target's description and seed program) so that provider prompt
caches hit, and a user message with what changes (the parent, inspirations, feedback from
recent candidates). The answer's edits are applied strictly onto the parent; every
unusable answer becomes ``Proposal(rejected=reason)``, which the loop feeds back.

Retries are done here, not by the openai client (its ``max_retries`` is 0), so that the
backoff is tested: exponential with jitter from a seeded RNG, honouring ``Retry-After``.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import json
import math
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any
from urllib.parse import urlparse

from optimizer.accounting import Prices
from optimizer.edits import apply_edits, parse_edits
from optimizer.errors import ConfigError, EditError
from optimizer.proposers._base import ArchiveEntry, ProposalContext, Proposer
from optimizer.proposers.cassette import CassetteWriter
from optimizer.records import CandidateState, Proposal, Usage
from optimizer.targets import TargetSpec

_RETRIABLE_STATUS = {408, 409, 425, 429}


@dataclass(frozen=True)
class LLMSettings:
    """``[proposer.llm]`` of an experiment file; every key is a field of the same name."""

    base_url: str | None = None  # None = OpenAI; e.g. "http://localhost:8000/v1" for vLLM
    model: str = "gpt-5-mini"
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float | None = None  # None = the server's default (reasoning models want it)
    reasoning_effort: str | None = None  # "minimal" | "low" | "medium" | "high"; None = omit
    timeout_s: float = 120.0
    max_retries: int = 4
    max_tokens: int | None = None  # None = the server's limit
    # USD per million tokens; the defaults are gpt-5-mini's list prices at the time of writing.
    price_input_per_m: float = 0.25
    price_cached_input_per_m: float = 0.025
    price_output_per_m: float = 2.0
    models: tuple[tuple[str, float], ...] = ()  # (name, weight); empty = just `model`
    selection: str = "weights"  # "weights" or "bandit" (Thompson sampling, improvement per USD)
    retry_base_s: float = 1.0  # first backoff; doubles per retry, with jitter
    retry_max_s: float = 60.0  # cap on one wait, Retry-After included
    max_feedback: int = 8  # most recent candidates shown in the prompt (at least half of it)
    max_inspirations: int = 3
    max_artifact_chars: int = 800  # per artifact (validation report, log) in the prompt

    def __post_init__(self) -> None:
        pairs: list[Any] = [tuple(m) for m in self.models]  # TOML gives lists of lists
        if any(len(p) != 2 for p in pairs):
            raise ValueError('models: each entry is a pair ["model-name", weight]')
        models = tuple((str(name), float(weight)) for name, weight in pairs)
        object.__setattr__(self, "models", models)
        if self.selection not in ("weights", "bandit"):
            raise ValueError(f"selection must be 'weights' or 'bandit', not {self.selection!r}")
        if any(w <= 0 or not math.isfinite(w) for _, w in models):
            raise ValueError("models: every weight must be a positive number")
        if self.timeout_s <= 0 or self.max_retries < 0:
            raise ValueError("timeout_s must be positive and max_retries non-negative")
        prices = (self.price_input_per_m, self.price_cached_input_per_m, self.price_output_per_m)
        if any(p < 0 for p in prices):
            raise ValueError("prices must be non-negative (USD per million tokens)")

    @property
    def prices(self) -> Prices:
        return Prices(
            self.price_input_per_m, self.price_cached_input_per_m, self.price_output_per_m
        )

    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.models) or (self.model,)


def _is_local(base_url: str) -> bool:
    host = urlparse(base_url).hostname or ""
    if host in ("localhost", "") or host.endswith((".local", ".internal")) or "." not in host:
        return True  # "vllm" in a compose network, "localhost", mDNS names
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    return addr.is_private or addr.is_loopback or addr.is_link_local


def api_key(settings: LLMSettings) -> str:
    """The key from ``api_key_env``; a placeholder for local servers that need none."""
    key = os.environ.get(settings.api_key_env, "")
    if key:
        return key
    if settings.base_url and _is_local(settings.base_url):
        return "not-needed"  # vLLM, Ollama, llama.cpp accept any key unless started with one
    where = settings.base_url or "the OpenAI API"
    raise ConfigError(
        f"environment variable {settings.api_key_env} is not set, and {where} needs a key; "
        f"export {settings.api_key_env}=... or set api_key_env to the variable that holds it",
        key="proposer.llm.api_key_env",
    )


# --------------------------------------------------------------------------- the prompt


def _template(name: str) -> str:
    return resources.files("optimizer.proposers").joinpath("prompts", name).read_text("utf-8")


def _fenced(path: str, text: str) -> str:
    longest = max((len(run) for run in text.split("\n") if run and set(run) == {"`"}), default=2)
    ticks = "`" * max(3, longest + 1)
    lang = "python" if path.endswith(".py") else ""
    body = text if text.endswith("\n") else text + "\n"
    return f"### {path}\n{ticks}{lang}\n{body}{ticks}"


def _files(files: Mapping[str, str]) -> str:
    return "\n\n".join(_fenced(path, text) for path, text in files.items())


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters cut ...]\n{text[-half:]}"


def _numbers(values: Mapping[str, Any]) -> str:
    def fmt(v: Any) -> str:
        return f"{v:.6g}" if isinstance(v, float) else repr(v)

    return ", ".join(f"{k}={fmt(v)}" for k, v in sorted(values.items())) or "none"


def system_prompt(target: TargetSpec, seed_files: Mapping[str, str]) -> str:
    """The stable prefix: identical for every call on ``target``."""
    kinds = {"function", "kernel", "routing", "speculative"}
    kind_text = _template(f"kind_{target.kind}.txt" if target.kind in kinds else "kind_other.txt")
    objectives = "; ".join(f"{o.direction} {o.metric}" for o in target.objectives)
    target_text = Template(_template("target.txt")).substitute(
        name=target.name,
        description=target.description.strip() or "(no description given)",
        objectives=objectives,
        editable=", ".join(target.editable),
        min_gain_pct=f"{100 * target.min_gain:g}",
        timeout_s=f"{target.timeout_s:g}",
        seed_files=_files(seed_files),
    )
    reference = target.path / "reference.py"
    if target.kind == "kernel" and reference.is_file() and "reference.py" not in target.editable:
        target_text += (
            "\n## The trusted reference (reference.py, not editable)\n\n"
            "Outputs are compared with this, computed in float64 on the same inputs.\n\n"
            + _fenced("reference.py", reference.read_text())
            + "\n"
        )
    parts = [
        _template("system.txt"),
        _template("edit_format.txt"),
        _template("knobs.txt"),
        Template(kind_text).safe_substitute(kind=target.kind),
        target_text,
    ]
    return "\n\n".join(p.strip() for p in parts) + "\n"


def _entry_line(entry: ArchiveEntry) -> str:
    line = f"{entry.id} ({entry.state.value}"
    if entry.proposer:
        line += f", by {entry.proposer}"
    line += ")"
    if entry.summary:
        line += f": {entry.summary}"
    return line


def _diff(old: Mapping[str, str], new: Mapping[str, str], limit: int) -> str:
    lines: list[str] = []
    for path in new:
        lines += difflib.unified_diff(
            old.get(path, "").splitlines(), new[path].splitlines(), path, path, lineterm="", n=2
        )
    if not lines:
        return "(same code as the parent)"
    return "```diff\n" + _clip("\n".join(lines), limit) + "\n```"


def feedback_window(history: Sequence[ArchiveEntry], shown: int) -> list[ArchiveEntry]:
    """The entries of a chronological history to show: append-only within epochs.

    A sliding window of the last ``shown`` entries would change the first entry on every
    call and so break the cacheable prefix right there. Instead the window starts at an
    epoch boundary (every ``shown // 2`` entries) and only grows until the next boundary:
    between ``shown // 2 + 1`` and ``shown`` entries are shown, and successive calls share
    everything but the newly appended ones.
    """
    epoch = max(1, shown // 2)
    n = len(history)
    start = max(0, ((n - 1) // epoch) * epoch - epoch) if n else 0
    return list(history[start:])


def _feedback_item(e: ArchiveEntry, limit: int) -> str:
    # Rendered the same wherever the entry sits in the list, so that an entry's text stays
    # identical from call to call (and cached).
    item = [f"## {_entry_line(e)}"]
    if e.reason:
        item.append(f"Reason: {_clip(e.reason, limit)}")
    if e.metrics:
        item.append(f"Metrics: {_numbers(e.metrics)}")
    if e.state is not CandidateState.VALID:  # the validation report or log says why
        item += [f"{name}:\n{_clip(text, limit)}" for name, text in sorted(e.artifacts.items())]
    return "\n".join(item)


def user_prompt(
    ctx: ProposalContext,
    settings: LLMSettings,
    history: Sequence[ArchiveEntry] | None = None,
) -> str:
    """The varying part: inspirations, the parent, then the feedback log.

    The feedback changes on every call but only by appending (see ``feedback_window``), and
    the parent changes on fewer calls than that, so this order keeps the longest prefix.

    ``history`` is the target's candidates so far, oldest first (the proposer keeps it);
    without it, ``ctx.feedback`` (newest first) is used.
    """
    parent, limit = ctx.parent, settings.max_artifact_chars
    if history is None:
        history = list(reversed(ctx.feedback))
    feedback = [_feedback_item(e, limit) for e in feedback_window(history, settings.max_feedback)]
    metrics = [f"State: {parent.state.value}. Metrics: {_numbers(parent.metrics)}."]
    if parent.knobs:
        metrics.append(f"Knob values it was measured with: {_numbers(parent.knobs)}.")
    if parent.summary:
        metrics.append(f"Its change: {parent.summary}")
    inspirations = [
        # Diffs against the seed, not the parent: they stay the same when the parent changes.
        f"## {_entry_line(e)}\nMetrics: {_numbers(e.metrics)}. Its code, as a diff against the "
        f"seed:\n{_diff(ctx.seed.files, e.files, limit)}"
        for e in ctx.inspirations[: settings.max_inspirations]
    ]
    return Template(_template("task.txt")).substitute(
        parent_id=parent.id,
        parent_metrics="\n".join(metrics),
        parent_files=_files(parent.files),
        inspirations=(
            "# Other candidates for inspiration (best and diverse)\n\n" + "\n\n".join(inspirations)
            if inspirations
            else "# Other candidates\n\nNone measured yet."
        ),
        feedback=(
            "# Recent candidates, oldest first (learn from their outcomes)\n\n"
            + "\n\n".join(feedback)
            if feedback
            else "# Recent candidates\n\nNone yet: this is the first proposal."
        ),
        objective=", ".join(f"{o.direction} {o.metric}" for o in ctx.target.objectives),
    )


def render_messages(messages: Sequence[Mapping[str, str]]) -> str:
    """Messages as one markdown text (the ``prompt.md`` artifact)."""
    return "\n\n".join(f"<!-- {m['role']} -->\n{m['content']}" for m in messages)


# --------------------------------------------------------------------------- the answer


def _summary(text: str) -> str:
    for line in text.splitlines():
        stripped = line.strip().lstrip("*#").strip()
        if stripped.upper().startswith("SUMMARY:"):
            return stripped[len("SUMMARY:") :].strip()[:200]
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:200]
    return ""


def proposal_from_answer(
    ctx: ProposalContext,
    *,
    proposer: str,
    text: str,
    finish_reason: str | None,
    error: str | None,
    usage: Usage,
    prompt: str,
) -> Proposal:
    """Turn one model answer into a Proposal; every unusable answer is a rejection."""
    base = Proposal(
        proposer=proposer,
        parent_id=ctx.parent.id,
        files=dict(ctx.parent.files),
        summary=_summary(text),
        prompt=prompt,
        response=text,
        usage=usage,
    )

    def reject(reason: str) -> Proposal:
        return dataclasses.replace(base, rejected=reason)

    if error:
        return reject(error)
    if finish_reason == "length":
        return reject(
            "the answer was cut off at the token limit (finish_reason=length); give a shorter "
            "answer: fewer, smaller SEARCH/REPLACE blocks and no long explanations"
        )
    if not text.strip():
        return reject(f"the model returned an empty answer (finish_reason={finish_reason})")
    try:
        edits = parse_edits(text, ctx.target.editable)
        files = apply_edits(ctx.parent.files, edits)
    except EditError as exc:
        return reject(f"edit rejected: {exc}")
    try:
        from optimizer import knobs
    except ImportError:  # knob declarations are then checked by nobody here
        knobs = None  # type: ignore[assignment]
    if knobs is not None:
        try:
            knobs.knobs_of_files(files)
        except knobs.KnobError as exc:
            return reject(f"bad knob declaration: {exc}")
    return dataclasses.replace(base, files=files)


# --------------------------------------------------------------------------- the proposer


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, (when - datetime.now(UTC)).total_seconds())


@dataclass
class _Arm:
    proposals: int = 0
    improvements: int = 0
    calls: int = 0
    usd: float = 0.0


class LLMProposer(Proposer):
    """Proposals from a chat model; see the module docstring and docs/llm.md."""

    name = "llm"

    def __init__(
        self,
        settings: LLMSettings,
        *,
        cassette: Path | None = None,
        seed: int = 0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        import openai  # here: evaluators and offline runs never need it

        self.settings = settings
        self._openai = openai
        self._client = openai.OpenAI(
            api_key=api_key(settings),
            base_url=settings.base_url,
            timeout=settings.timeout_s,
            max_retries=0,
        )
        self._rng = random.Random(seed)
        self._sleep = sleep
        self._cassette = CassetteWriter(cassette) if cassette is not None else None
        self._calls: dict[str, int] = {}
        self._system: dict[str, str] = {}
        self._arms = {name: _Arm() for name in settings.model_names}
        self._parents: dict[str, tuple[float, bool]] = {}
        self._history: dict[str, list[ArchiveEntry]] = {}  # per target, oldest first

    # -- model choice

    def _pick_model(self) -> str:
        names = self.settings.model_names
        if len(names) == 1:
            return names[0]
        if self.settings.selection == "weights":
            return self._rng.choices(names, weights=[w for _, w in self.settings.models])[0]
        spent = [a.usd / a.calls for a in self._arms.values() if a.calls]
        prior_cost = sum(spent) / len(spent) if spent else 1.0

        def score(name: str) -> float:
            arm = self._arms[name]
            p = self._rng.betavariate(1 + arm.improvements, 1 + arm.proposals - arm.improvements)
            cost = arm.usd / arm.calls if arm.calls else prior_cost
            return p / cost if cost > 0 else p

        return max(names, key=score)

    def observe(self, entry: ArchiveEntry) -> None:
        model = entry.proposer.removeprefix("llm:")
        arm = self._arms.get(model)
        if arm is None or not entry.proposer.startswith("llm:"):
            return
        arm.proposals += 1
        parent = self._parents.get(entry.parent_id or "")
        if entry.state is CandidateState.VALID and entry.objectives and parent is not None:
            value, minimize = parent
            if (entry.objectives[0] < value) if minimize else (entry.objectives[0] > value):
                arm.improvements += 1

    # -- one call with retries

    def _create(self, model: str, messages: list[dict[str, str]], target: str) -> Any:
        s = self.settings
        kwargs: dict[str, Any] = {"model": model, "messages": messages}
        if s.temperature is not None:
            kwargs["temperature"] = s.temperature
        if s.reasoning_effort:
            kwargs["reasoning_effort"] = s.reasoning_effort
        if s.max_tokens:
            # OpenAI's reasoning models accept only max_completion_tokens; local servers
            # (vLLM, Ollama, llama.cpp) all read max_tokens.
            kwargs["max_completion_tokens" if s.base_url is None else "max_tokens"] = s.max_tokens
        if s.base_url is None:
            kwargs["prompt_cache_key"] = f"optimizer/{target}"  # routes to the same cache
        return self._client.chat.completions.create(**kwargs)

    def _call(
        self, model: str, messages: list[dict[str, str]], target: str
    ) -> tuple[Any, str | None, int]:
        """(response or None, error or None, attempts)."""
        errors = self._openai
        reason = ""
        attempts = 0
        for attempt in range(self.settings.max_retries + 1):
            attempts = attempt + 1
            wait: float | None = None
            try:
                response = self._create(model, messages, target)
                if not getattr(response, "choices", None):
                    reason = "the server's answer has no choices (malformed response)"
                else:
                    return response, None, attempts
            except errors.APIStatusError as exc:
                status = exc.status_code
                reason = f"HTTP {status} from the model server: {_clip(str(exc.message), 300)}"
                if status not in _RETRIABLE_STATUS and status < 500:
                    return None, reason, attempts  # 400, 401, 404: retrying cannot help
                wait = _retry_after(exc.response.headers)
            except errors.APITimeoutError:
                reason = f"the model server did not answer within {self.settings.timeout_s:g} s"
            except errors.APIConnectionError as exc:
                reason = f"cannot reach the model server: {exc}"
            except ValueError as exc:  # the body was not JSON (a proxy's error page, cut off)
                reason = f"the model server's answer is not valid JSON ({exc})"
            if attempt == self.settings.max_retries:
                break
            if wait is None:
                step = min(self.settings.retry_max_s, self.settings.retry_base_s * 2**attempt)
                wait = step / 2 + self._rng.uniform(0, step / 2)  # equal jitter
            self._sleep(min(wait, self.settings.retry_max_s))
        return None, f"gave up after {attempts} attempt(s): {reason}", attempts

    def _usage(self, model: str, response: Any, messages: list[dict[str, str]], text: str) -> Usage:
        raw = getattr(response, "usage", None)
        if raw is None:
            # No usage reported: estimate at 4 characters per token so budgets still hold.
            prompt = sum(len(m["content"]) for m in messages) // 4
            completion, cached = len(text) // 4, 0
        else:
            prompt, completion = raw.prompt_tokens or 0, raw.completion_tokens or 0
            details = getattr(raw, "prompt_tokens_details", None)
            cached = (getattr(details, "cached_tokens", None) or 0) if details else 0
        usd = self.settings.prices.usd(prompt, cached, completion)
        return Usage(prompt, cached, completion, usd, 1, model)

    # -- the contract

    def propose(self, context: ProposalContext) -> Proposal:
        target = context.target
        if target.name not in self._system:
            self._system[target.name] = system_prompt(target, context.seed.files)
        history = self._history.setdefault(target.name, [])
        known = {e.id for e in history}
        history += [e for e in reversed(context.feedback) if e.id not in known]
        messages = [
            {"role": "system", "content": self._system[target.name]},
            {"role": "user", "content": user_prompt(context, self.settings, history)},
        ]
        model = self._pick_model()
        if context.parent.objectives:
            self._parents[context.parent.id] = (
                context.parent.objectives[0],
                target.primary.minimize,
            )
        started = time.monotonic()
        response, error, attempts = self._call(model, messages, target.name)
        elapsed = time.monotonic() - started
        text, finish = "", None
        usage = Usage(calls=1, model=model)
        if response is not None:
            choice = response.choices[0]
            text = (choice.message.content if choice.message else None) or ""
            finish = choice.finish_reason
            usage = self._usage(model, response, messages, text)
        arm = self._arms[model]
        arm.calls += 1
        arm.usd += usage.usd
        index = self._calls.get(target.name, 0)
        self._calls[target.name] = index + 1
        if self._cassette is not None:
            self._cassette.append(
                {
                    "target": target.name,
                    "index": index,
                    "model": model,
                    "parent_id": context.parent.id,
                    "messages": messages,
                    "response": text,
                    "finish_reason": finish,
                    "error": error,
                    "usage": dataclasses.asdict(usage),
                    "attempts": attempts,
                    "elapsed_s": round(elapsed, 3),
                    "time": datetime.now(UTC).isoformat(timespec="seconds"),
                }
            )
        return proposal_from_answer(
            context,
            proposer=f"llm:{model}",
            text=text,
            finish_reason=finish,
            error=error,
            usage=usage,
            prompt=render_messages(messages),
        )

    def close(self) -> None:
        self._client.close()


def usage_from_json(data: Mapping[str, Any]) -> Usage:
    """The inverse of ``dataclasses.asdict(usage)`` as written to a cassette."""
    fields = {f.name for f in dataclasses.fields(Usage)}
    return Usage(**{k: v for k, v in json.loads(json.dumps(data)).items() if k in fields})
