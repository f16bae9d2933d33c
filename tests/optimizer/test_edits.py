"""Strict edits: parsing the answer format, applying blocks and whole-file rewrites."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optimizer.edits import (
    apply_edits,
    closest_match,
    evolve_regions,
    format_edits,
    parse_edits,
)
from optimizer.errors import EditError
from optimizer.records import FileEdit

PROGRAM = """\
import math

SCALE = 2  # outside: must not change


# EVOLVE-BLOCK-START
def f(x):
    y = x * 2
    return y + 1


def g(x):
    y = x * 2
    return y - 1
# EVOLVE-BLOCK-END


def main():
    return f(3) + g(3)
"""


def test_parse_blocks_with_paths_fences_and_continuation() -> None:
    answer = """SUMMARY: faster f
Here is the change:

`program.py`
```python
<<<<<<< SEARCH
    return y + 1
=======
    return y + 2
>>>>>>> REPLACE
```
<<<<<<< SEARCH
    return y - 1
=======
    return y - 2
>>>>>>> REPLACE

File: helper.py
<<<<<<< SEARCH
a = 1
=======
a = 2
>>>>>>> REPLACE
"""
    edits = parse_edits(answer, ["program.py", "helper.py"])
    assert edits == [
        FileEdit(
            "program.py",
            blocks=(
                ("    return y + 1\n", "    return y + 2\n"),
                ("    return y - 1\n", "    return y - 2\n"),
            ),
        ),
        FileEdit("helper.py", blocks=(("a = 1\n", "a = 2\n"),)),
    ]


def test_parse_whole_file_rewrite_and_prefixed_path() -> None:
    answer = "File: targets/x/program.py\n```python\nprint(1)\n```\nSome trailing prose.\n"
    assert parse_edits(answer, ["program.py"]) == [FileEdit("program.py", content="print(1)\n")]


def test_fenced_code_without_a_file_name_is_not_an_edit() -> None:
    with pytest.raises(EditError, match="contains no edit"):
        parse_edits("An idea:\n```python\nx = 1\n```\n", ["program.py"])


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("other.py\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n", "'other.py' may not"),
        ("File: other.py\n```\nx\n```\n", "'other.py' may not"),
        ("Change the loop:\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n", "path alone"),
        ("program.py\n<<<<<<< SEARCH\na\nb\n", "unterminated"),
        ("program.py\n<<<<<<< SEARCH\na\n=======\nb\n", "cut off"),
        ("File: program.py\n```python\nx = 1\n", "not closed"),
        ("<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n", "no file path"),
        ("no edits here, sorry", "contains no edit"),
        ("", "contains no edit"),
    ],
)
def test_parse_rejects_with_actionable_reason(answer: str, message: str) -> None:
    with pytest.raises(EditError, match=message):
        parse_edits(answer, ["program.py"])


def test_apply_block_inside_region() -> None:
    edit = FileEdit(
        "program.py", blocks=(("def f(x):\n    y = x * 2\n", "def f(x):\n    y = x << 1\n"),)
    )
    out = apply_edits({"program.py": PROGRAM}, [edit])
    assert out["program.py"] == PROGRAM.replace(
        "def f(x):\n    y = x * 2\n", "def f(x):\n    y = x << 1\n"
    )


def test_no_match_names_the_closest_lines() -> None:
    edit = FileEdit("program.py", blocks=(("def f(x):\n    y = x*2\n", "pass\n"),))
    with pytest.raises(EditError) as info:
        apply_edits({"program.py": PROGRAM}, [edit])
    assert "lines 7-8" in str(info.value)
    assert info.value.closest == "def f(x):\n    y = x * 2\n"
    assert info.value.file == "program.py"


def test_two_matches_are_rejected_with_both_line_ranges() -> None:
    edit = FileEdit("program.py", blocks=(("    y = x * 2\n", "    y = x + x\n"),))
    with pytest.raises(EditError, match=r"occurs 2 times \(lines 8-8, lines 13-13\)"):
        apply_edits({"program.py": PROGRAM}, [edit])


def test_match_must_start_at_a_line_start() -> None:
    edit = FileEdit("program.py", blocks=(("y = x * 2\n", "y = 0\n"),))
    with pytest.raises(EditError, match="does not occur exactly"):
        apply_edits({"program.py": PROGRAM}, [edit])


def test_outside_region_is_rejected_with_line_numbers() -> None:
    edit = FileEdit(
        "program.py", blocks=(("SCALE = 2  # outside: must not change\n", "SCALE = 3\n"),)
    )
    with pytest.raises(EditError, match=r"matches lines 3-3.*editable lines: 7-14"):
        apply_edits({"program.py": PROGRAM}, [edit])


def test_removing_a_marker_is_rejected() -> None:
    edit = FileEdit(
        "program.py", blocks=(("    return y - 1\n# EVOLVE-BLOCK-END\n", "    return y - 1\n"),)
    )
    with pytest.raises(EditError, match="outside the EVOLVE-BLOCKs"):
        apply_edits({"program.py": PROGRAM}, [edit])
    sneaky = FileEdit("program.py", blocks=(("    return y - 1\n", "# EVOLVE-BLOCK-END\nx = 1\n"),))
    with pytest.raises(EditError, match="marker"):
        apply_edits({"program.py": PROGRAM}, [sneaky])


def test_whole_file_rewrite_must_keep_outside_text() -> None:
    inside = PROGRAM.replace("return y + 1", "return y + 100")
    assert apply_edits({"program.py": PROGRAM}, [FileEdit("program.py", content=inside)]) == {
        "program.py": inside
    }
    outside = PROGRAM.replace("return f(3) + g(3)", "return 0")
    with pytest.raises(EditError, match="line 19 lies outside"):
        apply_edits({"program.py": PROGRAM}, [FileEdit("program.py", content=outside)])
    unbalanced = PROGRAM.replace("# EVOLVE-BLOCK-END\n", "")
    with pytest.raises(EditError, match="unbalanced"):
        apply_edits({"program.py": PROGRAM}, [FileEdit("program.py", content=unbalanced)])


def test_unknown_file_is_rejected() -> None:
    with pytest.raises(EditError, match="not an editable file"):
        apply_edits({"program.py": PROGRAM}, [FileEdit("x.py", content="")])


def test_closest_match_prefers_the_most_similar_window() -> None:
    first, last, ratio, window = closest_match("a\nbcd\nxyz\n", "bce\n")
    assert (first, last, window) == (2, 2, "bcd\n") and 0.5 < ratio < 1.0


# --------------------------------------------------------------------------- properties

_line = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp")),
    max_size=12,
).filter(
    lambda s: "EVOLVE" not in s and not s.lstrip().startswith(("<<<<<", "=====", ">>>>>", "```"))
)
_lines = st.lists(_line, min_size=1, max_size=8)


@st.composite
def _program(draw: st.DrawFn) -> tuple[str, str, str]:
    before, region, after = draw(_lines), draw(_lines), draw(_lines)
    join = "".join
    src = join(f"{x}\n" for x in before) + "# EVOLVE-BLOCK-START\n"
    body = join(f"{x}\n" for x in region)
    return src, body, "# EVOLVE-BLOCK-END\n" + join(f"{x}\n" for x in after)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(_program(), st.data(), _lines)
def test_property_unique_substring_inside_region_applies(prog, data, new_lines) -> None:
    head, body, tail = prog
    source = head + body + tail
    lines = body.splitlines(keepends=True)
    i = data.draw(st.integers(0, len(lines) - 1))
    j = data.draw(st.integers(i + 1, len(lines)))
    search = "".join(lines[i:j])
    replace = "".join(f"{x}\n" for x in new_lines)
    edit = FileEdit("p.py", blocks=((search, replace),))
    hits = [
        k
        for k in range(len(source))
        if source.startswith(search, k) and (k == 0 or source[k - 1] == "\n")
    ]
    if len(hits) != 1 or not search.strip():
        with pytest.raises(EditError):
            apply_edits({"p.py": source}, [edit])
        return
    expected = head + "".join(lines[:i]) + replace + "".join(lines[j:]) + tail
    assert apply_edits({"p.py": source}, [edit]) == {"p.py": expected}


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(_program(), st.data(), _lines)
def test_property_edits_touching_outside_text_are_rejected(prog, data, new_lines) -> None:
    head, body, tail = prog
    source = head + body + tail
    all_lines = source.splitlines(keepends=True)
    n_head = len(head.splitlines())
    n_body = len(body.splitlines())
    outside = [k for k in range(len(all_lines)) if k < n_head or k >= n_head + n_body]
    k = data.draw(st.sampled_from(outside))
    span = data.draw(st.integers(1, 3))
    lo = max(0, min(k, len(all_lines) - span))
    search = "".join(all_lines[lo : lo + span])
    replace = "".join(f"{x}\n" for x in new_lines)
    with pytest.raises(EditError):
        apply_edits({"p.py": source}, [FileEdit("p.py", blocks=((search, replace),))])
    # A whole-file rewrite that inserts a line at an outside line boundary.
    offset = len("".join(all_lines[:k])) if k < n_head else len(source)
    assert not any(lo_ < offset < hi_ for lo_, hi_ in evolve_regions(source))
    rewritten = source[:offset] + "x\n" + source[offset:]
    with pytest.raises(EditError):
        apply_edits({"p.py": source}, [FileEdit("p.py", content=rewritten)])


_path = st.sampled_from(["program.py", "kernel.py", "sub/dir/router.py"])


@st.composite
def _edits(draw: st.DrawFn) -> list[FileEdit]:
    paths = draw(st.lists(_path, min_size=1, max_size=3, unique=True))
    text = st.lists(_line, max_size=6).map(lambda xs: "".join(f"{x}\n" for x in xs))
    out = []
    for p in paths:
        if draw(st.booleans()):
            out.append(FileEdit(p, content=draw(text)))
        else:
            pairs = draw(st.lists(st.tuples(text.filter(str.strip), text), min_size=1, max_size=3))
            out.append(FileEdit(p, blocks=tuple(pairs)))
    return out


@settings(max_examples=200)
@given(_edits())
def test_property_parse_format_round_trip(edits: list[FileEdit]) -> None:
    assert (
        parse_edits(format_edits(edits), ["program.py", "kernel.py", "sub/dir/router.py"]) == edits
    )
