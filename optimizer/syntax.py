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
from collections.abc import Callable
from types import CodeType
from typing import Any, TypeVar, cast

T = TypeVar("T")

_PARSING = threading.RLock()  # re-entrant: a finalizer run mid-parse may parse too
# A parse here can still meet one outside this lock (a module compiled at import in another
# thread, a library's own parse): `make nightly` on a fresh clone (every import compiled
# from source) failed so on 2026-12-06. The error is transient: the same parse again works.
_MISMATCH = "recursion depth mismatch"
_TRIES = 3


def _retried(make: Callable[[], T]) -> T:
    for attempt in range(_TRIES):
        try:
            with _PARSING:
                return make()
        except SystemError as exc:
            if _MISMATCH not in str(exc) or attempt == _TRIES - 1:
                raise
    raise AssertionError("unreachable")


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, one thread at a time."""
    return _retried(lambda: ast.parse(source, filename=filename))


def parse_expression(source: str) -> ast.Expression:
    """``ast.parse(source, mode="eval")``, one thread at a time."""
    return _retried(lambda: cast(ast.Expression, ast.parse(source, mode="eval")))


def compile_expression(tree: ast.Expression, filename: str) -> CodeType:
    """``compile(tree, filename, "eval")``, one thread at a time (turning ``ast`` objects
    back into the compiler's tree counts its recursion in the same place)."""
    return _retried(lambda: compile(tree, filename, "eval"))


def literal_eval(source: str) -> Any:
    """``ast.literal_eval(source)``, one thread at a time."""
    return _retried(lambda: ast.literal_eval(source))
