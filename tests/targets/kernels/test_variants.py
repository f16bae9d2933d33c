"""Hand-written kernel variants (``targets/kernels/<target>/variants/*.py``), which the H200
benchmark searches next to each seed: their knob lines parse the way the benchmark reads them
and every grid point stays legal. (Static check and CPU correctness of every variant:
test_kernel_targets.py.)"""

import importlib.util
import json
import math
import random
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
    # The static rules read one literal at a time (no rule relates two knobs' values), so
    # every value of every knob, each beside the others' first values, covers what the
    # grid can write; 64 whole grid points besides (GEMM's buckets have 10,368, and
    # checking each cost CI 32 s).
    first = combos[0]
    singles = [{**first, name: v} for name, values in grid.items() for v in values]
    rng = random.Random(rel)
    for values in singles + rng.sample(combos, min(64, len(combos))) + combos[-1:]:
        assert check_source(bench.substitute(src, values), Path(rel).name) == [], values


_TWO_TILES = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("v", sys.argv[1])
v = importlib.util.module_from_spec(spec); spec.loader.exec_module(v)
torch.manual_seed(0)
for width in (128, 100, 5):  # no tail, a tail of 36 in a 64 tile, a tail of 1
    m = v.ModelNew(width)
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
        if hasattr(m, "bias"):
            m.bias.uniform_(-1, 1)
    x = torch.randn(3, width) * 4 + 300
    xd = x.double()
    if hasattr(m, "bias"):
        ref = torch.nn.functional.layer_norm(xd, (width,), m.weight.double(),
                                             m.bias.double(), m.eps)
    else:
        ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + m.eps) * m.weight.double()
    err = ((m(x).double() - ref).norm() / ref.norm()).item()
    assert err < 1e-5, (width, err)
print("ok")
"""


@pytest.mark.parametrize("rel", ["rmsnorm/variants/two_tiles.py",
                                 "layernorm/variants/two_tiles.py",
                                 "layernorm/variants/shifted_tiles.py",
                                 "layernorm/variants/paired_tiles.py"])
def test_two_tile_rows_are_right_with_and_without_a_tail(rel):
    import os
    import subprocess
    import sys

    path = KERNELS / rel
    done = subprocess.run([sys.executable, "-c", _TWO_TILES, str(path)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
