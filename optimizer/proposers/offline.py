"""The offline proposer: knob search plus small AST mutations, no network.

Each call draws one of two moves from a ``random.Random`` seeded by the proposer's seed,
the context's ``rng_seed`` and its ``iteration`` (so a run replays exactly):

* **knob search** (``knob_search_share`` of the draws): hand back the parent's structure,
  or an inspiration's, unchanged; the engine then asks Optuna for its knob values;
* **knob nudge** (``knob_nudge_share`` of the draws, none by default): the parent's
  structure with its knob values, 1..3 of them moved a little within their declarations
  (a choice changed; a number a step or two along its grid, or scaled by 0.5-2). The
  values are pinned, so this is a local search around the parent (most often the best so
  far) beside the sampler's global one: where the best values sit at the edge of what is
  VALID, the sampler learns nothing from the INVALID ones and rarely lands close by;
* **mutation**: change 1..``max_mutations`` sites inside the EVOLVE-BLOCKs of the parent:
  a numeric literal (x0.5, x2, or +-1 for small ints), a comparison (``<`` <-> ``<=``,
  ``>`` <-> ``>=``, rarely ``==`` <-> ``!=``) or an arithmetic operator (table below).
  New text is spliced at the node's exact source position, so every other byte stays as
  it was, and the parent's knob values are pinned so the mutation is measured alone.
  Code inside a GPU kernel (a function decorated ``jit``, ``autotune`` or ``heuristics``)
  is never mutated: a kernel changes through its knobs and its target's starts. Nor are
  indices, shapes and dimensions (``x.shape[1]``, ``x.view(-1, n)``, ``dim=1``,
  ``torch.cat(xs, -1)``) or a dict literal's keys: an edit there breaks, never speeds up.

When one move has nothing to work on, the other is tried; when neither has, and when a
file cannot be parsed, the proposal comes back ``rejected`` with the reason.
"""

from __future__ import annotations

import ast
import math
import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from optimizer import syntax
from optimizer.edits import evolve_regions
from optimizer.knobs import (
    Knob,
    KnobError,
    declared,
    literal_text,
    parse_knobs,
)
from optimizer.proposers._base import ArchiveEntry, ProposalContext, Proposer
from optimizer.records import Proposal

# Comparison swaps move a boundary by one element; == <-> != inverts a branch, which is
# rarely an improvement, so it is drawn a fifth as often.
_COMPARE: dict[type[ast.cmpop], tuple[str, str, float]] = {
    ast.Lt: ("<", "<=", 1.0),
    ast.LtE: ("<=", "<", 1.0),
    ast.Gt: (">", ">=", 1.0),
    ast.GtE: (">=", ">", 1.0),
    ast.Eq: ("==", "!=", 0.2),
    ast.NotEq: ("!=", "==", 0.2),
}
# Arithmetic swaps. "float" means only where the result is a float either way (a float
# literal operand, or the value is passed straight to int()/round()/floor()/ceil()), so
# an index or a range() argument never silently becomes a float.
_BINARY: dict[type[ast.operator], tuple[str, str, str]] = {
    ast.Add: ("+", "-", "always"),
    ast.Sub: ("-", "+", "always"),
    ast.Mult: ("*", "/", "float"),
    ast.Div: ("/", "*", "always"),
    ast.FloorDiv: ("//", "/", "float"),
    ast.LShift: ("<<", ">>", "always"),
    ast.RShift: (">>", "<<", "always"),
}
_FLOAT_FORCING = {"int", "round", "floor", "ceil", "float"}
_OP_TOKEN = re.compile(r"[^\s()\\]+")
_COMMENT = re.compile(r"#[^\n]*")
_NEWLINE = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class _Site:
    file: str
    line: int
    start: int  # character offsets in the file
    end: int
    old: str
    new: tuple[str, ...]  # replacements to draw from
    weight: float = 1.0


def _new_numbers(value: int | float, powers: bool = False) -> list[int | float]:
    """Nearby values of a literal. With ``powers`` (a module that launches Triton kernels)
    a power of two stays one: block sizes and ``num_warps`` must be (7 warps fail at launch,
    and 1 halved is 0: ``num_warps=1`` became 0 on an H200 night)."""
    if isinstance(value, int) and powers and value >= 1 and value & (value - 1) == 0:
        return [value // 2, value * 2] if value >= 2 else [2]
    if isinstance(value, int):
        if value == 0:
            return [1]
        options = {value * 2, value // 2 if value % 2 == 0 or value > 8 else value}
        if value <= 8:
            options |= {value - 1, value + 1}
        return sorted(v for v in options if v != value)
    if value == 0.0:
        return [0.5, 1.0]
    # Doubling 1e308 gives inf, which repr() writes as a name that does not exist.
    return [v for v in (value * 0.5, value * 2.0) if math.isfinite(v) and v != value]


def _builds_a_power(node: ast.BinOp) -> bool:
    """``1 << k``: a power of two built by shifting (a block or tile size)."""
    return (isinstance(node.op, ast.LShift) and isinstance(node.left, ast.Constant)
            and node.left.value == 1)


def _float_context(node: ast.BinOp, parent: ast.AST | None) -> bool:
    for side in (node.left, node.right):
        if isinstance(side, ast.Constant) and isinstance(side.value, float):
            return True
    if isinstance(parent, ast.Call) and len(parent.args) >= 1 and parent.args[0] is node:
        func = parent.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        return name in _FLOAT_FORCING
    return False


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)
    )


class _Finder:
    """Mutation sites of one file, restricted to its editable regions."""

    def __init__(self, path: str, source: str, regions: list[tuple[int, int]], skip: set[int]):
        self.path, self.source, self.regions, self.skip = path, source, regions, skip
        self.powers = False  # the module imports triton (set by visit)
        self.starts = [0] + [m.end() for m in _NEWLINE.finditer(source)]
        self.sites: list[_Site] = []

    def offset(self, line: int, byte_col: int) -> int:
        # ast columns count UTF-8 bytes; only a non-ASCII line needs converting.
        start = self.starts[line - 1]
        end = self.starts[line] if line < len(self.starts) else len(self.source)
        text = self.source[start:end]
        return start + (byte_col if text.isascii() else len(text.encode()[:byte_col].decode()))

    def editable(self, start: int, end: int, first: int, last: int) -> bool:
        if any(line in self.skip for line in range(first, last + 1)):
            return False
        return any(a <= start and end <= b for a, b in self.regions)

    def constant(self, node: ast.Constant) -> None:
        assert node.end_lineno is not None and node.end_col_offset is not None
        start = self.offset(node.lineno, node.col_offset)
        end = self.offset(node.end_lineno, node.end_col_offset)
        old, value = self.source[start:end], node.value
        if not isinstance(value, int | float) or not self.editable(
            start, end, node.lineno, node.end_lineno
        ):
            return
        try:  # guards against a position that does not hold the literal
            if syntax.literal_eval(old) != value:
                return
        except (ValueError, SyntaxError):
            return
        new = tuple(repr(v) if isinstance(v, float) else str(v)
                    for v in _new_numbers(value, self.powers))
        if new:
            self.sites.append(_Site(self.path, node.lineno, start, end, old, new))

    def operator(self, left: ast.expr, right: ast.expr, symbol: str, new: str, w: float) -> None:
        assert left.end_lineno is not None and left.end_col_offset is not None
        gap_start = self.offset(left.end_lineno, left.end_col_offset)
        gap_end = self.offset(right.lineno, right.col_offset)
        gap = _COMMENT.sub(lambda m: " " * len(m.group()), self.source[gap_start:gap_end])
        tokens = list(_OP_TOKEN.finditer(gap))
        if len(tokens) != 1 or tokens[0].group() != symbol:
            return  # an unexpected layout: leave it alone rather than guess
        start, end = gap_start + tokens[0].start(), gap_start + tokens[0].end()
        if self.editable(start, end, left.end_lineno, right.lineno):
            line = left.end_lineno + gap[: tokens[0].start()].count("\n")
            self.sites.append(_Site(self.path, line, start, end, symbol, (new,), w))

    def visit(self, tree: ast.AST) -> list[_Site]:
        parents: dict[ast.AST, ast.AST] = {}
        inside_fstring: set[ast.AST] = set()
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                parents[child] = node
                # 3.11 reports unreliable positions inside f-strings.
                if isinstance(node, ast.JoinedStr) or node in inside_fstring:
                    inside_fstring.add(child)
        self.powers = any(
            isinstance(n, ast.Import) and any(a.name.split(".")[0] == "triton" for a in n.names)
            or isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "triton"
            for n in ast.walk(tree))
        kernel_code = {n for f in ast.walk(tree) if _is_device_kernel(f) for n in ast.walk(f)}
        plumbing = _shape_plumbing(tree)
        if self.powers:
            # the 1 of 1 << k (2 << k is twice the tile the code sized) and the exponent k:
            # 1 << (n.bit_length() + 1) is a tile four times the row, read unmasked past
            # its end (most likely the 10 "illegal memory access" LayerNorm candidates of
            # an H200 night, 2026-12-04)
            plumbing |= {x for n in ast.walk(tree)
                         if isinstance(n, ast.BinOp) and _builds_a_power(n)
                         for x in (n.left, *ast.walk(n.right))}
        for node in ast.walk(tree):
            if node in inside_fstring or node in kernel_code or node in plumbing:
                continue
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, int | float)
                and not isinstance(node.value, bool)
            ):
                self.constant(node)
            elif isinstance(node, ast.Compare):
                lefts = [node.left, *node.comparators[:-1]]
                for op, left, right in zip(node.ops, lefts, node.comparators, strict=True):
                    if type(op) in _COMPARE:
                        symbol, new, weight = _COMPARE[type(op)]
                        self.operator(left, right, symbol, new, weight)
            elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
                if _is_text(node.left) or _is_text(node.right):
                    continue  # string concatenation and formatting are not arithmetic
                if self.powers and _builds_a_power(node):
                    continue  # 1 << k is a tile size; 1 >> k is 0 (tl.arange(0, 0) fails)
                symbol, new, when = _BINARY[type(node.op)]
                if when == "always" or _float_context(node, parents.get(node)):
                    self.operator(node.left, node.right, symbol, new, 1.0)
        return self.sites


# methods whose numeric arguments say which dimension or what shape, not how fast
_SHAPE_METHODS = {"view", "reshape", "size", "stride", "permute", "transpose", "flatten",
                  "unsqueeze", "squeeze", "expand", "movedim", "unflatten", "split", "chunk"}
_DIM_KEYWORDS = {"dim", "dims", "axis", "axes"}
# functions and methods (called as attributes: torch.cat, x.softmax; the builtin max(16, n) is
# a value) whose numeric positional arguments are dimensions (torch.cat(xs, -1),
# x.softmax(-1), x.argmax(-1)): a broken EAGLE candidate of a CPU run of the speculative
# experiment had torch.cat(..., -1) turned into torch.cat(..., -0) (2026-12-04)
_DIM_CALLS = {"cat", "concat", "concatenate", "stack", "hstack", "vstack", "softmax",
              "log_softmax", "argmax", "argmin", "cumsum", "cumprod", "logsumexp", "sum",
              "mean", "amax", "amin", "max", "min", "prod", "std", "var", "norm", "flip",
              "roll", "gather", "scatter", "index_select", "index_copy", "index_copy_",
              "index_add", "index_add_", "narrow", "select", "diff", "sort", "argsort",
              "topk", "unbind", "tril", "triu", "diagonal", "repeat_interleave"}


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _number(node: ast.expr) -> bool:
    """A numeric literal, negative ones included (``-1`` is a UnaryOp in the tree)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        node = node.operand
    return (isinstance(node, ast.Constant) and isinstance(node.value, int)
            and not isinstance(node.value, bool))


def _shape_plumbing(tree: ast.AST) -> set[ast.AST]:
    """Nodes that index, reshape or name a dimension (``x.shape[1]``, ``x.view(-1, n)``,
    ``dim=-1``, ``torch.cat(xs, -1)``) or a dict literal's keys: a blind edit there breaks
    the program's contract, never speeds it up (in an H200 kernel night such edits were
    most of the crashes: a shape of -2 rows, a dimension 2 of a matrix)."""
    out: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            out.update(ast.walk(node.slice))
        elif isinstance(node, ast.Dict):  # keys are looked up, not tuned
            for key in node.keys:
                if key is not None:
                    out.update(ast.walk(key))
        elif isinstance(node, ast.Call):
            name = _call_name(node)
            if isinstance(node.func, ast.Attribute) and name in _SHAPE_METHODS:
                for arg in (*node.args, *(k.value for k in node.keywords)):
                    out.update(ast.walk(arg))
            if isinstance(node.func, ast.Attribute) and name in _DIM_CALLS:  # not max(16, n)
                for arg in node.args:
                    if _number(arg):
                        out.update(ast.walk(arg))
            for kw in node.keywords:
                if kw.arg in _DIM_KEYWORDS:
                    out.update(ast.walk(kw.value))
    return out


def _is_device_kernel(node: ast.AST) -> bool:
    """A function compiled for a GPU (``@triton.jit``, ``@gluon.jit``, ``@jit``...): its
    masks, offsets and constants are where a blind edit reads out of bounds or computes
    garbage (12 of 23 candidates of an H200 kernel night were broken that way), so it
    changes through its knobs, a target's starts and the LLM proposer, never here."""
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in ("jit", "autotune", "heuristics"):
            return True
    return False


def _splice(source: str, edits: Iterable[tuple[_Site, str]]) -> str:
    out = source
    for site, new in sorted(edits, key=lambda e: e[0].start, reverse=True):
        out = out[: site.start] + new + out[site.end :]
    return out


class OfflineProposer(Proposer):
    """Knob search and AST mutation; deterministic for a given seed, no network."""

    name = "offline"

    def __init__(self, seed: int = 0, knob_search_share: float = 0.6, max_mutations: int = 2,
                 knob_nudge_share: float = 0.0):
        if not 0.0 <= knob_search_share <= 1.0:
            raise ValueError(f"knob_search_share must be in [0, 1], not {knob_search_share}")
        if not 0.0 <= knob_nudge_share <= 1.0 - knob_search_share + 1e-12:
            raise ValueError(f"knob_nudge_share must be in [0, 1 - knob_search_share], not "
                             f"{knob_nudge_share}")
        if max_mutations < 1:
            raise ValueError(f"max_mutations must be at least 1, not {max_mutations}")
        self.seed = seed
        self.knob_search_share = knob_search_share
        self.knob_nudge_share = knob_nudge_share
        self.max_mutations = max_mutations

    def propose(self, context: ProposalContext) -> Proposal:
        rng = random.Random(f"offline:{self.seed}:{context.rng_seed}:{context.iteration}")
        draw = rng.random()
        want_knobs = draw < self.knob_search_share
        moves: tuple[Any, ...] = (self._knob_search, self._mutate)
        if not want_knobs:
            moves = moves[::-1]
            if draw < self.knob_search_share + self.knob_nudge_share:
                moves = (self._nudge, self._knob_search, self._mutate)
        reasons = []
        for move in moves:
            proposal, reason = move(context, rng)
            if proposal is not None:
                return proposal
            reasons.append(reason)
        return Proposal(
            proposer=self.name,
            parent_id=context.parent.id,
            files=dict(context.parent.files),
            summary="offline proposer: nothing to do",
            rejected="; ".join(reasons),
        )

    # ---------------------------------------------------------------------- knob search

    def _knob_search(self, ctx: ProposalContext, rng: random.Random) -> tuple[Proposal | None, str]:
        pool: list[tuple[ArchiveEntry, str, dict[str, Knob], float]] = []
        keys: set[str] = set()
        for i, entry in enumerate((ctx.parent, *ctx.inspirations)):
            try:
                program = declared(entry.files)  # its sources entered once
                key, knobs = program.structure, dict(program.knobs)
            except KnobError:
                continue  # a broken declaration: the loop reports it when it is evaluated
            if knobs and key not in keys:
                keys.add(key)
                # The parent is the program to improve: half the draws go to it.
                weight = float(max(1, len(ctx.inspirations))) if i == 0 else 1.0
                pool.append((entry, key, knobs, weight))
        if not pool:
            return None, "no knobs declared in the parent or the inspirations"
        entry, key, knobs, _ = rng.choices(pool, weights=[p[3] for p in pool])[0]
        if entry is ctx.parent:
            why = "the parent, the program to improve"
        else:
            best = f"objective {entry.objectives[0]:.6g}" if entry.objectives else "no objective"
            why = f"an inspiration ({best})"
        space = ", ".join(f"{k.name} {k.describe()}" for k in knobs.values())
        summary = f"knob search on structure {key} of {entry.id} ({why}); knobs: {space}"
        proposal = Proposal(
            proposer=self.name, parent_id=entry.id, files=dict(entry.files), summary=summary
        )
        return proposal, ""

    # ----------------------------------------------------------------------- knob nudge

    def _nudge(self, ctx: ProposalContext, rng: random.Random) -> tuple[Proposal | None, str]:
        try:
            knobs = dict(declared(ctx.parent.files).knobs)
        except KnobError as exc:
            return None, f"the parent's knobs do not parse: {exc}"
        values = _pinned(knobs, ctx.parent.knobs)
        movable = [k for k in knobs.values() if k.name in values and _can_move(k)]
        if not movable:
            return None, "the parent has no knob values to move"
        for _attempt in range(8):
            count = min(len(movable), rng.choices((1, 2, 3), weights=(0.5, 0.35, 0.15))[0])
            new = dict(values)
            for knob in rng.sample(movable, count):
                new[knob.name] = _moved(knob, values[knob.name], rng)
            changed = [k for k in sorted(new) if new[k] != values[k]]
            if changed:
                moves = ", ".join(f"{k} {values[k]!r} -> {new[k]!r}" for k in changed)
                return Proposal(proposer=self.name, parent_id=ctx.parent.id,
                                files=dict(ctx.parent.files),
                                summary=f"knob nudge of {ctx.parent.id}: {moves}",
                                fixed_knobs=new), ""
        return None, "no nudge moved a knob"

    # ------------------------------------------------------------------------- mutation

    def _mutate(self, ctx: ProposalContext, rng: random.Random) -> tuple[Proposal | None, str]:
        files = dict(ctx.parent.files)
        sites: list[_Site] = []
        knobs: dict[str, Knob] = {}
        for path in sorted(files):
            if not path.endswith(".py"):
                continue
            source = files[path]
            try:
                tree = syntax.parse(source)
                regions = evolve_regions(source, ctx.target.symbols.get(path, ()))
                in_file = parse_knobs(source, path)
            except SyntaxError as exc:
                return self._reject(ctx, f"{path}, line {exc.lineno}: not valid Python: {exc.msg}")
            except (ValueError, KnobError) as exc:
                return self._reject(ctx, f"{path}: {exc}")
            knobs.update({k.name: k for k in in_file})
            skip = {k.line for k in in_file}
            sites += _Finder(path, source, regions, skip).visit(tree)
        if not sites:
            return None, "no numeric literal or operator to mutate inside the EVOLVE-BLOCKs"
        for _attempt in range(8):
            count = min(rng.randint(1, self.max_mutations), len(sites))
            chosen: list[_Site] = []
            pool = list(sites)
            while len(chosen) < count and pool:
                site = rng.choices(pool, weights=[s.weight for s in pool])[0]
                pool.remove(site)
                chosen.append(site)
            edits = [(site, rng.choice(site.new)) for site in chosen]
            new_files = dict(files)
            try:
                for path in sorted({site.file for site in chosen}):
                    mine = [(s, n) for s, n in edits if s.file == path]
                    new_files[path] = _splice(files[path], mine)
                    syntax.parse(new_files[path])
            except SyntaxError:
                continue  # e.g. a literal glued to an attribute; draw other sites
            edits.sort(key=lambda e: (e[0].file, e[0].start))
            summary = "; ".join(f"{s.file}:{s.line}: `{s.old}` -> `{new}`" for s, new in edits)
            return Proposal(
                proposer=self.name,
                parent_id=ctx.parent.id,
                files=new_files,
                summary=f"mutation of {ctx.parent.id}: {summary}",
                fixed_knobs=_pinned(knobs, ctx.parent.knobs),
            ), ""
        return None, "every drawn mutation left a file that does not parse"

    def _reject(self, ctx: ProposalContext, reason: str) -> tuple[Proposal, str]:
        proposal = Proposal(
            proposer=self.name,
            parent_id=ctx.parent.id,
            files=dict(ctx.parent.files),
            summary="offline proposer: unusable parent",
            rejected=reason,
        )
        return proposal, reason


_SCALES = (0.5, 0.7, 0.85, 1.2, 1.4, 2.0)


def _can_move(knob: Knob) -> bool:
    if knob.kind == "choices":
        return len(knob.choices or ()) > 1
    return knob.low is not None and knob.high is not None and knob.high > knob.low


def _moved(knob: Knob, value: Any, rng: random.Random) -> Any:
    """``value`` moved a little within ``knob``'s declaration (and on its grid)."""
    if knob.kind == "choices":
        return rng.choice([c for c in knob.choices or () if c != value] or [value])
    assert knob.low is not None and knob.high is not None
    lo, hi = knob.low, knob.high
    step = knob.step or (1 if knob.kind == "int" else None)
    if rng.random() < 0.5 or value == 0:
        if step is not None:
            x = value + rng.choice((-2, -1, 1, 2)) * step
        else:
            x = value + rng.gauss(0.0, 0.1 * (hi - lo))
    else:
        x = value * rng.choice(_SCALES)
    x = min(hi, max(lo, x))
    if step is not None:
        x = lo + round((x - lo) / step) * step
        x = min(hi, max(lo, x))
    return int(round(x)) if knob.kind == "int" else float(x)


def _pinned(knobs: Mapping[str, Knob], values: Mapping[str, Any]) -> dict[str, Any]:
    """The parent's knob values that still fit the declarations in the files."""
    out = {}
    for name, value in values.items():
        knob = knobs.get(name)
        if knob is None:
            continue
        try:
            literal_text(knob, value)
        except KnobError:
            continue
        out[name] = value
    return out
