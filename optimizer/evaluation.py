"""Evaluating one candidate: the sandbox a target kind gets, its private directories, the
evaluator's stages with every failure turned into a state, and what the evaluation leaves
behind (logs, and the kind's own outputs such as curves and weights) handed to MLflow.

Nothing here knows a kind by name: the evaluator says whether it wants a GPU, which
environment its sandboxed processes need and what it leaves behind."""

from __future__ import annotations

import dataclasses
import logging
import secrets
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from optimizer.config import ExperimentConfig
from optimizer.errors import SandboxError
from optimizer.kinds import EvalContext, Evaluator
from optimizer.night import Run
from optimizer.records import CandidateState, EvalResult
from optimizer.sandbox import Sandbox, SandboxSettings
from optimizer.sandbox.host import PROJECT_ROOT
from optimizer.slots import Slot
from optimizer.targets import TargetSpec, candidate_root_env

log = logging.getLogger("optimizer.loop")


def evaluate_candidate(
    r: Run,
    target: TargetSpec,
    evaluator: Evaluator,
    sandbox: Sandbox,
    cid: str,
    cand_dir: Path,
    slot: Slot | None = None,
) -> tuple[EvalResult, str]:
    """Run the evaluator's stages; anything that goes wrong is a state with a reason.
    ``slot`` is the evaluation slot whose sandbox this is: its device's timing lock is
    what the evaluator holds while it times (none when it is the only slot)."""
    recorder = RecordingSandbox(sandbox)
    timeout_s = r.config.sandbox.timeout_s or target.timeout_s
    ctx = fresh_context(
        r.config, target, cid, recorder, timeout_s=timeout_s, device=device_for(evaluator),
        device_lock=slot.timing if slot is not None else None,
    )
    result = guarded(lambda: evaluator.evaluate(cand_dir, ctx), "evaluate", recorder.notes)
    shutil.rmtree(ctx.scratch, ignore_errors=True)
    return result, recorder.log()  # io_dir stays until its outputs are logged


def guarded(stage: Callable[[], EvalResult], name: str, notes: list[str]) -> EvalResult:
    """Run an evaluator's stage; a sandbox failure or an evaluator tripping over a
    candidate's output becomes FAILED with the reason (the traceback goes to ``notes``)."""
    start = time.perf_counter()
    try:
        result = stage()
    except SandboxError as exc:
        result = EvalResult(CandidateState.FAILED, f"sandbox error: {exc}", "sandbox")
    except Exception as exc:  # noqa: BLE001 - a bad candidate is a state, never a crash
        notes.append(traceback.format_exc())
        result = EvalResult(
            CandidateState.FAILED, f"evaluation error: {type(exc).__name__}: {exc}", name
        )
    if not result.cost_s:
        result = dataclasses.replace(result, cost_s=time.perf_counter() - start)
    return result


def io_dir_of(config: ExperimentConfig, target: TargetSpec, key: str) -> Path:
    """Shared with the candidate: under the sandbox's writable root (``worktrees/``)."""
    return config.state_dir / "worktrees" / "_io" / config.name / target.name / key


def fresh_context(
    config: ExperimentConfig,
    target: TargetSpec,
    key: str,
    sandbox: Any,
    *,
    timeout_s: float,
    device: str = "cpu",
    device_lock: Any = None,
) -> EvalContext:
    """An evaluation context with empty private directories and a fresh hidden seed.

    ``scratch`` lies outside the sandbox's writable root (the candidate never sees it);
    ``io_dir`` is what the candidate's process reads inputs from and writes outputs to.
    """
    io_dir = io_dir_of(config, target, key)
    scratch = config.state_dir / "scratch" / config.name / target.name / key
    for d in (io_dir, scratch):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    return EvalContext(
        sandbox,
        secrets.randbits(63),
        scratch,
        io_dir,
        device=device,
        timeout_s=timeout_s,
        cache_dir=config.state_dir / "cache",
        device_lock=device_lock,
    )


def log_outputs(
    r: Run, evaluator: Evaluator, run_id: str, result: EvalResult, io_dir: Path
) -> None:
    """What the kind says an evaluation left besides metrics (curves, weights)."""
    try:
        outputs = evaluator.outputs(result, io_dir)
        for name, points in outputs.curves.items():
            r.tracker.log_curve(run_id, name, list(points))
        for path, folder in outputs.files:
            file = Path(path)
            # only a file the evaluation wrote into its own io dir is taken
            if file.is_file() and file.resolve().is_relative_to(io_dir.resolve()):
                r.tracker.log_artifact_file(run_id, file, folder)
    except (ValueError, KeyError, TypeError, OSError) as exc:
        log.warning("outputs of run %s not logged: %s", run_id, exc)
    finally:
        shutil.rmtree(io_dir, ignore_errors=True)


class RecordingSandbox:
    """Keeps the output of every sandboxed call of one evaluation for eval.log."""

    def __init__(self, inner: Sandbox):
        self.inner = inner
        self.calls: list[tuple[str, Any]] = []
        self.sessions: list[tuple[str, Any]] = []
        self.notes: list[str] = []

    def call(self, entry: str, payload: Mapping[str, Any], **kw: Any) -> Any:
        res = self.inner.call(entry, payload, **kw)
        self.calls.append((entry, res))
        return res

    def open_session(self, entry: str, payload: Mapping[str, Any], **kw: Any) -> Any:
        session = self.inner.open_session(entry, payload, **kw)
        self.sessions.append((entry, session))
        return session

    def log(self) -> str:
        """Every call's and session's exit and output (sessions still open are closed)."""
        parts = []
        calls = list(self.calls)
        for entry, session in self.sessions:
            calls.append((f"{entry} (session)", session.close()))
        for entry, res in calls:
            parts.append(
                f"== {entry}: exit {res.returncode}, {res.wall_s:.3f} s"
                f"{', timed out' if res.timed_out else ''}{', ' + res.error if res.error else ''}"
            )
            if res.stdout.strip():
                parts.append("-- stdout\n" + res.stdout[-20000:])
            if res.stderr.strip():
                parts.append("-- stderr\n" + res.stderr[-20000:])
        parts.extend(self.notes)
        return "\n".join(parts)


def device_for(evaluator: Evaluator | None) -> str:
    """ "cuda" for a kind that uses a GPU, on a machine with an NVIDIA driver, else "cpu".

    Decided from the device node, not by importing torch: the engine must not create a CUDA
    context before the sandbox forks its candidates.
    """
    wants = evaluator is not None and type(evaluator).uses_gpu
    return "cuda" if wants and Path("/dev/nvidiactl").exists() else "cpu"


def code_roots(cls: type) -> tuple[Path, ...]:
    """Import roots the sandboxed child needs for ``cls``'s entry functions besides the
    project's own (a kind living in a user's package)."""
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if not file:
        return ()
    root = Path(file).resolve().parent
    for _ in cls.__module__.split(".")[1:]:
        root = root.parent
    if file.endswith("__init__.py"):
        root = root.parent
    return () if root == PROJECT_ROOT else (root,)


def make_sandbox(
    config: ExperimentConfig,
    target: TargetSpec,
    evaluator: Evaluator,
    hidden: tuple[Path, ...] = (),
    slot: Slot | None = None,
) -> Sandbox:
    """The sandbox of ``target``'s kind; ``hidden`` names trusted folders besides the
    state dir that candidates must not see (a cache outside it); ``slot`` places its
    processes on that slot's GPU and cores."""
    device = device_for(evaluator)
    gpu = device == "cuda"
    wanted: dict[str, Any] = {
        "timeout_s": config.sandbox.timeout_s or target.timeout_s,
        # a CUDA context reserves terabytes of address space: RLIMIT_AS cannot bound it
        "memory_mb": 0 if gpu else config.sandbox.memory_mb,
        "require_isolation": config.sandbox.require_isolation,
        "workspace": config.workspace,
        "state_dir": config.state_dir,
        "rw_root": config.state_dir / "worktrees",
        "preload": tuple(type(evaluator).preload),
        "extra_ro": (target.path,),  # the trusted target folder (evaluate.py, reference)
        "extra_env": {**evaluator.sandbox_env(device), **(slot.env() if slot else {}),
                      **candidate_root_env(target)},
        "python_path": code_roots(type(evaluator)),
        "hidden": tuple(hidden),
        "allow_gpu": gpu,
    }
    fields = {f.name for f in dataclasses.fields(SandboxSettings)}
    return Sandbox(SandboxSettings(**{k: v for k, v in wanted.items() if k in fields}))
