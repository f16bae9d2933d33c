"""Experiment configuration: ``experiments/*.toml`` into frozen, validated records.

Every problem is one :class:`~optimizer.errors.ConfigError` naming the file and the key;
the CLI turns it into exit code 2 before anything is written. ``--set KEY=VALUE``
overrides any key: ``budget.minutes=3``, ``proposer.kind=llm``,
``targets.<name>.share=2``, ``targets.<name>.min_gain=0.1``,
``targets.<name>.evaluator.repeats=5`` (target keys override ``target.toml``).

Layout of an experiment file::

    name = "nightly"          # experiment name: MLflow experiment, Optuna study prefix, branches
    seed = 0
    state_dir = ".optimizer"  # relative to the workspace (the git repository)
    base = "HEAD"             # the commit candidates branch from
    [budget]    minutes, max_candidates, usd
    [proposer]  kind = "offline" | "llm" | "replay:PATH"; [proposer.offline], [proposer.llm]
    [search]    sampler = "tpe" | "random" | "nsga2", storage (SQLAlchemy URL), n_startup_trials
    [tracking]  uri (MLflow tracking URI)
    [vcs]       push (remote name), keep_worktrees
    [sandbox]   require_isolation, memory_mb, timeout_s
    [stats]     confidence, confirm_repeats, n_boot
    [[targets]] path, share, max_candidates, [targets.settings] (target.toml overrides)
"""

from __future__ import annotations

import dataclasses
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimizer.errors import ConfigError
from optimizer.targets import TargetSpec, load_target


@dataclass(frozen=True)
class BudgetConfig:
    minutes: float = 10.0  # wall-clock minutes for the whole run (all targets)
    max_candidates: int = 0  # 0 = no limit
    usd: float = 0.0  # 0 = no limit (LLM proposers only)


@dataclass(frozen=True)
class OfflineConfig:
    knob_search_share: float = 0.6
    max_mutations: int = 2


@dataclass(frozen=True)
class ProposerConfig:
    kind: str = "offline"  # offline | llm | replay:PATH
    offline: OfflineConfig = field(default_factory=OfflineConfig)
    llm: Mapping[str, Any] = field(default_factory=dict)  # LLMSettings fields


@dataclass(frozen=True)
class SearchConfig:
    sampler: str = "tpe"  # tpe | random | nsga2
    storage: str = ""  # default: sqlite:///<state_dir>/optuna.db
    n_startup_trials: int = 6


@dataclass(frozen=True)
class TrackingConfig:
    uri: str = ""  # default: sqlite:///<state_dir>/mlflow.db


@dataclass(frozen=True)
class VcsConfig:
    push: str = ""  # remote to push pull branches to; "" = no push
    keep_worktrees: bool = False


@dataclass(frozen=True)
class SandboxConfig:
    require_isolation: bool = False
    memory_mb: int = 16384
    timeout_s: float = 0.0  # 0 = the target's timeout_s


@dataclass(frozen=True)
class StatsConfig:
    confidence: float = 0.95
    confirm_repeats: int = 15  # paired repetitions when confirming a timing winner
    n_boot: int = 2000


@dataclass(frozen=True)
class TargetEntry:
    spec: TargetSpec
    share: float = 1.0  # share of the time budget, relative to the other targets
    max_candidates: int = 0  # 0 = no limit


@dataclass(frozen=True)
class ExperimentConfig:
    name: str
    file: Path
    workspace: Path
    targets: tuple[TargetEntry, ...]
    seed: int = 0
    state_dir: Path = Path(".optimizer")
    base: str = "HEAD"
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    proposer: ProposerConfig = field(default_factory=ProposerConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    vcs: VcsConfig = field(default_factory=VcsConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    stats: StatsConfig = field(default_factory=StatsConfig)

    @property
    def optuna_storage(self) -> str:
        return self.search.storage or f"sqlite:///{self.state_dir / 'optuna.db'}"

    @property
    def tracking_uri(self) -> str:
        return self.tracking.uri or f"sqlite:///{self.state_dir / 'mlflow.db'}"

    def target(self, name: str) -> TargetEntry:
        for entry in self.targets:
            if entry.spec.name == name:
                return entry
        known = ", ".join(e.spec.name for e in self.targets)
        raise ConfigError(f"no target named {name!r} in this experiment; targets: {known}")


_SECTIONS: dict[str, type] = {
    "budget": BudgetConfig,
    "search": SearchConfig,
    "tracking": TrackingConfig,
    "vcs": VcsConfig,
    "sandbox": SandboxConfig,
    "stats": StatsConfig,
}
_TOP_KEYS = {"name", "seed", "state_dir", "base", "proposer", "targets", *_SECTIONS}
_TARGET_ENTRY_KEYS = {"path", "share", "max_candidates", "settings"}


def parse_value(text: str) -> Any:
    """A --set value as TOML (numbers, booleans, strings, lists); bare words are strings."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _check_type(value: Any, hint: Any, file: str, key: str) -> Any:
    origin = typing.get_origin(hint)
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"must be a number, not {value!r}", file=file, key=key)
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"must be an integer, not {value!r}", file=file, key=key)
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"must be true or false, not {value!r}", file=file, key=key)
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"must be a string, not {value!r}", file=file, key=key)
        return value
    if origin in (Mapping, dict) or hint is Mapping:
        if not isinstance(value, dict):
            raise ConfigError("must be a table", file=file, key=key)
        return value
    if origin is types.UnionType:
        return value
    return value


def build_section(cls: type, data: Any, file: str, prefix: str) -> Any:
    """One section dataclass (e.g. :class:`SandboxConfig`) from a table, type-checked;
    unknown keys are a :class:`ConfigError` naming ``file`` and ``prefix.key``."""
    if not isinstance(data, dict):
        raise ConfigError("must be a table", file=file, key=prefix)
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"unknown key; allowed in [{prefix}]: {', '.join(sorted(names))}",
            file=file,
            key=f"{prefix}.{unknown[0]}",
        )
    kwargs = {}
    for name, value in data.items():
        hint = hints[name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            kwargs[name] = build_section(hint, value, file, f"{prefix}.{name}")
        else:
            kwargs[name] = _check_type(value, hint, file, f"{prefix}.{name}")
    return cls(**kwargs)


def _set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"--set {dotted}: '{part}' is not a table")
        node = nxt
    node[parts[-1]] = value


def load_experiment(
    file: Path, overrides: Sequence[str] = (), workspace: Path | None = None
) -> ExperimentConfig:
    """Read and validate an experiment file; ``overrides`` are ``KEY=VALUE`` strings."""
    file = Path(file)
    shown = str(file)
    if not file.is_file():
        raise ConfigError("experiment file not found (give a path to a .toml file)", file=shown)
    try:
        data = tomllib.loads(file.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", file=shown) from None
    target_overrides: dict[str, dict[str, Any]] = {}
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        value = parse_value(text.strip())
        if key.startswith("targets."):
            _, _, rest = key.partition(".")
            tname, _, tkey = rest.partition(".")
            if not tkey:
                raise ConfigError(f"--set {key}: write targets.<name>.<key>=VALUE")
            _set_path(target_overrides.setdefault(tname, {}), tkey, value)
        else:
            _set_path(data, key, value)
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ConfigError(
            f"unknown key; allowed at top level: {', '.join(sorted(_TOP_KEYS))}",
            file=shown,
            key=unknown[0],
        )
    ws = (workspace or file.resolve().parent.parent).resolve()
    name = data.get("name", file.stem)
    if not isinstance(name, str) or not name or "/" in name:
        raise ConfigError("must be a non-empty string without '/'", file=shown, key="name")
    seed = _check_type(data.get("seed", 0), int, shown, "seed")
    state_dir = Path(_check_type(data.get("state_dir", ".optimizer"), str, shown, "state_dir"))
    state_dir = state_dir if state_dir.is_absolute() else ws / state_dir
    base = _check_type(data.get("base", "HEAD"), str, shown, "base")
    sections = {k: build_section(cls, data.get(k, {}), shown, k) for k, cls in _SECTIONS.items()}
    proposer = _proposer(data.get("proposer", {}), shown)
    targets = _targets(data.get("targets"), shown, ws, target_overrides)
    return ExperimentConfig(
        name=name,
        file=file.resolve(),
        workspace=ws,
        targets=targets,
        seed=seed,
        state_dir=state_dir,
        base=base,
        proposer=proposer,
        **sections,
    )


def _proposer(data: Any, file: str) -> ProposerConfig:
    if not isinstance(data, dict):
        raise ConfigError("must be a table", file=file, key="proposer")
    unknown = sorted(set(data) - {"kind", "offline", "llm"})
    if unknown:
        raise ConfigError(
            "unknown key; allowed in [proposer]: kind, offline, llm",
            file=file,
            key=f"proposer.{unknown[0]}",
        )
    kind = _check_type(data.get("kind", "offline"), str, file, "proposer.kind")
    if kind not in ("offline", "llm") and not kind.startswith("replay:"):
        raise ConfigError(
            f"must be 'offline', 'llm' or 'replay:PATH', not {kind!r}",
            file=file,
            key="proposer.kind",
        )
    offline = build_section(OfflineConfig, data.get("offline", {}), file, "proposer.offline")
    llm = data.get("llm", {})
    if not isinstance(llm, dict):
        raise ConfigError("must be a table", file=file, key="proposer.llm")
    if llm or kind == "llm":
        llm_settings_from(llm, file)  # validate now, so that nothing is written on error
    return ProposerConfig(kind=kind, offline=offline, llm=llm)


def llm_settings_from(data: Mapping[str, Any], file: str = "<config>") -> Any:
    """Build ``LLMSettings`` from the [proposer.llm] table, with unknown keys an error."""
    from optimizer.proposers.llm import LLMSettings

    names = {f.name for f in dataclasses.fields(LLMSettings)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"unknown key; allowed in [proposer.llm]: {', '.join(sorted(names))}",
            file=file,
            key=f"proposer.llm.{unknown[0]}",
        )
    values: dict[str, Any] = {
        k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
        for k, v in data.items()
    }
    try:
        return LLMSettings(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc), file=file, key="proposer.llm") from None


def _targets(
    data: Any, file: str, workspace: Path, overrides: dict[str, dict[str, Any]]
) -> tuple[TargetEntry, ...]:
    if not isinstance(data, list) or not data:
        raise ConfigError(
            'an experiment needs at least one [[targets]] entry with path = "targets/..."',
            file=file,
            key="targets",
        )
    entries = []
    used: set[str] = set()
    for i, item in enumerate(data):
        key = f"targets[{i}]"
        if not isinstance(item, dict):
            raise ConfigError("must be a table", file=file, key=key)
        unknown = sorted(set(item) - _TARGET_ENTRY_KEYS)
        if unknown:
            raise ConfigError(
                f"unknown key; allowed: {', '.join(sorted(_TARGET_ENTRY_KEYS))}",
                file=file,
                key=f"{key}.{unknown[0]}",
            )
        if "path" not in item:
            raise ConfigError("missing required key", file=file, key=f"{key}.path")
        path = Path(_check_type(item["path"], str, file, f"{key}.path"))
        folder = path if path.is_absolute() else workspace / path
        if not (folder / "target.toml").is_file():
            raise ConfigError(
                f"target folder {path} has no target.toml (is the path right?)",
                file=file,
                key=f"{key}.path",
            )
        name_guess = _peek_name(folder)
        item = dict(item)
        extra = overrides.get(name_guess, {}) or overrides.get(folder.name, {})
        settings = dict(item.get("settings", {}))
        for k in ("share", "max_candidates"):
            if k in extra:
                item[k] = extra[k]
        for k, v in extra.items():
            if k not in ("share", "max_candidates"):
                settings[k] = _merge_setting(settings.get(k), v)
        spec = load_target(folder, workspace, settings)
        if spec.name in used:
            raise ConfigError(f"two targets are named {spec.name!r}", file=file, key=key)
        used.add(spec.name)
        share = _check_type(item.get("share", 1.0), float, file, f"{key}.share")
        maxc = _check_type(item.get("max_candidates", 0), int, file, f"{key}.max_candidates")
        if share <= 0:
            raise ConfigError("must be > 0", file=file, key=f"{key}.share")
        entries.append(TargetEntry(spec=spec, share=share, max_candidates=maxc))
    known = {e.spec.name for e in entries} | {e.spec.path.name for e in entries}
    for tname in overrides:
        if tname not in known:
            raise ConfigError(
                f"--set targets.{tname}...: no such target; targets: "
                + ", ".join(e.spec.name for e in entries)
            )
    return tuple(entries)


def _merge_setting(old: Any, new: Any) -> Any:
    if isinstance(old, dict) and isinstance(new, dict):
        return {**old, **new}
    return new


def _peek_name(folder: Path) -> str:
    try:
        return str(tomllib.loads((folder / "target.toml").read_text()).get("name", folder.name))
    except (OSError, tomllib.TOMLDecodeError):
        return folder.name
