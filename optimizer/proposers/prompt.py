"""The LLM proposer's prompt: the messages built from a ProposalContext.

Two messages per call. The system message is byte-identical for every call on one target
(rules, edit format, knob syntax, the evaluator's contract for the target's kind, the
target's description and seed program) so that provider prompt caches hit; the user message
holds what changes (inspirations, feedback from recent candidates, the parent), ordered so
that successive calls share as long a prefix as they can. The texts live in ``prompts/``.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from string import Template
from typing import Any

from optimizer.config import LLMConfig
from optimizer.edits import apply_edits, parse_edits
from optimizer.errors import EditError
from optimizer.proposers._base import ProposalContext
from optimizer.proposers.context import ContextPolicy, epoch_start, policy
from optimizer.records import ArchiveEntry, CandidateState, program_metrics
from optimizer.targets import TargetSpec

DIFF_SHARE = 0.6  # a parent's diff against the seed replaces its files up to this share


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
    target: TargetSpec,
    seed_files: Mapping[str, str],
    seed: ArchiveEntry | None = None,
    kind_text: str = "",
    trusted_files: Mapping[str, str] | None = None,
) -> str:
    """The stable prefix: identical for every call on ``target``.

    ``seed`` (the seed as evaluated, constant for a night) adds its measured metrics;
    ``kind_text`` is the kind's own contract (the generic text when empty) and
    ``trusted_files`` the non-editable files its evaluator shows (a kernel's reference).
    """
    kind_text = kind_text or _template("kind.txt")
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
    for name, text in (trusted_files or {}).items():
        target_text += f"\n## {name} (trusted, not editable)\n\n" + _fenced(name, text) + "\n"
    settings = {k: v for k, v in target.evaluator.items() if not k.startswith("held_out")}
    if settings:
        target_text += (
            "\n## How it is measured (the evaluator's settings in target.toml)\n\n"
            + _settings(settings)
            + "\n"
        )
    if seed is not None and seed.metrics:
        target_text += f"\nThe seed as measured: {_numbers(program_metrics(seed.metrics))}."
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
            edited = apply_edits(seed_files, parse_edits(answer, target.editable), target.symbols)
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
    return list(history[epoch_start(len(history), shown):])


def _feedback_item(e: ArchiveEntry, limit: int, brief: bool = False) -> str:
    # Rendered the same wherever the entry sits in the list, so that an entry's text stays
    # identical from call to call (and cached). A brief entry keeps its verdict, the first
    # line of its reason and its metrics.
    item = [f"## {_entry_line(e)}"]
    if e.reason:
        reason = e.reason.strip().splitlines()[0] if brief else e.reason
        item.append(f"Reason: {_clip(reason, limit)}")
    if e.metrics:
        item.append(f"Metrics: {_numbers(program_metrics(e.metrics))}")
    if e.state is not CandidateState.VALID and not brief:  # the report or log says why
        item += [f"{name}:\n{_clip(text, limit)}" for name, text in sorted(e.artifacts.items())]
    elif e.state is not CandidateState.VALID and e.artifacts:
        item.append(f"(reports left out: {', '.join(sorted(e.artifacts))})")
    return "\n".join(item)


def _parent_text(parent: ArchiveEntry) -> str:
    lines = [f"State: {parent.state.value}. Metrics: {_numbers(program_metrics(parent.metrics))}."]
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
        f"## {_entry_line(e)}\nMetrics: {_numbers(program_metrics(e.metrics))}. Its code, as a "
        f"diff against the seed:\n{_diff(seed, e.files, limit)}"
    )


def user_prompt(
    ctx: ProposalContext,
    settings: LLMConfig,
    history: Sequence[ArchiveEntry] | None = None,
    inspirations: Sequence[ArchiveEntry] | None = None,
    context: ContextPolicy | None = None,
) -> str:
    """The varying part, least often changed first: inspirations, feedback, the parent.

    Within an epoch of the feedback log (see ``feedback_window``) the inspirations are the
    ones chosen when the epoch began and the log only grows, so everything up to the newest
    feedback entry is the previous call's text. The parent comes last: the archive picks a
    different one on about 63% of calls (bench/prompt_cache_share.py), and placed before the
    log it would take the whole log out of the cached prefix each time.

    ``history`` is the target's candidates so far, oldest first (the proposer keeps it);
    without it, ``ctx.feedback`` (newest first) is used. ``inspirations`` default to the
    context's. ``context`` is the context policy (default: the settings' ``context``).
    """
    limit = settings.max_artifact_chars
    if history is None:
        history = list(reversed(ctx.feedback))
    if inspirations is None:
        inspirations = ctx.inspirations[: settings.max_inspirations]
    context = context or policy(settings.context)
    most, n = settings.max_feedback, len(history)
    first = context.window(n, most)
    feedback = [_feedback_item(history[i], limit, context.brief(i, n, most))
                for i in range(first, n)]
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

    def __init__(self, settings: LLMConfig) -> None:
        self.settings = settings
        self.context = policy(settings.context)
        self._system: dict[str, str] = {}
        self._history: dict[str, list[ArchiveEntry]] = {}  # per target, oldest first
        # per target: (first history index of the epoch, the inspirations frozen for it)
        self._epoch: dict[str, tuple[int, tuple[ArchiveEntry, ...]]] = {}

    def messages(self, context: ProposalContext) -> list[dict[str, str]]:
        target, s = context.target, self.settings
        if target.name not in self._system:
            self._system[target.name] = system_prompt(
                target, context.seed.files, context.seed, context.kind_text,
                context.trusted_files,
            )
        history = self._history.setdefault(target.name, [])
        known = {e.id for e in history}
        history += [e for e in reversed(context.feedback) if e.id not in known]
        start = self.context.window(len(history), s.max_feedback)
        epoch = self._epoch.get(target.name)
        offered = tuple(context.inspirations[: s.max_inspirations])
        if epoch is None or (not epoch[1] and offered) or not self.context.frozen_inspirations:
            epoch = (start, offered)
        elif epoch[0] != start:
            # A new epoch: take the context's inspirations only if they hold a better
            # candidate than the ones shown; otherwise the unchanged text stays cached.
            epoch = (start, offered if _better(offered, epoch[1], target) else epoch[1])
        self._epoch[target.name] = epoch
        user = user_prompt(context, s, history, epoch[1], self.context)
        return [
            {"role": "system", "content": self._system[target.name]},
            {"role": "user", "content": user},
        ]


def render_messages(messages: Sequence[Mapping[str, str]]) -> str:
    """Messages as one markdown text (the ``prompt.md`` artifact)."""
    return "\n\n".join(f"<!-- {m['role']} -->\n{m['content']}" for m in messages)
