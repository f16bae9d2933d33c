"""Progress lines: plain when not on a terminal, coloured states and a title on one."""

from __future__ import annotations

import io

import pytest

from optimizer.cli import _progress_printer

LINE = "[toy] c0003 FAILED    ValueError: x | best 1 (c0001) | offline | 2.5 min left"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_when_not_on_a_terminal() -> None:
    out = io.StringIO()
    _progress_printer(out)(LINE)
    assert out.getvalue() == LINE + "\n"


def test_terminal_gets_colour_and_title(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = _Terminal()
    _progress_printer(out)(LINE)
    text = out.getvalue()
    assert "\x1b[31mFAILED\x1b[0m" in text
    assert text.startswith("\x1b]0;optimizer: 2.5 min left\x07")


def test_no_color_is_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    out = _Terminal()
    _progress_printer(out)(LINE)
    assert out.getvalue() == LINE + "\n"
