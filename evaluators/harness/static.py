"""Static rules of a context policy, checked before anything runs (REJECTED otherwise).

The policy is a pure function of the past it is shown. It may import only a few modules of
the standard library that compute (no files, no processes, no introspection), and may not
name what reaches beyond its arguments: the built-ins that open files, evaluate code or
read frames and globals, and any underscore attribute (``__class__``, ``f_back``,
``__globals__``...). So it cannot load the trajectories, regenerate the synthetic ones from
the project's code, or read the oracle's labels; the replay never sends them.
"""

from __future__ import annotations

import ast

from optimizer import syntax

ALLOWED_IMPORTS = frozenset({"math", "itertools", "functools", "collections", "heapq",
                             "bisect", "operator", "statistics", "typing", "re",
                             "dataclasses", "__future__"})
FORBIDDEN_NAMES = frozenset({"open", "exec", "eval", "compile", "__import__", "globals",
                             "locals", "vars", "getattr", "setattr", "delattr", "breakpoint",
                             "input", "memoryview", "__builtins__", "help", "exit", "quit"})


def violations(source: str, filename: str) -> list[str]:
    tree = syntax.parse(source, filename)
    out = []
    for node in ast.walk(tree):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in ALLOWED_IMPORTS:
                    out.append(f"{where}: import of {alias.name!r} (a policy may import only "
                               f"{', '.join(sorted(ALLOWED_IMPORTS - {'__future__'}))})")
        elif isinstance(node, ast.ImportFrom):
            mod = (node.module or "").split(".")[0]
            if node.level or mod not in ALLOWED_IMPORTS:
                out.append(f"{where}: import from {node.module!r} (a policy may import only "
                           f"{', '.join(sorted(ALLOWED_IMPORTS - {'__future__'}))})")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            out.append(f"{where}: {node.id!r} reaches beyond the policy's arguments")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            out.append(f"{where}: attribute {node.attr!r} (underscore attributes reach the "
                       "interpreter's internals)")
    return out
