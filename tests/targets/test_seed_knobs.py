"""Every built-in target's seed declares knobs the engine can read: a declaration the knob
parser refuses leaves a night unable to read any proposal's knobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from optimizer.knobs import declared
from optimizer.targets import load_target

ROOT = Path(__file__).resolve().parents[2]
TARGETS = sorted(p.parent for p in (ROOT / "targets").rglob("target.toml"))


@pytest.mark.parametrize("folder", TARGETS, ids=[str(f.relative_to(ROOT)) for f in TARGETS])
def test_the_seeds_knob_declarations_parse(folder: Path) -> None:
    target = load_target(folder, ROOT)
    declared(target.seed_files())  # raises with the file, the line and the knob
