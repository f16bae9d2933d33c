"""The seed draft of a speculative target, imported fresh, its knobs set (test helper)."""

from pathlib import Path
from types import ModuleType

from optimizer.sandbox.serve import load_module

TARGETS = Path(__file__).resolve().parents[3] / "targets" / "speculative"


def draft_module(name: str, **knobs: object) -> ModuleType:
    """``targets/speculative/<name>/draft.py`` as a new module; every knob must exist."""
    mod = load_module(TARGETS / name / "draft.py", f"draft_{name}")
    for knob, value in knobs.items():
        assert hasattr(mod, knob), f"{name} has no knob {knob}"
        setattr(mod, knob, value)
    return mod
