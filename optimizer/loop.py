"""The nightly loop: propose, apply, ask, commit, evaluate, tell, log; then pick winners.

Read :func:`run` and :func:`optimize_target` top to bottom; the helpers below them do one
thing each. Per candidate the order is chosen so that a run killed at any point can be
resumed with Optuna, MLflow and git agreeing: ask (trial RUNNING) -> branch -> evaluate ->
annotate branch -> MLflow run -> tell. ``--resume`` turns trials left RUNNING into FAILED
("interrupted") everywhere, or tells them their recorded result when it was complete.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import secrets
import shutil
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

import evaluators
from evaluators._base import EvalContext, Evaluator
from optimizer import knobs, search, stats
from optimizer.accounting import Ledger, Prices
from optimizer.archive import Archive
from optimizer.budget import Budget, StopOnSigint
from optimizer.config import ExperimentConfig, TargetEntry
from optimizer.errors import OptimizerError, ProposalError, SandboxError
from optimizer.proposers._base import ArchiveEntry, ProposalContext, Proposer
from optimizer.records import Candidate, CandidateState, EvalResult, Proposal, content_hash
from optimizer.sandbox import Sandbox, SandboxSettings
from optimizer.stores import enable_fast_sqlite
from optimizer.targets import TargetSpec
from optimizer.tracking import Tracker
from optimizer.vcs import Workspace

log = logging.getLogger("optimizer.loop")
MAX_DUPLICATES_IN_A_ROW = 40
CONFIRM_SHARE = 0.15  # of a target's time slice, kept for confirming its winner


@dataclass
class TargetSummary:
    target: str
    candidates: int = 0
    duplicates: int = 0
    states: dict[str, int] = field(default_factory=dict)
    seed_value: float | None = None
    best_value: float | None = None
    best_candidate: str | None = None
    winner: dict[str, Any] | None = None
    note: str = ""


@dataclass
class RunSummary:
    experiment: str
    night: str
    parent_run_id: str
    targets: list[TargetSummary] = field(default_factory=list)
    stop_reason: str = ""
    engine_overhead_ms: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Run:
    """Handles shared by every target of one invocation (not a god object: no logic)."""

    config: ExperimentConfig
    ws: Workspace
    tracker: Tracker
    proposer: Proposer
    budget: Budget
    ledger: Ledger  # LLM tokens and dollars, per call, candidate, target and night
    summary: RunSummary
    say: Callable[[str], None]


# -- the loop --------------------------------------------------------------------------


def run(
    config: ExperimentConfig,
    *,
    resume: bool = False,
    proposer: Proposer | None = None,
    say: Callable[[str], None] = print,
) -> RunSummary:
    """Optimise every target of ``config`` within its budget; return what happened."""
    ws = Workspace(
        config.workspace, experiment=config.name, state_dir=config.state_dir, base=config.base
    )
    enable_fast_sqlite()
    for sub in ("reports", "logs", "cache", "worktrees"):
        (config.state_dir / sub).mkdir(parents=True, exist_ok=True)
    # trusted evaluators keep expensive artefacts (e.g. a trained target model) here
    os.environ.setdefault("OPTIMIZER_CACHE_DIR", str(config.state_dir / "cache"))
    tracker = Tracker(config.tracking_uri, config.name, config.state_dir / "mlartifacts")
    night, parent_run_id = _open_night(config, tracker, resume)
    summary = RunSummary(config.name, night, parent_run_id)
    budget = Budget(config.budget.minutes, config.budget.max_candidates, config.budget.usd)
    from optimizer.proposers import make_proposer

    the_proposer = proposer or make_proposer(config, night)
    if config.proposer.kind == "llm":
        _trace_llm_calls(config)
    settings = getattr(the_proposer, "settings", None)
    ledger = Ledger(getattr(settings, "prices", None) or Prices())
    r = Run(config, ws, tracker, the_proposer, budget, ledger, summary, say)
    say(
        f"night {night} of experiment '{config.name}': {len(config.targets)} target(s), "
        f"{config.budget.minutes:g} min, proposer {the_proposer.name}"
    )
    try:
        with StopOnSigint(budget):
            shares_left = sum(t.share for t in config.targets)
            for entry in config.targets:
                slice_s = budget.remaining_s() * entry.share / shares_left
                shares_left -= entry.share
                summary.targets.append(optimize_target(r, entry, time.monotonic() + slice_s))
                if budget.stop.is_set() or summary.stop_reason:
                    break
        summary.stop_reason = summary.stop_reason or budget.exhausted() or "all targets done"
    finally:
        the_proposer.close()
        tracker.log_night_metrics(parent_run_id, _night_metrics(summary, ledger))
        accounts = config.state_dir / "reports" / f"{config.name}-{night}-llm-usage.json"
        accounts.write_text(json.dumps(ledger.summary(), indent=2))
        tracker.log_artifact_file(parent_run_id, accounts)
        tracker.end_night(parent_run_id, "KILLED" if budget.stop.is_set() else "FINISHED")
        (config.state_dir / "reports" / f"{config.name}-{night}.json").write_text(
            json.dumps(summary.to_json(), indent=2)
        )
    return summary


def optimize_target(r: Run, entry: TargetEntry, deadline: float) -> TargetSummary:
    target = entry.spec
    out = TargetSummary(target.name)
    evaluator = evaluators.get(target.kind)(target)
    study = search.open_study(
        r.config.optuna_storage,
        r.config.name,
        target,
        search.make_sampler(
            r.config.search.sampler,
            r.config.seed,
            r.config.search.n_startup_trials,
            len(target.objectives) > 1,
        ),
    )
    names = search.ParamNames(study)
    archive = Archive(target)
    _recover_interrupted(r, study, target)
    _load_archive(r, study, target, archive)
    rng = random.Random(f"{r.config.seed}/{target.name}/{len(archive.entries)}")
    search_deadline = deadline - CONFIRM_SHARE * max(0.0, deadline - time.monotonic())
    dup_streak = 0
    with _make_sandbox(r.config, target, evaluator) as sandbox:
        if archive.seed is None:
            seed_files = target.seed_files()
            seed = Proposal(
                "seed",
                None,
                seed_files,
                "the target's seed program",
                fixed_knobs=knobs.values_of(seed_files),
            )
            _candidate(r, target, evaluator, sandbox, study, names, archive, seed, out)
        if archive.seed is None or archive.seed.state is not CandidateState.VALID:
            why = archive.seed.reason if archive.seed else "not evaluated"
            if archive.seed is not None and archive.seed.state is CandidateState.PRUNED:
                out.note = f"seed not measured here ({why[:300]}); skipped on this machine"
            else:
                out.note = f"seed program is not valid ({why[:300]}); nothing to optimise against"
            r.say(f"[{target.name}] {out.note}")
            return _finish_summary(out, archive, study)
        while True:
            next_usd = r.ledger.estimate_next_usd(target.name) if r.budget.usd else 0.0
            stop = r.budget.exhausted(next_usd)
            if stop:  # a budget of the whole run: no other target starts either
                r.summary.stop_reason = stop
                break
            if time.monotonic() >= search_deadline:
                break
            if entry.max_candidates and out.candidates >= entry.max_candidates:
                break
            parent = archive.pick_parent(rng)
            context = ProposalContext(
                target=target,
                parent=parent,
                seed=archive.seed,
                inspirations=archive.inspirations(parent, rng),
                feedback=archive.feedback(),
                rng_seed=r.config.seed,
                iteration=len(archive.entries) + out.duplicates,
                structures_seen=archive.structures(),
            )
            try:
                proposal = r.proposer.propose(context)
            except ProposalError as exc:
                proposal = Proposal(r.proposer.name, parent.id, {}, rejected=str(exc))
            if proposal.usage.calls:
                r.ledger.record(target.name, proposal.usage)
                r.budget.spent_usd = r.ledger.usd
            best_before = archive.best()
            evaluated = _candidate(
                r, target, evaluator, sandbox, study, names, archive, proposal, out
            )
            dup_streak = 0 if evaluated else dup_streak + 1
            best = archive.best()
            if proposal.usage.calls and best is not None and best is not best_before:
                r.ledger.mark_improvement(
                    target.name, candidate=best.id, model=proposal.usage.model
                )
            if dup_streak >= MAX_DUPLICATES_IN_A_ROW:
                out.note = f"stopped early: {dup_streak} duplicate proposals in a row"
                break
        if not r.budget.stop.is_set():
            out.winner = _select_winner(r, target, evaluator, sandbox, study, archive)
    return _finish_summary(out, archive, study)


def _candidate(
    r: Run,
    target: TargetSpec,
    evaluator: Evaluator,
    sandbox: Sandbox,
    study: optuna.Study,
    names: search.ParamNames,
    archive: Archive,
    proposal: Proposal,
    out: TargetSummary,
) -> bool:
    """Turn one proposal into an evaluated candidate; False when it was a duplicate."""
    t0 = time.perf_counter()
    if proposal.rejected is None:
        try:
            knob_set = knobs.knobs_of_files(proposal.files)
        except ProposalError as exc:
            proposal = dataclasses.replace(proposal, rejected=f"bad knob declaration: {exc}")
    if proposal.rejected is not None:
        _record_rejected(r, target, study, archive, proposal, out)
        return True
    dists = knobs.distributions(knob_set.values())
    structure = knobs.structure_key(proposal.files)
    fixed = {k: v for k, v in proposal.fixed_knobs.items() if k in dists}
    trial, values = search.ask(study, dists, names.map(dists, structure), fixed)
    files = knobs.substitute_files(proposal.files, values)
    digest = content_hash(files)
    if digest in archive.hashes:
        _record_duplicate(study, trial, archive, archive.hashes[digest])
        out.duplicates += 1
        return False
    cid = f"c{_next_number(archive):04d}"
    cand = Candidate(
        cid,
        target.name,
        proposal.parent_id,
        proposal.proposer,
        files,
        values,
        digest,
        proposal.summary,
    )
    trial.set_user_attr("candidate", cid)
    for key, value in (
        ("proposer", cand.proposer),
        ("parent", cand.parent_id or ""),
        ("summary", cand.summary[:500]),
        ("structure", structure),
        ("content_hash", digest),
        ("state", CandidateState.RUNNING.value),
    ):
        trial.set_user_attr(key, value)
    branch = r.ws.candidate_branch(target.name, cid)
    cand_dir = r.ws.create_worktree(target.rel_path, target.name, cid, files)
    r.ws.commit_candidate(
        target.name,
        cid,
        f"{target.name} {cid}: {cand.summary or 'candidate'}"
        f"\n\nstate: RUNNING\nproposer: {cand.proposer}\n",
    )
    trial.set_user_attr("branch", branch)
    overhead = time.perf_counter() - t0

    result, eval_log = _evaluate(r, target, evaluator, sandbox, cid, cand_dir)

    t1 = time.perf_counter()
    commit = r.ws.annotate(target.name, cid, _commit_message(target, cand, result))
    diff = r.ws.diff(target.name, cid)
    run_id = r.tracker.log_candidate(
        parent_run_id=r.summary.parent_run_id,
        candidate=cand,
        result=result,
        branch=branch,
        commit=commit,
        trial_number=trial.number,
        diff=diff,
        prompt=proposal.prompt,
        response=proposal.response,
        eval_log=eval_log,
    )
    _log_outputs(r, run_id, result, _io_dir(r, target, cid))
    _set_result_attrs(trial, result, commit, run_id)
    _tell(study, trial, result)
    if not r.config.vcs.keep_worktrees:
        r.ws.remove_worktree(target.name, cid)
    entry = ArchiveEntry(
        cid,
        cand.parent_id,
        files,
        values,
        result.state,
        result.reason,
        dict(result.metrics),
        tuple(result.objectives),
        dict(result.artifacts),
        cand.summary,
        cand.proposer,
    )
    archive.add(entry, structure, digest)
    r.proposer.observe(entry)
    r.budget.candidates += 1
    out.candidates += 1
    overhead += time.perf_counter() - t1
    r.summary.engine_overhead_ms.append(overhead * 1000)
    _say_candidate(r, target, archive, entry, result)
    return True


def _evaluate(
    r: Run, target: TargetSpec, evaluator: Evaluator, sandbox: Sandbox, cid: str, cand_dir: Path
) -> tuple[EvalResult, str]:
    """Run the evaluator's stages; anything that goes wrong is a state with a reason."""
    io_dir = _io_dir(r, target, cid)
    scratch = r.config.state_dir / "scratch" / r.config.name / target.name / cid
    for d in (io_dir, scratch):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    recorder = _RecordingSandbox(sandbox)
    ctx = EvalContext(
        recorder,
        secrets.randbits(63),
        scratch,
        io_dir,
        device=device_for(target),
        timeout_s=r.config.sandbox.timeout_s or target.timeout_s,
    )
    start = time.perf_counter()
    try:
        result = evaluator.evaluate(cand_dir, ctx)
    except SandboxError as exc:
        result = EvalResult(CandidateState.FAILED, f"sandbox error: {exc}", "sandbox")
    except Exception as exc:  # an evaluator tripping over a candidate's output
        recorder.notes.append(traceback.format_exc())
        result = EvalResult(
            CandidateState.FAILED, f"evaluation error: {type(exc).__name__}: {exc}", "evaluate"
        )
    if not result.cost_s:
        result = dataclasses.replace(result, cost_s=time.perf_counter() - start)
    shutil.rmtree(scratch, ignore_errors=True)
    return result, recorder.log()  # io_dir stays until its outputs are logged


def _io_dir(r: Run, target: TargetSpec, cid: str) -> Path:
    return r.config.state_dir / "worktrees" / "_io" / r.config.name / target.name / cid


def _log_outputs(r: Run, run_id: str, result: EvalResult, io_dir: Path) -> None:
    """Outputs an evaluator leaves besides metrics: a training curve, a model's weights."""
    try:
        curve = result.artifacts.get("training_curve.json")
        if curve:
            points = [(int(p["step"]), float(p["loss"])) for p in json.loads(curve)]
            if points:
                r.tracker.log_curve(run_id, "distill_loss", points)
        draft = result.artifacts.get("draft.json")
        if draft and result.ok:
            weights = Path(json.loads(draft).get("weights") or "")
            # only a file the evaluation wrote into its own io dir is taken
            if weights.is_file() and weights.resolve().is_relative_to(io_dir.resolve()):
                r.tracker.log_artifact_file(run_id, weights, "draft")
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("outputs of run %s not logged: %s", run_id, exc)
    finally:
        shutil.rmtree(io_dir, ignore_errors=True)


class _RecordingSandbox:
    """Keeps the output of every sandboxed call of one evaluation for eval.log."""

    def __init__(self, inner: Sandbox):
        self.inner = inner
        self.calls: list[tuple[str, Any]] = []
        self.notes: list[str] = []

    def call(self, entry: str, payload: Mapping[str, Any], **kw: Any) -> Any:
        res = self.inner.call(entry, payload, **kw)
        self.calls.append((entry, res))
        return res

    def log(self) -> str:
        parts = []
        for entry, res in self.calls:
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


# -- recording --------------------------------------------------------------------------


def _tell(study: optuna.Study, trial: optuna.trial.Trial, result: EvalResult) -> None:
    if result.ok and result.objectives:
        study.tell(trial, list(result.objectives))
    elif result.state is CandidateState.PRUNED:
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, state=TrialState.FAIL)


def _set_result_attrs(trial: Any, result: EvalResult, commit: str, run_id: str) -> None:
    trial.set_user_attr("reason", result.reason[:2000])
    trial.set_user_attr("metrics", {k: float(v) for k, v in result.metrics.items()})
    trial.set_user_attr("objectives", list(result.objectives))
    trial.set_user_attr("commit", commit)
    trial.set_user_attr("mlflow_run_id", run_id)
    trial.set_user_attr("state", result.state.value)  # last: marks the record complete


def _record_rejected(
    r: Run,
    target: TargetSpec,
    study: optuna.Study,
    archive: Archive,
    proposal: Proposal,
    out: TargetSummary,
) -> None:
    cid = f"c{_next_number(archive):04d}"
    trial = study.ask()
    result = EvalResult(CandidateState.REJECTED, str(proposal.rejected), "proposal")
    cand = Candidate(
        cid, target.name, proposal.parent_id, proposal.proposer, {}, {}, "", proposal.summary
    )
    trial.set_user_attr("candidate", cid)
    trial.set_user_attr("proposer", proposal.proposer)
    trial.set_user_attr("parent", proposal.parent_id or "")
    run_id = r.tracker.log_candidate(
        parent_run_id=r.summary.parent_run_id,
        candidate=cand,
        result=result,
        branch="",
        commit="",
        trial_number=trial.number,
        diff="",
        prompt=proposal.prompt,
        response=proposal.response,
    )
    _set_result_attrs(trial, result, "", run_id)
    study.tell(trial, state=TrialState.FAIL)
    entry = ArchiveEntry(
        cid,
        proposal.parent_id,
        dict(proposal.files),
        {},
        CandidateState.REJECTED,
        result.reason,
        summary=proposal.summary,
        proposer=proposal.proposer,
    )
    archive.add(entry, "rejected")
    r.proposer.observe(entry)
    r.budget.candidates += 1
    out.candidates += 1
    _say_candidate(r, target, archive, entry, result)


def _record_duplicate(study: optuna.Study, trial: Any, archive: Archive, of: str) -> None:
    trial.set_user_attr("state", CandidateState.DUPLICATE.value)
    trial.set_user_attr("duplicate_of", of)
    original = archive.get(of)
    if original.state is CandidateState.VALID and original.objectives:
        study.tell(trial, list(original.objectives))  # the sampler learns the known value
    else:
        study.tell(trial, state=TrialState.FAIL)


def _commit_message(target: TargetSpec, cand: Candidate, result: EvalResult) -> str:
    lines = [
        f"{target.name} {cand.id}: {cand.summary or 'candidate'}"[:200],
        "",
        f"state: {result.state.value}",
    ]
    if result.reason:
        lines.append(f"reason: {result.reason[:1500]}")
    lines.append(f"proposer: {cand.proposer}")
    lines.append(f"parent: {cand.parent_id or '-'}")
    if cand.knobs:
        lines.append("knobs: " + ", ".join(f"{k}={v!r}" for k, v in sorted(cand.knobs.items())))
    for name, value in sorted(result.metrics.items()):
        lines.append(f"metric {name}: {value:.6g}")
    lines.append(f"evaluation: {result.cost_s:.2f} s")
    return "\n".join(lines) + "\n"


def _say_candidate(
    r: Run, target: TargetSpec, archive: Archive, entry: ArchiveEntry, result: EvalResult
) -> None:
    best = archive.best()
    metric = target.primary.metric
    value = f"{metric}={entry.objectives[0]:.6g}" if entry.objectives else result.reason[:90]
    best_s = f"best {best.objectives[0]:.6g} ({best.id})" if best else "no valid candidate yet"
    left = r.budget.remaining_s() / 60
    r.say(
        f"[{target.name}] {entry.id} {entry.state.value:<9} "
        f"{value.splitlines()[0] if value else ''}"
        f" | {best_s} | {entry.proposer} | {left:.1f} min left"
    )


def _next_number(archive: Archive) -> int:
    return 1 + max((int(e.id[1:]) for e in archive.entries), default=0)


def _finish_summary(out: TargetSummary, archive: Archive, study: optuna.Study) -> TargetSummary:
    for e in archive.entries:
        out.states[e.state.value] = out.states.get(e.state.value, 0) + 1
    if archive.seed and archive.seed.objectives:
        out.seed_value = archive.seed.objectives[0]
    best = archive.best()
    if best:
        out.best_value, out.best_candidate = best.objectives[0], best.id
    return out


def _night_metrics(summary: RunSummary, ledger: Ledger) -> dict[str, float]:
    usage = ledger.summary()
    m: dict[str, float] = {
        **{f"llm_{k}": float(v) for k, v in usage.items() if isinstance(v, int | float)},
        "candidates": float(sum(t.candidates for t in summary.targets)),
        "duplicates": float(sum(t.duplicates for t in summary.targets)),
        "winners": float(sum(1 for t in summary.targets if t.winner)),
    }
    if summary.engine_overhead_ms:
        s = sorted(summary.engine_overhead_ms)
        m["engine_overhead_ms_median"] = s[len(s) // 2]
    return m


# -- nights, resume ---------------------------------------------------------------------


def _open_night(config: ExperimentConfig, tracker: Tracker, resume: bool) -> tuple[str, str]:
    """A new night (parent run), or with ``resume`` the last one of this experiment."""
    pointer = config.state_dir / "logs" / f"{config.name}.night.json"
    if resume and pointer.is_file():
        data = json.loads(pointer.read_text())
        run_id = tracker.find_night(data["night"])
        if run_id:
            tracker.resume_night(run_id)
            return data["night"], run_id
    if resume:
        raise OptimizerError(
            f"--resume: no earlier night of experiment '{config.name}' under {config.state_dir}; "
            "run without --resume to start one"
        )
    night = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    params = {
        "experiment_file": str(config.file),
        "seed": config.seed,
        "proposer": config.proposer.kind,
        "budget_minutes": config.budget.minutes,
        "targets": ",".join(t.spec.name for t in config.targets),
    }
    run_id = tracker.start_night(night, params, {"optimizer.experiment": config.name})
    pointer.write_text(json.dumps({"night": night, "parent_run_id": run_id}))
    return night, run_id


def _trace_llm_calls(config: ExperimentConfig) -> None:
    """MLflow's OpenAI tracing, where installed: every chat call becomes a trace of the
    experiment (the prompt and response files of each candidate are logged regardless)."""
    try:
        import mlflow
        import mlflow.openai

        mlflow.set_tracking_uri(config.tracking_uri)
        mlflow.set_experiment(config.name)
        mlflow.openai.autolog(log_traces=True, silent=True)
    except Exception as exc:  # noqa: BLE001 - tracing is a convenience, never a reason to stop
        log.info("MLflow OpenAI tracing not enabled: %s", exc)


def _recover_interrupted(r: Run, study: optuna.Study, target: TargetSpec) -> None:
    """Trials left RUNNING by a killed run: finish their records in all three stores."""
    for frozen in search.running_trials(study):
        attrs = frozen.user_attrs
        cid = attrs.get("candidate")
        complete = attrs.get("state") not in (None, CandidateState.RUNNING.value)
        if complete and attrs.get("mlflow_run_id"):
            # evaluated and logged; only the tell was lost
            if attrs["state"] == CandidateState.VALID.value and attrs.get("objectives"):
                study.tell(frozen.number, list(attrs["objectives"]))
            else:
                study.tell(frozen.number, state=TrialState.FAIL)
            continue
        reason = "interrupted: the run stopped before this candidate finished"
        if not cid:  # killed between ask and naming it: no branch, no run
            study._storage.set_trial_user_attr(frozen._trial_id, "state", "FAILED")
            study._storage.set_trial_user_attr(frozen._trial_id, "reason", reason)
            study.tell(frozen.number, state=TrialState.FAIL)
            continue
        result = EvalResult(CandidateState.FAILED, reason, "interrupted")
        has_branch = cid in r.ws.candidate_ids(target.name)
        files = (
            r.ws.read_files(target.name, cid, target.rel_path, target.editable)
            if has_branch
            else {}
        )
        cand = Candidate(
            cid,
            target.name,
            attrs.get("parent") or None,
            attrs.get("proposer", ""),
            files,
            frozen.params,
            attrs.get("content_hash", ""),
            attrs.get("summary", ""),
        )
        branch = commit = diff = ""
        if has_branch:
            branch = r.ws.candidate_branch(target.name, cid)
            commit = r.ws.annotate(target.name, cid, _commit_message(target, cand, result))
            diff = r.ws.diff(target.name, cid)
            try:
                r.ws.remove_worktree(target.name, cid)
            except OptimizerError:
                pass
        run_id = r.tracker.log_candidate(
            parent_run_id=r.summary.parent_run_id,
            candidate=cand,
            result=result,
            branch=branch,
            commit=commit,
            trial_number=frozen.number,
            diff=diff,
        )
        storage, tid = study._storage, frozen._trial_id
        for key, value in (
            ("reason", reason),
            ("commit", commit),
            ("mlflow_run_id", run_id),
            ("state", CandidateState.FAILED.value),
            ("metrics", {}),
            ("objectives", []),
        ):
            storage.set_trial_user_attr(tid, key, value)
        study.tell(frozen.number, state=TrialState.FAIL)
        r.say(f"[{target.name}] {cid} marked FAILED: {reason}")


def _load_archive(r: Run, study: optuna.Study, target: TargetSpec, archive: Archive) -> None:
    """Rebuild the archive from an earlier night's trials (sources from their branches)."""
    frozen = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("candidate")]
    frozen.sort(key=lambda t: t.user_attrs["candidate"])
    branches = set(r.ws.candidate_ids(target.name))
    for t in frozen:
        a = t.user_attrs
        cid = a["candidate"]
        state = CandidateState(a.get("state", "FAILED"))
        files: dict[str, str] = {}
        if cid in branches and (state is CandidateState.VALID or cid == "c0001"):
            files = r.ws.read_files(target.name, cid, target.rel_path, target.editable)
        entry = ArchiveEntry(
            cid,
            a.get("parent") or None,
            files,
            dict(t.params),
            state,
            a.get("reason", ""),
            dict(a.get("metrics", {})),
            tuple(a.get("objectives", [])),
            {},
            a.get("summary", ""),
            a.get("proposer", ""),
        )
        archive.add(entry, a.get("structure", ""), a.get("content_hash", ""))
    if archive.entries:
        r.say(f"[{target.name}] resumed with {len(archive.entries)} earlier candidate(s)")


def device_for(target: TargetSpec) -> str:
    """ "cuda" for GPU kinds on a machine with an NVIDIA driver, else "cpu".

    Decided from the device node, not by importing torch: the engine must not create a CUDA
    context before the sandbox forks its candidates.
    """
    gpu_kind = target.kind in ("kernel", "speculative")
    return "cuda" if gpu_kind and Path("/dev/nvidiactl").exists() else "cpu"


def _make_sandbox(config: ExperimentConfig, target: TargetSpec, evaluator: Evaluator) -> Sandbox:
    gpu = device_for(target) == "cuda"
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
        # Triton reads TRITON_INTERPRET when it is imported, i.e. in the warm zygote
        "extra_env": {"TRITON_INTERPRET": "1"} if target.kind == "kernel" and not gpu else {},
        "allow_gpu": gpu,
    }
    fields = {f.name for f in dataclasses.fields(SandboxSettings)}
    return Sandbox(SandboxSettings(**{k: v for k, v in wanted.items() if k in fields}))


# -- winners ----------------------------------------------------------------------------


def _materialize(r: Run, target: TargetSpec, entry: ArchiveEntry) -> Path:
    """A private copy of the target folder holding ``entry``'s files (for confirmation)."""
    folder = r.config.state_dir / "worktrees" / "_confirm" / r.config.name / target.name / entry.id
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(target.path, folder, ignore=shutil.ignore_patterns("__pycache__"))
    for rel, text in entry.files.items():
        (folder / rel).write_text(text)
    return folder


def _select_winner(
    r: Run,
    target: TargetSpec,
    evaluator: Evaluator,
    sandbox: Sandbox,
    study: optuna.Study,
    archive: Archive,
) -> dict[str, Any] | None:
    """The best candidates, confirmed against the seed: significant and held-out."""
    seed = archive.seed
    assert seed is not None
    minimize = target.primary.minimize
    contenders = [e for e in archive.best_per_structure() if e.id != seed.id][:3]
    for best in contenders:
        if not stats.exact_improvement(
            seed.objectives[0], best.objectives[0], minimize=minimize, min_gain=target.min_gain
        ):
            r.say(
                f"[{target.name}] no winner: best {best.id} is not {target.min_gain:.0%} "
                "better than the seed"
            )
            return None
        evidence = _confirm(r, target, evaluator, sandbox, seed, best)
        if evidence.get("confirmed"):
            winner = _publish(r, target, study, archive, best, evidence)
            r.say(
                f"[{target.name}] winner {best.id}: {evidence['headline']} -> "
                f"{winner['pull_branch']}"
            )
            return winner
        r.say(f"[{target.name}] {best.id} not confirmed: {evidence['headline']}")
    return None


def _confirm(
    r: Run,
    target: TargetSpec,
    evaluator: Evaluator,
    sandbox: Sandbox,
    seed: ArchiveEntry,
    best: ArchiveEntry,
) -> dict[str, Any]:
    cand_dir, seed_dir = _materialize(r, target, best), _materialize(r, target, seed)
    io_dir = r.config.state_dir / "worktrees" / "_io" / r.config.name / target.name / "confirm"
    scratch = r.config.state_dir / "scratch" / r.config.name / target.name / "confirm"
    for d in (io_dir, scratch):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    ctx = EvalContext(
        sandbox,
        secrets.randbits(63),
        scratch,
        io_dir,
        device=device_for(target),
        timeout_s=max(r.config.sandbox.timeout_s or target.timeout_s, 60.0) * 4,
    )
    metric, minimize = target.primary.metric, target.primary.minimize
    try:
        if target.noise == "timing":
            res = evaluator.compare(cand_dir, seed_dir, ctx, r.config.stats.confirm_repeats)
            if not res.ok:
                return {"confirmed": False, "headline": f"comparison failed: {res.reason[:200]}"}
            ci = stats.paired_bootstrap_speedup(
                res.samples["baseline"],
                res.samples["candidate"],
                minimize=minimize,
                confidence=r.config.stats.confidence,
                n_boot=r.config.stats.n_boot,
                seed=r.config.seed,
            )
            ok = ci.significant(target.min_gain)
            head = (
                f"speedup {ci.speedup:.3f}x, {ci.confidence:.0%} CI [{ci.low:.3f}, "
                f"{ci.high:.3f}] over {ci.n} interleaved pairs (needs > {1 + target.min_gain:.2f})"
            )
            return {
                "confirmed": ok,
                "headline": head,
                "speedup": ci.speedup,
                "low": ci.low,
                "high": ci.high,
                "pairs": ci.n,
                "kind": "paired bootstrap",
            }
        gain = _gain(seed.objectives[0], best.objectives[0], minimize)
        head = f"{metric} {seed.objectives[0]:.6g} -> {best.objectives[0]:.6g} ({gain:+.1%}, exact)"
        held_c = evaluator.held_out(cand_dir, ctx)
        held_s = evaluator.held_out(seed_dir, ctx) if held_c is not None else None
        if held_c is None or held_s is None:
            return {
                "confirmed": True,
                "headline": head + "; no held-out workload for this kind",
                "speedup": 1 + gain,
                "kind": "exact",
            }
        if not (held_c.ok and held_s.ok):
            bad = held_c if not held_c.ok else held_s
            return {
                "confirmed": False,
                "headline": f"held-out evaluation failed: {bad.reason[:200]}",
            }
        hc, hs = held_c.metrics[metric], held_s.metrics[metric]
        ok = stats.exact_improvement(hs, hc, minimize=minimize, min_gain=target.min_gain)
        hgain = _gain(hs, hc, minimize)
        head += f"; held-out {hs:.6g} -> {hc:.6g} ({hgain:+.1%})"
        return {
            "confirmed": ok,
            "headline": head,
            "speedup": 1 + gain,
            "held_out_gain": hgain,
            "kind": "exact + held-out",
            "held_out_metrics": {"seed": dict(held_s.metrics), "candidate": dict(held_c.metrics)},
        }
    finally:
        for d in (cand_dir, seed_dir, io_dir, scratch):
            shutil.rmtree(d, ignore_errors=True)


def _gain(seed: float, cand: float, minimize: bool) -> float:
    if minimize:
        return seed / cand - 1 if cand > 0 else float("inf")
    return cand / seed - 1 if seed > 0 else float("inf")


def _metric_lines(seed: Mapping[str, float], cand: Mapping[str, float]) -> list[str]:
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.6g}"

    return [
        f"- {name}: {fmt(seed.get(name))} -> {fmt(cand.get(name))}"
        for name in sorted(set(seed) | set(cand))
    ]


def _lineage(archive: Archive, entry: ArchiveEntry) -> list[ArchiveEntry]:
    chain = [entry]
    while chain[-1].parent_id:
        try:
            chain.append(archive.get(chain[-1].parent_id))
        except KeyError:
            break
    return list(reversed(chain))


def _publish(
    r: Run,
    target: TargetSpec,
    study: optuna.Study,
    archive: Archive,
    best: ArchiveEntry,
    evidence: dict[str, Any],
) -> dict[str, Any]:
    seed = archive.seed
    assert seed is not None
    trial = next(
        t for t in study.get_trials(deepcopy=False) if t.user_attrs.get("candidate") == best.id
    )
    run_id = trial.user_attrs.get("mlflow_run_id", "")
    title = f"{target.name}: {evidence['headline'].split(',')[0]} ({best.id})"
    lines = [
        title,
        "",
        f"Candidate {best.id} of experiment '{r.config.name}' (night {r.summary.night}) "
        f"improves `{target.primary.metric}` of target `{target.name}` over its seed.",
        "",
        "## Evidence",
        f"- {evidence['headline']}",
        f"- Validation: passed every stage of the `{target.kind}` evaluator (static check, "
        "correctness against the trusted reference on fresh inputs, performance).",
        "",
        "## Metrics (seed -> candidate)",
    ]
    lines += _metric_lines(seed.metrics, best.metrics)
    held = evidence.get("held_out_metrics")
    if held:
        lines += ["", "## Held-out workload (seed -> candidate)"]
        lines += _metric_lines(held["seed"], held["candidate"])
    if best.knobs:
        lines += ["", "## Knobs", *(f"- {k} = {v!r}" for k, v in sorted(best.knobs.items()))]
    lines += ["", "## Lineage"]
    for e in _lineage(archive, best):
        lines.append(f"- {e.id} ({e.proposer}): {e.summary[:160] or '-'}")
    lines += [
        "",
        "## Records",
        f"- MLflow run: {run_id} (experiment '{r.config.name}')",
        f"- Optuna study: {study.study_name}, trial {trial.number}",
        f"- Candidate branch: {r.ws.candidate_branch(target.name, best.id)}",
    ]
    if target.kind == "speculative" and run_id:
        try:
            version = r.tracker.register_model(run_id, "draft", target.name)
            lines.append(f"- MLflow model: {target.name} version {version} (the draft's weights)")
        except Exception as exc:  # noqa: BLE001 - the pull branch matters more than the registry
            log.warning("draft of %s not registered: %s", best.id, exc)
    message = "\n".join(lines) + "\n"
    branch, sha = r.ws.make_pull_branch(target.name, target.rel_path, best.files, message)
    report = r.config.state_dir / "reports" / f"{r.config.name}-{target.name}-pr.md"
    report.write_text(message)
    if r.config.vcs.push:
        r.ws.push(r.config.vcs.push, [branch])
    if held and run_id:
        r.tracker.log_night_metrics(
            run_id, {f"held_out.{k}": float(v) for k, v in held["candidate"].items()}
        )
    winner = {
        "candidate": best.id,
        "pull_branch": branch,
        "commit": sha,
        "mlflow_run_id": run_id,
        **{k: v for k, v in evidence.items() if k != "confirmed"},
    }
    study.set_user_attr("winner", winner)
    return winner
