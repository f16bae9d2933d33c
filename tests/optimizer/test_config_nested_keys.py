"""A misspelt key is one clear error in every table of an experiment and of every shipped
target, nested tables and tables in arrays included: exit code 2, the file and the key
named, nothing written. (A night that silently ignores ``trian_s = 8.0`` runs for hours
with the wrong settings.)"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from optimizer.cli import main
from optimizer.config import load_experiment
from optimizer.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
BAD = "zz_misspelt"
# free-form tables: their keys are names the user chooses, not settings
FREE = {"regions", "rtt_ms", "args", "init"}


def _tables(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Paths of every table (dict) in a parsed TOML document; list items by index."""
    if isinstance(node, dict):
        if not (path and path[-1] in FREE):
            yield path
        for key, value in node.items():
            yield from _tables(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            if isinstance(value, dict):
                yield from _tables(value, (*path, i))


def _with_bad_key(doc: dict[str, Any], path: tuple[Any, ...]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    node: Any = doc
    for part in path:
        node = node[part]
    node[BAD] = 1
    return doc


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    return repr(value)


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() else _toml(k)


def _dump(doc: dict[str, Any]) -> str:
    return "\n".join(f"{_key(k)} = {_toml(v)}" for k, v in doc.items()) + "\n"


EXPERIMENTS = sorted((ROOT / "experiments").glob("*.toml"))
CASES = [
    (exp, path)
    for exp in EXPERIMENTS
    for path in _tables(tomllib.loads(exp.read_text()))
]


@pytest.mark.parametrize(("exp", "path"), CASES,
                         ids=[f"{e.stem}:{'.'.join(map(str, p)) or 'top'}" for e, p in CASES])
def test_misspelt_key_in_an_experiment_table(tmp_path: Path, exp: Path, path: tuple) -> None:
    doc = _with_bad_key(tomllib.loads(exp.read_text()), path)
    bad = ROOT / "experiments" / f".bad-{tmp_path.name}.toml"  # target paths are relative
    bad.write_text(_dump(doc))
    try:
        with pytest.raises(ConfigError) as err:
            load_experiment(bad, workspace=ROOT)
    finally:
        bad.unlink()
    assert BAD in str(err.value) and bad.name in str(err.value), str(err.value)


TARGETS = sorted(p.parent for p in (ROOT / "targets").rglob("target.toml"))
TARGET_CASES = [
    (folder, path)
    for folder in TARGETS
    for path in _tables(tomllib.loads((folder / "target.toml").read_text()))
]


@pytest.mark.parametrize(
    ("folder", "path"), TARGET_CASES,
    ids=[f"{f.relative_to(ROOT / 'targets')}:{'.'.join(map(str, p)) or 'top'}"
         for f, p in TARGET_CASES])
def test_misspelt_key_in_a_target_table(tmp_path: Path, folder: Path, path: tuple) -> None:
    """Set through the experiment's [targets.settings] (merged over target.toml), as a user
    overriding a shipped target would."""
    doc = tomllib.loads((folder / "target.toml").read_text())
    bad_doc = _with_bad_key(doc, path)
    top = path[0] if path else None
    settings = {BAD: 1} if top is None else {top: bad_doc[top]}
    exp = {"name": "bad", "targets": [{"path": str(folder.relative_to(ROOT)),
                                        "settings": settings}]}
    bad = ROOT / "experiments" / f".bad-{tmp_path.name}.toml"
    bad.write_text(_dump(exp))
    try:
        with pytest.raises(ConfigError) as err:
            load_experiment(bad, workspace=ROOT)
    finally:
        bad.unlink()
    assert BAD in str(err.value), str(err.value)


def test_every_kind_has_a_nested_table_in_the_cases() -> None:
    kinds = {tomllib.loads((f / "target.toml").read_text())["kind"]
             for f, p in TARGET_CASES if len(p) >= 2}
    assert kinds >= {"kernel", "routing"}, kinds
    assert len(CASES) >= 40 and len(TARGET_CASES) >= 70


def test_the_night_of_the_report_stops_with_exit_2_and_writes_nothing(
    toy_repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The defect as found: a misspelt key after a target's [targets.settings.evaluator]."""
    exp = toy_repo / "experiments" / "toy.toml"
    exp.write_text(exp.read_text() + "\n[targets.settings.evaluator]\ntrian_s = 8.0\n")
    monkeypatch.chdir(toy_repo)
    assert main(["run", "experiments/toy.toml"]) == 2
    err = capsys.readouterr().err
    assert "experiments/toy.toml" in err and "targets[0].settings.evaluator.trian_s" in err
    assert not (toy_repo / ".optimizer").exists()
