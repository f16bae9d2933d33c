"""The house's structure, checked: kinds own their knowledge, no import circles, and the
trusted evaluators import without the engine's third-party dependencies."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import evaluators

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("optimizer", "evaluators")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imports(source: str, name: str, is_package: bool, known: set[str]) -> set[str]:
    """Every module of the packages that ``name`` imports anywhere in its source: at the top,
    in functions, and under ``if TYPE_CHECKING`` (a type-only arrow is an arrow: a reader,
    mypy and the next refactoring follow it)."""
    tree = ast.parse(source)
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1]
                                + ([node.module] if node.module else []))
            for alias in node.names:  # the module named: a submodule, else the package
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    # Parent packages run first, but a package whose __init__ re-exports its submodules is
    # the usual pattern, not a circle: only the modules named count as edges.
    return {m for m in found if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {name: _imports(path.read_text(), name, path.name == "__init__.py", known)
            for name, path in mods.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = dfs(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = dfs(node)
            if found:
                return found
    return None


def test_no_import_circle_type_only_and_late_imports_included() -> None:
    graph = _graph()
    assert len(graph) > 60  # the walk found the packages
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_the_walk_sees_a_circle_when_there_is_one() -> None:
    graph = _graph()
    graph["optimizer.records"] = graph["optimizer.records"] | {"optimizer.loop"}
    assert _cycle(graph) is not None


def test_the_walk_counts_type_only_and_late_imports() -> None:
    known = {"optimizer.a", "optimizer.b", "optimizer.c", "optimizer.d"}
    source = """
from typing import TYPE_CHECKING
from . import b
if TYPE_CHECKING:
    from optimizer.c import Thing
def late():
    import optimizer.d
"""
    assert _imports(source, "optimizer.a", False, known) == {
        "optimizer.b", "optimizer.c", "optimizer.d"}


# The ground floor: what both the engine and the kinds stand on. It imports nothing else of
# the project, and it is all of the engine that a kind may import.
GROUND = {"optimizer", "optimizer.records", "optimizer.targets", "optimizer.errors",
          "optimizer.syntax", "optimizer.kinds", "optimizer.kinds._base",
          "optimizer.sandbox.loader", "optimizer.sandbox.landlock",
          "optimizer.sandbox.seccomp", "optimizer.sandbox.procfs",
          "optimizer.sandbox.calls"}


def _upward(graph: dict[str, set[str]]) -> list[str]:
    """Arrows that run the wrong way: the engine importing a kind, a kind importing more of
    the engine than its ground floor, the ground floor importing anything above it."""
    wrong = []
    for name, deps in sorted(graph.items()):
        if name.startswith("optimizer"):
            wrong += [f"{name} -> {d}" for d in sorted(deps) if d.startswith("evaluators")]
        if name.startswith("evaluators") or name in GROUND:
            wrong += [f"{name} -> {d}" for d in sorted(deps)
                      if d.startswith("optimizer") and d not in GROUND]
    return wrong


def test_imports_between_the_packages_run_one_way() -> None:
    graph = _graph()
    assert GROUND <= set(graph)
    assert not _upward(graph), "\n".join(_upward(graph))


def test_the_one_way_rule_sees_an_arrow_back_up() -> None:
    graph = _graph()
    known = set(graph)
    late = "def f():\n    import evaluators\n"
    graph["optimizer.loop"] = _imports(late, "optimizer.loop", False, known)
    assert _upward(graph) == ["optimizer.loop -> evaluators"]
    graph = _graph()
    graph["evaluators.function.evaluator"] |= {"optimizer.loop"}
    graph["optimizer.kinds"] |= {"optimizer.sandbox.host"}
    assert len(_upward(graph)) == 2


BLOCKER = """
import importlib, importlib.abc, pkgutil, sys
BLOCKED = ("optuna", "mlflow", "openai", "git")
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, Block())
import evaluators
names = []
for info in pkgutil.walk_packages(evaluators.__path__, "evaluators."):
    importlib.import_module(info.name)
    names.append(info.name)
for kind in evaluators.kinds():
    evaluators.get(kind)
assert not [m for m in sys.modules if m.split(".")[0] in BLOCKED], "a blocked module loaded"
print(len(names))
"""


def test_evaluators_import_with_the_engine_dependencies_blocked() -> None:
    res = subprocess.run([sys.executable, "-c", BLOCKER], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert int(res.stdout.strip()) >= 25


def _string_constants(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings]


def test_no_kind_name_in_the_engine() -> None:
    builtin = set(evaluators.BUILTIN_KINDS)
    assert builtin == {"coinfer", "function", "harness", "kernel", "routing", "speculative"}
    found = []
    for path in sorted((ROOT / "optimizer").rglob("*.py")):
        for line, text in _string_constants(path):
            words = {w.strip(".,:;'\"()[]{}`") for w in text.replace("_", " ").split()}
            if text in builtin or text.startswith("evaluators.") or words & {"kernel"}:
                found.append(f"{path.relative_to(ROOT)}:{line}: {text!r}")
    for path in sorted((ROOT / "optimizer").rglob("*.txt")):
        words = set(path.read_text().lower().replace("`", " ").split())
        if {"kind: kernel", "kernel"} & words or path.stem.startswith("kind_"):
            found.append(f"{path.relative_to(ROOT)}: kind-specific text")
    assert not found, "\n".join(found)
