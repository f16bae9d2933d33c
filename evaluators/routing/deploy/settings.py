"""The deployment mode's ``[evaluator]`` settings, checked and turned into objects.

::

    mode = "deploy"
    model = "llama-2-70b"                   # a DeployModel of deploy/parallel.py
    gpu_budget = 16
    accelerators = ["H100"]                 # what a plan may use (H100, A100, H200)
    max_prompt_tokens = 16384               # longer prompts are cut to this
    max_output_tokens = 2048                # longer outputs too
    kv_link_gb_s = 50.0                     # a prefill instance's KV link (separate pools)
    host_kv_gib_per_gpu = 0                 # host memory a plan may give its prefix cache
    host_link_gb_s = 25.0                   # per GPU, host to HBM (KV read back)
    slo = { ttft_p90_s = 2.0, tbt_p99_s = 0.2 }
    scale_range = [0.125, 16.0]             # the bisection's bracket of rate scales
    bisect_steps = 7
    workload = { kind = "profile", profile = "azure2023_conversation", seed = 3,
                 duration_s = 300 }         # training (evaluators/routing/config.py's forms)
    held_out = [{ name = "azure-s4", kind = "profile", ..., slo = { ttft_p90_s = 6.0 },
                  scale_range = [0.02, 2.0] }]     # slo and scale_range: per workload
    baselines = "targets/routing/deploy_instance/baselines"   # plan files ("" = none), or
                                            # a list of such folders
    grid = { tp = [4, 8], pp = [1], max_num_batched_tokens = [512, 2048],
             max_num_seqs = [256], block_size = [16] }        # single-class plans
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from evaluators.routing.config import SettingsError as _ConfigSettingsError
from evaluators.routing.config import _check_workload, build_workload
from evaluators.routing.deploy.capacity import DeploySlo
from evaluators.routing.deploy.parallel import LLAMA2_70B, LLAMA3_8B, DeployModel
from evaluators.routing.deploy.plan import Limits
from evaluators.routing.deploy.tables import profile_of
from evaluators.routing.workload import Workload

PROJECT_ROOT = Path(__file__).resolve().parents[3]
MODELS: dict[str, DeployModel] = {m.name: m for m in (LLAMA2_70B, LLAMA3_8B)}
KEYS = {"mode", "model", "gpu_budget", "accelerators", "max_prompt_tokens",
        "max_output_tokens", "kv_link_gb_s", "host_kv_gib_per_gpu", "host_link_gb_s", "slo",
        "scale_range", "bisect_steps", "workload", "held_out", "baselines", "grid"}
GRID_KEYS = ("tp", "pp", "max_num_batched_tokens", "max_num_seqs", "block_size")
SettingsError = _ConfigSettingsError


@dataclass(frozen=True)
class Case:
    workload: dict[str, Any]
    slo: DeploySlo
    scale_range: tuple[float, float]


@dataclass(frozen=True)
class DeployConfig:
    limits: Limits
    cases: dict[str, Case]
    train: str
    held_out: tuple[str, ...]
    bisect_steps: int
    baselines: tuple[Path, ...]
    grid: dict[str, list[int]]

    @property
    def resolution(self) -> float:
        """The bisection's precision as a factor of the scale (the widest bracket's)."""
        return max(float((c.scale_range[1] / c.scale_range[0]) ** (1.0 / 2 ** self.bisect_steps))
                   for c in self.cases.values())


def _number(raw: Mapping[str, Any], key: str, default: float, low: float,
            integer: bool = False) -> Any:
    v = raw.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or (integer and not isinstance(
            v, int)) or not v >= low or not math.isfinite(v):
        raise SettingsError(f"must be {'an int' if integer else 'a number'} >= {low}, not "
                            f"{v!r}", key)
    return v


def _slo(raw: Any, base: DeploySlo, key: str) -> DeploySlo:
    if not isinstance(raw, Mapping):
        raise SettingsError("must be a table", key)
    names = {f.name for f in fields(DeploySlo)}
    extra = sorted(set(raw) - names)
    if extra:
        raise SettingsError(f"unknown key; allowed: {', '.join(sorted(names))}",
                            f"{key}.{extra[0]}")
    values = {n: float(_number(raw, n, getattr(base, n), 1e-6)) for n in names}
    return DeploySlo(**values)


def _range(rng: Any, key: str) -> tuple[float, float]:
    if (not isinstance(rng, list) or len(rng) != 2
            or any(isinstance(x, bool) or not isinstance(x, int | float) for x in rng)
            or not 0 < rng[0] < rng[1]):
        raise SettingsError("must be [low, high] with 0 < low < high", key)
    return float(rng[0]), float(rng[1])


def _case(raw: Any, key: str, slo: DeploySlo,
          scales: tuple[float, float]) -> tuple[str, Case]:
    if not isinstance(raw, Mapping):
        raise SettingsError("must be a table", key)
    raw = dict(raw)
    name = str(raw.pop("name", "train"))
    own = _slo(raw.pop("slo", {}), slo, f"{key}.slo")
    rng = _range(raw.pop("scale_range"), f"{key}.scale_range") if "scale_range" in raw else scales
    _check_workload(raw, key)
    return name, Case(raw, own, rng)


def _limits(s: Mapping[str, Any]) -> Limits:
    model = str(s.get("model", "llama-2-70b"))
    if model not in MODELS:
        raise SettingsError(f"unknown model {model!r}; known: {sorted(MODELS)}", "model")
    accs = s.get("accelerators", ["H100"])
    if not isinstance(accs, list) or not accs:
        raise SettingsError("must be a non-empty list of accelerator names", "accelerators")
    for a in accs:
        try:
            profile_of(str(a))
        except (KeyError, ValueError) as exc:
            raise SettingsError(f"{a!r}: no measured tables ({exc})", "accelerators") from None
    return Limits(MODELS[model], int(_number(s, "gpu_budget", 16, 1, True)),
                  tuple(str(a) for a in accs),
                  int(_number(s, "max_prompt_tokens", 16384, 1, True)),
                  int(_number(s, "max_output_tokens", 2048, 1, True)),
                  float(_number(s, "kv_link_gb_s", 50.0, 1e-3)),
                  int(_number(s, "host_kv_gib_per_gpu", 0, 0, True)),
                  float(_number(s, "host_link_gb_s", 25.0, 1e-3)))


def _grid(raw: Any) -> dict[str, list[int]]:
    if not isinstance(raw, Mapping):
        raise SettingsError("must be a table", "grid")
    extra = sorted(set(raw) - set(GRID_KEYS))
    if extra:
        raise SettingsError(f"unknown key; allowed: {', '.join(GRID_KEYS)}", f"grid.{extra[0]}")
    out = {}
    for k in GRID_KEYS:
        v = raw.get(k, [16] if k == "block_size" else [1] if k == "pp" else [])
        if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int)
                                          for x in v):
            raise SettingsError("must be a list of ints", f"grid.{k}")
        out[k] = v
    return out


def parse(s: Mapping[str, Any]) -> DeployConfig:
    extra = sorted(set(s) - KEYS)
    if extra:
        raise SettingsError(f"unknown key in deploy mode; allowed: {', '.join(sorted(KEYS))}",
                            extra[0])
    limits = _limits(s)
    slo = _slo(s.get("slo", {}), DeploySlo(), "slo")
    rng = _range(s.get("scale_range", [0.125, 16.0]), "scale_range")
    steps = int(_number(s, "bisect_steps", 7, 0, True))
    if steps > 12:
        raise SettingsError("at most 12 (each step is a simulation)", "bisect_steps")
    train, case = _case(s.get("workload", {}), "workload", slo, rng)
    cases = {train: case}
    held = s.get("held_out", [])
    if not isinstance(held, list):
        raise SettingsError("must be a list of workload tables with a name", "held_out")
    names = []
    for i, raw in enumerate(held):
        name, c = _case(raw, f"held_out[{i}]", slo, rng)
        if name in cases:
            raise SettingsError(f"workload name {name!r} appears twice", f"held_out[{i}]")
        cases[name] = c
        names.append(name)
    return DeployConfig(limits, cases, train, tuple(names), steps,
                        _folders(s.get("baselines", "")), _grid(s.get("grid", {})))


def _folders(raw: Any) -> tuple[Path, ...]:
    """The baseline folders: one path, a list of paths, or "" for none."""
    listed = raw if isinstance(raw, list) else [raw]
    out = []
    for base in (str(b) for b in listed if b != ""):
        folder = Path(base) if Path(base).is_absolute() else PROJECT_ROOT / base
        if not folder.is_dir():
            raise SettingsError(f"{base!r}: not a folder of plan files", "baselines")
        out.append(folder)
    return tuple(out)


def build(raw: Mapping[str, Any]) -> Workload:
    return build_workload(raw)


def grid_plans(cfg: DeployConfig) -> Iterator[tuple[str, dict[str, Any]]]:
    """Single-class plans over the grid, each with as many instances as the budget holds."""
    g, lim = cfg.grid, cfg.limits
    for acc, tp, pp, budget, seqs, block in itertools.product(
            lim.accelerators, g["tp"], g["pp"], g["max_num_batched_tokens"],
            g["max_num_seqs"], g["block_size"]):
        replicas = lim.gpu_budget // (tp * pp)
        if replicas < 1:
            continue
        name = f"grid_{acc.lower()}_tp{tp}_pp{pp}_b{budget}_s{seqs}_k{block}"
        yield name, {"classes": [{
            "prompt_tokens": [1, lim.max_prompt_tokens], "accelerator": acc, "tp": tp,
            "pp": pp, "replicas": replicas, "max_num_batched_tokens": budget,
            "max_num_seqs": min(seqs, budget), "block_size": block}]}
