"""A program's knob declarations are parsed once however often a night enters them: the
proposer's knob search, the admission of a candidate (distributions, substitution, the
structure key) and the mutations of later proposals share one parse per source."""

from __future__ import annotations

import collections
import types
from pathlib import Path

import optuna
import pytest

from optimizer import knobs, syntax
from optimizer.config import load_experiment
from optimizer.loop import run


def test_a_night_parses_each_program_source_once(
    toy_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: collections.Counter[str] = collections.Counter()

    def counting_parse(source: str, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        parsed[source] += 1
        return syntax.parse(source, *args, **kwargs)  # type: ignore[arg-type]

    public = {name: value for name, value in vars(syntax).items() if not name.startswith("_")}
    counted = types.SimpleNamespace(**{**public, "parse": counting_parse})
    monkeypatch.setattr(knobs, "syntax", counted)
    knobs._scan.cache_clear()  # sources parsed by earlier tests count here too
    cfg = load_experiment(
        toy_repo / "experiments/toy.toml", ["budget.max_candidates=6"], workspace=toy_repo
    )
    run(cfg, say=lambda s: None)
    knobs._scan.cache_clear()  # nothing parsed through the counter outlives the test

    study = optuna.load_study(study_name="toy/toy", storage=cfg.optuna_storage)
    candidates = [t for t in study.trials if t.user_attrs.get("candidate")]
    assert len(candidates) >= 4
    assert parsed, "the night parsed no knob declaration"
    assert max(parsed.values()) == 1, [n for n in parsed.values() if n > 1]
