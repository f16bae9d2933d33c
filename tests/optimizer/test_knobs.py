import ast
import statistics
import time

import numpy as np
import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from optimizer import knobs as knobs_mod
from optimizer.errors import ProposalError
from optimizer.knobs import (
    Knob,
    KnobError,
    distributions,
    knobs_of_files,
    parse_knobs,
    structure_key,
    substitute,
    substitute_files,
    values_of,
)

SOURCE = '''"""Example; this docstring mentions `X = 1  # knob: int 1..2` and is not a knob."""

import math

# EVOLVE-BLOCK-START
NUM_WARPS = 4  # knob: choices=[1, 2, 4, 8, 16]
CACHE_WEIGHT = 0.5  # knob: float 0.0..4.0
TOP_K = 8  # knob: int 1..64 log
METHOD = "sort"  # knob: choices=["sort", "argpartition"]  # sort is stable
STEP = 10  # knob: int 0..100 step 5
OFFSET = -3  # knob: int -8..8
LIMIT = 1000  # a plain constant, not a knob


class Config:
    LR: float = 1e-3  # knob: float 1e-5..1e-1 log


def f(x):
    return x * CACHE_WEIGHT + math.sqrt(TOP_K)
# EVOLVE-BLOCK-END
'''


def test_parses_every_kind_with_its_fields():
    found = {k.name: k for k in parse_knobs(SOURCE, "program.py")}
    assert list(found) == ["NUM_WARPS", "CACHE_WEIGHT", "TOP_K", "METHOD", "STEP", "OFFSET", "LR"]
    assert found["NUM_WARPS"] == Knob(
        "NUM_WARPS", "choices", (1, 2, 4, 8, 16), None, None, False, None, 4, "program.py", 6
    )
    assert found["CACHE_WEIGHT"] == Knob(
        "CACHE_WEIGHT", "float", None, 0.0, 4.0, False, None, 0.5, "program.py", 7
    )
    assert (found["TOP_K"].kind, found["TOP_K"].log, found["TOP_K"].low) == ("int", True, 1)
    assert found["METHOD"].choices == ("sort", "argpartition")
    assert (found["STEP"].step, found["STEP"].default) == (5, 10)
    assert (found["OFFSET"].low, found["OFFSET"].default) == (-8, -3)
    assert (found["LR"].kind, found["LR"].line, found["LR"].default) == ("float", 16, 1e-3)


def test_file_without_knob_text_is_not_parsed():
    assert parse_knobs("def broken(:\n") == []


def test_float_knob_accepts_int_literal_and_reports_float():
    (knob,) = parse_knobs("W = 2  # knob: float 0..4\n")
    assert knob.default == 2.0 and isinstance(knob.default, float)


def test_non_ascii_text_before_and_in_the_literal():
    src = 'NOTE = "größe"; X = "é"  # knob: choices=["é", "ü"]\nY = 3  # knob: int 1..9  # ünï\n'
    assert values_of({"p.py": src}) == {"X": "é", "Y": 3}
    out = substitute(src, {"X": "ü", "Y": 9})
    assert out == src.replace('X = "é"', 'X = "ü"').replace("Y = 3", "Y = 9")


BAD = [
    ("X = 4  # knob: integer 1..8\n", "not understood"),
    ("X = 4  # knob: int 1..8 fast\n", "option 'fast'"),
    ("X = 4  # knob: int a..8\n", "not an integer"),
    ("X = 4  # knob: int 1.5..8\n", "not an integer"),
    ("X = 4  # knob: float 0..inf\n", "not finite"),
    ("X = 4  # knob: int 9..1\n", "empty"),
    ('X = "4"  # knob: int 1..8\n', "not an integer"),
    ("X = 4.0  # knob: int 1..8\n", "not an integer"),
    ("X = True  # knob: int 0..8\n", "not an integer"),
    ("X = None  # knob: float 0..8\n", "not a number"),
    ("X = 0  # knob: int 1..64\n", "outside int 1..64"),
    ("X = 9.5  # knob: float 0.0..4.0\n", "outside float 0.0..4.0"),
    ("X = 1  # knob: int 0..64 log\n", "needs LOW > 0"),
    ("X = 1.0  # knob: float -1.0..4.0 log\n", "needs LOW > 0"),
    ("X = 2  # knob: int 1..64 log step 2\n", "cannot be combined"),
    ("X = 10  # knob: int 0..100 step 7\n", "whole number of steps"),
    ("X = 12  # knob: int 0..100 step 5\n", "not on the grid"),
    ("X = 10  # knob: int 0..100 step 0\n", "must be positive"),
    ("X = 4  # knob: choices=[]\n", "non-empty list"),
    ("X = 4  # knob: choices=[1, 2, 2, 4]\n", "listed twice"),
    ("X = 4  # knob: choices=[1, [2], 4]\n", "not an int, float"),
    ("X = 4  # knob: choices [1, 4]\n", "lacks '='"),
    ("X = 3  # knob: choices=[1, 2, 4]\n", "not one of the choices"),
    ("X = True  # knob: choices=[1, 2]\n", "not one of the choices"),
    ("X = 4 * 2  # knob: int 1..8\n", "not a literal"),
    ("X = Y = 4  # knob: int 1..8\n", "single-name assignment"),
    ("X, Y = 4, 5  # knob: int 1..8\n", "single-name assignment"),
    ("X = (\n    4)  # knob: int 1..8\n", "spans lines"),
    ("def f():\n    X = 4  # knob: int 1..8\n", "not on a module- or class-level"),
    ("X = 4  # knob: int 1..8\nX = 5  # knob: int 1..8\n", "declared twice"),
    ("X = 4  # knob: int 1..8\ndef (:\n", "not valid Python"),
]


@pytest.mark.parametrize(("source", "problem"), BAD)
def test_bad_declarations_raise_knob_error_with_line_and_hint(source, problem):
    with pytest.raises(KnobError) as info:
        parse_knobs(source, "program.py")
    message = str(info.value)
    assert problem in message
    assert message.startswith("program.py, line ")
    assert isinstance(info.value, ProposalError)
    assert info.value.line is not None


def test_error_message_names_knob_and_fix():
    with pytest.raises(KnobError, match=r"line 1: knob TOP_K: default 0 outside int 1..64; write"):
        parse_knobs("TOP_K = 0  # knob: int 1..64\n", "p.py")


def test_same_name_in_two_files_is_an_error_and_non_python_files_are_skipped():
    files = {"a.py": "X = 1  # knob: int 1..8\n", "b.py": "X = 2  # knob: int 1..8\n"}
    with pytest.raises(KnobError, match="also declared in a.py, line 1"):
        knobs_of_files(files)
    notes = {"a.py": files["a.py"], "notes.md": "Y = 3  # knob: int 1..8\n"}
    assert list(knobs_of_files(notes)) == ["X"]


def test_distributions_match_declarations():
    dists = distributions(parse_knobs(SOURCE))
    assert dists["NUM_WARPS"] == CategoricalDistribution([1, 2, 4, 8, 16])
    assert dists["CACHE_WEIGHT"] == FloatDistribution(0.0, 4.0)
    assert dists["TOP_K"] == IntDistribution(1, 64, log=True)
    assert dists["STEP"] == IntDistribution(0, 100, step=5)
    assert dists["OFFSET"] == IntDistribution(-8, 8)
    assert dists["LR"] == FloatDistribution(1e-5, 1e-1, log=True)


def test_substitute_changes_only_the_literals():
    values = {
        "NUM_WARPS": 16,
        "CACHE_WEIGHT": 2.25,
        "METHOD": "argpartition",
        "OFFSET": 7,
        "LR": 0.05,
        "STEP": 95,
    }
    out = substitute(SOURCE, values)
    expected = (
        SOURCE.replace("NUM_WARPS = 4 ", "NUM_WARPS = 16 ")
        .replace("CACHE_WEIGHT = 0.5", "CACHE_WEIGHT = 2.25")
        .replace('METHOD = "sort"', 'METHOD = "argpartition"')
        .replace("OFFSET = -3", "OFFSET = 7")
        .replace("LR: float = 1e-3", "LR: float = 0.05")
        .replace("STEP = 10", "STEP = 95")
    )
    assert out == expected
    assert values_of({"p.py": out}) == {**values_of({"p.py": SOURCE}), **values}


def test_substitute_types_ints_floats_and_quotes():
    src = "A = 1.5  # knob: float 0..4\nB = 'x'  # knob: choices=['x', \"it's\"]\n"
    out = substitute(src, {"A": 2, "B": "it's"})
    assert out == "A = 2.0  # knob: float 0..4\nB = \"it's\"  # knob: choices=['x', \"it's\"]\n"
    assert substitute("N = 2  # knob: int 1..8\n", {"N": np.int64(5)}) == (
        "N = 5  # knob: int 1..8\n"
    )


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"NOPE": 1}, "no knob named NOPE"),
        ({"TOP_K": 65}, "outside int 1..64 log"),
        ({"TOP_K": 2.5}, "not an integer"),
        ({"TOP_K": True}, "not a number"),
        ({"CACHE_WEIGHT": float("nan")}, "outside float"),
        ({"CACHE_WEIGHT": "1.0"}, "not a number"),
        ({"NUM_WARPS": 3}, "not one of"),
        ({"NUM_WARPS": 4.0}, "not one of"),
        ({"STEP": 12}, "not on the grid"),
    ],
)
def test_substitute_rejects_bad_values(values, problem):
    with pytest.raises(KnobError, match=problem):
        substitute(SOURCE, values, "program.py")


def test_substitute_files_and_structure_key():
    files = {
        "a.py": "X = 1  # knob: int 1..8\n",
        "b.py": "Y = 0.5  # knob: float 0..1\n",
        "c.txt": "untouched",
    }
    out = substitute_files(files, {"Y": 0.25})
    assert out == {**files, "b.py": "Y = 0.25  # knob: float 0..1\n"}
    with pytest.raises(KnobError, match="no knob named Z"):
        substitute_files(files, {"Z": 1})
    assert structure_key(out) == structure_key(files)
    assert len(structure_key(files)) == 12
    reranged = {**files, "a.py": "X = 1  # knob: int 1..16\n"}
    assert structure_key(reranged) != structure_key(files)
    edited = {**files, "c.txt": "changed"}
    assert structure_key(edited) != structure_key(files)


def test_values_sampled_by_optuna_substitute_and_read_back():
    knobs = parse_knobs(SOURCE)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(40):
        trial = study.ask(distributions(knobs))
        out = substitute(SOURCE, trial.params)
        assert values_of({"p.py": out}) == {**values_of({"p.py": SOURCE}), **trial.params}
        study.tell(trial, 0.0)


@st.composite
def _declaration(draw):
    kind = draw(st.sampled_from(["int", "float", "choices"]))
    if kind == "int":
        low = draw(st.integers(-1000, 1000))
        high = draw(st.integers(low, low + 5000))
        log = low > 0 and draw(st.booleans())
        value, default = (draw(st.integers(low, high)) for _ in range(2))
        return f"int {low}..{high}{' log' if log else ''}", default, value
    if kind == "float":
        low = draw(st.floats(-1e6, 1e6, allow_nan=False))
        high = draw(st.floats(low, low + 1e6, allow_nan=False))
        value, default = (draw(st.floats(low, high)) for _ in range(2))
        return f"float {low!r}..{high!r}", default, value
    pool = st.one_of(
        st.integers(-5, 5),
        st.text(max_size=6),
        st.booleans(),
        st.none(),
        st.floats(allow_nan=False, allow_infinity=False),
    )
    choices = draw(st.lists(pool, min_size=1, max_size=5, unique_by=lambda v: (type(v), v)))
    return f"choices={choices!r}", draw(st.sampled_from(choices)), draw(st.sampled_from(choices))


@settings(max_examples=150, deadline=None)
@given(decl=_declaration(), before=st.text(alphabet="ab #é\n", max_size=20))
def test_round_trip_property(decl, before):
    annotation, default, value = decl
    prefix = "".join(f"# {line}\n" for line in before.splitlines())
    src = f"{prefix}K = {default!r}  # knob: {annotation}\nrest = 1\n"
    assert substitute(src, {"K": default}) == src
    out = substitute(src, {"K": value})
    read = values_of({"p.py": out})["K"]
    assert type(read) is type(value) and read == value
    assert out.startswith(prefix + "K = ") and out.endswith(f"  # knob: {annotation}\nrest = 1\n")


def _three_hundred_lines() -> str:
    lines = ['"""A module of about the size of a real target."""', "import math", ""]
    for i in range(40):
        lines += [
            f"K{i} = {i + 1}  # knob: int 1..1000" if i % 4 == 0 else f"C{i} = {i} * 2.5",
            "",
            f"def f{i}(x, y=3):",
            f"    # loop {i}",
            f"    return [math.sqrt(v) + x * {i} for v in range(y)]",
            "",
        ]
    while len(lines) < 300:
        lines.append(f"TABLE_{len(lines)} = ({len(lines)}, 'row', None)")
    return "\n".join(lines) + "\n"


def _parse_s(source: str) -> float:
    start = time.perf_counter()
    ast.parse(source)
    return time.perf_counter() - start


def _timed(source: str, clear_between: bool) -> float:
    knobs_mod._scan.cache_clear()  # a structure never seen before
    start = time.perf_counter()
    knobs = parse_knobs(source, "big.py")
    if clear_between:
        knobs_mod._scan.cache_clear()
    out = substitute(source, {k.name: 7 for k in knobs}, "big.py")
    elapsed = time.perf_counter() - start
    assert len(knobs) == 10 and out.count("= 7  # knob:") == 10
    return elapsed


def test_parse_and_substitute_300_lines_is_fast():
    base = _three_hundred_lines()
    assert len(base.splitlines()) == 300
    # The engine's path: one parse, then substitution from the cache. Measured 1.3 ms
    # median (2.6 ms with both passes parsing) on a shared 2-core machine when a bare
    # ast.parse of the same source took about 0.5 ms; on the same machine hours later the
    # bare parse took 2.3-4.6 ms and the fixed 5 ms / 10 ms bounds failed in isolation. So
    # the bounds are in units of this machine's own ast.parse of the source, measured here:
    # the engine path is about one parse (0.7-1.2x at best, 1.2-2.0x median), the cold
    # path two (1.5-2.7x).
    parse = min(_parse_s(base + f"# run {r}\n") for r in range(15))
    engine = [_timed(base + f"# run {r}\n", clear_between=False) for r in range(40)]
    cold = [_timed(base + f"# run {r}\n", clear_between=True) for r in range(15)]
    assert min(engine) < 3 * parse, (min(engine), parse)
    assert statistics.median(engine) < 6 * parse, (statistics.median(engine), parse)
    assert min(cold) < 5 * parse, (min(cold), parse)
