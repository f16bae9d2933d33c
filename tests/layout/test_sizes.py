"""Sizes a reader can carry: no module of the packages over 600 lines, no function over 80.

A function's length is its lines from ``def`` (or its first decorator) to its last line,
nested functions counted on their own as well; a module's is its number of lines. The
engine (``optimizer/``) has no exception. The evaluators carry a known debt, listed below
with today's sizes: the list may shrink, never grow (no new entry, no listed one longer).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80

# (module, function or None for the module itself) -> its lines when the limits came in
EVALUATORS_DEBT: dict[tuple[str, str | None], int] = {
    ("evaluators/routing/sim.py", "simulate"): 402,
    ("evaluators/routing/sim.py", "advance"): 149,
    ("evaluators/kernels/evaluator.py", "_correctness"): 116,
    ("evaluators/kernels/evaluator.py", None): 853,
    ("evaluators/kernels/kernelbench.py", "import_kernelbench"): 98,
    ("evaluators/scaffold.py", None): 750,
}


def _sizes(package: str, root: Path = ROOT) -> dict[tuple[str, str | None], int]:
    """Every module of ``package`` over the module limit, and every function over the
    function limit, with its lines."""
    found: dict[tuple[str, str | None], int] = {}
    for path in sorted((root / package).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        source = path.read_text()
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            found[(rel, None)] = lines
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = (node.end_lineno or node.lineno) - first + 1
                if length > MAX_FUNCTION_LINES:
                    key = (rel, node.name)
                    found[key] = max(length, found.get(key, 0))
    return found


def _describe(found: dict[tuple[str, str | None], int]) -> list[str]:
    return [f"{mod} {name or '(module)'}: {n} lines" for (mod, name), n in sorted(
        found.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))]


def test_no_engine_module_or_function_is_too_long() -> None:
    found = _sizes("optimizer")
    assert not found, (
        f"over {MAX_MODULE_LINES} lines a module or {MAX_FUNCTION_LINES} a function; split "
        "it by job: " + "; ".join(_describe(found))
    )


def test_the_evaluators_debt_does_not_grow() -> None:
    found = _sizes("evaluators")
    new = {k: n for k, n in found.items() if k not in EVALUATORS_DEBT}
    grown = {k: n for k, n in found.items() if k in EVALUATORS_DEBT and n > EVALUATORS_DEBT[k]}
    assert not new, "new long code in evaluators/: " + "; ".join(_describe(new))
    assert not grown, "listed long code grew: " + "; ".join(
        f"{line} (listed at {EVALUATORS_DEBT[k]})" for k, line in zip(
            sorted(grown, key=lambda k: (k[0], k[1] or "")), _describe(grown), strict=True))


def test_the_measure_sees_a_long_function_and_module(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (pkg / "long.py").write_text(f"@staticmethod\ndef f():\n{body}\n\n\ndef g():\n    pass\n")
    (pkg / "big.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert _sizes("pkg", tmp_path) == {
        ("pkg/long.py", "f"): MAX_FUNCTION_LINES + 2,
        ("pkg/big.py", None): MAX_MODULE_LINES + 1,
    }
