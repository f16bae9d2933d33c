"""Python source to syntax trees, safe in the engine's threads.

On CPython 3.11 without the fix for python/cpython#106905 (pull request #113035, December
2023) turning a parsed tree into ``ast`` objects keeps its recursion count in one place per
interpreter. A garbage collection in the middle of it can hand the interpreter to another
thread, whose parse resets that count, and the first parse then fails with ``SystemError:
AST constructor recursion depth mismatch``. A night with every target's search at once
(proposer threads mutating programs while the slots check candidates' syntax) hit it on
3.11.7 (2026-12-03). So the parses of the engine and of the evaluators that run in a
night's threads take turns here: a 300-line program parses in about a millisecond.
"""

from __future__ import annotations

import ast
import threading
from typing import Any, cast

_PARSING = threading.RLock()  # re-entrant: a finalizer run mid-parse may parse too


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, one thread at a time."""
    with _PARSING:
        return ast.parse(source, filename=filename)


def parse_expression(source: str) -> ast.Expression:
    """``ast.parse(source, mode="eval")``, one thread at a time."""
    with _PARSING:
        return cast(ast.Expression, ast.parse(source, mode="eval"))


def literal_eval(source: str) -> Any:
    """``ast.literal_eval(source)``, one thread at a time."""
    with _PARSING:
        return ast.literal_eval(source)
