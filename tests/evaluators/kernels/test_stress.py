"""Stress from the reference: every kernel target validates with the distributions its
reference supports, and its target.toml says which and why the others are dropped."""

import dataclasses
import tomllib
from pathlib import Path

import pytest

from evaluators import numerics
from evaluators.kernels.evaluator import KernelConfig, load_reference, screened
from optimizer.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
TARGETS = sorted(p.parent for p in (ROOT / "targets" / "kernels").glob("*/target.toml"))


def _config(folder: Path) -> KernelConfig:
    raw = tomllib.loads((folder / "target.toml").read_text())
    return KernelConfig.parse(dict(raw["evaluator"]), str(folder))


@pytest.mark.parametrize("folder", TARGETS, ids=[p.name for p in TARGETS])
def test_a_built_in_target_records_the_screen_of_its_reference(folder: Path) -> None:
    """What target.toml records is what the screen finds today: re-record it (the kept
    distributions and [evaluator.dropped]) when a reference or workload changes."""
    config = _config(folder)
    fresh = screened(dataclasses.replace(config, distributions=()), load_reference(folder))
    assert config.distributions == fresh.distributions
    assert dict(config.dropped).keys() == dict(fresh.dropped).keys()
    assert set(config.distributions) | set(dict(config.dropped)) == set(numerics.DISTRIBUTIONS)


def test_a_target_that_names_no_distributions_gets_those_its_reference_supports() -> None:
    folder = ROOT / "targets" / "kernels" / "rmsnorm"
    raw = tomllib.loads((folder / "target.toml").read_text())["evaluator"]
    raw = {k: v for k, v in raw.items() if k not in ("distributions", "dropped")}
    config = screened(KernelConfig.parse(raw, "t"), load_reference(folder))
    assert "offset" in config.distributions and "neginf_mask" not in config.distributions
    assert "not finite" in dict(config.dropped)["neginf_mask"]
    assert "neginf_mask (" in config.stress_note()


def test_a_distribution_both_used_and_dropped_is_a_clear_error() -> None:
    raw = {"distributions": ["normal", "offset"], "dropped": {"offset": "overflows"},
           "workloads": [{"name": "w", "device": "cpu"}]}
    with pytest.raises(ConfigError, match="both used and dropped"):
        KernelConfig.parse(raw, "t")
    raw = {"dropped": {"sideways": "why"}, "workloads": [{"name": "w"}]}
    with pytest.raises(ConfigError, match="maps a distribution"):
        KernelConfig.parse(raw, "t")
