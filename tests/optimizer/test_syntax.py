"""Parses of the engine's threads take turns (optimizer/syntax.py)."""

from __future__ import annotations

import ast
import threading
import time

import pytest

from optimizer import syntax


def test_the_trees_are_those_of_ast() -> None:
    tree = syntax.parse("X = 1  # knob: int 0..9\n", filename="program.py")
    assert isinstance(tree, ast.Module) and isinstance(tree.body[0], ast.Assign)
    assert isinstance(syntax.parse_expression("A * B <= 8").body, ast.Compare)
    assert syntax.literal_eval("[1, 2.5, 'x']") == [1, 2.5, "x"]
    with pytest.raises(SyntaxError):
        syntax.parse("def f(:\n", filename="bad.py")


def test_no_two_threads_parse_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """ast.parse slowed down: eight threads parsing at once still enter it one by one."""
    inside, most = [0], [0]
    lock = threading.Lock()
    plain = ast.parse

    def slow(*args, **kwargs):  # type: ignore[no-untyped-def]
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.01)
        try:
            return plain(*args, **kwargs)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(ast, "parse", slow)
    calls = [lambda: syntax.parse("x = 1"), lambda: syntax.parse_expression("x + 1"),
             lambda: syntax.literal_eval("(1, 2)")]
    threads = [threading.Thread(target=calls[i % 3]) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1


def test_a_parse_that_meets_one_outside_the_lock_is_tried_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CPython 3.11's transient 'AST constructor recursion depth mismatch' (a parse in a
    thread outside the lock, such as an import compiling its module) is tried again; any
    other SystemError, or the mismatch every time, is raised."""
    plain, failures = ast.parse, [1]

    def flaky(*args, **kwargs):  # type: ignore[no-untyped-def]
        if failures[0]:
            failures[0] -= 1
            raise SystemError("AST constructor recursion depth mismatch (before=27, after=33)")
        return plain(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", flaky)
    assert isinstance(syntax.parse("x = 1").body[0], ast.Assign)
    failures[0] = 10
    with pytest.raises(SystemError, match="mismatch"):
        syntax.parse("x = 1")
    assert failures[0] == 10 - 3  # three tries, then the error

    def other(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise SystemError("something else")

    monkeypatch.setattr(ast, "parse", other)
    with pytest.raises(SystemError, match="something else"):
        syntax.parse_expression("x + 1")


def test_a_knob_constraint_compiles_under_the_lock() -> None:
    code = syntax.compile_expression(syntax.parse_expression("A * B <= 8"), "<c>")
    assert eval(code, {"__builtins__": {}}, {"A": 2, "B": 4}) is True  # noqa: S307
