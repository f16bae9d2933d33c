"""The exception tree drawn in optimizer/errors.py is the tree of its classes, and every
class in it is raised somewhere (a node nobody raises is a promise nobody keeps)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import optimizer.errors as errors

ROOT = Path(__file__).resolve().parents[2]


def _drawn() -> dict[str, str | None]:
    """name -> parent name, from the drawing (indentation gives the parent)."""
    doc = errors.__doc__ or ""
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in doc.splitlines():
        m = re.match(r"^(\s*)(?:[|+ -]*?)([A-Z][A-Za-z]+)\s{2,}", line)
        if not m or not m.group(2).endswith(("Error", "Died", "Exhausted")):
            continue
        col = line.index(m.group(2))
        while stack and stack[-1][0] >= col:
            stack.pop()
        parents[m.group(2)] = stack[-1][1] if stack else None
        stack.append((col, m.group(2)))
    return parents


def _classes() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name, cls in vars(errors).items():
        ours = inspect.isclass(cls) and cls.__module__ == errors.__name__
        if ours and issubclass(cls, Exception):
            base = cls.__bases__[0]
            out[name] = base.__name__ if base.__module__ == errors.__name__ else None
    return out


def test_the_drawing_is_the_tree_of_classes() -> None:
    assert _drawn() == _classes()
    assert _classes()["ZygoteDied"] == "SandboxError"
    assert _classes()["KnobError"] == "ProposalError"


def test_every_error_is_raised_somewhere() -> None:
    sources = "\n".join(p.read_text() for pkg in ("optimizer", "evaluators")
                        for p in (ROOT / pkg).rglob("*.py") if p.name != "errors.py")
    classes = _classes()

    def raised(name: str) -> bool:
        return bool(re.search(rf"\b{name}\(|partial\({name}\b", sources))

    for name in classes:
        children = [c for c, parent in classes.items() if parent == name]
        if raised(name):
            continue
        # a grouping node: its subclasses are raised and it is caught as a group
        assert children and any(raised(c) for c in children), f"{name} is never raised"
        assert re.search(rf"except \(?[\w, ]*\b{name}\b", sources), f"{name} is never caught"
