"""Knobs: tunable constants declared in the source itself.

A knob is a module- or class-level single-name assignment of a literal, annotated on the
same line::

    NUM_WARPS = 4  # knob: choices=[1, 2, 4, 8, 16]
    CACHE_WEIGHT = 0.5  # knob: float 0.0..4.0
    TOP_K = 8  # knob: int 1..64 log
    METHOD = "sort"  # knob: choices=["sort", "argpartition"]
    STEP = 10  # knob: int 0..100 step 5

Every candidate stays plain code: Optuna samples values and :func:`substitute` writes them
over the literals, leaving every other byte (spacing, comments, the annotation) as it was.
Text after a second ``#`` on the annotation is free commentary.

Only ``.py`` files carry knobs, and a file without the text ``knob:`` is not parsed at all,
so a non-Python editable file or a syntax error elsewhere never reaches this module.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import math
import numbers
import re
import tokenize
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from optimizer import syntax
from optimizer.errors import KnobError

if TYPE_CHECKING:  # optuna costs ~0.5 s to import; only distributions() needs it
    from optuna.distributions import BaseDistribution

_ANNOTATION = re.compile(r"#\s*knob:")
_COMMENT = re.compile(r"\s*#\s*knob:(.*)$")
_NEWLINE = re.compile(r"\r\n|\r|\n")
_RANGE = re.compile(r"^(int|float)\s+(\S+?)\s*\.\.\s*(\S+)(.*)$")
_LITERAL_TYPES = (bool, int, float, str, type(None))


@dataclass(frozen=True)
class Knob:
    """One declared knob. ``default`` is the literal currently written in the source."""

    name: str
    kind: str  # "choices" | "int" | "float"
    choices: tuple[Any, ...] | None
    low: int | float | None
    high: int | float | None
    log: bool
    step: int | float | None
    default: Any
    file: str
    line: int

    def describe(self) -> str:
        """The annotation as it would be written after ``# knob:``."""
        if self.kind == "choices":
            return f"choices={list(self.choices or ())!r}"
        text = f"{self.kind} {self.low!r}..{self.high!r}"
        if self.log:
            text += " log"
        if self.step is not None:
            text += f" step {self.step!r}"
        return text


@dataclass(frozen=True)
class _Site:
    knob: Knob
    start: int  # character offsets of the literal in the source
    end: int


# ----------------------------------------------------------------------------- parsing


def _line_starts(source: str) -> list[int]:
    return [0] + [m.end() for m in _NEWLINE.finditer(source)]


def _char_col(line_text: str, byte_col: int) -> int:
    # ast reports UTF-8 byte columns; only non-ASCII lines need converting.
    if line_text.isascii():
        return byte_col
    return len(line_text.encode()[:byte_col].decode())


def _same_literal(a: Any, b: Any) -> bool:
    # True == 1 in Python, but a knob with choices=[1, 2] must not accept True.
    return type(a) is type(b) and a == b


def _literal(node: ast.expr) -> tuple[bool, Any]:
    if isinstance(node, ast.Constant) and isinstance(node.value, _LITERAL_TYPES):
        return True, node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub | ast.UAdd)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, int | float)
        and not isinstance(node.operand.value, bool)
    ):
        value = node.operand.value
        return True, -value if isinstance(node.op, ast.USub) else value
    return False, None


def _number(text: str, kind: str, err: functools.partial[KnobError]) -> int | float:
    try:
        value: int | float = int(text) if kind == "int" else float(text)
    except ValueError:
        raise err(
            f"bound {text!r} is not {'an integer' if kind == 'int' else 'a number'}; "
            f"write e.g. '{kind} 1..64'"
        ) from None
    if not math.isfinite(value):
        raise err(f"bound {text!r} is not finite; write a finite number")
    return value


def _on_grid(value: float, low: float, step: float) -> bool:
    k = (value - low) / step
    return abs(k - round(k)) <= 1e-9 * max(1.0, abs(k))


def _parse_choices(text: str, err: functools.partial[KnobError]) -> tuple[Any, ...]:
    hint = 'write e.g. choices=[1, 2, 4] or choices=["a", "b"]'
    parsed: Any = None
    for cut in [len(text)] + [i for i, ch in enumerate(text) if ch == "#"]:
        try:
            parsed = syntax.literal_eval(text[:cut].strip())
            break
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    if not isinstance(parsed, list | tuple) or not parsed:
        raise err(f"choices {text.strip()!r} is not a non-empty list of literals; {hint}")
    for choice in parsed:
        if not isinstance(choice, _LITERAL_TYPES):
            raise err(f"choice {choice!r} is not an int, float, str, bool or None; {hint}")
    for i, choice in enumerate(parsed):
        if any(_same_literal(choice, other) for other in parsed[:i]):
            raise err(f"choice {choice!r} is listed twice; list each choice once")
    return tuple(parsed)


def _make_knob(name: str, default: Any, body: str, file: str, line: int) -> Knob:
    err = functools.partial(KnobError, file=file, line=line, knob=name)
    body = body.strip()
    if body.startswith("choices"):
        rest = body[len("choices") :].lstrip()
        if not rest.startswith("="):
            raise err(f"annotation {body!r} lacks '='; write choices=[...]")
        choices = _parse_choices(rest[1:], err)
        if not any(_same_literal(default, c) for c in choices):
            raise err(
                f"default {default!r} is not one of the choices {list(choices)!r}; "
                "write one of the choices (same type) as the value"
            )
        return Knob(name, "choices", choices, None, None, False, None, default, file, line)

    match = _RANGE.match(body.split("#", 1)[0].strip())
    if not match:
        raise err(
            f"annotation {body!r} is not understood; write 'choices=[...]', "
            "'int LOW..HIGH [log] [step N]' or 'float LOW..HIGH [log] [step X]'"
        )
    kind, low_text, high_text, options = match.groups()
    low, high = _number(low_text, kind, err), _number(high_text, kind, err)
    if low > high:
        raise err(f"range {low_text}..{high_text} is empty; write LOW..HIGH with LOW <= HIGH")
    log, step = False, None
    words = options.replace("=", " ").split()
    i = 0
    while i < len(words):
        if words[i] == "log":
            log = True
            i += 1
        elif words[i] == "step" and i + 1 < len(words):
            step = _number(words[i + 1], kind, err)
            i += 2
        else:
            raise err(f"option {words[i]!r} is not understood; options are 'log' and 'step N'")
    if log and low <= 0:
        raise err(f"log range {low_text}..{high_text} needs LOW > 0; raise LOW or drop 'log'")
    if log and step is not None:
        raise err("'log' and 'step' cannot be combined (Optuna refuses it); keep one")
    if step is not None:
        if step <= 0:
            raise err(f"step {step!r} must be positive")
        if not _on_grid(high, low, step):
            raise err(f"range {low_text}..{high_text} is not a whole number of steps of {step!r}")
    kind_hint = "an integer" if kind == "int" else "a number"
    if isinstance(default, bool) or not isinstance(default, int | float):
        raise err(f"default {default!r} is not {kind_hint}; write {kind_hint} in the range")
    if kind == "int" and not isinstance(default, int):
        raise err(f"default {default!r} is not an integer; write an integer or declare 'float'")
    if kind == "float":
        default = float(default)
    if not math.isfinite(default) or not low <= default <= high:
        raise err(
            f"default {default!r} outside {kind} {low_text}..{high_text}; "
            "write a value inside the range"
        )
    if step is not None and not _on_grid(default, low, step):
        raise err(f"default {default!r} is not on the grid {low_text} + k*{step!r}")
    return Knob(name, kind, None, low, high, log, step, default, file, line)


def _assignments(body: list[ast.stmt]) -> Iterable[ast.Assign | ast.AnnAssign]:
    for node in body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            yield node
        elif isinstance(node, ast.ClassDef):
            yield from _assignments(node.body)


def _comment_lines(source: str) -> set[int]:
    """Lines holding a real ``# knob:`` comment (not text inside a string)."""
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and _ANNOTATION.match(tok.string):
            lines.add(tok.start[0])
    return lines


@functools.lru_cache(maxsize=256)
def _scan(source: str, file: str) -> tuple[_Site, ...]:
    # Cached: the engine parses the same structure for distributions, substitution and
    # the structure key of every trial; a 300-line file costs ~1 ms uncached.
    if "knob:" not in source:
        return ()
    try:
        tree = syntax.parse(source)
    except SyntaxError as exc:
        raise KnobError(
            f"not valid Python ({exc.msg}); fix the syntax", file=file, line=exc.lineno
        ) from None
    starts = _line_starts(source)
    texts = [source[a:b] for a, b in zip(starts, starts[1:] + [len(source)], strict=True)]
    marked = {i + 1 for i, text in enumerate(texts) if _ANNOTATION.search(text)}
    sites: list[_Site] = []
    seen: dict[str, int] = {}
    matched: set[int] = set()
    for node in _assignments(tree.body):
        value = node.value
        if value is None or node.end_lineno not in marked or node.end_col_offset is None:
            continue
        line = node.end_lineno
        text = texts[line - 1]
        comment = _COMMENT.match(text, _char_col(text, node.end_col_offset))
        if comment is None:
            continue  # another statement or a plain comment follows the value
        matched.add(line)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if len(targets) != 1 or not isinstance(targets[0], ast.Name):
            raise KnobError(
                "'# knob:' needs a single-name assignment; write NAME = literal",
                file=file,
                line=line,
            )
        name = targets[0].id
        if node.lineno != line or value.lineno != line or value.end_col_offset is None:
            raise KnobError(
                "the assignment spans lines; write it on one line", file=file, line=line, knob=name
            )
        ok, default = _literal(value)
        if not ok:
            raise KnobError(
                f"value {ast.get_source_segment(source, value)!r} is not a literal; "
                "write a number, string, bool or None",
                file=file,
                line=line,
                knob=name,
            )
        if name in seen:
            raise KnobError(
                f"declared twice (first on line {seen[name]}); rename one of them",
                file=file,
                line=line,
                knob=name,
            )
        seen[name] = line
        knob = _make_knob(name, default, comment.group(1), file, line)
        base = starts[line - 1]
        start, end = (_char_col(text, col) for col in (value.col_offset, value.end_col_offset))
        sites.append(_Site(knob, base + start, base + end))
    if marked - matched:
        for line in sorted(_comment_lines(source) - matched):
            raise KnobError(
                "'# knob:' is not on a module- or class-level 'NAME = literal' line; "
                "move the constant to module level or remove the annotation",
                file=file,
                line=line,
            )
    return tuple(sites)


def parse_knobs(source: str, file: str = "<source>") -> list[Knob]:
    """The knobs declared in ``source``, in source order; KnobError on a bad declaration."""
    return [site.knob for site in _scan(source, file)]


def _knob_files(files: Mapping[str, str]) -> list[str]:
    return sorted(path for path in files if path.endswith(".py"))


def knobs_of_files(files: Mapping[str, str]) -> dict[str, Knob]:
    """Knobs of every ``.py`` file by name; the same name in two files is a KnobError."""
    return _by_name({path: _scan(files[path], path) for path in _knob_files(files)})


def _by_name(sites: Mapping[str, tuple[_Site, ...]]) -> dict[str, Knob]:
    out: dict[str, Knob] = {}
    for path in sorted(sites):
        for knob in (site.knob for site in sites[path]):
            if knob.name in out:
                first = out[knob.name]
                raise KnobError(
                    f"also declared in {first.file}, line {first.line}; knob names are "
                    "global to a target: rename one of them",
                    file=path,
                    line=knob.line,
                    knob=knob.name,
                )
            out[knob.name] = knob
    return out


def values_of(files: Mapping[str, str]) -> dict[str, Any]:
    """The values currently written in the sources, by knob name."""
    return {name: knob.default for name, knob in knobs_of_files(files).items()}


def distributions(knobs: Iterable[Knob]) -> dict[str, BaseDistribution]:
    """Optuna distributions for ``study.ask``, by knob name."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    out: dict[str, BaseDistribution] = {}
    for knob in knobs:
        if knob.kind == "choices":
            out[knob.name] = CategoricalDistribution(list(knob.choices or ()))
        elif knob.kind == "int":
            assert knob.low is not None and knob.high is not None
            out[knob.name] = IntDistribution(
                int(knob.low), int(knob.high), log=knob.log, step=int(knob.step or 1)
            )
        else:
            assert knob.low is not None and knob.high is not None
            out[knob.name] = FloatDistribution(
                float(knob.low), float(knob.high), log=knob.log, step=knob.step
            )
    return out


# ------------------------------------------------------------------------- substitution


def literal_text(knob: Knob, value: Any) -> str:
    """The source text for ``value`` as ``knob``'s literal; KnobError if it does not fit."""
    err = functools.partial(KnobError, file=knob.file, line=knob.line, knob=knob.name)
    if knob.kind == "choices":
        for choice in knob.choices or ():
            if _same_literal(value, choice):
                return repr(choice)
        raise err(f"value {value!r} is not one of {list(knob.choices or ())!r}; pick a choice")
    assert knob.low is not None and knob.high is not None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise err(f"value {value!r} is not a number ({knob.describe()})")
    if knob.kind == "int":
        if not isinstance(value, numbers.Integral):
            raise err(f"value {value!r} is not an integer ({knob.describe()})")
        number: int | float = int(value)
    else:
        number = float(value)
    if not math.isfinite(number) or not knob.low <= number <= knob.high:
        raise err(f"value {value!r} outside {knob.describe()}; use a value inside the range")
    if knob.step is not None and not _on_grid(number, knob.low, knob.step):
        raise err(f"value {value!r} is not on the grid of {knob.describe()}")
    return str(number) if knob.kind == "int" else repr(number)


def _splice(source: str, sites: Iterable[_Site], texts: Mapping[str, str]) -> str:
    parts: list[str] = []
    pos = 0
    for site in sites:  # in source order, so one pass builds the result
        if site.knob.name in texts:
            parts += [source[pos : site.start], texts[site.knob.name]]
            pos = site.end
    parts.append(source[pos:])
    return "".join(parts)


def substitute(source: str, values: Mapping[str, Any], file: str = "<source>") -> str:
    """``source`` with each named knob's literal replaced; every other byte is kept."""
    return _substituted(source, _scan(source, file), values, file)


def _substituted(source: str, sites: tuple[_Site, ...], values: Mapping[str, Any],
                 file: str) -> str:
    by_name = {site.knob.name: site.knob for site in sites}
    unknown = sorted(set(values) - set(by_name))
    if unknown:
        raise KnobError(
            f"no knob named {', '.join(unknown)} here; known: {sorted(by_name) or 'none'}",
            file=file,
        )
    texts = {name: literal_text(by_name[name], value) for name, value in values.items()}
    for site in sites:
        text = texts.get(site.knob.name)
        # Keep the file's quote style: repr() always picks single quotes.
        if text and text[0] == "'" and source[site.start] == '"' and '"' not in text:
            texts[site.knob.name] = f'"{text[1:-1]}"'
    return _splice(source, sites, texts)


def substitute_files(files: Mapping[str, str], values: Mapping[str, Any]) -> dict[str, str]:
    """Every file with the knob values written in; names unknown in all files: KnobError."""
    knobs = knobs_of_files(files)
    unknown = sorted(set(values) - set(knobs))
    if unknown:
        raise KnobError(
            f"no knob named {', '.join(unknown)} in these files; known: {sorted(knobs) or 'none'}"
        )
    out = dict(files)
    for path in _knob_files(files):
        mine = {name: v for name, v in values.items() if knobs[name].file == path}
        if mine:
            out[path] = substitute(files[path], mine, path)
    return out


def structure_key(files: Mapping[str, str]) -> str:
    """Hash of the sources with every knob literal blanked (annotations kept).

    Two candidates that differ only in knob values share a key; re-ranging a knob or
    changing any other byte gives a new one.
    """
    return _structure(files, {path: _scan(files[path], path) for path in _knob_files(files)})


def _structure(files: Mapping[str, str], sites: Mapping[str, tuple[_Site, ...]]) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        source = files[path]
        if path in sites:
            mine = sites[path]
            source = _splice(source, mine, {site.knob.name: "_" for site in mine})
        h.update(path.encode())
        h.update(b"\0")
        h.update(source.encode())
        h.update(b"\0")
    return h.hexdigest()[:12]


# ------------------------------------------------------------------- a program's knobs


@dataclass(frozen=True)
class Declared:
    """A program's knobs, parsed once: what a candidate's life needs of them (the values
    written, Optuna's distributions, the structure key, the sources with other values).
    Make one with :func:`declared`."""

    files: Mapping[str, str]
    knobs: Mapping[str, Knob]  # by name
    sites: Mapping[str, tuple[_Site, ...]]  # by .py file
    structure: str

    @property
    def values(self) -> dict[str, Any]:
        """The values written in the sources, by knob name."""
        return {name: knob.default for name, knob in self.knobs.items()}

    def distributions(self) -> dict[str, BaseDistribution]:
        return distributions(self.knobs.values())

    def substitute(self, values: Mapping[str, Any]) -> dict[str, str]:
        """Every file with ``values`` written in; a name unknown here: KnobError."""
        unknown = sorted(set(values) - set(self.knobs))
        if unknown:
            raise KnobError(f"no knob named {', '.join(unknown)} in these files; known: "
                            f"{sorted(self.knobs) or 'none'}")
        out = dict(self.files)
        for path, sites in self.sites.items():
            mine = {name: v for name, v in values.items() if self.knobs[name].file == path}
            if mine:
                out[path] = _substituted(self.files[path], sites, mine, path)
        return out


def declared(files: Mapping[str, str]) -> Declared:
    """The knobs of ``files``, each source parsed once; KnobError on a bad declaration
    (the same name in two files included)."""
    sites = {path: _scan(files[path], path) for path in _knob_files(files)}
    return Declared(files=dict(files), knobs=_by_name(sites), sites=sites,
                    structure=_structure(files, sites))
