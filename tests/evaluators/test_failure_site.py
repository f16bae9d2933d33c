"""A function target whose own evaluate.py is wrong says where and on what values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optimizer.cli import main
from optimizer.testing.own_repo import PENALTY_EVALUATE, add_penalty_target, make_serving_repo


def test_a_wrongly_unpacked_timed_result_names_the_line_and_the_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    repo = make_serving_repo(tmp_path / "repo")
    folder = add_penalty_target(repo)
    # the first try of a new user: (seconds, value) instead of (value, seconds), checked
    # with a bare message
    wrong = PENALTY_EVALUATE.replace(
        "out, seconds = timed(mod.apply_repetition_penalty, *args)\n        _check(out, args)",
        "seconds, out = timed(mod.apply_repetition_penalty, *args)\n"
        '        assert np.allclose(out, _reference(*args)), "wrong"')
    assert wrong != PENALTY_EVALUATE
    (folder / "evaluate.py").write_text(wrong)
    assert main(["evaluate", str(folder), "--json"]) == 1
    reason = json.loads(capsys.readouterr().out)["reason"]
    assert reason.startswith("wrong answer: wrong (evaluate.py line ")
    assert 'assert np.allclose(out, _reference(*args)), "wrong"' in reason
    assert "out = " in reason and "(float)" in reason  # the seconds, where an array belongs
    assert "args = " in reason
