"""The routing evaluator's settings (``[evaluator]`` in target.toml) turned into objects.

::

    workload = { kind = "synthetic", seed = 7, duration_s = 300, sessions_per_s = 2.0 }
             # or { kind = "trace", path = "../shared/data/traces/mooncake_conversation.jsonl",
             #      start_s = 0, end_s = 600, rate_scale = 1.0 }
             # or { kind = "profile", profile = "azure2023_code", seed = 3, duration_s = 300 }
             # or { kind = "mix", parts = [<workloads>] }: served together, each part's
             #      prefixes its own; a part's at_s = 200 starts it 200 s in
             # optional in all but a mix: regions = { us = 0.7, eu = 0.3 }
    held_out = { seed = 8 }                  # overrides merged over `workload`
    check_requests = 200                     # accepted and ignored: every run is checked
                                             # whole now (older target files still load)
    pools  = [{ accelerator = "H200", count = 8 }]
    rtt_ms = { "us-eu" = 80 }
    sim    = { token_budget = 2048, max_seqs = 256 }
    slo    = { ttft_s = 2.0, tpot_s = 0.1 }
    max_decision_ms = 1.0                    # bound on the p99 decision time (timed
                                             # outside the policy's process) and on its
                                             # CPU time per decision over a run
    fleet_search = { metric = "ttft_p99_s", max = 2.0 }   # for the min_replicas objective
    sweep = [                                # the training set: families x rate scales
      { name = "chat", seed = 1, rate_scales = [0.75, 1.0] },   # merged over `workload`
      { name = "mooncake", kind = "profile", profile = "mooncake_conversation", seed = 1,
        duration_s = 300, rate_scales = [2, 3] },
    ]
    held_out_sweep = [                       # the held-out set, same form; per entry also
      { name = "azure", kind = "profile", profile = "azure2023_conversation", seed = 5,
        duration_s = 300, rate_scales = [4, 8] },
      { name = "mooncake-real", kind = "trace", optional = true, start_s = 1800,
        end_s = 2400, path = "../shared/data/traces/mooncake_conversation.jsonl",
        rate_scales = [1, 4], pools = [{ accelerator = "H200", count = 4 }] },
    ]                                        # `pools` (another fleet) and `optional` (a
                                             # trace that may be absent: skipped, said so)
    compare = "ttft_p99_s"                   # the metric each sweep workload is compared on
                                             # with its best baseline (objective
                                             # `vs_baselines`, see evaluators/routing/sweep.py)
    mode   = "router"                        # or "scheduler": policy.py defines the
                                             # schedule/chunk_size/evict hooks
    router = "least_outstanding"             # scheduler mode: the fixed (trusted) router,
                                             # a file of targets/routing/baselines/
    baselines = "targets/routing/baselines"  # folder of baseline policies ("" = none);
                                             # scheduler mode: .../baselines/scheduler

Trace paths are relative to the project root; a missing trace is an error that says so.
Only the trusted side reads these settings and builds workloads: the candidate's process is
told none of them (evaluators/routing/child.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from evaluators.routing.fleet import Fleet, build_fleet
from evaluators.routing.metrics import Slo
from evaluators.routing.profiles import PARENTS, generate, load_profile
from evaluators.routing.sim import SimConfig
from evaluators.routing.workload import SyntheticSpec, Workload, load_trace, merge, synthetic
from optimizer.errors import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
_KEYS = {"workload", "held_out", "check_requests", "pools", "rtt_ms", "sim", "slo",
         "max_decision_ms", "fleet_search", "mode", "router", "baselines", "sweep",
         "held_out_sweep", "compare"}
SWEEPS = ("sweep", "held_out_sweep")
MODES = ("router", "scheduler")
ROUTERS = PROJECT_ROOT / "targets" / "routing" / "baselines"
DEFAULT_BASELINES = {"router": "targets/routing/baselines",
                     "scheduler": "targets/routing/baselines/scheduler"}


_TRACE_KEYS = {"kind", "path", "start_s", "end_s", "rate_scale", "regions"}
_PROFILE_KEYS = {"kind", "profile", "seed", "duration_s", "rate_scale", "regions", "parents"}
_SWEEP_KEYS = {"name", "rate_scales", "pools", "optional"}
_FLEET_SEARCH_KEYS = {"metric", "max"}


class SettingsError(ValueError):
    """A bad ``[evaluator]`` setting; ``key`` is its dotted name under ``evaluator``."""

    def __init__(self, message: str, key: str):
        self.key = key
        super().__init__(message)


_Parsed = TypeVar("_Parsed")


def parse_settings(target: Any, parse: Callable[[dict[str, Any]], _Parsed]) -> _Parsed:
    """A mode's ``[evaluator]`` settings parsed, or a configuration error naming the target's
    file and the setting's key."""
    try:
        return parse(dict(target.evaluator))
    except SettingsError as exc:
        raise ConfigError(str(exc), file=f"{target.rel_path}/target.toml",
                          key=f"evaluator.{exc.key}") from None


def _unknown(raw: Any, allowed: set[str], key: str) -> None:
    if not isinstance(raw, Mapping):
        raise SettingsError("must be a table", key)
    extra = sorted(set(raw) - allowed)
    if extra:
        raise SettingsError(f"unknown key; allowed: {', '.join(sorted(allowed))}",
                            f"{key}.{extra[0]}" if key else extra[0])


def _check_workload(raw: Any, key: str) -> None:
    if not isinstance(raw, Mapping):
        raise SettingsError("must be a table", key)
    kind = raw.get("kind", "synthetic")
    if kind == "trace":
        _unknown(raw, _TRACE_KEYS, key)
    elif kind == "profile":
        _unknown(raw, _PROFILE_KEYS, key)
        if raw.get("parents", "latest") not in PARENTS:
            raise SettingsError(f"must be one of {', '.join(PARENTS)}, not "
                                f"{raw.get('parents')!r}", f"{key}.parents")
    elif kind == "synthetic":
        _unknown(raw, {f.name for f in fields(SyntheticSpec)}
                 | {"kind", "seed", "regions", "rate_scale"}, key)
    elif kind == "mix":
        _unknown(raw, {"kind", "parts"}, key)
        parts = raw.get("parts")
        if not isinstance(parts, list) or not parts:
            raise SettingsError("must be a non-empty list of workload tables", f"{key}.parts")
        for i, part in enumerate(parts):
            where = f"{key}.parts[{i}]"
            if isinstance(part, Mapping) and part.get("kind") == "mix":
                raise SettingsError("a mix's part cannot be a mix", f"{where}.kind")
            if isinstance(part, Mapping) and "at_s" in part:
                at = part["at_s"]
                if isinstance(at, bool) or not isinstance(at, int | float) or not 0 <= at < 1e7:
                    raise SettingsError("must be seconds >= 0 (when the part starts)",
                                        f"{where}.at_s")
                part = {k: v for k, v in part.items() if k != "at_s"}
            _check_workload(part, where)
    else:
        raise SettingsError(f"must be 'synthetic', 'profile', 'trace' or 'mix', not {kind!r}",
                            f"{key}.kind")


def check_settings(settings: Mapping[str, Any]) -> None:
    """Every key of every nested table is known, before anything is built (traces are
    not read here)."""
    _unknown(settings, _KEYS, "")
    if mode_of(settings) not in MODES:
        raise SettingsError(f"expected one of {MODES}, not {settings['mode']!r}", "mode")
    _check_workload(settings.get("workload", {}), "workload")
    if "held_out" in settings:
        held = settings["held_out"]
        _check_workload({**dict(settings.get("workload", {})), **dict(held)}
                        if isinstance(held, Mapping) else held, "held_out")
    for name in SWEEPS:
        if name in settings:
            sweep_cases(settings, name)  # raises SettingsError on a bad entry
    _unknown(settings.get("fleet_search", {}), _FLEET_SEARCH_KEYS, "fleet_search")
    _unknown(settings.get("sim", {}), {f.name for f in fields(SimConfig)}, "sim")
    _unknown(settings.get("slo", {}), {f.name for f in fields(Slo)}, "slo")
    for name, value in settings.items():
        if name in ("check_requests", "max_decision_ms") and (
                isinstance(value, bool) or not isinstance(value, int | float)):
            raise SettingsError(f"must be a number, not {value!r}", name)
    try:
        if mode_of(settings) == "scheduler":
            router_path(settings)
        baselines_dir(settings)
        build_fleet_from(settings)
    except SettingsError:
        raise
    except (ValueError, TypeError) as exc:
        raise SettingsError(str(exc), "pools") from None


def mode_of(settings: Mapping[str, Any]) -> str:
    return str(settings.get("mode", "router"))


def router_path(settings: Mapping[str, Any]) -> Path:
    """The trusted router of scheduler mode (a baseline policy file)."""
    name = str(settings.get("router", "least_outstanding"))
    path = ROUTERS / f"{name}.py"
    if not path.is_file():
        known = sorted(p.stem for p in ROUTERS.glob("*.py"))
        raise ValueError(f"router = {name!r}: no such baseline router; known {known}")
    return path


def baselines_dir(settings: Mapping[str, Any]) -> Path | None:
    """The folder of baseline policies to report against; None when switched off."""
    raw = str(settings.get("baselines", DEFAULT_BASELINES[mode_of(settings)]))
    if not raw:
        return None
    path = Path(raw) if Path(raw).is_absolute() else PROJECT_ROOT / raw
    if not path.is_dir():
        raise ValueError(f"baselines = {raw!r}: not a folder (a folder of policy files, or '' "
                         "for none)")
    return path


def _table(cls: type, raw: Mapping[str, Any], where: str) -> Any:
    names = {f.name for f in fields(cls)}
    unknown = set(raw) - names
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; allowed {sorted(names)}")
    return cls(**raw)


def build_workload(raw: Mapping[str, Any]) -> Workload:
    raw = dict(raw)
    kind = raw.pop("kind", "synthetic")
    regions = raw.pop("regions", None)
    if kind == "synthetic":
        seed = int(raw.pop("seed", 0))
        scale = float(raw.pop("rate_scale", 1.0))
        spec = _table(SyntheticSpec, raw, "workload")
        if scale != 1.0:  # more sessions in the same time: each keeps its think times
            spec = replace(spec, sessions_per_s=spec.sessions_per_s * scale)
        w = synthetic(spec, seed, name=f"synthetic-s{seed}" + (f"x{scale:g}" if scale != 1.0
                                                                else ""))
    elif kind == "profile":
        profile = load_profile(str(raw.pop("profile", "")))
        w = generate(profile, int(raw.pop("seed", 0)), float(raw.pop("duration_s", 600.0)),
                     float(raw.pop("rate_scale", 1.0)), parents=str(raw.pop("parents", "latest")))
        if raw:
            raise ValueError(f"workload: unknown profile key(s) {sorted(raw)}")
    elif kind == "mix":  # one fleet serving several workloads at once (or in turn: at_s)
        parts = []
        for part in raw.pop("parts", []):
            part = dict(part)
            at = float(part.pop("at_s", 0.0))
            w = build_workload(part)
            parts.append(replace(w, arrival=tuple(t + at for t in w.arrival)) if at else w)
        w = merge(parts, "+".join(p.name for p in parts))
        if raw:
            raise ValueError(f"workload: unknown mix key(s) {sorted(raw)}")
    elif kind == "trace":
        path = Path(str(raw.pop("path", "")))
        path = path if path.is_absolute() else PROJECT_ROOT / path
        if not path.is_file():
            raise FileNotFoundError(
                f"trace {path} not found; traces are not part of the project: put it there or "
                "use workload = { kind = 'synthetic' }"
            )
        w = load_trace(path)
        start, end = float(raw.pop("start_s", 0.0)), raw.pop("end_s", None)
        if start > 0 or end is not None:
            w = w.window(start, float(end) if end is not None else float("inf"))
        scale = float(raw.pop("rate_scale", 1.0))
        if scale != 1.0:
            w = w.scale_rate(scale)
        if raw:
            raise ValueError(f"workload: unknown trace key(s) {sorted(raw)}")
    else:
        raise ValueError(f"workload.kind must be 'synthetic', 'profile', 'trace' or 'mix', "
                         f"not {kind!r}")
    if regions:
        w = w.with_regions(dict(regions), seed=0)
    return w


def held_out_settings(settings: Mapping[str, Any]) -> dict[str, Any] | None:
    if "held_out" not in settings:
        return None
    return {**dict(settings.get("workload", {})), **dict(settings["held_out"])}


def build_fleet_from(settings: Mapping[str, Any]) -> Fleet:
    return build_fleet(settings.get("pools", [{"accelerator": "H200", "count": 8}]),
                       settings.get("rtt_ms"))


def build_sim_config(settings: Mapping[str, Any]) -> SimConfig:
    return _table(SimConfig, settings.get("sim", {}), "sim")


def build_slo(settings: Mapping[str, Any]) -> Slo:
    return _table(Slo, settings.get("slo", {}), "slo")


@dataclass(frozen=True)
class Case:
    """One workload of a sweep: a family at one rate scale, on the target's fleet or its
    own (``pools``); ``optional``: a trace that may be absent (then skipped, said so)."""

    label: str
    workload: dict[str, Any]  # a table for build_workload, rate_scale included
    pools: list[Any] | None = None
    optional: bool = False

    @property
    def fleet_label(self) -> str:
        if not self.pools:
            return ""
        return "+".join(f"{p.get('count', 1)} {p.get('accelerator', 'H200')}"
                        for p in self.pools)

    def missing(self) -> str:
        """Why this case cannot run here ("" when it can): an absent optional trace."""
        if self.workload.get("kind") != "trace":
            return ""
        path = Path(str(self.workload.get("path", "")))
        path = path if path.is_absolute() else PROJECT_ROOT / path
        return "" if path.is_file() else f"trace {self.workload.get('path')} not found"


def sweep_cases(settings: Mapping[str, Any], key: str) -> list[Case]:
    """The workloads of ``sweep`` or ``held_out_sweep``: each entry's family at each of its
    ``rate_scales``; a synthetic entry is merged over a synthetic ``workload``."""
    raw = settings.get(key)
    if not isinstance(raw, list) or not raw:
        raise SettingsError("must be a non-empty list of workload tables", key)
    base = dict(settings.get("workload", {}))
    cases: list[Case] = []
    for i, entry in enumerate(raw):
        where = f"{key}[{i}]"
        if not isinstance(entry, Mapping):
            raise SettingsError("must be a table", where)
        entry = dict(entry)
        name = str(entry.pop("name", f"w{i}"))
        scales = entry.pop("rate_scales", [1.0])
        pools = entry.pop("pools", None)
        optional = bool(entry.pop("optional", False))
        kind = entry.get("kind", "synthetic")
        if kind == "synthetic" and base.get("kind", "synthetic") == "synthetic":
            entry = {**base, **entry}
        _check_workload(entry, where)
        if optional and key == "sweep":
            raise SettingsError("a training workload cannot be optional (the objective "
                                "would change with the machine)", f"{where}.optional")
        if optional and kind != "trace":
            raise SettingsError("only a trace may be optional", f"{where}.optional")
        if "rate_scale" in entry:
            raise SettingsError("use rate_scales (a list) in a sweep", f"{where}.rate_scale")
        if (not isinstance(scales, list) or not scales
                or any(isinstance(s, bool) or not isinstance(s, int | float) or s <= 0
                       for s in scales)):
            raise SettingsError("must be a non-empty list of positive numbers",
                                f"{where}.rate_scales")
        if pools is not None:
            try:
                build_fleet(pools, settings.get("rtt_ms"))
            except (ValueError, TypeError) as exc:
                raise SettingsError(str(exc), f"{where}.pools") from None
        for s in scales:
            case = Case(f"{name}x{float(s):g}", {**entry, "rate_scale": float(s)},
                        list(pools) if pools is not None else None, optional)
            if case.pools:
                case = replace(case, label=f"{case.label}@{case.fleet_label.replace(' ', '')}")
            if any(c.label == case.label for c in cases):
                raise SettingsError(f"workload {case.label!r} appears twice", where)
            cases.append(case)
    return cases


def case_fleet(settings: Mapping[str, Any], case: Case) -> Fleet:
    return (build_fleet(case.pools, settings.get("rtt_ms")) if case.pools
            else build_fleet_from(settings))
