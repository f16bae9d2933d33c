"""The documentation's front door holds: the README stays short, every relative link in the
README, docs/ and the results index leads to a file that exists, and every committed result
file is indexed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
README_MAX_LINES = 200  # about 150 today; the measurements live in bench/results/README.md

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def relative_links(text: str) -> list[str]:
    """The targets of the markdown links in ``text`` that point into the repository: code
    blocks and code spans are not prose, and web addresses and in-page anchors are not
    files."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", text))
    out = []
    for target in _LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue
        out.append(target.split("#", 1)[0])
    return out


def _documents() -> list[Path]:
    docs = sorted((ROOT / "docs").rglob("*.md"))
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", RESULTS / "README.md", *docs]


def test_relative_links_finds_links_and_skips_the_rest() -> None:
    text = (
        "See [the engine](docs/engine.md#stores) and [a site](https://example.org).\n"
        "[anchor](#here) `[in code](nowhere.md)`\n```\n[in a block](nowhere.md)\n```\n"
    )
    assert relative_links(text) == ["docs/engine.md"]


@pytest.mark.parametrize("doc", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc: Path) -> None:
    missing = [
        target
        for target in relative_links(doc.read_text(encoding="utf-8"))
        if not (doc.parent / target).exists()
    ]
    assert not missing, (
        f"{doc.relative_to(ROOT)} links to files that do not exist: {missing}; "
        "fix the path (links are relative to the file that holds them)"
    )


def test_every_result_file_is_indexed() -> None:
    index = RESULTS / "README.md"
    linked = {
        (index.parent / target).resolve()
        for target in relative_links(index.read_text(encoding="utf-8"))
    }
    unindexed = sorted(
        path.name
        for path in RESULTS.iterdir()
        if path.is_file() and path.name != "README.md" and path.resolve() not in linked
    )
    assert not unindexed, (
        f"bench/results/README.md has no row for {unindexed}: add one per figure "
        "(the figure, device, date, command and the file's link)"
    )


def test_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move measurements "
        "to bench/results/README.md or docs/results/, and night stories to CHANGELOG.md"
    )
