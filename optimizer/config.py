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
import math
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optimizer.accounting import Prices
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
    knob_nudge_share: float = 0.0  # local moves of the parent's knob values (offline.py)


# the names of optimizer/proposers/context.py's policies (that module tests they agree)
CONTEXT_POLICIES = ("append-only", "masked", "sliding")


@dataclass(frozen=True)
class LLMConfig:
    """``[proposer.llm]`` of an experiment file; every key is a field of the same name."""

    base_url: str | None = None  # None = OpenAI; e.g. "http://localhost:8000/v1" for vLLM
    model: str = "gpt-5-mini"
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float | None = None  # None = the server's default (reasoning models want it)
    reasoning_effort: str | None = None  # "minimal" | "low" | "medium" | "high"; None = omit
    timeout_s: float = 120.0
    max_retries: int = 4
    max_tokens: int | None = None  # None = the server's limit
    # USD per million tokens; the defaults are gpt-5-mini's list prices at the time of writing.
    price_input_per_m: float = 0.25
    price_cached_input_per_m: float = 0.025
    price_output_per_m: float = 2.0
    models: tuple[tuple[str, float], ...] = ()  # (name, weight); empty = just `model`
    selection: str = "weights"  # "weights" or "bandit" (Thompson sampling, improvement per USD)
    retry_base_s: float = 1.0  # first backoff; doubles per retry, with jitter
    retry_max_s: float = 60.0  # cap on one wait, Retry-After included
    # Most recent candidates shown: between max_feedback/2 + 1 and max_feedback (epochs of
    # max_feedback/2 calls). 12 rather than 8: 0.858 instead of 0.846 of each prompt is the
    # previous call's prefix (bench/prompt_cache_share.py), and the model sees more outcomes.
    max_feedback: int = 12
    max_inspirations: int = 3
    # which past candidates each prompt shows, and how (optimizer/proposers/context.py):
    # "append-only", "masked" (append-only, the previous epoch's reports left out), "sliding"
    context: str = "append-only"
    max_artifact_chars: int = 800  # per artifact (validation report, log) in the prompt

    def __post_init__(self) -> None:
        pairs: list[Any] = [tuple(m) for m in self.models]  # TOML gives lists of lists
        if any(len(p) != 2 for p in pairs):
            raise ValueError('models: each entry is a pair ["model-name", weight]')
        models = tuple((str(name), float(weight)) for name, weight in pairs)
        object.__setattr__(self, "models", models)
        if self.context not in CONTEXT_POLICIES:
            raise ValueError(f"context must be one of {', '.join(CONTEXT_POLICIES)}, not "
                             f"{self.context!r}")
        if self.selection not in ("weights", "bandit"):
            raise ValueError(f"selection must be 'weights' or 'bandit', not {self.selection!r}")
        if any(w <= 0 or not math.isfinite(w) for _, w in models):
            raise ValueError("models: every weight must be a positive number")
        if self.timeout_s <= 0 or self.max_retries < 0:
            raise ValueError("timeout_s must be positive and max_retries non-negative")
        prices = (self.price_input_per_m, self.price_cached_input_per_m, self.price_output_per_m)
        if any(p < 0 for p in prices):
            raise ValueError("prices must be non-negative (USD per million tokens)")

    @property
    def prices(self) -> Prices:
        return Prices(
            self.price_input_per_m, self.price_cached_input_per_m, self.price_output_per_m
        )

    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.models) or (self.model,)


@dataclass(frozen=True)
class ProposerConfig:
    kind: str = "offline"  # offline | llm | replay:PATH
    offline: OfflineConfig = field(default_factory=OfflineConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    concurrency: int = 1  # proposals being made at once while the slots evaluate

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"proposer.concurrency must be at least 1, not {self.concurrency}")


@dataclass(frozen=True)
class RunConfig:
    # evaluation slots: sandboxes evaluating at once, each owning a device (one GPU, or
    # CPU cores); 0 = one per visible GPU for a kind that uses a GPU, else 1
    slots: int = 0

    def __post_init__(self) -> None:
        if self.slots < 0:
            raise ValueError(f"run.slots must be 0 (automatic) or more, not {self.slots}")


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
class WorkerConfig:
    """``optimizer worker``: how workers on several machines share a night."""

    heartbeat_s: int = 10  # each held trial's Optuna heartbeat and the worker's record
    grace_s: int = 0  # a trial without a heartbeat this long is lost; 0 = 3 heartbeats
    night: str = ""  # the night to join ("" = the experiment's open night, else a new one)

    def __post_init__(self) -> None:
        if self.heartbeat_s < 1:
            raise ValueError(f"worker.heartbeat_s must be 1 or more, not {self.heartbeat_s}")
        if self.grace_s < 0:
            raise ValueError(f"worker.grace_s must be 0 (automatic) or more, not {self.grace_s}")
        if "/" in self.night:
            raise ValueError(f"worker.night must not contain '/': {self.night!r}")

    @property
    def grace(self) -> int:
        return self.grace_s or 3 * self.heartbeat_s


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
    # the most evaluations spent reducing a winner to a minimal change: a ceiling, the
    # reduction's plan says how many a complete one takes (optimizer.minimize.Plan)
    minimize_trials: int = 40


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
    run: RunConfig = field(default_factory=RunConfig)
    worker: WorkerConfig = field(default_factory=WorkerConfig)

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
    "run": RunConfig,
    "worker": WorkerConfig,
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
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:  # a section's own checks (__post_init__)
        raise ConfigError(str(exc), file=file, key=prefix) from None


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
    return experiment_from(data, file, overrides, workspace)


def experiment_for_targets(
    folders: Sequence[Path], workspace: Path, overrides: Sequence[str] = (),
    name: str = "nightly",
) -> ExperimentConfig:
    """A night of the target folders ``folders`` without an experiment file: every
    setting at its default (``--set`` changes any), the experiment named ``name``."""
    targets = []
    for folder in folders:
        folder = folder.resolve()
        try:
            rel = str(folder.relative_to(workspace.resolve()))
        except ValueError:
            raise ConfigError(f"target folder {folder} is not inside the repository "
                              f"{workspace}; targets live in the repository they edit") from None
        targets.append({"path": rel})
    data = {"name": name, "targets": targets}
    label = folders[0].resolve() / "target.toml" if folders else workspace / "target.toml"
    return experiment_from(data, label, overrides, workspace)


def experiment_from(
    data: dict[str, Any], file: Path, overrides: Sequence[str] = (),
    workspace: Path | None = None,
) -> ExperimentConfig:
    """Validate an experiment's parsed TOML (``file`` names it in errors)."""
    shown = str(file)
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
    unknown = sorted(set(data) - {"kind", "offline", "llm", "concurrency"})
    if unknown:
        raise ConfigError(
            "unknown key; allowed in [proposer]: kind, offline, llm, concurrency",
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
    shares = (("knob_search_share", offline.knob_search_share, 1.0),
              ("knob_nudge_share", offline.knob_nudge_share, 1.0 - offline.knob_search_share))
    for name, share, most in shares:
        if not 0.0 <= float(share) <= most + 1e-12:
            raise ConfigError(f"must be between 0 and {most:g} (knob_search_share and "
                              f"knob_nudge_share are shares of the same draws), not {share!r}",
                              file=file, key=f"proposer.offline.{name}")
    llm = build_section(LLMConfig, data.get("llm", {}), file, "proposer.llm")
    concurrency = _check_type(data.get("concurrency", 1), int, file, "proposer.concurrency")
    try:
        return ProposerConfig(kind=kind, offline=offline, llm=llm, concurrency=concurrency)
    except ValueError as exc:
        raise ConfigError(str(exc), file=file, key="proposer.concurrency") from None


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
        try:
            spec = load_target(folder, workspace, settings)
            _check_kind(spec)
        except ConfigError as exc:
            raise _blame(exc, settings, name_guess, file, key) from None
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


def _blame(
    exc: ConfigError, settings: Mapping[str, Any], target: str, file: str, key: str
) -> ConfigError:
    """A target's error against the experiment file when this experiment set the key."""
    node: Any = settings
    for part in (exc.key or "").replace("[", ".").replace("]", "").split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, Mapping) and part in node:
            node = node[part]
        else:
            return exc
    if not exc.key:
        return exc
    return ConfigError(f"target '{target}': {exc.message}", file=file,
                       key=f"{key}.settings.{exc.key}")


def _check_kind(spec: TargetSpec) -> None:
    """The target's kind exists and accepts its ``[evaluator]`` settings (unknown keys in
    any nested table are errors): the evaluator is built once here, before anything is
    written."""
    from optimizer import kinds as evaluators

    try:
        evaluators.get(spec.kind)(spec)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"target '{spec.name}': {exc}", file=f"{spec.rel_path}/target.toml", key="evaluator"
        ) from None


def _merge_setting(old: Any, new: Any) -> Any:
    if isinstance(old, dict) and isinstance(new, dict):
        return {**old, **new}
    return new


def _peek_name(folder: Path) -> str:
    try:
        return str(tomllib.loads((folder / "target.toml").read_text()).get("name", folder.name))
    except (OSError, tomllib.TOMLDecodeError):
        return folder.name
