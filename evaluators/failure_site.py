"""Where a target's trusted checks failed, in words: the line of its ``evaluate.py`` that
raised and the values it named.

An ``evaluate.py`` that unpacks ``harness.timed``'s ``(value, seconds)`` the wrong way
round fails its own ``assert np.allclose(out, ref), "wrong"`` on the seed: "wrong answer:
wrong" says nothing, "wrong answer: wrong (evaluate.py line 41: `assert np.allclose(out,
ref), "wrong"`; out = 0.00213 (float), ref = array(64, 32000) float64)" says what to fix.
"""

from __future__ import annotations

import linecache
import re
import types
from pathlib import Path
from typing import Any

_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_SKIP = {"assert", "and", "or", "not", "in", "is", "if", "else", "for", "None", "True",
         "False", "lambda", "return", "raise"}


def failure_site(exc: BaseException, module: Path) -> str:
    """`` (evaluate.py line N: `code`; name = value, ...)`` for the deepest frame of
    ``exc``'s traceback in ``module``; "" when none is."""
    tb = exc.__traceback__
    found: types.TracebackType | None = None
    target = str(module)
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == target:
            found = tb
        tb = tb.tb_next
    if found is None:
        return ""
    lineno = found.tb_lineno
    code = linecache.getline(target, lineno).strip()
    if not code:
        return f" ({module.name} line {lineno})"
    local = found.tb_frame.f_locals
    shown = []
    for name in dict.fromkeys(_NAME.findall(code.split("#")[0])):
        if name in _SKIP or name not in local:
            continue
        value = local[name]
        if isinstance(value, types.ModuleType | types.FunctionType | type) or callable(value):
            continue
        shown.append(f"{name} = {_short(value)}")
        if len(shown) == 4:
            break
    values = f"; {', '.join(shown)}" if shown else ""
    return f" ({module.name} line {lineno}: `{code[:160]}`{values})"


def _short(value: Any) -> str:
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"array{tuple(shape)} {dtype}"
    text = repr(value)
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({type(value).__name__})"
