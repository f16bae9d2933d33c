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
DIFF_SHARE = 0.6  # a parent's diff against the seed replaces its files up to this share


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
    # Most recent candidates shown: between max_feedback/2 + 1 and max_feedback (epochs of
    # max_feedback/2 calls). 12 rather than 8: 0.858 instead of 0.846 of each prompt is the
    # previous call's prefix (bench/prompt_cache_share.py), and the model sees more outcomes.
    max_feedback: int = 12
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


def _settings(values: Mapping[str, Any]) -> str:
    # One line per setting and per workload: the shapes and dtypes a kernel is timed on
    # are what its block sizes should fit. The held-out settings are left out on purpose.
    lines = []
    for key, value in sorted(values.items()):
        if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            lines.append(f"{key}:")
            lines += [f"- {json.dumps(v, sort_keys=True)}" for v in value]
        else:
            lines.append(f"{key} = {json.dumps(value, sort_keys=True)}")
    return "\n".join(lines)


def system_prompt(
    target: TargetSpec, seed_files: Mapping[str, str], seed: ArchiveEntry | None = None
) -> str:
    """The stable prefix: identical for every call on ``target``.

    ``seed`` (the seed as evaluated, constant for a night) adds its measured metrics.
    """
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
    settings = {k: v for k, v in target.evaluator.items() if not k.startswith("held_out")}
    if settings:
        target_text += (
            "\n## How it is measured (the evaluator's settings in target.toml)\n\n"
            + _settings(settings)
            + "\n"
        )
    if seed is not None and seed.metrics:
        target_text += f"\nThe seed as measured: {_numbers(seed.metrics)}."
        if seed.knobs:
            target_text += f" Knob values: {_numbers(seed.knobs)}."
        target_text += "\n"
    example = worked_example(target, seed_files)
    if example:
        target_text += (
            "\n## An answer in the edit format, on the seed (it shows the format; it is "
            "not a suggestion)\n\n" + example
        )
    parts = [
        _template("system.txt"),
        _template("edit_format.txt"),
        _template("knobs.txt"),
        Template(kind_text).safe_substitute(kind=target.kind),
        target_text,
    ]
    return "\n\n".join(p.strip() for p in parts) + "\n"


def _example_block(path: str, source: str) -> tuple[str, str, str] | None:
    """(summary, SEARCH, REPLACE) of a small, valid edit of ``source``: a knob re-ranged."""
    try:
        from optimizer.edits import evolve_regions
        from optimizer.knobs import KnobError, parse_knobs
    except ImportError:
        return None
    try:
        regions = evolve_regions(source)
        knobs = parse_knobs(source, path)
    except (ValueError, SyntaxError, KnobError):
        return None
    lines = source.splitlines(keepends=True)
    starts = [sum(len(x) for x in lines[:i]) for i in range(len(lines))]
    for knob in knobs:
        line = lines[knob.line - 1]
        if "# knob:" not in line or not any(a <= starts[knob.line - 1] < b for a, b in regions):
            continue
        if knob.kind == "choices":
            kept = [c for c in knob.choices or () if c == knob.default]
            others = [c for c in knob.choices or () if c != knob.default]
            if len(others) < 2:
                continue
            wider = f"choices={[c for c in knob.choices or () if c in kept + others[1:]]!r}"
            what = f"drop {others[0]!r} from the choices of {knob.name}"
        else:
            wider = f"{knob.kind} {knob.low!r}..{knob.high * 2!r}"  # type: ignore[operator]
            wider += " log" if knob.log else ""
            wider += f" step {knob.step!r}" if knob.step is not None else ""
            what = f"let the search try {knob.name} up to {knob.high * 2!r}"  # type: ignore[operator]
        code, _, _ = line.partition("# knob:")
        return what, line, f"{code}# knob: {wider}\n"
    return None


def worked_example(target: TargetSpec, seed_files: Mapping[str, str]) -> str:
    """An answer in the edit format on the seed itself, checked by the real edit parser.

    Empty when the seed has no knob inside an EVOLVE-BLOCK to re-range, or when the
    example would not apply (it is then better left out than shown wrong).
    """
    for path in target.editable:
        found = _example_block(path, seed_files.get(path, ""))
        if found is None:
            continue
        what, search, replace = found
        answer = (
            f"SUMMARY: {what}\n{path}\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"
        )
        try:
            edited = apply_edits(seed_files, parse_edits(answer, target.editable))
        except EditError:
            return ""
        if edited == dict(seed_files):
            return ""
        return answer
    return ""


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


def _parent_text(parent: ArchiveEntry) -> str:
    lines = [f"State: {parent.state.value}. Metrics: {_numbers(parent.metrics)}."]
    if parent.knobs:
        lines.append(f"Knob values it was measured with: {_numbers(parent.knobs)}.")
    if parent.summary:
        lines.append(f"Its change: {parent.summary}")
    return "\n".join(lines)


def _blocks(text: str) -> list[tuple[int, int]] | None:
    """Spans of the EVOLVE-BLOCKs of ``text``, marker lines included; None without markers."""
    from optimizer.edits import END, START, evolve_regions

    if START not in text:
        return None
    try:
        regions = evolve_regions(text)
    except ValueError:
        return None
    spans = []
    for a, b in regions:
        first = text.rfind("\n", 0, a - 1) + 1  # the START marker's line
        last = text.find("\n", b)  # the END marker's line
        spans.append((first, len(text) if last < 0 else last + 1))
    if not all(START in text[a:b] and END in text[a:b] for a, b in spans):
        return None
    return spans


def _outside(text: str, spans: list[tuple[int, int]]) -> list[str]:
    bounds = [0, *[x for span in spans for x in span], len(text)]
    return [text[bounds[i] : bounds[i + 1]] for i in range(0, len(bounds), 2)]


def _parent_code(files: Mapping[str, str], seed: Mapping[str, str]) -> str:
    """The parent's files, as short as they can be shown exactly.

    The seed is in the system message, so a parent file is shown as (in order of preference)
    "identical to the seed", a diff against the seed when that is at most ``DIFF_SHARE`` of
    its EVOLVE-BLOCKs, or its EVOLVE-BLOCKs in full (everything outside them is the seed's,
    byte for byte). This part misses the cache on every call (it follows the growing
    feedback log), so each token saved here is saved on every call.
    """
    parts = []
    for path, text in files.items():
        old = seed.get(path)
        if old == text:
            parts.append(f"### {path}\nIdentical to the seed's {path}, shown in full above.")
            continue
        spans = _blocks(text)
        same_outside = (
            spans is not None
            and old is not None
            and (seed_spans := _blocks(old)) is not None
            and len(seed_spans) == len(spans)
            and _outside(text, spans) == _outside(old, seed_spans)
        )
        shown = sum(b - a for a, b in spans) if same_outside and spans else len(text)
        if old is not None:
            diff = "\n".join(
                difflib.unified_diff(
                    old.splitlines(), text.splitlines(), f"seed/{path}", f"parent/{path}",
                    lineterm="", n=3,
                )
            )  # fmt: skip
            if len(diff) <= DIFF_SHARE * shown:
                parts.append(
                    f"### {path}: the seed's {path} (above) with this diff applied\n"
                    "Copy SEARCH text from the parent: the diff's context and `+` lines "
                    "(without their first character) and the seed's lines the diff leaves "
                    f"alone.\n```diff\n{diff}\n```"
                )
                continue
        if not same_outside or spans is None:
            parts.append(_fenced(path, text))
            continue
        parts.append(
            f"### {path}: its EVOLVE-BLOCKs; every line outside them is as in the seed above"
        )
        parts += [_fenced(path, text[a:b]).partition("\n")[2] for a, b in spans]
    return "\n\n".join(parts)


def _inspiration_item(e: ArchiveEntry, seed: Mapping[str, str], limit: int) -> str:
    # A diff against the seed, not the parent, so that its text does not depend on the parent.
    return (
        f"## {_entry_line(e)}\nMetrics: {_numbers(e.metrics)}. Its code, as a diff against the "
        f"seed:\n{_diff(seed, e.files, limit)}"
    )


def user_prompt(
    ctx: ProposalContext,
    settings: LLMSettings,
    history: Sequence[ArchiveEntry] | None = None,
    inspirations: Sequence[ArchiveEntry] | None = None,
) -> str:
    """The varying part, least often changed first: inspirations, feedback, the parent.

    Within an epoch of the feedback log (see ``feedback_window``) the inspirations are the
    ones chosen when the epoch began and the log only grows, so everything up to the newest
    feedback entry is the previous call's text. The parent comes last: the archive picks a
    different one on about 63% of calls (bench/prompt_cache_share.py), and placed before the
    log it would take the whole log out of the cached prefix each time.

    ``history`` is the target's candidates so far, oldest first (the proposer keeps it);
    without it, ``ctx.feedback`` (newest first) is used. ``inspirations`` default to the
    context's.
    """
    limit = settings.max_artifact_chars
    if history is None:
        history = list(reversed(ctx.feedback))
    if inspirations is None:
        inspirations = ctx.inspirations[: settings.max_inspirations]
    feedback = [_feedback_item(e, limit) for e in feedback_window(history, settings.max_feedback)]
    shown = [_inspiration_item(e, ctx.seed.files, limit) for e in inspirations]
    return Template(_template("task.txt")).substitute(
        parent_id=ctx.parent.id,
        parent_metrics=_parent_text(ctx.parent),
        parent_files=_parent_code(ctx.parent.files, ctx.seed.files),
        inspirations=(
            "# Other candidates for inspiration (best and diverse)\n\n" + "\n\n".join(shown)
            if shown
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


def _best(entries: Sequence[ArchiveEntry], target: TargetSpec) -> float | None:
    values = [e.objectives[0] for e in entries if e.objectives]
    if not values:
        return None
    return min(values) if target.primary.minimize else max(values)


def _better(new: Sequence[ArchiveEntry], old: Sequence[ArchiveEntry], target: TargetSpec) -> bool:
    a, b = _best(new, target), _best(old, target)
    if a is None or b is None:
        return a is not None
    return a < b if target.primary.minimize else a > b


class PromptBook:
    """The prompts of one proposer: a system message per target and each target's history.

    ``messages(context)`` is all that ``LLMProposer.propose`` sends; the benchmark
    bench/prompt_cache_share.py drives the same object, so what it measures is what is sent.
    The inspirations shown are the context's at the start of each feedback epoch, kept until
    the next one: the archive draws one of them at random on every call, which would
    otherwise change the prompt right after the system message.
    """

    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self._system: dict[str, str] = {}
        self._history: dict[str, list[ArchiveEntry]] = {}  # per target, oldest first
        # per target: (first history index of the epoch, the inspirations frozen for it)
        self._epoch: dict[str, tuple[int, tuple[ArchiveEntry, ...]]] = {}

    def messages(self, context: ProposalContext) -> list[dict[str, str]]:
        target, s = context.target, self.settings
        if target.name not in self._system:
            self._system[target.name] = system_prompt(target, context.seed.files, context.seed)
        history = self._history.setdefault(target.name, [])
        known = {e.id for e in history}
        history += [e for e in reversed(context.feedback) if e.id not in known]
        start = len(history) - len(feedback_window(history, s.max_feedback))
        epoch = self._epoch.get(target.name)
        offered = tuple(context.inspirations[: s.max_inspirations])
        if epoch is None or (not epoch[1] and offered):
            epoch = (start, offered)
        elif epoch[0] != start:
            # A new epoch: take the context's inspirations only if they hold a better
            # candidate than the ones shown; otherwise the unchanged text stays cached.
            epoch = (start, offered if _better(offered, epoch[1], target) else epoch[1])
        self._epoch[target.name] = epoch
        user = user_prompt(context, s, history, epoch[1])
        return [
            {"role": "system", "content": self._system[target.name]},
            {"role": "user", "content": user},
        ]


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
        self._prompts = PromptBook(settings)
        self._arms = {name: _Arm() for name in settings.model_names}
        self._parents: dict[str, tuple[float, bool]] = {}

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
        messages = self._prompts.messages(context)
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
