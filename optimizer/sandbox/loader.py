"""Importing a Python file by its path, as a fresh module.

The one way the project imports a file that is not on its path: a candidate's module
inside the sandbox, and on the trusted side a target's ``reference.py`` or ``evaluate.py``,
a baseline policy, a problem file. Each load runs the file again, so no module state is
shared between two loads unless the caller names them alike. Standard library only.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

_fresh = itertools.count()


class NotImportable(ImportError):
    """The path is not a file Python can import (no loader for its suffix)."""


def load_module(path: str | Path, name: str = "", *, register: bool = True) -> ModuleType:
    """Import ``path`` as a fresh module named ``name`` (default: a private name of its
    own). ``register``: put it in ``sys.modules`` while (and after) it runs, as a normal
    import does (dataclasses and pickling look their module up there). Errors raised by
    the file's code propagate; :class:`NotImportable` when it is no Python file."""
    name = name or f"_loaded_{next(_fresh)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise NotImportable(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
