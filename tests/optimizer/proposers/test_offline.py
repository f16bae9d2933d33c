import ast
import re
from pathlib import Path

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer.edits import evolve_regions
from optimizer.knobs import distributions, knobs_of_files, structure_key, substitute_files
from optimizer.proposers import OfflineProposer
from optimizer.proposers._base import ProposalContext
from optimizer.records import ArchiveEntry, CandidateState
from optimizer.targets import Objective, TargetSpec

TARGET = TargetSpec(
    name="toy",
    kind="function",
    path=Path("/nonexistent/toy"),
    rel_path="targets/function/toy",
    description="toy",
    editable=("program.py",),
    objectives=(Objective("cost"),),
)

PROGRAM = '''"""Outside the block: 3 * 4 < 20 and 0.5 + 1 must never change."""

import math

SCALE = 2.5 * 4  # outside: a constant and an operator the proposer must not touch

# EVOLVE-BLOCK-START
BLOCK = 4  # knob: int 1..64 log
WEIGHT = 0.5  # knob: float 0.0..4.0


def score(x, n=10):
    total = 0.0
    for i in range(1, n):
        if i < n - 2 and x >= 0.25:
            total += x * 1.5 - i / 3 + (BLOCK << 1)
    label = f"{n + 1}" + "s"
    return total * WEIGHT, label
# EVOLVE-BLOCK-END


def outside(y):
    return y * 7 - 1 if y > 3 else y // 2
'''


def entry(files, knobs=None, id="c0000", objective=None):
    return ArchiveEntry(
        id=id,
        parent_id=None,
        files=files,
        knobs=knobs or {},
        state=CandidateState.VALID,
        objectives=() if objective is None else (objective,),
    )


def context(parent, iteration=0, rng_seed=0, inspirations=()):
    return ProposalContext(
        target=TARGET,
        parent=parent,
        seed=parent,
        inspirations=tuple(inspirations),
        rng_seed=rng_seed,
        iteration=iteration,
    )


def outside_text(source):
    regions = evolve_regions(source)
    cuts = [0] + [p for region in regions for p in region] + [len(source)]
    return [source[a:b] for a, b in zip(cuts[::2], cuts[1::2], strict=True)]


def test_same_seed_gives_identical_proposals_and_seeds_differ():
    parent = entry({"program.py": PROGRAM}, {"BLOCK": 8, "WEIGHT": 1.0})
    runs = {}
    for seed in (0, 0, 1):
        proposer = OfflineProposer(seed=seed)
        runs.setdefault(seed, []).append(
            [proposer.propose(context(parent, iteration=i, rng_seed=5)) for i in range(25)]
        )
    assert runs[0][0] == runs[0][1]
    assert runs[0][0] != runs[1][0]
    kinds = {p.summary.split(" ")[0] for p in runs[0][0]}
    assert kinds == {"knob", "mutation"}


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), iteration=st.integers(0, 1000), most=st.integers(1, 4))
def test_mutations_stay_inside_evolve_blocks_and_parse(seed, iteration, most):
    parent = entry({"program.py": PROGRAM}, {"BLOCK": 8, "WEIGHT": 1.0})
    proposer = OfflineProposer(seed=seed, knob_search_share=0.0, max_mutations=most)
    proposal = proposer.propose(context(parent, iteration=iteration))
    new = proposal.files["program.py"]
    assert proposal.rejected is None
    assert new != PROGRAM
    ast.parse(new)
    assert outside_text(new) == outside_text(PROGRAM)
    knob_lines = [line for line in PROGRAM.splitlines() if "# knob:" in line]
    assert [line for line in new.splitlines() if "# knob:" in line] == knob_lines
    assert 'f"{n + 1}" + "s"' in new  # f-strings and string concatenation are left alone
    changes = re.findall(r"program\.py:(\d+): `([^`]+)` -> `([^`]+)`", proposal.summary)
    assert 1 <= len(changes) <= most
    old_lines, new_lines = PROGRAM.splitlines(), new.splitlines()
    changed = {i + 1 for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=True)) if a != b}
    assert changed == {int(line) for line, _, _ in changes}
    for line, old, replacement in changes:
        assert old in old_lines[int(line) - 1] and replacement in new_lines[int(line) - 1]
    assert proposal.fixed_knobs == {"BLOCK": 8, "WEIGHT": 1.0}


def test_mutation_table():
    seen = set()
    parent = entry({"program.py": PROGRAM})
    proposer = OfflineProposer(seed=0, knob_search_share=0.0, max_mutations=1)
    for i in range(300):
        summary = proposer.propose(context(parent, iteration=i)).summary
        seen.update(re.findall(r"`([^`]+)` -> `([^`]+)`", summary))
    assert {("<", "<="), (">=", ">"), ("-", "+"), ("+", "-"), ("<<", ">>")} <= seen
    assert {("1.5", "0.75"), ("1.5", "3.0"), ("0.25", "0.5"), ("3", "2"), ("3", "6")} <= seen
    assert ("/", "*") in seen  # `i / 3`: division may become multiplication
    assert ("*", "/") in seen  # only `x * 1.5`, which is a float either way
    assert ("0.0", "0.5") in seen or ("0.0", "1.0") in seen
    assert not any(old in ("4", "8", "0.5", "7", "2.5") for old, _ in seen)  # knobs, outside


def test_integer_product_never_becomes_a_division():
    src = "def f(n, k):\n    return list(range(0, n * k, k * 2))\n"
    proposer = OfflineProposer(seed=0, knob_search_share=0.0, max_mutations=1)
    for i in range(100):
        summary = proposer.propose(context(entry({"p.py": src}), iteration=i)).summary
        assert "`*` ->" not in summary


def test_non_ascii_lines_and_huge_floats_are_spliced_correctly():
    src = 'def f(y):\n    s = "größe"; return len(s) * 3 + y * 1e308\n'
    proposer = OfflineProposer(seed=0, knob_search_share=0.0, max_mutations=1)
    results = set()
    for i in range(60):
        new = proposer.propose(context(entry({"p.py": src}), iteration=i)).files["p.py"]
        assert "inf" not in new and new.startswith('def f(y):\n    s = "größe"; return len(s)')
        ast.parse(new)
        results.add(new.split("return ")[1].strip())
    assert {
        "len(s) * 6 + y * 1e308",
        "len(s) * 3 - y * 1e308",
        "len(s) * 3 + y * 5e+307",
    } <= results


def test_fixed_knobs_leave_out_unknown_and_out_of_range_values():
    parent = entry({"program.py": PROGRAM}, {"BLOCK": 128, "WEIGHT": 1.0, "GONE": 3})
    proposal = OfflineProposer(knob_search_share=0.0).propose(context(parent))
    assert proposal.fixed_knobs == {"WEIGHT": 1.0}


def test_knob_search_returns_a_structure_unchanged_and_says_why():
    parent = entry({"program.py": PROGRAM}, {"BLOCK": 8}, id="c0003", objective=2.0)
    other_src = PROGRAM.replace("int 1..64 log", "int 1..32 log")
    other = entry({"program.py": other_src}, id="c0001", objective=1.5)
    proposer = OfflineProposer(seed=2, knob_search_share=1.0)
    picked = {}
    for i in range(40):
        proposal = proposer.propose(context(parent, iteration=i, inspirations=[other]))
        assert proposal.fixed_knobs == {}
        assert proposal.files == (parent if proposal.parent_id == "c0003" else other).files
        picked[proposal.parent_id] = proposal.summary
    assert set(picked) == {"c0001", "c0003"}
    assert "the parent, the program to improve" in picked["c0003"]
    assert "an inspiration (objective 1.5)" in picked["c0001"]
    assert structure_key(other.files) in picked["c0001"]
    assert "BLOCK int 1..32 log" in picked["c0001"]


def test_fallbacks_and_rejections():
    no_knobs = entry({"p.py": "X = 1\n\n\ndef f(a):\n    return a + X\n"})
    proposal = OfflineProposer(knob_search_share=1.0).propose(context(no_knobs))
    assert proposal.summary.startswith("mutation") and proposal.rejected is None

    nothing_mutable = entry(
        {"p.py": "# EVOLVE-BLOCK-START\nK = 2  # knob: int 1..8\n# EVOLVE-BLOCK-END\nY = 3 + 4\n"}
    )
    proposal = OfflineProposer(knob_search_share=0.0).propose(context(nothing_mutable))
    assert proposal.summary.startswith("knob search") and proposal.rejected is None

    inert = entry({"p.py": "def f(a):\n    return a\n", "notes.md": "1 + 2"})
    proposal = OfflineProposer().propose(context(inert))
    assert "no knobs declared" in proposal.rejected
    assert "no numeric literal or operator" in proposal.rejected

    for share in (0.0, 1.0):
        broken = entry({"p.py": "def f(:\n    return 1 + 2\n"})
        proposal = OfflineProposer(knob_search_share=share).propose(context(broken))
        assert proposal.rejected.startswith("p.py, line 1: not valid Python")
        unbalanced = entry({"p.py": "# EVOLVE-BLOCK-START\nX = 1 + 2\n"})
        proposal = OfflineProposer(knob_search_share=share).propose(context(unbalanced))
        assert "EVOLVE-BLOCK-START without END" in proposal.rejected


def test_a_nudge_moves_a_few_of_the_parents_knob_values_within_their_declarations():
    parent = entry({"program.py": PROGRAM}, {"BLOCK": 8, "WEIGHT": 1.0}, id="c0007")
    proposer = OfflineProposer(seed=3, knob_search_share=0.0, knob_nudge_share=1.0)
    seen = set()
    for i in range(60):
        proposal = proposer.propose(context(parent, iteration=i))
        assert proposal.summary.startswith("knob nudge of c0007: ")
        assert proposal.files == parent.files and proposal.parent_id == "c0007"
        values = proposal.fixed_knobs
        assert set(values) == {"BLOCK", "WEIGHT"} and values != parent.knobs
        assert isinstance(values["BLOCK"], int) and 1 <= values["BLOCK"] <= 64
        assert isinstance(values["WEIGHT"], float) and 0.0 <= values["WEIGHT"] <= 4.0
        seen.add(values["BLOCK"])
        if values["BLOCK"] != 8:
            assert f"BLOCK 8 -> {values['BLOCK']}" in proposal.summary
    assert len(seen) >= 4 and max(seen) <= 16 and min(seen) >= 4  # near 8: a local move


def test_a_nudge_keeps_a_knobs_grid_and_changes_a_choice():
    src = ('# EVOLVE-BLOCK-START\nN = 300  # knob: int 0..2000 step 50\n'
           'MODE = "a"  # knob: choices=["a", "b", "c"]\n# EVOLVE-BLOCK-END\n')
    parent = entry({"p.py": src}, {"N": 300, "MODE": "a"})
    proposer = OfflineProposer(knob_search_share=0.0, knob_nudge_share=1.0)
    modes = set()
    for i in range(40):
        values = proposer.propose(context(parent, iteration=i)).fixed_knobs
        assert values["N"] % 50 == 0 and 0 <= values["N"] <= 2000
        modes.add(values["MODE"])
    assert modes == {"a", "b", "c"}
    # nothing to nudge (no knob values): the knob search is asked instead
    proposal = proposer.propose(context(entry({"p.py": src})))
    assert proposal.summary.startswith("knob search")


def test_no_nudge_by_default_and_the_draws_are_unchanged():
    parent = entry({"program.py": PROGRAM}, {"BLOCK": 8, "WEIGHT": 1.0})
    for i in range(30):
        a = OfflineProposer(seed=1).propose(context(parent, iteration=i))
        b = OfflineProposer(seed=1, knob_nudge_share=0.0).propose(context(parent, iteration=i))
        assert a == b and not a.summary.startswith("knob nudge")


def test_constructor_checks_its_arguments():
    with pytest.raises(ValueError, match="knob_nudge_share"):
        OfflineProposer(knob_search_share=0.6, knob_nudge_share=0.5)
    with pytest.raises(ValueError, match="knob_search_share"):
        OfflineProposer(knob_search_share=1.5)
    with pytest.raises(ValueError, match="max_mutations"):
        OfflineProposer(max_mutations=0)


# --------------------------------------------------------------------- finding real wins

N_ITEMS = 10_000


def chunk_cost(files):
    """Trusted evaluator of the toy: the plan must cover [0, N) exactly, in order.

    Cost model of a batched launch: 5 units per launch plus 0.01 per item of the largest
    chunk (its latency); the optimum is chunks of about 2,236 items (cost ~45).
    """
    namespace = {}
    try:
        exec(compile(files["program.py"], "program.py", "exec"), namespace)
        chunks = namespace["plan"](N_ITEMS)
    except Exception:
        return None
    pos = 0
    for start, end in chunks:
        if start != pos or end <= start:
            return None
        pos = end
    if pos != N_ITEMS:
        return None
    return len(chunks) * 5.0 + 0.01 * max(end - start for start, end in chunks)


TOY = '''"""Splits work into chunks for batched launches."""

# EVOLVE-BLOCK-START
CHUNK = 1  # knob: int 1..1024 log


def plan(n):
    step = 2 * CHUNK
    return [(i, min(i + step, n)) for i in range(0, n, step)]
# EVOLVE-BLOCK-END
'''


def search(seed_files, iterations, seed=0):
    """A minimal version of the engine's loop: propose, ask Optuna, substitute, evaluate."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    proposer = OfflineProposer(seed=seed)
    seed_knobs = {k: v.default for k, v in knobs_of_files(seed_files).items()}
    seed_entry = entry(seed_files, seed_knobs, objective=chunk_cost(seed_files))
    archive = [seed_entry]
    studies = {}
    for it in range(iterations):
        ranked = sorted(archive, key=lambda e: e.objectives[0])
        ctx = ProposalContext(TARGET, ranked[0], seed_entry, tuple(ranked[1:4]), 0, it)
        proposal = proposer.propose(ctx)
        if proposal.rejected:
            continue
        key = structure_key(proposal.files)
        study = studies.setdefault(
            key, optuna.create_study(sampler=optuna.samplers.TPESampler(seed=it))
        )
        if proposal.fixed_knobs:
            study.enqueue_trial(dict(proposal.fixed_knobs))
        trial = study.ask(distributions(knobs_of_files(proposal.files).values()))
        cost = chunk_cost(substitute_files(proposal.files, trial.params))
        if cost is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        study.tell(trial, cost)
        archive.append(entry(proposal.files, trial.params, id=f"c{it + 1:04d}", objective=cost))
    return seed_entry.objectives[0], min(e.objectives[0] for e in archive)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_knob_search_and_mutation_find_a_clear_win(seed):
    seed_cost, best = search({"program.py": TOY}, iterations=40, seed=seed)
    assert seed_cost == pytest.approx(25_000.02)
    assert best < 100  # the optimum is ~45; 40 candidates get within a factor of two


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mutation_alone_finds_a_win_without_knobs(seed):
    no_knobs = TOY.replace("CHUNK = 1  # knob: int 1..1024 log\n", "").replace("2 * CHUNK", "64")
    seed_cost, best = search({"program.py": no_knobs}, iterations=80, seed=seed)
    assert seed_cost == pytest.approx(157 * 5 + 0.64)
    assert best < seed_cost / 10  # doubling `64` five times reaches the optimum's region


KERNEL = '''import triton
import triton.language as tl

# EVOLVE-BLOCK-START
NUM_WARPS = 4  # knob: choices=[2, 4, 8]


@triton.jit
def _kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + cols, mask=mask, other=-1.5)
    tl.store(y_ptr + cols, x * 2.0, mask=mask)


def launch(x, y):
    return max(16, x.numel() * 2)
# EVOLVE-BLOCK-END
'''


def test_code_inside_a_gpu_kernel_is_never_mutated():
    prop = OfflineProposer(seed=3, knob_search_share=0.0)
    kernel_lines = KERNEL.split("@triton.jit")[1].split("def launch")[0]
    changed_host = 0
    for iteration in range(40):
        out = prop.propose(context(entry({"kernel.py": KERNEL}), iteration=iteration))
        assert out.rejected is None, out.rejected
        new = out.files["kernel.py"]
        assert kernel_lines in new, out.summary  # the jit function is byte for byte the same
        changed_host += new != KERNEL
    assert changed_host == 40  # the host function's literals and operators still mutate


def test_powers_of_two_stay_powers_of_two_in_triton_modules():
    prop = OfflineProposer(seed=5, knob_search_share=0.0, max_mutations=1)
    seen = set()
    for iteration in range(60):
        out = prop.propose(context(entry({"kernel.py": KERNEL}), iteration=iteration))
        seen.update(re.findall(r"`(\d+)` -> `(\d+)`", out.summary))
    assert ("16", "8") in seen or ("16", "32") in seen
    assert seen and all(int(new) > 0 and int(new) & (int(new) - 1) == 0 for old, new in seen
                        if int(old) > 0 and int(old) & (int(old) - 1) == 0), seen
    from optimizer.proposers.offline import _new_numbers

    assert _new_numbers(8, powers=True) == [4, 16]
    assert _new_numbers(1, powers=True) == [2]  # num_warps=1 never becomes 0
    assert {7, 9} <= set(_new_numbers(8))  # elsewhere a small literal moves by one too
    assert _new_numbers(6, powers=True) == _new_numbers(6)  # not a power of two


def test_a_power_of_two_built_by_shifting_keeps_its_shift_in_triton_modules():
    import ast

    from optimizer.proposers.offline import _Finder

    body = "def tiles(n):\n    return 1 << (n.bit_length() - 1), n << 2\n"
    for imports, shifts, ones, minus in (("import triton\n", 1, 0, 0),
                                         ("import math\n", 2, 2, 1)):
        src = imports + body
        sites = _Finder("k.py", src, [(0, len(src))], set()).visit(ast.parse(src))
        assert sum(site.old == "<<" for site in sites) == shifts, sites
        # the shifted 1 stays too (2 << k is twice the tile), and so does the exponent:
        # n.bit_length() + 1 makes a tile four times the row, read past its end
        assert sum(site.old == "1" for site in sites) == ones, sites
        assert sum(site.old == "-" for site in sites) == minus, sites
        # the other shift's operand still moves (n << 2 is no tile built from a 1)
        assert any(site.old == "2" for site in sites), sites


PLUMBING = '''
import torch

# EVOLVE-BLOCK-START
SCALE = 3  # not a knob: a literal the mutation may change


def launch(x):
    rows = x.shape[1]
    y = x.reshape(-1, 4096).sum(dim=1)
    z = torch.cat([y, y], -1).softmax(-1)
    spread = {1: (-1,), 2: (0, -1)}
    return y[:rows] * SCALE + x.size(0) + z.argmax(0) + len(spread[1])
# EVOLVE-BLOCK-END
'''


def test_indices_shapes_and_dimensions_are_never_mutated():
    """x.shape[1], reshape(-1, 4096), dim=1, size(0), cat(.., -1), argmax(0) and a dict's
    keys say which axis, what shape or which entry: an edit there crashes or computes
    garbage, so only SCALE, the dict's values and the operators change."""
    prop = OfflineProposer(seed=5, knob_search_share=0.0)
    plumbing = ("x.shape[1]", "x.reshape(-1, 4096)", ".sum(dim=1)", "y[:rows]", "x.size(0)",
                "torch.cat([y, y], -1).softmax(-1)", "z.argmax(0)", "{1: (", ", 2: (",
                "spread[1]")
    changed = 0
    for iteration in range(40):
        out = prop.propose(context(entry({"kernel.py": PLUMBING}), iteration=iteration))
        if out.rejected is not None:
            continue
        new = out.files["kernel.py"]
        assert all(p in new for p in plumbing), (out.summary, new)
        changed += new != PLUMBING
    assert changed >= 20  # SCALE and the arithmetic still mutate
