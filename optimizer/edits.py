"""Editable regions and strict edits.

Editable regions sit between a line containing ``# EVOLVE-BLOCK-START`` and a line
containing ``# EVOLVE-BLOCK-END``; outside them nothing may change. A file without any
marker is editable as a whole, or, where the target names definitions in it
(``editable = ["serving/x.py::apply_penalty"]``), those definitions are its editable
regions: their text from the first decorator to the last line may change, nothing else.

The answer format (the prompt in ``optimizer/proposers/prompts/edit_format.txt`` shows it
to the model) has two kinds of edit:

SEARCH/REPLACE blocks: the file path alone on the line before the block (optionally in
backticks, after ``File:``, or as a markdown heading; a code fence may sit in between),
then::

    <<<<<<< SEARCH
    exact old lines
    =======
    new lines
    >>>>>>> REPLACE

A block without its own path line continues the previous block's file. SEARCH text is
whole lines and must occur exactly once, starting at the beginning of a line.

Whole-file rewrites: a line ``File: <path>`` (or the path alone, or in backticks) followed
by a fenced code block holding the complete new file. Text outside the EVOLVE-BLOCKs must
come back byte-identical.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence

from optimizer.errors import EditError
from optimizer.records import FileEdit

START = "EVOLVE-BLOCK-START"
END = "EVOLVE-BLOCK-END"

SEARCH_MARK = "<<<<<<< SEARCH"
DIVIDER_MARK = "======="
REPLACE_MARK = ">>>>>>> REPLACE"

_SEARCH_RE = re.compile(r"^\s*<{5,9} ?SEARCH\s*$")
_DIVIDER_RE = re.compile(r"^\s*={5,9}\s*$")
_REPLACE_RE = re.compile(r"^\s*>{5,9} ?REPLACE\s*$")
_FENCE_OPEN_RE = re.compile(r"^(`{3,})[\w.+-]*\s*$")
_PATH_PREFIX_RE = re.compile(r"^(?:file|path|full file|filename)\s*:\s*", re.IGNORECASE)


def evolve_regions(source: str, symbols: Sequence[str] = ()) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the editable regions of ``source``.

    A region starts after the end of the START marker's line and ends at the beginning of
    the END marker's line. A file without markers is one region covering everything, or,
    with ``symbols`` (definition names, "Class.method" for a method), one region per named
    definition: its lines, decorators included. Unbalanced markers, a source that does not
    parse or a named definition it lacks raise ValueError.
    """
    if symbols and START not in source and END not in source:
        return symbol_regions(source, symbols)
    regions: list[tuple[int, int]] = []
    pos = 0
    open_at: int | None = None
    for line in source.splitlines(keepends=True):
        if START in line:
            if open_at is not None:
                raise ValueError("nested EVOLVE-BLOCK-START")
            open_at = pos + len(line)
        elif END in line:
            if open_at is None:
                raise ValueError("EVOLVE-BLOCK-END without START")
            regions.append((open_at, pos))
            open_at = None
        pos += len(line)
    if open_at is not None:
        raise ValueError("EVOLVE-BLOCK-START without END")
    if not regions and START not in source:
        return [(0, len(source))]
    return regions


def symbol_regions(source: str, symbols: Sequence[str]) -> list[tuple[int, int]]:
    """Character spans of the named definitions of ``source``, in file order."""
    from optimizer import syntax
    from optimizer.targets import symbol_span

    try:
        tree = syntax.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"the file does not parse ({exc.msg}, line {exc.lineno})") from None
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    spans = []
    for name in symbols:
        found = symbol_span(tree, name)
        if found is None:
            raise ValueError(f"the definition {name!r} is gone")
        first, last = found
        spans.append((starts[first - 1], starts[min(last, len(starts) - 1)]))
    return sorted(spans)


# --------------------------------------------------------------------------- parsing


def _clean_path(line: str) -> tuple[str, bool]:
    """The path named by ``line`` and whether it was explicitly labelled (``File:``)."""
    text = line.strip().lstrip("#").strip().strip("*").strip()
    labelled = bool(_PATH_PREFIX_RE.match(text))
    text = _PATH_PREFIX_RE.sub("", text).strip().strip("*`'\"").strip()
    text = text.rstrip(":").strip().strip("`")
    if text.startswith("./"):
        text = text[2:]
    return text, labelled


def _resolve_path(name: str, editable: Sequence[str]) -> str | None:
    if name in editable:
        return name
    # "targets/kernels/softmax/kernel.py" for the editable "kernel.py": same file; and
    # "serving/x.py" (or its tail) for the editable "../../serving/x.py" elsewhere in the
    # repository
    hits = [e for e in editable if name.endswith("/" + e)]
    if not hits:
        tails = {e: _without_ups(e) for e in editable}
        hits = [e for e, t in tails.items() if t != e and (name == t or name.endswith("/" + t)
                                                           or t.endswith("/" + name))]
    return hits[0] if len(hits) == 1 else None


def _without_ups(path: str) -> str:
    parts = path.split("/")
    while parts and parts[0] in ("..", "."):
        parts.pop(0)
    return "/".join(parts)


def _not_editable(name: str, editable: Sequence[str], where: str) -> EditError:
    allowed = ", ".join(editable)
    if " " in name.strip():
        return EditError(
            f"{where}: the line before it must be the file path alone, got {name!r}; "
            f"editable files: {allowed}"
        )
    return EditError(
        f"{where}: file {name!r} may not be edited; only these files may: {allowed}",
        file=name,
    )


def _fence_close(lines: list[str], start: int, ticks: int) -> int | None:
    for j in range(start, len(lines)):
        stripped = lines[j].strip()
        if stripped and set(stripped) == {"`"} and len(stripped) >= ticks:
            return j
    return None


def _previous_line(lines: list[str], i: int, skip_fences: bool) -> int | None:
    j = i - 1
    while j >= 0:
        stripped = lines[j].strip()
        if stripped and not (skip_fences and _FENCE_OPEN_RE.match(stripped)):
            return j
        j -= 1
    return None


def parse_edits(text: str, editable: Sequence[str]) -> list[FileEdit]:
    """Parse a model's answer into edits, one :class:`FileEdit` per file, in answer order.

    Raises :class:`EditError` for a file not in ``editable``, an unterminated block, a
    file given both blocks and a rewrite, or an answer without any edit.
    """
    return _Answer(text, editable).edits()


class _Answer:
    """One answer read line by line: SEARCH/REPLACE blocks and whole-file rewrites."""

    def __init__(self, text: str, editable: Sequence[str]):
        self.lines = text.splitlines(keepends=True)
        self.editable = editable
        self.blocks: dict[str, list[tuple[str, str]]] = {}
        self.rewrites: dict[str, str] = {}
        self.order: list[str] = []
        self.last_path: str | None = None
        self.n_block = 0
        self.closers: set[int] = set()  # closing fences of fences that wrap blocks

    def edits(self) -> list[FileEdit]:
        lines, i = self.lines, 0
        while i < len(lines):
            line = lines[i]
            if i in self.closers:
                i += 1
                continue
            if _SEARCH_RE.match(line):
                i = self._block(i)
                continue
            fence = _FENCE_OPEN_RE.match(line.strip()) if not line[:1].isspace() else None
            if fence:
                i = self._fenced(i, len(fence.group(1)))
                continue
            if _REPLACE_RE.match(line) or (_DIVIDER_RE.match(line) and self.last_path is not None):
                raise EditError(
                    f"answer line {i + 1}: '{line.strip()}' outside a SEARCH/REPLACE block; "
                    f"each block starts with '{SEARCH_MARK}'"
                )
            i += 1
        if not self.order:
            raise EditError(
                "the answer contains no edit: give SEARCH/REPLACE blocks (file path on the "
                "line before '<<<<<<< SEARCH') or a whole-file rewrite ('File: <path>' "
                f"followed by a fenced code block); editable files: {', '.join(self.editable)}"
            )
        return [
            FileEdit(path=p, content=self.rewrites[p])
            if p in self.rewrites
            else FileEdit(path=p, blocks=tuple(self.blocks[p]))
            for p in self.order
        ]

    def _block(self, i: int) -> int:
        """The SEARCH/REPLACE block whose SEARCH line is ``i``; returns the line after it."""
        self.n_block += 1
        where = f"SEARCH/REPLACE block {self.n_block} (answer line {i + 1})"
        path = self._block_path(i, where)
        k = self._mark(i + 1, _DIVIDER_RE, (_SEARCH_RE, _REPLACE_RE), path,
                       f"{where} for {path}: unterminated, no '{DIVIDER_MARK}' line after "
                       f"'{SEARCH_MARK}'; every block needs SEARCH, {DIVIDER_MARK} and REPLACE")
        m = self._mark(k + 1, _REPLACE_RE, (_SEARCH_RE, _DIVIDER_RE), path,
                       f"{where} for {path}: unterminated, no '{REPLACE_MARK}' line after "
                       f"'{DIVIDER_MARK}' (was the answer cut off?)")
        lines = self.lines
        search, replace = "".join(lines[i + 1 : k]), "".join(lines[k + 1 : m])
        if path in self.rewrites:
            raise EditError(
                f"{path}: both a whole-file rewrite and SEARCH/REPLACE blocks; use one",
                file=path,
            )
        if path not in self.blocks:
            self.blocks[path] = []
            self.order.append(path)
        self.blocks[path].append((search, replace))
        self.last_path = path
        return m + 1

    def _block_path(self, i: int, where: str) -> str:
        """The file of the block at line ``i``: the path on the line before it, else the
        previous block's."""
        j = _previous_line(self.lines, i, skip_fences=True)
        if j is None or _REPLACE_RE.match(self.lines[j]):
            if self.last_path is None:
                raise EditError(
                    f"{where}: no file path on the line before it; put the path of an "
                    f"editable file ({', '.join(self.editable)}) alone on that line"
                )
            return self.last_path
        name, _ = _clean_path(self.lines[j])
        resolved = _resolve_path(name, self.editable)
        if resolved is None:
            raise _not_editable(name, self.editable, where)
        return resolved

    def _mark(self, start: int, want: re.Pattern[str], stop: tuple[re.Pattern[str], ...],
              path: str, unterminated: str) -> int:
        """The first line from ``start`` that ``want`` matches; an EditError saying
        ``unterminated`` when one of ``stop`` matches first or the answer ends."""
        for k in range(start, len(self.lines)):
            if want.match(self.lines[k]):
                return k
            if any(p.match(self.lines[k]) for p in stop):
                break
        raise EditError(unterminated, file=path)

    def _fenced(self, i: int, ticks: int) -> int:
        """The code block opening at line ``i``: a whole-file rewrite when the line before
        names an editable file, a wrapper of SEARCH/REPLACE blocks, or prose; returns the
        line to read next."""
        lines = self.lines
        close = _fence_close(lines, i + 1, ticks)
        inner = lines[i + 1 : close if close is not None else len(lines)]
        if any(_SEARCH_RE.match(x) for x in inner):
            if close is not None:
                self.closers.add(close)
            return i + 1  # a fence around SEARCH/REPLACE blocks: parse them one by one
        j = _previous_line(lines, i, skip_fences=False)
        if j is not None:
            name, labelled = _clean_path(lines[j])
            resolved = _resolve_path(name, self.editable)
            looks_like_path = labelled or (
                name != "" and " " not in name and ("." in name or "/" in name)
            )
            if resolved is None and looks_like_path:
                raise _not_editable(name, self.editable, f"code block at answer line {i + 1}")
            if resolved is not None:
                self._rewrite(resolved, close, "".join(inner))
        return (close if close is not None else len(lines)) + 1

    def _rewrite(self, path: str, close: int | None, content: str) -> None:
        if close is None:
            raise EditError(
                f"whole-file rewrite of {path}: the code block is not closed "
                "(was the answer cut off?)",
                file=path,
            )
        if path in self.blocks or path in self.rewrites:
            raise EditError(
                f"{path}: rewritten more than once, or rewritten and edited "
                "with SEARCH/REPLACE blocks; use one kind of edit per file",
                file=path,
            )
        self.rewrites[path] = content
        self.order.append(path)
        self.last_path = path


def format_edits(edits: Sequence[FileEdit]) -> str:
    """Write edits in the answer format; ``parse_edits`` reads them back unchanged."""
    out: list[str] = []
    for edit in edits:
        if edit.content is not None:
            longest = max((len(m) for m in re.findall(r"`{3,}", edit.content)), default=2)
            ticks = "`" * max(3, longest + 1)
            body = (
                edit.content
                if edit.content.endswith("\n") or not edit.content
                else (edit.content + "\n")
            )
            out.append(f"File: {edit.path}\n{ticks}python\n{body}{ticks}\n")
            continue
        for search, replace in edit.blocks:
            out.append(
                f"{edit.path}\n{SEARCH_MARK}\n{search}{DIVIDER_MARK}\n{replace}{REPLACE_MARK}\n"
            )
    return "\n".join(out)


# --------------------------------------------------------------------------- applying


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _occurrences(text: str, search: str) -> list[int]:
    """Start offsets where ``search`` occurs beginning at a line start."""
    hits: list[int] = []
    pos = text.find(search)
    while pos != -1:
        if pos == 0 or text[pos - 1] == "\n":
            hits.append(pos)
        pos = text.find(search, pos + 1)
    return hits


def closest_match(text: str, search: str) -> tuple[int, int, float, str]:
    """The window of ``text`` with as many lines as ``search`` that is most similar.

    Returns (first line, last line, similarity 0..1, window text); (0, 0, 0.0, "") for an
    empty text.
    """
    lines = text.splitlines(keepends=True)
    want = max(1, len(search.splitlines()))
    best = (0, 0, 0.0, "")
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(search)
    for start in range(0, max(1, len(lines) - want + 1)):
        window = "".join(lines[start : start + want])
        matcher.set_seq1(window)
        if matcher.real_quick_ratio() <= best[2] or matcher.quick_ratio() <= best[2]:
            continue
        ratio = matcher.ratio()
        if ratio > best[2]:
            best = (start + 1, min(start + want, len(lines)), ratio, window)
    return best


def _outside(source: str, regions: list[tuple[int, int]]) -> list[str]:
    """The non-editable segments of ``source``, in order (markers included)."""
    segments, pos = [], 0
    for start, end in regions:
        segments.append(source[pos:start])
        pos = end
    segments.append(source[pos:])
    return segments


def _regions(source: str, path: str, what: str,
             symbols: Sequence[str] = ()) -> list[tuple[int, int]]:
    try:
        return evolve_regions(source, symbols)
    except ValueError as exc:
        if symbols and START not in source and END not in source:
            raise EditError(
                f"{path}: {what} lost its editable definitions {', '.join(symbols)} ({exc}); "
                "keep each one, with its name, and keep the file valid Python",
                file=path,
            ) from None
        raise EditError(
            f"{path}: {what} has unbalanced EVOLVE-BLOCK markers ({exc}); keep every "
            f"'# {START}' and '# {END}' line exactly where it is",
            file=path,
        ) from None


def _check_outside_unchanged(old: str, new: str, path: str, symbols: Sequence[str] = ()) -> None:
    old_regions = _regions(old, path, "the original", symbols)
    old_out = _outside(old, old_regions)
    new_out = _outside(new, _regions(new, path, "the new text", symbols))
    if len(old_out) != len(new_out):
        raise EditError(
            f"{path}: the edit changes the number of EVOLVE-BLOCKs ({len(old_out) - 1} -> "
            f"{len(new_out) - 1}); markers must stay intact and in place",
            file=path,
        )
    for k, (a, b) in enumerate(zip(old_out, new_out, strict=True)):
        if a != b:
            seg_start = 0 if k == 0 else old_regions[k - 1][1]
            line = _line_of(old, seg_start + len(_common_prefix(a, b)))
            allowed = (f"the definitions {', '.join(symbols)}" if symbols and START not in old
                       else f"text between '# {START}' and '# {END}'")
            raise EditError(
                f"{path}: line {line} lies outside every EVOLVE-BLOCK and was changed; only "
                f"{allowed} may change",
                file=path,
            )


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


def _apply_block(text: str, search: str, replace: str, path: str, index: int,
                 symbols: Sequence[str] = ()) -> str:
    where = f"{path}: SEARCH block {index}"
    if not search.strip():
        raise EditError(f"{where} is empty; quote the exact existing lines to replace", file=path)
    hits = _occurrences(text, search)
    if not hits:
        first, last, ratio, window = closest_match(text, search)
        raise EditError(
            f"{where} does not occur exactly in the file; the closest text is lines "
            f"{first}-{last} (similarity {ratio:.2f}):\n{window}"
            "Copy the SEARCH lines exactly from the current file, whitespace included.",
            file=path,
            closest=window,
        )
    if len(hits) > 1:
        spans = ", ".join(
            f"lines {_line_of(text, h)}-{_line_of(text, h + len(search) - 1)}" for h in hits
        )
        raise EditError(
            f"{where} occurs {len(hits)} times ({spans}); add surrounding lines so it "
            "matches exactly once",
            file=path,
            closest=search,
        )
    start, end = hits[0], hits[0] + len(search)
    regions = _regions(text, path, "the current text", symbols)
    if not any(lo <= start and end <= hi for lo, hi in regions):
        editable = ", ".join(f"{_line_of(text, lo)}-{_line_of(text, hi) - 1}" for lo, hi in regions)
        raise EditError(
            f"{where} matches lines {_line_of(text, start)}-{_line_of(text, end - 1)}, which "
            f"reach outside the EVOLVE-BLOCKs (editable lines: {editable}); edit only "
            "between the markers",
            file=path,
        )
    if START in replace or END in replace:
        raise EditError(
            f"{where}: the REPLACE text contains an EVOLVE-BLOCK marker; markers must stay "
            "intact and in place",
            file=path,
        )
    return text[:start] + replace + text[end:]


def apply_edits(
    files: Mapping[str, str],
    edits: Sequence[FileEdit],
    symbols: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, str]:
    """Apply ``edits`` to ``files`` strictly; returns the new content of every file.
    ``symbols`` names, per file, the definitions that are its editable regions (where the
    file has no EVOLVE-BLOCK markers).

    Raises :class:`EditError` (with ``file`` and, for a near miss, ``closest``) when a
    SEARCH text does not occur exactly once, when a change touches text outside an
    EVOLVE-BLOCK, or when a file is unknown.
    """
    out = dict(files)
    for edit in edits:
        if edit.path not in out:
            raise EditError(
                f"{edit.path}: not an editable file of this target; editable: {', '.join(files)}",
                file=edit.path,
            )
        old = out[edit.path]
        named = tuple((symbols or {}).get(edit.path, ()))
        if edit.content is not None:
            new = edit.content
        else:
            new = old
            for k, (search, replace) in enumerate(edit.blocks, start=1):
                new = _apply_block(new, search, replace, edit.path, k, named)
        _check_outside_unchanged(old, new, edit.path, named)
        out[edit.path] = new
    return out
