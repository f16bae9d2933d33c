"""The harness kind's ``[evaluator]`` settings, checked before anything runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evaluators.harness.cache import Rules

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = "../shared/data/harness"  # relative to the repository root

KEYS = {"workload", "synthetic", "held_out", "taubench", "recorded", "provider", "prices",
        "window", "ttl_s", "seconds_per_call", "min_cache_tokens", "baselines",
        "max_decision_ms", "data_dir"}
PRICE_KEYS = {"openai": {"input", "cached_input", "output"},
              "anthropic": {"input", "output", "write_mult", "read_mult"}}
# list prices per million tokens (2026-12): gpt-4o, and Claude Sonnet with its cache rules
DEFAULT_PRICES = {"openai": {"input": 2.5, "cached_input": 1.25, "output": 10.0},
                  "anthropic": {"input": 3.0, "output": 15.0, "write_mult": 1.25,
                                "read_mult": 0.1}}


class SettingsError(ValueError):
    def __init__(self, message: str, key: str):
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class Settings:
    workload: str  # synthetic, taubench or recorded
    synthetic: tuple[int, int, int]  # seed, tasks, trials (training)
    held_out: tuple[int, int, int]  # seed, tasks, trials (held-out synthetic set)
    held_out_every: int  # taubench, recorded: tasks held out (trajectories.held_out)
    provider: str
    rules: dict[str, Rules]
    window: int
    baselines: Path | None
    max_decision_ms: float
    data_dir: Path
    recorded_file: Path | None = None  # workload = "recorded": the file in data_dir


def _num(raw: Mapping[str, Any], key: str, default: float, lo: float, where: str) -> float:
    v = raw.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= lo:
        raise SettingsError(f"{where}{key} must be a number >= {lo:g}, got {v!r}", where + key)
    return float(v)


def _triple(raw: Any, key: str, default: tuple[int, int, int]) -> tuple[int, int, int]:
    if raw is None:
        return default
    if not isinstance(raw, Mapping) or set(raw) - {"seed", "tasks", "trials"}:
        extra = sorted(set(raw) - {"seed", "tasks", "trials"}) if isinstance(raw, Mapping) else []
        raise SettingsError(f"{key} must be a table of seed, tasks, trials"
                            + (f"; unknown: {', '.join(extra)}" if extra else ""), key)
    out = []
    for name, d in zip(("seed", "tasks", "trials"), default, strict=True):
        v = raw.get(name, d)
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "seed" else 1):
            raise SettingsError(f"{key}.{name} must be a positive integer, got {v!r}",
                                f"{key}.{name}")
        out.append(v)
    return out[0], out[1], out[2]


def _every(raw: Mapping[str, Any], key: str, default: int) -> int:
    """``held_out_every`` of the ``taubench`` or ``recorded`` table."""
    table = raw.get(key, {})
    allowed = {"held_out_every"} | ({"file"} if key == "recorded" else set())
    if not isinstance(table, Mapping) or set(table) - allowed:
        extra = sorted(set(table) - allowed) if isinstance(table, Mapping) else []
        raise SettingsError(f"{key} takes {', '.join(sorted(allowed))}"
                            + (f"; unknown: {', '.join(extra)}" if extra else ""), key)
    every = table.get("held_out_every", default)
    if isinstance(every, bool) or not isinstance(every, int) or every < 2:
        raise SettingsError(f"{key}.held_out_every must be an integer >= 2",
                            f"{key}.held_out_every")
    return every


def parse(raw: Mapping[str, Any]) -> Settings:
    unknown = set(raw) - KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise SettingsError(f"unknown key {key!r}; allowed: {', '.join(sorted(KEYS))}", key)
    workload = str(raw.get("workload", "synthetic"))
    if workload not in ("synthetic", "taubench", "recorded"):
        raise SettingsError("workload must be 'synthetic', 'taubench' or 'recorded', got "
                            f"{workload!r}", "workload")
    provider = str(raw.get("provider", "openai"))
    if provider not in PRICE_KEYS:
        raise SettingsError(f"provider must be 'openai' or 'anthropic', got {provider!r}",
                            "provider")
    prices = raw.get("prices", {})
    if not isinstance(prices, Mapping) or set(prices) - set(PRICE_KEYS):
        raise SettingsError("prices must be a table with 'openai' and/or 'anthropic' tables",
                            "prices")
    base = Rules(ttl_s=_num(raw, "ttl_s", 300.0, 1.0, ""),
                 seconds_per_call=_num(raw, "seconds_per_call", 10.0, 0.0, ""),
                 min_cache_tokens=int(_num(raw, "min_cache_tokens", 1024, 1, "")))
    rules = {}
    for name, keys in PRICE_KEYS.items():
        table = prices.get(name, {})
        if not isinstance(table, Mapping) or set(table) - keys:
            raise SettingsError(f"prices.{name} takes {', '.join(sorted(keys))}",
                                f"prices.{name}")
        vals: dict[str, Any] = {k: _num(table, k, DEFAULT_PRICES[name][k], 0.0, f"prices.{name}.")
                for k in keys}
        rules[name] = replace(base, provider=name, **vals)
    every = _every(raw, "taubench", 5)
    recorded_every = _every(raw, "recorded", 5)  # checked even when another workload runs
    recorded_file = None
    if workload == "recorded":
        every = recorded_every
        file = raw.get("recorded", {}).get("file")
        if not isinstance(file, str) or not file:
            raise SettingsError("workload = 'recorded' needs recorded.file, the recorded "
                                "trajectories' file (relative to data_dir)", "recorded.file")
        recorded_file = Path(file).expanduser()
    raw_b = str(raw.get("baselines", "targets/harness/baselines"))
    baselines = None
    if raw_b:
        baselines = Path(raw_b) if Path(raw_b).is_absolute() else PROJECT_ROOT / raw_b
        if not baselines.is_dir():
            raise SettingsError(f"baselines = {raw_b!r}: not a folder of policy files (or '' "
                                "for none)", "baselines")
    raw_d = str(raw.get("data_dir", DATA_DIR))
    data_dir = Path(raw_d).expanduser()
    data_dir = data_dir if data_dir.is_absolute() else PROJECT_ROOT / data_dir
    if recorded_file is not None and not recorded_file.is_absolute():
        recorded_file = data_dir / recorded_file
    return Settings(
        workload=workload,
        synthetic=_triple(raw.get("synthetic"), "synthetic", (1, 8, 3)),
        held_out=_triple(raw.get("held_out"), "held_out", (2, 4, 3)),
        held_out_every=every, provider=provider, rules=rules,
        window=int(_num(raw, "window", 128_000, 256, "")), baselines=baselines,
        max_decision_ms=_num(raw, "max_decision_ms", 50.0, 0.01, ""), data_dir=data_dir,
        recorded_file=recorded_file)
