from __future__ import annotations

from pathlib import Path

import pytest

from optimizer.cli import main
from optimizer.config import load_experiment, parse_value
from optimizer.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_loads_defaults_and_target(toy_repo: Path) -> None:
    cfg = load_experiment(toy_repo / "experiments/toy.toml", workspace=toy_repo)
    assert cfg.name == "toy"
    assert cfg.budget.max_candidates == 10
    assert cfg.state_dir == toy_repo / ".optimizer"
    assert cfg.optuna_storage == f"sqlite:///{toy_repo / '.optimizer' / 'optuna.db'}"
    (entry,) = cfg.targets
    assert entry.spec.name == "toy" and entry.spec.noise == "deterministic"
    assert entry.spec.rel_path == "targets/function/toy"


def test_set_overrides_experiment_and_target_keys(toy_repo: Path) -> None:
    cfg = load_experiment(
        toy_repo / "experiments/toy.toml",
        [
            "budget.minutes=0.5",
            "proposer.kind=offline",
            "targets.toy.min_gain=0.2",
            "targets.toy.share=3",
            "search.sampler=random",
        ],
        workspace=toy_repo,
    )
    assert cfg.budget.minutes == 0.5
    assert cfg.search.sampler == "random"
    assert cfg.targets[0].spec.min_gain == 0.2
    assert cfg.targets[0].share == 3.0


@pytest.mark.parametrize(
    ("body", "overrides", "needle"),
    [
        ("\n[budget]\nhours = 3\n", [], "budget.hours"),
        ("\ncolour = 'red'\n", [], "colour"),
        ("", ["budget.minutes=soon"], "budget.minutes"),
        ("", ["targets.nope.min_gain=1"], "nope"),
        ("", ["proposer.kind=magic"], "proposer.kind"),
        ("", ["targets.toy.noise=loud"], "noise"),
        ("", ["targets.toy.objectives=[{metric='cost', direction='up'}]"], "direction"),
        ("", ["budget"], "KEY=VALUE"),
        ("", ["proposer.offline.knob_search_share=1.2"], "proposer.offline.knob_search_share"),
        ("", ["proposer.offline.knob_search_share=0.6", "proposer.offline.knob_nudge_share=0.5"],
         "proposer.offline.knob_nudge_share"),
    ],
)
def test_bad_config_is_one_clear_error(
    toy_repo: Path, body: str, overrides: list[str], needle: str
) -> None:
    exp = toy_repo / "experiments/toy.toml"
    if body:
        # a duplicate [budget] table is invalid TOML, so write a fresh file
        exp.write_text(
            exp.read_text().replace("[budget]\nminutes = 3\nmax_candidates = 10\n", "") + body
        )
    with pytest.raises(ConfigError) as err:
        load_experiment(exp, overrides, workspace=toy_repo)
    assert needle in str(err.value)


def test_missing_target_folder(toy_repo: Path, experiment_writer) -> None:
    exp = experiment_writer(toy_repo, "bad")
    exp.write_text(exp.read_text().replace("targets/function/toy", "targets/none"))
    with pytest.raises(ConfigError, match=r"targets\[0\]\.path"):
        load_experiment(exp, workspace=toy_repo)


def test_cli_exits_2_and_writes_nothing(
    toy_repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(toy_repo)
    code = main(["run", "experiments/toy.toml", "--set", "budget.minutes=never"])
    assert code == 2
    err = capsys.readouterr().err
    assert "experiments/toy.toml" in err and "budget.minutes" in err
    assert not (toy_repo / ".optimizer").exists()


def test_parse_value() -> None:
    assert parse_value("3") == 3
    assert parse_value("0.5") == 0.5
    assert parse_value("true") is True
    assert parse_value("hello") == "hello"
    assert parse_value("[1, 2]") == [1, 2]


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.toml")),
                         ids=lambda p: p.name)
def test_every_shipped_experiment_loads(path):
    cfg = load_experiment(path, workspace=ROOT)
    assert cfg.targets and all(t.share > 0 for t in cfg.targets)
