"""The ``optimizer`` command line.

    optimizer run [EXPERIMENT.toml | --target PATH ...] [--set KEY=VALUE ...] [--resume] ...
    optimizer worker EXPERIMENT.toml [--storage URL] [--tracking-uri URI] [--remote NAME]
    optimizer evaluate TARGET [FILES ...] [--json]
    optimizer status [-e EXPERIMENT.toml] [--json]
    optimizer report [-e EXPERIMENT.toml]
    optimizer branches [-e EXPERIMENT.toml] [--prune]
    optimizer ui [-e EXPERIMENT.toml] [--port 5000]
    optimizer init KIND FILE.py::NAME [...]   (a target from existing code; kinds add it)
    optimizer publish [--remote NAME] [--experiment NAME] [--base BRANCH] [--open]
    optimizer import-kernelbench FILE [--dest DIR] [--name NAME]   (from the kernel kind)

Exit codes: 0 success, 1 the command ran but found a failure (e.g. an invalid candidate
for ``evaluate``), 2 bad input (configuration, paths, arguments) with nothing written.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optimizer.errors import ConfigError, OptimizerError

if TYPE_CHECKING:
    from optimizer.config import ExperimentConfig

DEFAULT_EXPERIMENT = Path("experiments/nightly.toml")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OptimizerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aborted", file=sys.stderr)
        return 130


_Subcommands = argparse._SubParsersAction  # the object add_subparsers returns


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="optimizer", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_worker(sub)
    _add_evaluate(sub)
    _add_publish(sub)
    _add_readers(sub)
    _add_kinds_commands(sub)
    return p


def _add_overrides(parser: argparse.ArgumentParser, help_: str) -> None:
    """``--set KEY=VALUE``, repeatable, into ``args.overrides``."""
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help_
    )


def _add_run(sub: _Subcommands) -> None:
    run = sub.add_parser("run", help="run an experiment (the nightly job)")
    run.add_argument("experiment", type=Path, nargs="?", default=None,
                     help=f"experiment file (default {DEFAULT_EXPERIMENT}; none with --target)")
    run.add_argument("--target", dest="targets", action="append", default=[], type=Path,
                     metavar="PATH", help="a target folder to run a night on without an "
                     "experiment file (repeatable; every setting at its default, --set "
                     "changes any)")
    _add_overrides(run, "override any experiment or target setting (repeatable)")
    run.add_argument(
        "--resume", action="store_true", help="continue the last night of this experiment"
    )
    run.add_argument("--proposer", help="offline | llm | replay:PATH")
    run.add_argument(
        "--llm-base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1"
    )
    run.add_argument("--llm-model", help="model name at that endpoint")
    run.add_argument("--minutes", type=float, help="time budget (same as --set budget.minutes=N)")
    run.add_argument("--slots", type=int, help="evaluation slots (same as --set run.slots=N)")
    run.add_argument("--json", action="store_true", help="print the run summary as JSON at the end")
    run.set_defaults(func=cmd_run)


def _add_worker(sub: _Subcommands) -> None:
    wk = sub.add_parser("worker", help="work on a night that workers on other machines share")
    wk.add_argument("experiment", type=Path)
    wk.add_argument("--storage", help="Optuna storage they share (same as --set "
                    "search.storage=URL), e.g. postgresql+psycopg2://user@host/db")
    wk.add_argument("--tracking-uri", help="MLflow tracking server, e.g. http://host:5000")
    wk.add_argument("--remote", help="git remote for the branches (same as --set vcs.push=NAME)")
    wk.add_argument("--night", help="the night to join or start (default: the experiment's "
                    "open night, else a new one)")
    wk.add_argument("--heartbeat-s", type=int, help="seconds between heartbeats (default 10)")
    wk.add_argument("--grace-s", type=int, help="a worker silent this long is lost "
                    "(default 3 heartbeats)")
    _add_overrides(wk, "override any experiment or target setting")
    wk.add_argument("--proposer", help="offline | llm | replay:PATH")
    wk.add_argument("--minutes", type=float, help="the night's time, for a worker that "
                    "starts it (same as --set budget.minutes=N)")
    wk.add_argument("--slots", type=int, help="evaluation slots of this worker")
    wk.add_argument("--json", action="store_true", help="print this worker's summary as JSON")
    wk.set_defaults(func=cmd_worker)


def _add_evaluate(sub: _Subcommands) -> None:
    ev = sub.add_parser("evaluate", help="evaluate a target's seed or given files once")
    ev.add_argument("target", help="target folder, or a target name of the experiment")
    ev.add_argument(
        "files",
        nargs="*",
        type=Path,
        help="candidate files in place of the editable ones (matched by name)",
    )
    ev.add_argument("-e", "--experiment", type=Path, default=DEFAULT_EXPERIMENT)
    ev.add_argument("--json", action="store_true")
    _add_overrides(
        ev,
        "override a target.toml setting, e.g. timeout_s=10 or evaluator.repeats=3, "
        "or the sandbox's, e.g. sandbox.memory_mb=2048",
    )
    ev.set_defaults(func=cmd_evaluate)


def _add_publish(sub: _Subcommands) -> None:
    pb = sub.add_parser("publish", help="push the night's pull branches for review and "
                        "write their pull-request bodies")
    pb.add_argument("--remote", default="origin", help="git remote to push to (default origin)")
    pb.add_argument("--experiment", help="only this experiment's pull branches (default all)")
    pb.add_argument("--base", help="the branch the pull requests merge into (default: the "
                    "forge's default branch)")
    pb.add_argument("--open", action="store_true",
                    help="open the pull requests with gh or glab (whichever is on PATH)")
    pb.set_defaults(func=cmd_publish)


def _add_readers(sub: _Subcommands) -> None:
    """The subcommands that read a workspace's stores: status, report, branches, ui."""
    for name, func, help_ in (
        ("status", cmd_status, "counts of candidates, branches and runs"),
        ("report", cmd_report, "markdown report with plots"),
        ("branches", cmd_branches, "list (or --prune) candidate branches"),
        ("ui", cmd_ui, "open the MLflow UI on this experiment's runs"),
    ):
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("-e", "--experiment", type=Path, default=None,
                        help="experiment file (default: the one whose night ran last in "
                        f"this workspace, else {DEFAULT_EXPERIMENT})")
        if name == "status":
            sp.add_argument("--json", action="store_true")
        if name == "branches":
            sp.add_argument(
                "--prune",
                action="store_true",
                help="delete candidate branches and stale worktrees (pull branches stay)",
            )
        if name == "ui":
            sp.add_argument("--port", type=int, default=5000)
            sp.add_argument("--host", default="127.0.0.1")
        sp.set_defaults(func=func)


def _add_kinds_commands(sub: _Subcommands) -> None:
    from optimizer import kinds as evaluators  # subcommands the kinds contribute (fast imports)

    for command in evaluators.commands():
        cp = sub.add_parser(command.name, help=command.help)
        command.add_arguments(cp)
        cp.set_defaults(func=command.run)


# -- run --------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:

    overrides = list(args.overrides)
    if args.minutes is not None:
        overrides.append(f"budget.minutes={args.minutes}")
    if args.slots is not None:
        overrides.append(f"run.slots={args.slots}")
    if args.proposer:
        overrides.append(f"proposer.kind={json.dumps(args.proposer)}")
    if args.llm_base_url:
        overrides.append(f"proposer.llm.base_url={json.dumps(args.llm_base_url)}")
    if args.llm_model:
        overrides.append(f"proposer.llm.model={json.dumps(args.llm_model)}")
    config = _run_config(args, overrides)
    refuse_uncommitted(config)
    from optimizer.loop import run

    summary = run(config, resume=args.resume, say=_progress_printer(sys.stdout))
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    else:
        print(_summary_table(summary))
    return 0


def _run_config(args: argparse.Namespace, overrides: list[str]) -> ExperimentConfig:
    """The experiment file's configuration, or one made for ``--target`` folders."""
    from optimizer.config import experiment_for_targets, load_experiment

    if args.targets and args.experiment is not None:
        raise ConfigError("give an experiment file or --target folders, not both")
    if args.targets:
        for folder in args.targets:
            if not (folder / "target.toml").is_file():
                raise ConfigError(f"--target {folder}: no target.toml there; a target is a "
                                  "folder with target.toml (`optimizer init` makes one)")
        workspace = _repository_of(args.targets[0].resolve())
        return experiment_for_targets(args.targets, workspace, overrides)
    experiment = args.experiment or DEFAULT_EXPERIMENT
    if args.experiment is None and not experiment.exists():
        raise ConfigError(f"no experiment file given and no {DEFAULT_EXPERIMENT} here; run "
                          "`optimizer run --target PATH` on a target folder, or give an "
                          "experiment file")
    return load_experiment(experiment, overrides, workspace=_workspace_of(experiment))


def refuse_uncommitted(config: ExperimentConfig) -> None:
    """A night builds every candidate on the base commit: an editable file with changes
    git has not committed would be reverted by the candidates and pull branches, so it is
    an error before anything is written."""
    from optimizer.targets import find_repo_root, uncommitted

    for entry in config.targets:
        spec = entry.spec
        root = spec.repo_root or find_repo_root(spec.path)
        if root is None:
            continue
        dirty = uncommitted(root, [spec.path / rel for rel in spec.editable])
        if dirty:
            raise ConfigError(
                f"target '{spec.name}': editable file(s) with uncommitted changes: "
                f"{', '.join(dirty)}; commit them (git add ... && git commit) or stash them "
                "first: candidates and pull branches are built on the last commit")


def cmd_worker(args: argparse.Namespace) -> int:
    from optimizer.config import load_experiment

    overrides = list(args.overrides)
    for value, key in ((args.storage, "search.storage"), (args.tracking_uri, "tracking.uri"),
                       (args.remote, "vcs.push"), (args.night, "worker.night"),
                       (args.proposer, "proposer.kind")):
        if value:
            overrides.append(f"{key}={json.dumps(value)}")
    for number, key in ((args.heartbeat_s, "worker.heartbeat_s"), (args.grace_s, "worker.grace_s"),
                        (args.minutes, "budget.minutes"), (args.slots, "run.slots")):
        if number is not None:
            overrides.append(f"{key}={number}")
    config = load_experiment(args.experiment, overrides, workspace=_workspace_of(args.experiment))
    from optimizer.worker import work

    summary = work(config, say=_progress_printer(sys.stdout))
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    else:
        print(_summary_table(summary))
    return 0


_STATE_COLOURS = {
    "VALID": "32",
    "INVALID": "33",
    "FAILED": "31",
    "TIMEOUT": "31",
    "REJECTED": "35",
    "PRUNED": "36",
    "winner": "1;32",
}


def _progress_printer(stream: Any) -> Callable[[str], None]:
    """Plain lines when not on a terminal; on one, states in colour and the time left
    in the terminal's title, so a long night shows where it is at a glance."""
    if not stream.isatty() or os.environ.get("NO_COLOR"):
        return lambda line: print(line, file=stream, flush=True)

    def say(line: str) -> None:
        for word, code in _STATE_COLOURS.items():
            if f" {word} " in line:
                line = line.replace(f" {word} ", f" \x1b[{code}m{word}\x1b[0m ", 1)
                break
        left = line.rsplit("| ", 1)[-1] if "min left" in line else ""
        title = f"\x1b]0;optimizer: {left}\x07" if left else ""
        print(title + line, file=stream, flush=True)

    return say


def _workspace_of(experiment: Path) -> Path:
    """The git repository holding the experiment file (or the current directory)."""
    return _repository_of(experiment.resolve().parent if experiment.exists() else Path.cwd())


def _repository_of(start: Path) -> Path:
    """The git repository holding ``start`` (or the current directory)."""
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return Path.cwd().resolve()


def _summary_table(summary: object) -> str:
    s = summary  # RunSummary
    lines = [
        f"\nnight {s.night}: {s.stop_reason}",  # type: ignore[attr-defined]
        f"{'target':<22} {'cands':>5} {'dups':>5} {'valid':>5} {'seed':>12} {'best':>12}  winner",
    ]
    for t in s.targets:  # type: ignore[attr-defined]
        seed = f"{t.seed_value:.6g}" if t.seed_value is not None else "-"
        best = f"{t.best_value:.6g}" if t.best_value is not None else "-"
        win = t.winner["pull_branch"] if t.winner else (t.note or "-")
        lines.append(
            f"{t.target:<22} {t.candidates:>5} {t.duplicates:>5} "
            f"{t.states.get('VALID', 0):>5} {seed:>12} {best:>12}  {win}"
        )
    from optimizer import reproduce

    if reproduce_line := reproduce.night_cost(s):
        lines.append(reproduce_line)
    oh = sorted(s.engine_overhead_ms)  # type: ignore[attr-defined]
    if oh:
        lines.append(f"engine overhead per candidate: median {oh[len(oh) // 2]:.0f} ms")
    return "\n".join(lines)


# -- publish ----------------------------------------------------------------------------


def cmd_publish(args: argparse.Namespace) -> int:
    from optimizer.publish import publish, shown

    repo = _repository_of(Path.cwd().resolve())
    prs = publish(repo, remote=args.remote, reports=repo / ".optimizer" / "reports",
                  experiment=args.experiment, base=args.base)
    failed = 0
    for pr in prs:
        print(f"pushed {pr.branch} to {args.remote}: {pr.title}")
        print(f"  pull-request body: {os.path.relpath(pr.body_file, Path.cwd())}")
        if not pr.command:
            print("  open a pull request from that branch on your forge (no gh or glab here)")
            continue
        print(f"  open it: {shown(pr.command, pr.body_file)}")
        if args.open:
            done = subprocess.run(list(pr.command), cwd=repo)
            failed += done.returncode != 0
    return 1 if failed else 0


# -- evaluate ---------------------------------------------------------------------------


def cmd_evaluate(args: argparse.Namespace) -> int:
    from optimizer.targets import load_target

    folder = Path(args.target)
    by_name = not (folder / "target.toml").is_file()
    if not by_name:  # the repository that holds the target
        workspace = _repository_of(folder.resolve())
    else:
        workspace = _workspace_of(args.experiment)
        if not args.experiment.exists():
            raise ConfigError(
                f"{args.target}: neither a target folder nor a target name "
                f"(no experiment file {args.experiment})"
            )
    from optimizer.config import SandboxConfig, build_section, load_experiment, parse_value

    overrides: dict[str, object] = {}
    target_sets = []  # the --set items that are the target's (not the sandbox's)
    for item in args.overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        node = overrides
        *parents, last = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})  # type: ignore[assignment]
        node[last] = parse_value(text.strip())
        if parents[:1] != ["sandbox"] and key.strip() != "sandbox":
            target_sets.append(item)
    # sandbox.* keys set the sandbox of this evaluation (as an experiment's [sandbox] does);
    # every other key overrides the target's settings: its target.toml's, or, for a target
    # named in an experiment, the experiment's [targets.settings] over its target.toml
    if by_name:  # the experiment's sandbox and target settings, --set over them
        sets = [item if item not in target_sets else f"targets.{args.target}.{item}"
                for item in args.overrides]
        config = load_experiment(args.experiment, sets, workspace=workspace)
        target, sandbox_cfg = config.target(args.target).spec, config.sandbox
    else:
        sandbox_cfg = build_section(SandboxConfig, overrides.pop("sandbox", {}), "--set",
                                    "sandbox")
        target = load_target(folder.resolve(), folder.resolve().parent, overrides)
    replacements = _match_files(target.editable, args.files)
    files = {rel: _read_source(src) for rel, src in replacements.items()}
    from optimizer.workbench import Workbench

    # the workspace's cache (e.g. a trained target model) outlives this evaluation
    with Workbench(target, workspace=workspace, sandbox=sandbox_cfg,
                   cache_dir=workspace / ".optimizer" / "cache") as bench:
        result = bench.evaluate(files)
    data = result.to_json()
    data["target"] = target.name
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(
            f"{target.name}: {result.state.value}"
            + (f" ({result.reason})" if result.reason else "")
        )
        for line in result.artifacts.get("notes.txt", "").splitlines():  # e.g. the stress used
            print(f"  {line}")
        for k, v in sorted(result.metrics.items()):
            print(f"  {k}: {v:.6g}")
        print(f"  evaluation took {result.cost_s:.2f} s")
    return 0 if result.ok else 1


def _read_source(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"candidate file {path} is not UTF-8 text ({exc.reason} at byte "
                          f"{exc.start}); save it as UTF-8") from None


def _match_files(editable: Sequence[str], files: Sequence[Path]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for f in files:
        if not f.is_file():
            raise ConfigError(f"candidate file {f} does not exist")
        matches = [e for e in editable if Path(e).name == f.name]
        if not matches and len(editable) == 1 and len(files) == 1:
            matches = list(editable)
        if len(matches) != 1:
            raise ConfigError(
                f"candidate file {f.name} matches no editable file of the target "
                f"({', '.join(editable)}); name it like the file it replaces"
            )
        out[matches[0]] = f
    return out


# -- status, report, branches, ui -------------------------------------------------------


def _config(args: argparse.Namespace) -> ExperimentConfig:
    from optimizer.config import load_experiment

    if args.experiment is None:
        args.experiment = _last_experiment()
    return load_experiment(args.experiment, workspace=_workspace_of(args.experiment))


def _last_experiment() -> Path:
    """The experiment file (under experiments/) whose night started last here, by the
    ``<state_dir>/logs/<name>.night.json`` pointers of the default state dir; else the
    default experiment. The morning after ``optimizer run experiments/x.toml``,
    ``optimizer status`` shows x."""
    ws = _workspace_of(DEFAULT_EXPERIMENT)
    files: dict[str, Path] = {}
    for file in sorted((ws / "experiments").glob("*.toml")):
        try:
            files.setdefault(str(tomllib.loads(file.read_text()).get("name")), file)
        except (OSError, tomllib.TOMLDecodeError):
            continue
    pointers = sorted((ws / ".optimizer" / "logs").glob("*.night.json"),
                      key=lambda p: p.stat().st_mtime, reverse=True)
    for pointer in pointers:
        name = pointer.name.removesuffix(".night.json")
        if name in files:
            return files[name]
    return DEFAULT_EXPERIMENT


def cmd_status(args: argparse.Namespace) -> int:
    from optimizer.status import collect_status, format_status

    data = collect_status(_config(args))
    print(json.dumps(data, indent=2) if args.json else format_status(data))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from optimizer.report import build_report

    config = _config(args)
    out = build_report(
        config.optuna_storage, config.name, config.state_dir / "reports" / config.name
    )
    print(f"report written to {out}")
    return 0


def cmd_branches(args: argparse.Namespace) -> int:
    from optimizer.vcs import Workspace

    config = _config(args)
    ws = Workspace(
        config.workspace, experiment=config.name, state_dir=config.state_dir, base=config.base
    )
    if args.prune:
        print(f"deleted {ws.prune(config.name)} candidate branch(es); pull branches kept")
        return 0
    for b in ws.branches(config.name):
        print(b)
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    from optimizer.tracking import Tracker

    config = _config(args)
    tracker = Tracker(config.tracking_uri, config.name, config.state_dir / "mlartifacts")
    cmd = tracker.ui_command(host=args.host, port=args.port)
    if not cmd:
        print(f"the runs are on the tracking server {config.tracking_uri}: open it in a browser")
        return 0
    print(
        f"MLflow UI on http://{args.host}:{args.port} (experiment '{config.name}'); Ctrl-C stops it"
    )
    # MLflow's server forks uvicorn workers and job consumers: run it in a session of its
    # own and stop that whole process group when we are stopped (Ctrl-C, SIGTERM, SIGHUP).
    proc = subprocess.Popen(cmd, start_new_session=True)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        stop_process_group(proc)
        return 0


def stop_process_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to ``proc``'s process group, then SIGKILL; once the leader has exited, the
    rest of the group is killed too (a server's own workers)."""
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        # the leader exited; give its children the same signal in case they linger
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


if __name__ == "__main__":
    sys.exit(main())
