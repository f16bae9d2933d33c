"""Hand-written kernel variants (``targets/kernels/<target>/variants/*.py``), which the H200
benchmark searches next to each seed: their knob lines parse the way the benchmark reads them
and every grid point stays legal. (Static check and CPU correctness of every variant:
test_kernel_targets.py.)"""

import importlib.util
import json
import math
from pathlib import Path

import pytest

from evaluators.kernels.static_checks import check_source
from optimizer.edits import evolve_regions

ROOT = Path(__file__).resolve().parents[3]
KERNELS = ROOT / "targets" / "kernels"
VARIANTS = sorted(str(p.relative_to(KERNELS)) for p in KERNELS.glob("*/variants/*.py"))


@pytest.fixture(scope="module")
def bench():
    # the benchmark's own knob parser and grid, so the test reads knobs exactly as it does
    path = ROOT / "bench" / "kernels_h200.py"
    spec = importlib.util.spec_from_file_location("kernels_h200", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_persistent_variants_exist():
    assert {f"{t}/variants/persistent.py" for t in ("softmax", "layernorm", "rmsnorm")} <= set(
        VARIANTS)


@pytest.mark.parametrize("rel", VARIANTS)
def test_variant_knobs_are_in_the_block_and_every_setting_stays_legal(rel, bench):
    src = (KERNELS / rel).read_text()
    (start, end), = evolve_regions(src)
    matches = list(bench.KNOB.finditer(src))
    assert matches and all(start <= m.start() < end for m in matches)
    grid = bench.knobs(src)
    for m in matches:
        assert json.loads(m["value"]) in grid[m["name"]], m.group(0)
    combos = bench.near_first(src)
    assert len(combos) == math.prod(len(c) for c in grid.values())
    for values in combos:
        assert check_source(bench.substitute(src, values), Path(rel).name) == [], values
