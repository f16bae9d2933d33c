"""Fixtures of the coinfer kind's tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def leak_weights(tiny: Any) -> Iterator[Callable[[str], str]]:
    """A copy of the tiny target's weights where the sandbox lets a codec read (inside the
    repository; a codec's /tmp is its own), removed afterwards. Yields what points a
    recompute cheat's ``WEIGHTS_DIR`` at it."""
    leak = Path(tempfile.mkdtemp(prefix=".coinfer-leak-", dir=ROOT))
    try:
        for name in ("meta.json", "target.safetensors"):
            shutil.copyfile(tiny.folder / name, leak / name)
        yield lambda text: text.replace('WEIGHTS_DIR = ""', f'WEIGHTS_DIR = "{leak}"', 1)
    finally:
        shutil.rmtree(leak, ignore_errors=True)
