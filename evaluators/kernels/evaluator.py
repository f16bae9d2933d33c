"""The ``kernel`` evaluator: Triton kernels in the KernelBench form, checked against float64.

A target folder holds ``reference.py`` (trusted: ``Model``, ``get_inputs(**args)``,
``get_init_inputs()``), ``kernel.py`` (editable: ``ModelNew`` with the same constructor and
forward) and ``target.toml``::

    [evaluator]
    distributions = ["normal", "offset", "wide", "negative", "neginf_mask"]
    allow_tf32 = false                 # float32 outputs must be full float32
    repetitions = 100                  # timed repetitions per workload (GPU)
    [evaluator.tolerances.bfloat16]    # optional per-dtype override of numerics defaults
    norm = 8e-3
    [[evaluator.workloads]]
    name = "bf16-4096"
    device = "cuda"                    # "cuda" (native) or "cpu" (TRITON_INTERPRET=1)
    args = { rows = 4096, cols = 4096, dtype = "bfloat16" }   # -> get_inputs(**args)
    init = [4096, 1e-6]                # optional; default get_init_inputs()
    param_dtype = "bfloat16"           # optional; default args.dtype
    skip = "reason"                    # optional; reported, not run

Stages: ``static_check`` (AST rules, :mod:`evaluators.kernels.static_checks`), ``correctness``
(one sandboxed call runs every workload of this device: 3 fresh input sets from the hidden
seed plus an in-place rerun; see :mod:`evaluators.kernels.child`), ``performance`` (CUDA
events; PRUNED without a GPU) and ``compare`` (candidate and incumbent interleaved). On a
GPU the check and the timing of one evaluation are two requests to one sandboxed process (a
session), so the candidate is imported and compiled once.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import random
import secrets
import shutil
import statistics
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from evaluators import numerics
from evaluators._base import (
    EvalContext,
    Evaluator,
    read_source,
    result_from_call,
    text_beside,
)
from evaluators.kernels.static_checks import check_source
from optimizer.errors import ConfigError
from optimizer.records import CandidateState, EvalResult
from optimizer.sandbox.loader import load_module

_EVAL_KEYS = {"distributions", "dropped", "allow_tf32", "repetitions", "tolerances", "workloads",
              "blocks"}
_WORKLOAD_KEYS = {"name", "device", "args", "init", "param_dtype", "skip"}
NO_GPU = "no GPU: correctness verified, timing skipped"
# when every workload needs a GPU, nothing was verified here, and the verdict says so
NO_GPU_UNCHECKED = ("no GPU: nothing was checked here (every workload of this target needs "
                    "a GPU), not measured")
TIMED_SETS = 3  # input sets the timed calls rotate over
CASE_POOL = 6  # validation input sets per workload and night (at least one per distribution)
TIMED_CHECKS = 3  # timed calls per block whose outputs are checked, at random
# when a target names no distributions, those its reference supports (numerics.screen)
# from this list; the list before the screen existed, when nothing can be screened
DEFAULT_DISTRIBUTIONS = ("normal", "uniform", "offset", "wide", "negative")


@dataclass(frozen=True)
class Workload:
    name: str
    device: str
    args: dict[str, Any]
    init: tuple[Any, ...] | None = None
    param_dtype: str | None = None
    skip: str = ""


@dataclass(frozen=True)
class KernelConfig:
    """``distributions`` is empty when the target names none: the evaluator then screens
    its reference for them (see :func:`screened`). ``dropped``: the distributions the
    reference does not support, with the reason (written by :func:`stress_toml`)."""

    workloads: tuple[Workload, ...]
    distributions: tuple[str, ...] = DEFAULT_DISTRIBUTIONS
    allow_tf32: bool = False
    repetitions: int = 100
    blocks: int = 5
    tolerances: tuple[tuple[str, numerics.Tolerance], ...] = ()
    dropped: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, raw: dict[str, Any], where: str) -> KernelConfig:
        unknown = set(raw) - _EVAL_KEYS
        if unknown:
            raise ConfigError(f"unknown [evaluator] key(s) {sorted(unknown)}; allowed: "
                              f"{sorted(_EVAL_KEYS)}", file=where)
        dists = tuple(raw.get("distributions", ()))
        for d in dists:
            if d not in numerics.DISTRIBUTIONS:
                raise ConfigError(f"unknown distribution {d!r}; known: {numerics.DISTRIBUTIONS}",
                                  file=where, key="evaluator.distributions")
        if "distributions" in raw and len(dists) < 2:
            raise ConfigError("give at least two distributions", file=where,
                              key="evaluator.distributions")
        dropped = raw.get("dropped", {})
        if not isinstance(dropped, dict) or not all(
                d in numerics.DISTRIBUTIONS and isinstance(why, str)
                for d, why in dropped.items()):
            bad = [d for d in dropped if d not in numerics.DISTRIBUTIONS] if isinstance(
                dropped, dict) else []
            raise ConfigError("[evaluator.dropped] maps a distribution to why it is not used, "
                              f"e.g. offset = \"...\"; known: {numerics.DISTRIBUTIONS}"
                              + (f"; unknown: {', '.join(map(repr, bad))}" if bad else ""),
                              file=where, key="evaluator.dropped")
        both = sorted(set(dropped) & set(dists))
        if both:
            raise ConfigError(f"{both} both used and dropped; remove them from one of "
                              "distributions and [evaluator.dropped]", file=where,
                              key="evaluator.dropped")
        workloads = []
        for i, w in enumerate(raw.get("workloads", [])):
            key = f"evaluator.workloads[{i}]"
            extra = sorted(set(w) - _WORKLOAD_KEYS) if isinstance(w, dict) else []
            if not isinstance(w, dict) or extra or "name" not in w:
                raise ConfigError(("unknown key; " if extra else "")
                                  + f"a workload is a table with keys {sorted(_WORKLOAD_KEYS)} "
                                  "('name' required)", file=where,
                                  key=key + (f".{extra[0]}" if extra else ""))
            device = w.get("device", "cuda")
            if device not in ("cuda", "cpu"):
                raise ConfigError("device must be 'cuda' or 'cpu'", file=where, key=key)
            init = w.get("init")
            workloads.append(Workload(str(w["name"]), device, dict(w.get("args", {})),
                                      tuple(init) if init is not None else None,
                                      w.get("param_dtype"), str(w.get("skip", ""))))
        if not workloads:
            raise ConfigError("no [[evaluator.workloads]]", file=where)
        try:
            tols = numerics.tolerances_from_config(raw)
        except ValueError as exc:
            raise ConfigError(str(exc), file=where) from None
        return cls(tuple(workloads), dists, bool(raw.get("allow_tf32", False)),
                   int(raw.get("repetitions", 100)), int(raw.get("blocks", 5)),
                   tuple(tols.items()), tuple(sorted(dropped.items())))

    def tolerance(self, dtype: str) -> numerics.Tolerance:
        return dict(self.tolerances).get(dtype, numerics.DEFAULT_TOLERANCES["float32"])

    def stress_note(self) -> str:
        """The distributions validated with, and why the others are not (for the verdict)."""
        line = f"validated with the distributions {', '.join(self.distributions)}"
        if self.dropped:
            line += "; dropped: " + "; ".join(f"{d} ({why})" for d, why in self.dropped)
        return line


def screen_workloads(config: KernelConfig, reference: Any) -> list[numerics.ScreenWorkload]:
    """The target's workloads small enough to screen on the CPU (numerics.screen), skipped
    ones included (a bf16 workload is skipped for the interpreter, not for torch)."""
    out = []
    for w in config.workloads:
        init = list(w.init if w.init is not None else reference.get_init_inputs())
        try:
            template = numerics._template(reference, w.args, "meta")
        except Exception:  # noqa: BLE001 - sizes its reference cannot build; not screened
            continue
        if sum(t.numel() for t in template if hasattr(t, "numel")) > \
                numerics.SCREEN_MAX_ELEMENTS:
            continue
        pdt = w.param_dtype or w.args.get("dtype")
        out.append(numerics.ScreenWorkload(w.name, w.args, init,
                                           numerics.torch_dtype(pdt) if pdt else None))
    return out


def screened(config: KernelConfig, reference: Any) -> KernelConfig:
    """``config`` with the distributions its reference supports (all of
    numerics.DISTRIBUTIONS screened) when it names none; unchanged otherwise."""
    if config.distributions:
        return config
    workloads = screen_workloads(config, reference)
    if not workloads:
        return dataclasses.replace(config, distributions=DEFAULT_DISTRIBUTIONS)
    found = numerics.screen(reference, workloads, tol32=config.tolerance("float32"))
    kept = tuple(d for d, why in found.items() if not why)
    if "normal" not in kept:
        raise ConfigError(f"the reference fails on plain normal inputs: {found['normal']}")
    return dataclasses.replace(config, distributions=kept,
                               dropped=tuple((d, why) for d, why in found.items() if why))


def stress_toml(config: KernelConfig, reference: Any) -> list[str]:
    """The ``distributions`` line and ``[evaluator.dropped]`` table that record the screen
    of ``reference`` in a target.toml (``optimizer import-kernelbench`` writes them)."""
    found = screened(dataclasses.replace(config, distributions=()), reference)
    lines = ["# stress from the reference: each distribution on which the float64 reference "
             "stays finite",
             "# and agrees with a float32 run of itself (evaluators.numerics.screen)",
             "distributions = [" + ", ".join(f'"{d}"' for d in found.distributions) + "]"]
    if found.dropped:
        lines += ["", "[evaluator.dropped]"]
        lines += [f"{d} = {json.dumps(why, ensure_ascii=False)}" for d, why in found.dropped]
    return lines


def load_reference(target_dir: Path) -> Any:
    """Import the trusted ``reference.py`` of a target under a private module name."""
    path = target_dir / "reference.py"
    return load_module(path, f"_reference_{abs(hash(str(path)))}")


def _device_kind(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "cpu"


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _itemsize(dtype: Any) -> int:
    import torch

    return int(torch.empty((), dtype=dtype).element_size())


def _reference_device() -> str:
    """Where the trusted side computes a GPU workload's float64 references: the GPU when
    this process has one (a cross-entropy reference of 4096 x 128256 is tens of seconds on
    CPU cores), else the CPU. It runs only while no candidate is being timed."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _set_keys(n: int) -> list[str]:
    """Names of an evaluation's ``n`` checked input sets: A, B and C (the storage checks),
    then S3, S4, ... (one call each)."""
    return ["A", "B", "C", *(f"S{i}" for i in range(3, n))][:n]


def _one_per_distribution(pool: Any, rng: random.Random) -> list[int]:
    """Pool cases for one evaluation: one of each distribution (case k is of distribution
    k modulo their number), chosen and ordered by ``rng``; at least three."""
    by_dist: dict[str, list[int]] = {}
    for k, (dist, _seed) in enumerate(pool.draws):
        by_dist.setdefault(dist, []).append(k)
    chosen = [rng.choice(ks) for ks in by_dist.values()]
    rest = [k for k in range(len(pool)) if k not in chosen]
    while len(chosen) < 3 and rest:
        chosen.append(rest.pop(rng.randrange(len(rest))))
    rng.shuffle(chosen)
    return chosen


def _drop_tensor_files(io_dir: Path) -> None:
    """The tensors an evaluation's calls exchanged through ``io_dir`` (its other files stay).
    The candidate could write there: a link is removed, never followed, and a folder of such
    a name is left for the io folder's own removal (it must not break the judgement)."""
    for path in io_dir.glob("*.safetensors"):
        if path.is_symlink() or path.is_file():
            path.unlink(missing_ok=True)


class _CasePool:
    """One workload's validation cases for a night (see KernelEvaluator._case_pool)."""

    def __init__(self, wid: str, folder: Path, reference: Any, args: dict[str, Any],
                 init: list[Any], param_dtype: Any, draws: list[tuple[str, int]]):
        self.wid, self.folder, self.reference = wid, folder, reference
        self.args, self.init, self.param_dtype, self.draws = args, init, param_dtype, draws
        # case k: the case, its float64 references, the digests of its inputs
        self.made: dict[int, tuple[Any, list[Any], dict[str, str]]] = {}
        self.ref_device = _reference_device()
        self.params: Path | None = None
        self.meta: list[Any] = []
        self._lock = threading.Lock()  # slots draw cases at once; the first sets the params

    def __len__(self) -> int:
        return len(self.draws)

    def get(self, k: int) -> tuple[Any, list[Any], dict[str, str]]:
        """Case ``k`` with its references and its inputs' digests, made on first use."""
        with self._lock:
            return self._get(k)

    def _get(self, k: int) -> tuple[Any, list[Any], dict[str, str]]:
        if k not in self.made:
            import torch
            from safetensors.torch import save_file

            dist, seed = self.draws[k]
            case = numerics.make_case(self.reference, self.args, self.init, dist, seed,
                                      self.param_dtype, self.ref_device)
            if self.made:  # one parameter set per model: every case shares the first's
                first = next(iter(self.made.values()))[0]
                case = numerics.Case(case.dist, case.inputs, first.params)
            else:
                self.params = self.folder / f"{self.wid}.params.safetensors"
                save_file({n: v.contiguous().cpu() for n, v in case.params.items()},
                          str(self.params))
                self.meta = numerics.expected_meta(self.reference, self.init, case)
            digests = {str(j): numerics.digest(t) for j, t in enumerate(case.inputs)
                       if isinstance(t, torch.Tensor)}
            refs = numerics.reference_output(self.reference, self.init, case, self.ref_device)
            self.made[k] = (numerics.shapes_only(case), refs, digests)
        return self.made[k]


# the child's entry functions, by the name of the request a session serves them under
_ENTRIES = {"check": "evaluators.kernels.child:check",
            "time": "evaluators.kernels.child:time_kernels"}


@dataclass(frozen=True)
class _Answer:
    """A session request's outcome, read like a sandbox call's (``result_from_call``)."""

    response: dict | None
    timed_out: bool
    error: str
    wall_s: float = 0.0
    stderr: str = ""



def _under_cache_lock(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``method`` holding the evaluator's cache lock (slots build a pool once)."""
    @functools.wraps(method)
    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._cache_lock:
            return method(self, *args, **kwargs)
    return locked

class KernelEvaluator(Evaluator):
    kind: ClassVar[str] = "kernel"
    # the warm-up imports what each candidate's first checked call imported
    # (evaluators.kernels.warm)
    preload: ClassVar[tuple[str, ...]] = ("torch", "triton", "evaluators.kernels.warm")
    uses_gpu: ClassVar[bool] = True
    # where an evaluation's calls share one process (on the CPU there is one call)
    session_devices: tuple[str, ...] = ("cuda",)
    # evaluations in several slots share the night's cases and references (built under a
    # lock) and each keeps its session under its own context
    concurrent_evaluations: ClassVar[bool] = True

    def __init__(self, target: Any):
        super().__init__(target)
        self.config = KernelConfig.parse(dict(target.evaluator), f"{target.rel_path}/target.toml")
        if not self.config.distributions:  # none named: those the reference supports
            has_ref = (target.path / "reference.py").is_file()
            self.config = (screened(self.config, load_reference(target.path)) if has_ref
                           else dataclasses.replace(self.config,
                                                    distributions=DEFAULT_DISTRIBUTIONS))
        # the timed calls' input sets: drawn from a seed the candidate is never told in
        # advance, fixed for this evaluator (a night), so references are computed once
        self._timing_seed = secrets.randbits(30)
        self._case_seed = secrets.randbits(30)  # the validation cases' (see _case_pool)
        dists = [d for d in self.config.distributions if d != "normal"]
        self._timing_dists = ("normal", *random.Random(self._timing_seed).sample(
            dists, k=min(TIMED_SETS - 1, len(dists))))
        self._timing_refs: dict[str, list[tuple[Any, list[Any]]]] = {}
        self._pools: dict[str, _CasePool] = {}
        self._pool_dir: Path | None = None
        # evaluations under way (id of their context) and the session each opened
        self._sessions: dict[int, Any] = {}
        self._cache_lock = threading.RLock()  # the pools and timing references, built once

    def evaluate(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        """The stages, with the candidate's sandboxed calls on a GPU made in one process
        (a session opened at the first call): one CUDA start, import and compilation per
        candidate instead of one per stage."""
        if _device_kind(ctx.device) not in self.session_devices:
            return super().evaluate(cand_dir, ctx)
        self._sessions[id(ctx)] = None
        try:
            return super().evaluate(cand_dir, ctx)
        finally:
            session = self._sessions.pop(id(ctx), None)
            if session is not None:
                session.close()

    def _call(self, ctx: EvalContext, cand_dir: Path, op: str, payload: dict) -> Any:
        """``op`` ("check" or "time", :mod:`evaluators.kernels.child`) run on ``payload`` in
        the candidate's process: by a request to this evaluation's session when it has one
        (see :meth:`evaluate`), else by a call."""
        if id(ctx) not in self._sessions:
            return ctx.run(_ENTRIES[op], payload, workdir=cand_dir)
        session = self._sessions[id(ctx)]
        if session is None:
            session = ctx.session("evaluators.kernels.child:session",
                                  {"device": _device_kind(ctx.device)}, workdir=cand_dir,
                                  timeout_s=4 * ctx.timeout_s)
            self._sessions[id(ctx)] = session
            if session.error:
                return _Answer(None, session.timed_out, session.error)
        if not session.ok:
            return _Answer(None, False, session.error or "the candidate's process ended")
        reply = session.request({"op": op, "payload": payload}, timeout_s=ctx.timeout_s)
        if reply.ok:
            return _Answer(reply.value, False, "", reply.wall_s)
        return _Answer(None, reply.timed_out, reply.reason, reply.wall_s)

    def prepare(self, ctx: EvalContext) -> None:
        """Every validation case of the night's pools on ``ctx.device`` with its references
        and files, and the timed sets' references (made when first drawn otherwise: each
        seed paid for its target's, 9-12 s of a norm or cross-entropy seed's evaluation on an
        H200, 2026-12-03)."""
        device = _device_kind(ctx.device)
        reference = load_reference(self.target.path)
        for i, w in enumerate(self.config.workloads):
            if w.device != device or w.skip:
                continue
            init = list(w.init if w.init is not None else reference.get_init_inputs())
            pool = self._case_pool(f"w{i}", w, reference, init, ctx)
            for k in range(len(pool)):
                pool.get(k)
        if device == "cuda":  # the timing sets' references last: they empty the cache
            for job in self._timing_payload(ctx, None, 1)["workloads"]:
                self._timing_sets(job)

    @_under_cache_lock
    def _case_pool(self, wid: str, w: Any, reference: Any, init: list[Any],
                   ctx: EvalContext) -> _CasePool:
        """The night's validation cases of one workload: CASE_POOL input sets (every
        distribution at least once when there are fewer), one parameter set, made when
        first drawn, with their float64 references (the parameters in a file). Each
        evaluation checks three of them drawn with its own hidden seed, as it checked three
        fresh ones before: generating inputs and references was most of a kernel
        evaluation (on 2 cores 5.4 s of softmax's, per candidate). The candidate's process
        draws the three from their seeds on the same device (the same values), as it draws
        the timed sets: no case crosses a file, and no candidate can reach another's
        inputs."""
        pool = self._pools.get(wid)
        if pool is not None and self._pool_dir is not None and self._pool_dir.exists():
            return pool
        if self._pool_dir is None or not self._pool_dir.exists():
            base = ctx.cache_dir if ctx.cache_dir is not None else ctx.scratch
            base.mkdir(parents=True, exist_ok=True)
            self._pool_dir = Path(tempfile.mkdtemp(prefix="kernel-cases-", dir=base))
            weakref.finalize(self, shutil.rmtree, self._pool_dir, True)
            self._pools.clear()
        pdt = w.param_dtype or w.args.get("dtype")
        rng = random.Random(self._case_seed + int(wid[1:]))
        # case k is of distribution k (cyclically): every evaluation checks one case of each
        # distribution, its hidden seed picks which, the night's secret seed their values
        dists = [self.config.distributions[k % len(self.config.distributions)]
                 for k in range(max(CASE_POOL, len(self.config.distributions)))]
        pool = _CasePool(wid, self._pool_dir, reference, w.args, init,
                         numerics.torch_dtype(pdt) if pdt else None,
                         [(d, rng.getrandbits(31)) for d in dists])
        self._pools[wid] = pool
        return pool

    def sandbox_env(self, device: str) -> dict[str, str]:
        # Triton reads TRITON_INTERPRET when it is imported, i.e. in the warm zygote
        return {} if device.startswith("cuda") else {"TRITON_INTERPRET": "1"}

    def prompt_text(self) -> str:
        return text_beside(__file__)

    def prompt_files(self) -> dict[str, str]:
        reference = self.target.path / "reference.py"
        if reference.is_file() and "reference.py" not in self.target.editable:
            return {"reference.py": reference.read_text()}
        return {}

    # -- stage 1 ---------------------------------------------------------------------
    def static_check(self, cand_dir: Path) -> EvalResult:
        base = super().static_check(cand_dir)
        if not base.ok:
            return base
        findings = []
        for rel in self.target.editable:
            if rel.endswith(".py"):
                src = read_source(cand_dir / rel)
                findings += [f"{rel}: {f}" for f in
                             check_source(src, rel, allow_tf32=self.config.allow_tf32,
                                          require_model=rel == "kernel.py")]
        if findings:
            return EvalResult(CandidateState.REJECTED, "; ".join(findings[:8]), "static",
                              artifacts={"static_check.txt": "\n".join(findings)})
        return EvalResult(CandidateState.VALID, "", "static")

    # -- stage 2 ---------------------------------------------------------------------
    def correctness(self, cand_dir: Path, ctx: EvalContext,
                    picks: tuple[int, ...] | None = None) -> EvalResult:
        """One of each workload's night cases per distribution (drawn with the evaluation's
        hidden seed; or ``picks``, at least three) through the child's checked calls,
        against float64 references: every evaluation meets every distribution the target
        validates with, on the CPU and on a GPU alike (a log-softmax without the max
        subtraction is wrong on two of seven, and passed three cases of six half the
        time). The first three are the storage checks' A, B and C. The
        case files, outputs and inputs-after-the-call are deleted once judged (a
        cross-entropy check leaves 5 GB: four slots filled a 64 GiB disk)."""
        try:
            return self._correctness(cand_dir, ctx, picks)
        finally:
            _drop_tensor_files(ctx.io_dir)

    def _correctness(self, cand_dir: Path, ctx: EvalContext,
                     picks: tuple[int, ...] | None) -> EvalResult:
        from safetensors.torch import load_file

        device = _device_kind(ctx.device)
        reference = load_reference(self.target.path)
        rng = random.Random(ctx.seed)
        report: list[str] = [f"# validation ({device}, {len(self.config.workloads)} workloads)",
                             f"- {self.config.stress_note()}"]
        jobs: list[dict[str, Any]] = []
        cases: dict[tuple[str, str], numerics.Case] = {}
        refs: dict[tuple[str, str], list[Any]] = {}
        metas: dict[str, list[Any]] = {}
        digests: dict[tuple[str, str], dict[str, str]] = {}
        t_prep = time.perf_counter()
        for i, w in enumerate(self.config.workloads):
            if w.device != device:
                continue
            if w.skip:
                report.append(f"- {w.name}: SKIPPED: {w.skip}")
                continue
            wid = f"w{i}"
            init = list(w.init if w.init is not None else reference.get_init_inputs())
            pool = self._case_pool(wid, w, reference, init, ctx)
            chosen = picks if picks is not None else _one_per_distribution(pool, rng)
            keys = _set_keys(len(chosen))
            for key, n in zip(keys, chosen, strict=True):
                cases[wid, key], refs[wid, key], digests[wid, key] = pool.get(n)
            assert pool.params is not None
            shutil.copyfile(pool.params, ctx.io_dir / f"{wid}.params.safetensors")
            metas[wid] = pool.meta
            jobs.append({
                "id": wid, "name": w.name, "init": init, "args": w.args,
                "param_dtype": w.param_dtype or w.args.get("dtype"),
                "draws": {key: list(pool.draws[n]) for key, n in zip(keys, chosen,
                                                                      strict=True)},
                "expect": [[list(s), _dtype_name(d)] for s, d in metas[wid]],
            })
        if not jobs:
            return EvalResult(CandidateState.VALID, f"no {device} workloads to check",
                              "correctness", artifacts={"validation.md": "\n".join(report)})
        prep_s = time.perf_counter() - t_prep  # cases, references, files (the pool's first use)
        t_call = time.perf_counter()
        call = self._call(ctx, cand_dir, "check", {
            "device": device, "workloads": jobs,
            "reference": str(self.target.path / "reference.py")})
        call_s = time.perf_counter() - t_call
        failed = result_from_call(call, "correctness")
        if failed is not None:
            return failed
        metrics: dict[str, float] = {"cost_s/check_prep": prep_s, "cost_s/check_call": call_s}
        for phase, secs in dict(call.response.get("phases", {})).items():
            metrics[f"cost_s/check_{phase}"] = float(secs)
        session = self._sessions.get(id(ctx))
        if session is not None:  # the process's start and the candidate's import
            metrics["cost_s/check_start"] = float(session.ready_s)
        by_id = {r["id"]: r for r in call.response.get("workloads", [])}
        for job in jobs:
            wid, name = str(job["id"]), str(job["name"])
            res = by_id.get(wid)
            if res is None:
                return self._invalid(f"{name}: no result", report)
            if res["problems"]:
                return self._invalid(f"{name}: {res['problems'][0]}", report, rejected=True)
            drawn = res.get("drawn", {})
            keys = list(job["draws"])
            extra = keys[3:]  # one call each on fresh inputs, after the storage checks
            for k in keys:
                if drawn.get(k) != digests[wid, k]:
                    return self._invalid(
                        f"{name}: the inputs drawn in the candidate's process are not the "
                        f"night's (set {k}, inputs '{cases[wid, k].dist}'): its process "
                        "changed how torch seeds or draws", report)
            post = res.get("post", {})
            for k in ("A", "B", *extra):
                for pos, expected in digests[wid, k].items():
                    if post.get(k, {}).get(pos) != expected:
                        return self._invalid(f"{name}: input {pos} was modified by the call",
                                             report)
            outs = {c: load_file(str(ctx.io_dir / f"{wid}.out.{c}.safetensors"))
                    for c in ("A1", "B", "C", *extra)}
            worst = 0.0
            for call_name, key in (("A1", "A"), ("B", "B"), ("C", "C"),
                                   *((k, k) for k in extra)):
                out = outs[call_name]
                for j, (ref, (_shape, dtype)) in enumerate(zip(refs[wid, key], metas[wid],
                                                              strict=True)):
                    if str(j) not in out:
                        return self._invalid(f"{name}: output {j} missing", report)
                    o = out[str(j)]
                    if o.dtype != dtype:
                        return self._invalid(
                            f"{name}: output {j} has dtype {_dtype_name(o.dtype)}, the reference "
                            f"gives {_dtype_name(dtype)}", report)
                    dn = _dtype_name(dtype)
                    v = numerics.compare(o, ref, self.config.tolerance(dn),
                                         allow_downcast=self.config.allow_tf32, out_dtype=dn)
                    where = f"{name}, inputs '{cases[wid, key].dist}'"
                    if call_name == "C":
                        where += " (written into the previous call's input storage)"
                    if not v.ok:
                        return self._invalid(f"{where}, output {j}: {v.reason}", report)
                    worst = max(worst, v.norm_err)
                    report.append(f"- {where}, output {j}: ok, rel. norm error {v.norm_err:.2e}")
            repeat = list(res.get("repeat", []))
            for j in range(len(metas[wid])):
                # the bits of A1's output (here) against those of the same call repeated
                # (the child's digest); compared where the references live
                first = outs["A1"][str(j)].to(refs[wid, "A"][j].device)
                if j >= len(repeat) or numerics.digest(first) != repeat[j]:
                    return self._invalid(f"{name}: nondeterministic: output {j} differs bitwise "
                                         "between two calls on the same inputs", report)
            metrics[f"norm_err/{name}"] = worst
        return EvalResult(CandidateState.VALID, "", "correctness", metrics=metrics,
                          artifacts={"validation.md": "\n".join(report),
                                     "notes.txt": self.config.stress_note()})

    def final_check(self, cand_dir: Path, ctx: EvalContext) -> EvalResult | None:
        """Before a pull branch: every case of the night's pools in one checked call (each
        evaluation checked one case per distribution, of values drawn that night)."""
        n = max((len(p) for p in self._pools.values()),
                default=max(CASE_POOL, len(self.config.distributions)))
        order = list(range(n))
        while len(order) < 3:
            order.append(order[len(order) % n])
        res = self.correctness(cand_dir, ctx, picks=tuple(order))
        if not res.ok:
            return EvalResult(res.state, f"final check: {res.reason}", "final check",
                              artifacts=res.artifacts)
        # the end-to-end gate: the kernel in its op's place in a model (evaluators/kernels/gate.py)
        from evaluators.kernels.gate import final_gate, shape_for

        dtype = shape_for(ctx.device, self.target.name).dtype
        passed, said = final_gate(self.target.name, self.target.path, cand_dir, ctx,
                                  self.config.tolerance(dtype).norm)
        if not passed:
            return EvalResult(CandidateState.INVALID, f"final check: end-to-end gate: {said}",
                              "final check")
        return EvalResult(CandidateState.VALID, f"all {n} validation cases of every workload "
                          f"answered right; end-to-end gate: {said}", "final check")

    def confirmation_evaluations(self, repeats: int) -> float:
        """The final check's correctness call (every case of the pools: at most two
        evaluations' checks; counted as the three-case calls it replaced), then one timed
        call in which candidate and seed alternate over ``repeats`` blocks (the blocks cost
        milliseconds of GPU time each: two evaluations' worth is ample)."""
        return math.ceil(CASE_POOL / 3) + 2.0 + 2.0  # + the end-to-end gate's two calls

    @staticmethod
    def _invalid(reason: str, report: list[str], rejected: bool = False) -> EvalResult:
        report.append(f"- FAILED: {reason}")
        state = CandidateState.REJECTED if rejected else CandidateState.INVALID
        return EvalResult(state, reason, "correctness",
                          artifacts={"validation.md": "\n".join(report)})

    # -- stage 3 ---------------------------------------------------------------------
    def _timing_payload(self, ctx: EvalContext, baseline: Path | None, blocks: int) -> dict:
        reference = load_reference(self.target.path)
        jobs = []
        for i, w in enumerate(self.config.workloads):
            if w.device != "cuda" or w.skip:
                continue
            init = list(w.init if w.init is not None else reference.get_init_inputs())
            jobs.append({"id": f"w{i}", "name": w.name, "args": w.args, "init": init,
                         "param_dtype": w.param_dtype or w.args.get("dtype"),
                         "dists": list(self._timing_dists)})
        return {"reference": str(self.target.path / "reference.py"), "workloads": jobs,
                "seed": self._timing_seed, "reps": self.config.repetitions, "blocks": blocks,
                "checks": TIMED_CHECKS, "baseline_dir": str(baseline) if baseline else None}

    @_under_cache_lock
    def _timing_sets(self, job: dict[str, Any]) -> list[tuple[Any, list[Any]]]:
        """The input sets the timed calls rotate over (the seeds the child draws them from)
        with their float64 references, made once per night: every candidate's the same."""
        key = job["id"]
        if key not in self._timing_refs:
            import torch

            reference = load_reference(self.target.path)
            pdt = job["param_dtype"]
            dtype = getattr(torch, pdt) if pdt else None
            sets: list[tuple[Any, list[Any]]] = []
            for j, dist in enumerate(job["dists"]):
                # drawn on the GPU, as the child draws them: the same values
                case = numerics.make_case(reference, job["args"], job["init"], dist,
                                          self._timing_seed + j, dtype, "cuda")
                if j:  # one parameter set per model, as in the child
                    case = numerics.Case(case.dist, case.inputs, sets[0][0].params)
                refs = numerics.reference_output(reference, job["init"], case, "cuda")
                sets.append((numerics.shapes_only(case), refs))
            self._timing_refs[key] = sets
            torch.cuda.empty_cache()  # what the float64 references reserved (GPU shared)
        return self._timing_refs[key]

    def _bytes_moved(self, job: dict[str, Any]) -> int:
        """Inputs, parameters and the reference's outputs at the workload's dtype: the
        memory floor never depends on what the candidate returns."""
        from evaluators import timing

        case, _ = self._timing_sets(job)[0]
        reference = load_reference(self.target.path)
        out = sum(math.prod(shape) * _itemsize(dtype)
                  for shape, dtype in numerics.expected_meta(reference, job["init"], case))
        return timing.tensor_bytes(list(case.inputs)) + out + sum(
            timing.tensor_bytes(p) for p in case.params.values())

    def _check_timed_outputs(self, job: dict[str, Any], w: dict[str, Any], io_dir: Path,
                             stage: str) -> EvalResult | None:
        """A sample of the timed calls' outputs, and the kernel once more on every input
        set after the timing, against the float64 reference."""
        from safetensors.torch import load_file

        sets = self._timing_sets(job)
        captured, after = list(w.get("captured", [])), list(w.get("after", []))
        if sorted(int(c["set"]) for c in after) != list(range(len(sets))) or not captured:
            return EvalResult(CandidateState.FAILED, f"{job['name']}: the timed outputs did "
                              "not all come back for checking", stage)
        seen: dict[int, list[str]] = {}  # a checked timed call's output digests, by set
        checked = [*(("timed call", c) for c in captured),
                   *(("after the timing", c) for c in after if "digests" not in c)]
        for what, c in checked:
            j = int(c["set"])
            case, refs = sets[j]
            out = load_file(str(io_dir / Path(str(c["file"])).name))
            for k, ref in enumerate(refs):
                o = out.get(str(k))
                dn = _dtype_name(ref.dtype if o is None else o.dtype)
                if o is None:
                    return EvalResult(CandidateState.INVALID, f"{job['name']}: output {k} "
                                      f"missing ({what})", stage)
                v = numerics.compare(o, ref, self.config.tolerance(dn),
                                     allow_downcast=self.config.allow_tf32, out_dtype=dn)
                if not v.ok:
                    where = f"rep {c['rep']} of block {c['block']}" if "rep" in c else "set"
                    return EvalResult(
                        CandidateState.INVALID,
                        f"{job['name']}, {what} ({where}, inputs '{case.dist}'), output {k}: "
                        f"{v.reason}", stage)
            if what == "timed call" and j not in seen:
                seen[j] = [numerics.digest(out[str(k)].to(ref.device))
                           for k, ref in enumerate(refs)]
        for c in after:  # the call after the timing gave a checked timed call's bits
            if "digests" not in c:
                continue
            j = int(c["set"])
            if j not in seen or list(c["digests"]) != seen[j]:
                return EvalResult(
                    CandidateState.INVALID,
                    f"{job['name']}: nondeterministic: after the timing, inputs "
                    f"'{sets[j][0].dist}' gave other bits than a timed call on them", stage)
        return None

    def _timed(self, cand_dir: Path, ctx: EvalContext, baseline: Path | None, blocks: int,
               stage: str) -> tuple[EvalResult | None, dict]:
        if _device_kind(ctx.device) != "cuda":
            checked = any(w.device == "cpu" and not w.skip for w in self.config.workloads)
            return EvalResult(CandidateState.PRUNED, NO_GPU if checked else NO_GPU_UNCHECKED,
                              stage), {}
        payload = self._timing_payload(ctx, baseline, blocks)
        if not payload["workloads"]:
            return EvalResult(CandidateState.PRUNED, "no cuda workloads in target.toml", stage), {}
        asked = time.perf_counter()
        with ctx.device_alone():  # no other slot's timing on this device meanwhile
            waited = time.perf_counter() - asked
            call = self._call(ctx, cand_dir, "time", payload)
        try:
            failed, resp = self._judge_timed(call, payload, ctx, stage)
        finally:
            _drop_tensor_files(ctx.io_dir)
        if resp:
            resp["device_wait_s"] = waited  # queueing behind other slots, not this candidate
        return failed, resp

    def _judge_timed(self, call: Any, payload: dict[str, Any], ctx: EvalContext,
                     stage: str) -> tuple[EvalResult | None, dict]:
        failed = result_from_call(call, stage)
        if failed is not None:
            return failed, {}
        from evaluators import timing  # torch only; safe once a GPU child has run

        resp = call.response
        copy_gbs = float(resp["copy_gbs"])
        jobs = {j["id"]: j for j in payload["workloads"]}
        if sorted(w["id"] for w in resp["workloads"]) != sorted(jobs):
            return EvalResult(CandidateState.FAILED, "timing did not report every workload",
                              stage), {}
        for w in resp["workloads"]:
            job = jobs[w["id"]]
            bad = self._check_timed_outputs(job, w, ctx.io_dir, stage)
            if bad is not None:
                return bad, {}
            w["bytes"] = self._bytes_moved(job)
            for block in w["blocks"]:
                for impl, s in block.items():
                    samples = timing.Samples(tuple(s["event_ms"]), tuple(s["wall_ms"]))
                    why = timing.implausible(samples, int(w["bytes"]), copy_gbs)
                    if why and impl == "candidate":
                        return EvalResult(CandidateState.REJECTED, f"{w['id']}: {why}", stage), {}
        return None, resp

    def performance(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        failed, resp = self._timed(cand_dir, ctx, None, 1, "performance")
        if failed is not None:
            return failed
        from evaluators import timing

        metrics: dict[str, float] = {"copy_gbs": float(resp["copy_gbs"]),
                                     "cost_s/device_wait": float(resp["device_wait_s"])}
        medians, samples = [], []
        for w in resp["workloads"]:
            s = w["blocks"][0]["candidate"]
            summ = timing.summary(timing.Samples(tuple(s["event_ms"]), tuple(s["wall_ms"])),
                                  int(w["bytes"]), float(resp["copy_gbs"]))
            for k, v in summ.items():
                metrics[f"{k}/{w['id']}"] = v
            medians.append(summ["ms"])
            samples.append(s["event_ms"])
        # geometric mean: every workload counts alike, whatever its size
        time_ms = math.exp(statistics.fmean(math.log(m) for m in medians))
        metrics["time_ms"] = time_ms
        per_rep = [math.exp(statistics.fmean(math.log(x[r]) for x in samples))
                   for r in range(min(len(x) for x in samples))]
        return EvalResult(CandidateState.VALID, "", "performance", metrics=metrics,
                          objectives=(time_ms,), samples={"time_ms": tuple(per_rep)})

    def compare(self, cand_dir: Path, base_dir: Path, ctx: EvalContext, repeats: int
                ) -> EvalResult:
        # the baseline folder is copied next to scratch so the sandbox can read it
        base_copy = ctx.io_dir / "baseline"
        if base_copy.exists():
            shutil.rmtree(base_copy)
        shutil.copytree(base_dir, base_copy)
        failed, resp = self._timed(cand_dir, ctx, base_copy, max(1, repeats), "compare")
        if failed is not None:
            return failed
        cand, base = [], []
        for b in range(max(1, repeats)):
            meds: dict[str, list[float]] = {"candidate": [], "baseline": []}
            for w in resp["workloads"]:
                for impl in meds:
                    meds[impl].append(statistics.median(w["blocks"][b][impl]["event_ms"]))
            cand.append(math.exp(statistics.fmean(math.log(m) for m in meds["candidate"])))
            base.append(math.exp(statistics.fmean(math.log(m) for m in meds["baseline"])))
        return EvalResult(CandidateState.VALID, "", "compare",
                          samples={"candidate": tuple(cand), "baseline": tuple(base)})
