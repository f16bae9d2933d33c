"""The split mode's ``[evaluator]`` settings, checked and turned into objects.

::

    mode = "split"
    server = { accelerator = "H200", count = 1 }     # the serving fleet (hardware.py)
    webgpu_factor = 0.5          # browser throughput over native llama.cpp (assumption)
    rtt_ms = 60.0                # client <-> server round trip (propagation)
    text_bytes_per_token = 4.0
    observe_s = 2.0              # the client's throughput estimate window
    slo = { ttft_p90_s = 2.0, tpot_p90_s = 0.1 }
    quality = { max_kl_mean = 0.005, max_kl_p99 = 0.05, min_top1 = 0.95, min_greedy = 0.85 }
    uplink_table = "targets/routing/coinfer_split/uplinks.json"
    workload = { kind = "profile", profile = "azure2023_conversation", seed = 3,
                 duration_s = 120 }
    devices = { rtx_4090 = 1.0, m1_max_32core = 2.0 }   # the device mix (weights)
    uplinks = ["verizon_lte_short"]                      # links drawn uniformly
    seed = 0                                             # draws clients and offsets
    held_out = [{ name = "...", workload = {...}, devices = {...}, uplinks = [...] }]
    baselines = "targets/routing/coinfer_split/baselines"
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluators.routing.config import PROJECT_ROOT, SettingsError, build_workload
from evaluators.routing.fleet import Fleet, build_fleet
from evaluators.routing.sim import SimConfig
from evaluators.routing.split.model import Client, Profile
from evaluators.routing.split.tables import DEVICES, Codec, Uplink, load_codecs, load_uplinks
from evaluators.routing.workload import Workload

KEYS = {"mode", "server", "webgpu_factor", "rtt_ms", "text_bytes_per_token", "observe_s",
        "slo", "quality", "uplink_table", "workload", "devices", "uplinks", "seed",
        "held_out", "baselines", "sim"}
CASE_KEYS = {"name", "workload", "devices", "uplinks", "seed"}  # a held-out entry
QUALITY = {"max_kl_mean": 0.005, "max_kl_p99": 0.05, "min_top1": 0.95, "min_greedy": 0.85}


@dataclass(frozen=True)
class Case:
    name: str
    workload: Workload
    clients: tuple[Client, ...]


@dataclass(frozen=True)
class SplitConfig:
    profile: Profile
    fleet: Fleet
    sim: SimConfig
    slo_ttft_s: float
    slo_tpot_s: float
    quality: dict[str, float]
    codecs: dict[str, Codec]
    train: Case
    held_out: tuple[Case, ...]
    baselines: Path | None


def quality_failure(codec: Codec, q: Mapping[str, float]) -> str:
    """Why ``codec``'s measured quality fails the budget, or ""."""
    bad = [f"kl_mean {codec.kl_mean:.3g} > {q['max_kl_mean']}" if codec.kl_mean > q[
        "max_kl_mean"] else "", f"kl_p99 {codec.kl_p99:.3g} > {q['max_kl_p99']}" if
        codec.kl_p99 > q["max_kl_p99"] else "", f"top-1 {codec.top1:.3f} < {q['min_top1']}"
        if codec.top1 < q["min_top1"] else "", f"greedy {codec.greedy:.3f} < "
        f"{q['min_greedy']}" if codec.greedy < q["min_greedy"] else ""]
    return "; ".join(b for b in bad if b)


def _num(raw: Mapping[str, Any], key: str, default: float, low: float = 0.0) -> float:
    v = raw.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or not v > low:
        raise SettingsError(f"{key} = {v!r}: expected a number > {low:g}", key)
    return float(v)


def clients_for(workload: Workload, devices: Mapping[str, Any], links: list[str],
                uplinks: dict[str, Uplink], seed: int, observe_s: float,
                key: str) -> tuple[Client, ...]:
    """Each request's device (drawn by the mix's weights) and uplink (uniformly, entered at
    a uniform offset of its period), from ``seed``: the same for every program."""
    if not devices or not links:
        raise SettingsError("devices and uplinks must not be empty", key)
    for name in devices:
        if name not in DEVICES:
            raise SettingsError(f"device {name!r} unknown; known: {sorted(DEVICES)}", key)
    for name in links:
        if name not in uplinks:
            raise SettingsError(f"uplink {name!r} unknown; known: {sorted(uplinks)}", key)
    names = sorted(devices)
    w = np.array([float(devices[n]) for n in names])
    if (w < 0).any() or w.sum() <= 0:
        raise SettingsError("device weights must be >= 0 with a positive sum", key)
    rng = np.random.default_rng(seed)
    dev = rng.choice(len(names), len(workload), p=w / w.sum())
    link = rng.integers(0, len(links), len(workload))
    frac = rng.random(len(workload))
    out = []
    for i in range(len(workload)):
        u = uplinks[links[int(link[i])]]
        out.append(Client(DEVICES[names[int(dev[i])]], u, observe_s + float(frac[i]) * u.period))
    return tuple(out)


def _case(raw: Mapping[str, Any], name: str, uplinks: dict[str, Uplink], seed: int,
          observe_s: float, key: str) -> Case:
    try:
        w = build_workload(dict(raw["workload"]))
    except (KeyError, ValueError, TypeError) as exc:
        raise SettingsError(f"workload: {exc}", key) from None
    clients = clients_for(w, dict(raw.get("devices", {})), list(raw.get("uplinks", [])),
                          uplinks, seed, observe_s, key)
    return Case(name, w, clients)


def parse(raw: Mapping[str, Any]) -> SplitConfig:
    unknown = set(raw) - KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise SettingsError(f"unknown key {key!r}; allowed: {sorted(KEYS)}", key)
    prof = Profile(webgpu_factor=_num(raw, "webgpu_factor", 0.5),
                   rtt_s=_num(raw, "rtt_ms", 60.0, -1e-12) / 1000.0,
                   text_bytes_per_token=_num(raw, "text_bytes_per_token", 4.0),
                   observe_s=_num(raw, "observe_s", 2.0))
    server = dict(raw.get("server", {"accelerator": "H200", "count": 1}))
    try:
        fleet = build_fleet([server])
    except (ValueError, KeyError) as exc:
        raise SettingsError(f"server: {exc}", "server") from None
    slo = dict(raw.get("slo", {}))
    for k in sorted(set(slo) - {"ttft_p90_s", "tpot_p90_s"}):
        raise SettingsError(f"slo.{k} unknown; slo takes ttft_p90_s and tpot_p90_s", f"slo.{k}")
    quality = dict(QUALITY)
    for k, v in dict(raw.get("quality", {})).items():
        if k not in QUALITY:
            raise SettingsError(f"quality.{k} unknown; allowed: {sorted(QUALITY)}", "quality")
        quality[k] = float(v)
    table = PROJECT_ROOT / str(raw.get("uplink_table", ""))
    try:
        uplinks = load_uplinks(table)
    except (OSError, ValueError, KeyError) as exc:
        raise SettingsError(f"uplink_table: {exc}", "uplink_table") from None
    seed = int(raw.get("seed", 0))
    if "workload" not in raw:
        raise SettingsError("workload is required", "workload")
    train = _case(raw, "train", uplinks, seed, prof.observe_s, "workload")
    held = []
    for j, h in enumerate(raw.get("held_out", [])):
        for k in sorted(set(h) - CASE_KEYS):
            raise SettingsError(f"held_out[{j}].{k} unknown; allowed: {sorted(CASE_KEYS)}",
                                f"held_out.{j}.{k}")
        held.append(_case(h, str(h.get("name", f"held_out_{j}")), uplinks,
                          int(h.get("seed", seed + 1 + j)), prof.observe_s, "held_out"))
    base = str(raw.get("baselines", ""))
    bdir = (PROJECT_ROOT / base) if base else None
    if bdir is not None and not bdir.is_dir():
        raise SettingsError(f"baselines = {base!r}: not a folder", "baselines")
    try:
        sim_config = SimConfig(**dict(raw.get("sim", {})))
    except TypeError as exc:
        raise SettingsError(f"sim: {exc}", "sim") from None
    return SplitConfig(prof, fleet, sim_config, _num(slo, "ttft_p90_s", 2.0),
                       _num(slo, "tpot_p90_s", 0.1), quality, load_codecs(), train,
                       tuple(held), bdir)
