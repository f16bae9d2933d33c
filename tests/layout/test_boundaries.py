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


def _module_level_imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Modules imported when ``name`` is imported: top-level statements only (imports in
    functions and under ``if TYPE_CHECKING`` run later or never)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(stmts: list[ast.stmt]) -> None:
        for node in stmts:
            if isinstance(node, ast.If):
                test = ast.unparse(node.test)
                if "TYPE_CHECKING" not in test:
                    visit(node.body)
                    visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                    + ([node.module] if node.module else []))
                for alias in node.names:  # the module named: a submodule, else the package
                    sub = f"{base}.{alias.name}"
                    found.add(sub if sub in known else base)

    visit(tree.body)
    # Parent packages run first, but a package whose __init__ re-exports its submodules is
    # the usual pattern, not a circle: only the modules named count as edges.
    return {m for m in found if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    graph = {}
    for name, path in mods.items():
        graph[name] = _module_level_imports(path, name, known)
    return graph


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


def test_no_module_level_import_circle() -> None:
    graph = _graph()
    assert len(graph) > 60  # the walk found the packages
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_the_walk_sees_a_circle_when_there_is_one() -> None:
    graph = _graph()
    graph["optimizer.records"] = graph["optimizer.records"] | {"optimizer.loop"}
    assert _cycle(graph) is not None


LEAF = {"optimizer", "optimizer.records", "optimizer.targets", "optimizer.errors",
        "optimizer.syntax"}


def test_evaluators_import_only_the_leaf_vocabulary_of_the_engine() -> None:
    graph = _graph()
    for name, deps in graph.items():
        if name.startswith("evaluators"):
            engine = {d for d in deps if d.startswith("optimizer")}
            assert engine <= LEAF, f"{name} imports {sorted(engine - LEAF)}"
    for name in LEAF - {"optimizer"}:
        assert graph[name] <= LEAF, f"{name} is not a leaf: {sorted(graph[name])}"


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
    builtin = set(evaluators._BUILTIN)
    assert builtin == {"function", "harness", "kernel", "routing", "speculative"}
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
