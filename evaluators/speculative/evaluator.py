"""The ``speculative`` kind: a draft model for speculative decoding of a fixed target.

Only the draft runs in the candidate's sandbox. The target model, the decoding loop, its
verification and the clock stay in this process, which never imports draft code
(:mod:`evaluators.speculative.harness`):

1. a training session (:func:`evaluators.speculative.serve_draft.train_server`) builds the
   draft, probes it, distils it on the staged target and training split (the held-out
   tokens are never staged) and saves its weights;
2. the sampled check: one session, speculative sampling driven from here (the trusted side
   samples every token), chi-square against the target's exact distributions;
3. timed passes: for every prompt, target-only decoding timed here, then a fresh session
   (a new process from the warm zygote) that loads the draft's weights and serves the
   trusted loop one round trip per step, timed here too. The k sweep decodes one prompt
   set; every repeat that makes the objective decodes a set of its own, so no prompt is
   decoded twice for the objective and nothing a draft could remember about a prompt pays;
4. the greedy outputs of every pass must be the target's own (they are decoded here, so
   this checks the loop and the device, not the draft).

The timed prompts are disjoint held-out windows chosen with a secret seed that no
candidate sees (``timing_seed`` mixed with a secret kept in the trusted cache), the same for
every candidate of a night (common random numbers). ``correctness`` runs all of this once
per candidate; ``performance`` turns the same record into metrics.

``[evaluator]`` settings (all optional): ``preset`` ("default" | "tiny"), ``cache_dir``,
``prompts``, ``prompt_len``, ``n_new``, ``ks``, ``train_s``, ``max_steps``,
``distill_seqs``, ``distill_prompt_len``, ``distill_gen_len``, ``repeats``, ``sampling_n``,
``sampling_k``, ``temperature``, ``alpha``, ``tie_tol``, ``threads``, ``timing_seed``,
``draft_process`` ("auto" | "prompt" | "pass": a fresh draft process per timed prompt, or
per pass of distinct prompts; "auto" is "pass" on a GPU only).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from evaluators._base import EvalContext, Evaluator, text_beside
from evaluators.speculative import prompts
from evaluators.speculative.checks import (
    cache_divergence,
    chi_square_check,
    first_divergence,
    target_marginals,
)
from evaluators.speculative.decoding import DraftContractError
from evaluators.speculative.distill import shared_data
from evaluators.speculative.engine import StaticDecoder
from evaluators.speculative.harness import (
    BusyDraftError,
    DraftSessions,
    Pass,
    fresh_dir,
    sample_outputs,
    threads,
    timed_pass,
    timed_plain,
)
from evaluators.speculative.model import TargetHead
from evaluators.speculative.remote import RemoteFailure
from evaluators.speculative.results import (
    decode_failure,
    session_failure,
    summarize,
    training_record,
)
from evaluators.speculative.target import PRESETS, TargetBundle, load_or_build
from optimizer.errors import ConfigError
from optimizer.records import CandidateState, EvalResult, Outputs

# 16 timed prompts and 1,024 distillation sequences (2026-11-30, default target, independent
# seed draft, same training seed): timed on 4 prompts it measured 1.41x, on 16 prompts (those
# 4 among them) 1.15x; two trainings on 256 sequences accepted 0.46-0.77 on those 4 prompts;
# on 16 prompts 1,024 sequences raised acceptance from 0.69-0.72 to 0.75-0.79.
DEFAULTS: dict[str, Any] = {
    "preset": "default", "cache_dir": "", "prompts": 16, "prompt_len": 64, "n_new": 96,
    "ks": [1, 2, 3, 4, 5, 6, 8], "train_s": 15.0, "max_steps": 100_000, "distill_seqs": 1024,
    "distill_prompt_len": 32, "distill_gen_len": 64, "repeats": 3, "sampling_n": 200,
    "sampling_k": 3, "temperature": 1.0, "alpha": 1e-3, "tie_tol": 1e-4, "threads": 1,
    "timing_seed": 0, "draft_process": "auto", "channel_spin": "auto",
}
# "prompt": a fresh draft process for every timed prompt; "pass": one per pass of distinct
# prompts (a draft may learn from the earlier prompts of its pass, never see one twice);
# "auto": "prompt" on CPU, "pass" on a GPU, where a process's CUDA context costs about a
# second to create (the design's H200 figure: a warm child took 1.0 s).
DRAFT_PROCESS = ("auto", "prompt", "pass")
# "on": both sides of a draft's channel busy-wait up to SPIN_S for the next message before
# they block (a round trip without two sleeps and wake-ups: 97 -> 15 us for a null request,
# 108 -> 23 us with 1 KB, on 2 busy cores, bench/results/boundary-cost-spin{0,5}.json);
# "auto": on where the machine has SPIN_MIN_CORES (a spinning draft process and the trusted
# decoding each hold a core while they wait; on 2 shared cores they would take what other
# work needs).
CHANNEL_SPIN = ("auto", "on", "off")
SPIN_S = 0.005  # covers a verification pass (2-3 ms on an H200), so the draft's process
SPIN_MIN_CORES = 8  # is spinning when the next request comes
SECRET_ENV = prompts.SECRET_ENV
# A draft step takes milliseconds (0.01-0.3 of a 2 ms target step on 2 CPU cores); a
# request that takes longer than this is a draft that hangs.
STEP_TIMEOUT_S = 20.0
TRAIN_ENTRY = "evaluators.speculative.serve_draft:train_server"
TRAIN_SHARE = 0.75  # of an evaluation's timeout_s that train_s may take at most
DRAFT_ENTRY = "evaluators.speculative.serve_draft:draft_server"


class CacheMismatchError(RuntimeError):
    """The target's cached decoding is not its full forward here: nothing can be judged."""


class _Stop(Exception):
    """A candidate's evaluation ends early with this result."""

    def __init__(self, result: EvalResult):
        super().__init__(result.reason)
        self.result = result


class SpeculativeEvaluator(Evaluator):
    kind = "speculative"
    # The draft's entry too: every timed prompt starts a fresh process, and importing it
    # there (with safetensors) took 0.1 s of a 0.14 s start on 2 loaded cores (2026-12-01).
    preload = ("torch", "safetensors.torch", "evaluators.speculative.serve_draft")
    uses_gpu = True
    model_artifact = "draft"  # a winning draft's weights become a model version

    def __init__(self, target: Any):
        super().__init__(target)
        where = f"{target.rel_path}/target.toml"
        unknown = sorted(set(target.evaluator) - set(DEFAULTS))
        if unknown:
            raise ConfigError(
                f"unknown key for kind 'speculative'; allowed in [evaluator]: "
                f"{', '.join(sorted(DEFAULTS))}",
                file=where,
                key=f"evaluator.{unknown[0]}",
            )
        for key, value in target.evaluator.items():
            default = DEFAULTS[key]
            number = isinstance(default, int | float) and not isinstance(default, bool)
            if number and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise ConfigError(f"must be a number, not {value!r}", file=where,
                                  key=f"evaluator.{key}")
            if isinstance(default, str | list) and not isinstance(value, type(default)):
                raise ConfigError(f"must be a {type(default).__name__}, not {value!r}",
                                  file=where, key=f"evaluator.{key}")
        self.s = {**DEFAULTS, **dict(target.evaluator)}
        if self.s["draft_process"] not in DRAFT_PROCESS:
            raise ConfigError(f"must be one of {', '.join(DRAFT_PROCESS)}, not "
                              f"{self.s['draft_process']!r}", file=where,
                              key="evaluator.draft_process")
        if self.s["channel_spin"] not in CHANNEL_SPIN:
            raise ConfigError(f"must be one of {', '.join(CHANNEL_SPIN)}, not "
                              f"{self.s['channel_spin']!r}", file=where,
                              key="evaluator.channel_spin")
        if self.s["preset"] not in PRESETS:
            raise ConfigError(f"unknown preset {self.s['preset']!r}; known: {sorted(PRESETS)}",
                              file=where, key="evaluator.preset")
        # Training shares the evaluation's wall-clock limit with building the draft, its
        # probe and the target's features: a train_s that leaves less than a quarter of
        # timeout_s times out in every candidate, the seed first (an H100 night of
        # 2026-12-05 lost its EAGLE target so, with train_s = timeout_s = 120).
        if self.s["train_s"] > TRAIN_SHARE * target.timeout_s:
            raise ConfigError(
                f"train_s = {self.s['train_s']:g} leaves too little of timeout_s = "
                f"{target.timeout_s:g} for building, probing and timing the draft; raise "
                f"timeout_s to at least {self.s['train_s'] / TRAIN_SHARE:g} or lower train_s",
                file=where, key="evaluator.train_s")
        self._bundle: TargetBundle | None = None
        self._cache_dir: Path | None = None
        self._models: dict[str, Any] = {}
        self._engines: dict[str, StaticDecoder] = {}
        self._runs: dict[str, dict[str, Any]] = {}
        self._checked: set[tuple[int, ...]] = set()  # prompts whose reference passed

    def prompt_text(self) -> str:
        return text_beside(__file__)

    def outputs(self, result: EvalResult, io_dir: Path) -> Outputs:
        """The distillation loss over training steps, and the draft's weights."""
        curves, files = {}, []
        curve = result.artifacts.get("training_curve.json")
        if curve:
            points = tuple((int(p["step"]), float(p["loss"])) for p in json.loads(curve))
            if points:
                curves["distill_loss"] = points
        draft = result.artifacts.get("draft.json")
        if draft and result.ok:
            weights = json.loads(draft).get("weights") or ""
            if weights:
                files.append((str(weights), self.model_artifact))
        return Outputs(curves=curves, files=tuple(files))

    # -- the target, trained once and cached ---------------------------------------------
    def _use(self, ctx: EvalContext) -> None:
        """Where the trained target is cached: ``cache_dir`` if set, else the context's."""
        if self._cache_dir is None:
            self._cache_dir = Path(self.s["cache_dir"]) if self.s["cache_dir"] else ctx.cache()

    def bundle(self) -> TargetBundle:
        if self._bundle is None:
            cache = self._cache_dir or (Path(self.s["cache_dir"]) if self.s["cache_dir"]
                                        else None)
            self._bundle = load_or_build(self.s["preset"], cache)
            for p in self._bundle.model.parameters():
                p.requires_grad_(False)
        return self._bundle

    def _raw(self, device: str) -> Any:
        """The trusted target on ``device`` (a CUDA copy is made here, in the evaluator's
        process: the sandbox's warm process is a separate one and never sees it)."""
        if device != "cuda" or not torch.cuda.is_available():
            return self.bundle().model
        if "cuda" not in self._models:
            self._models["cuda"] = copy.deepcopy(self.bundle().model).to("cuda").eval()
        return self._models["cuda"]

    def _model(self, device: str) -> StaticDecoder:
        """The trusted decode engine on ``device``: a static KV cache sized for this
        target's prompts, every step shape it decodes captured as a CUDA graph on a GPU
        (:mod:`evaluators.speculative.engine`). Target-only and speculative decoding both
        run on it."""
        raw = self._raw(device)
        key = str(raw.embed.weight.device)
        if key not in self._engines:
            s = self.s
            longest_k = max([int(k) for k in s["ks"]] + [int(s["sampling_k"])])
            need = max(int(s["prompt_len"]) + int(s["n_new"]), prompts.SAMPLE_LEN + 2)
            need = -(-(need + longest_k + 2) // 16) * 16  # attention kernels like 16s
            engine = StaticDecoder(raw, min(need, raw.cfg.max_len))
            engine.capture([*range(1, longest_k + 2), int(s["prompt_len"]),
                            prompts.SAMPLE_LEN])
            engine.calibrate(range(1, longest_k + 2))  # pads a step to a cheaper graph
            self._engines[key] = engine
        return self._engines[key]

    # -- prompts (evaluators/speculative/prompts.py) -----------------------------------
    def _timing_seed(self) -> int:
        cache = self._cache_dir or Path(".optimizer/cache")
        return prompts.timing_seed(prompts.secret(cache), int(self.s["timing_seed"]))

    def _prompt_sets(self, seed: int, n_sets: int) -> list[list[list[int]]]:
        return prompts.prompt_sets(self.bundle().heldout_tokens, int(self.s["prompts"]),
                                   int(self.s["prompt_len"]), int(self.s["n_new"]), seed,
                                   n_sets)

    def _sample_prompt(self, seed: int) -> list[int]:
        return prompts.sample_prompt(self.bundle().heldout_tokens, seed)

    # -- staging -------------------------------------------------------------------------
    def _cached_file(self, name: str, tensors: dict[str, torch.Tensor]) -> Path:
        from safetensors.torch import save_file

        folder = self.bundle().folder
        assert folder is not None
        path = folder / name
        if not path.is_file():
            tmp = path.with_suffix(f".partial-{os.getpid()}")
            save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp))
            os.replace(tmp, path)
        return path

    def _stage_training(self, ctx: EvalContext) -> Path:
        """What a training session reads: the target's weights, the training split and the
        distillation sequences (made from the training split). Never the held-out tokens:
        the timed prompts come from them. The candidate cannot write here."""
        bundle, dest = self.bundle(), fresh_dir(ctx.io_dir, "train")
        assert bundle.folder is not None
        shutil.copyfile(bundle.folder / "meta.json", dest / "meta.json")
        shutil.copyfile(bundle.folder / "target.safetensors", dest / "target.safetensors")
        shutil.copyfile(self._cached_file("train-tokens.safetensors",
                                          {"train": bundle.train_tokens}),
                        dest / "tokens.safetensors")
        shutil.copyfile(self._distill_file(ctx.device), dest / "distill.safetensors")
        return dest

    def _stage_view(self, ctx: EvalContext) -> Path:
        """What a timed session reads: the target's embedding and head, not its blocks."""
        state = self.bundle().model.state_dict()
        src = self._cached_file("head.safetensors", {k: state[k] for k in TargetHead.KEYS})
        dest = fresh_dir(ctx.io_dir, "view") / "head.safetensors"
        shutil.copyfile(src, dest)
        return dest

    def _distill_file(self, device: str) -> Path:
        """Distillation sequences shared by every candidate of this target (generated once,
        next to the cached target; a fixed seed, so candidates differ only in their draft)."""
        s, bundle = self.s, self.bundle()
        assert bundle.folder is not None
        return shared_data(self._raw(device), bundle.train_tokens, bundle.folder,
                           n_seqs=s["distill_seqs"], prompt_len=s["distill_prompt_len"],
                           gen_len=s["distill_gen_len"])

    # -- the draft's sessions --------------------------------------------------------------
    def _per_prompt(self, ctx: EvalContext) -> bool:
        mode = self.s["draft_process"]
        return mode == "prompt" or (mode == "auto" and ctx.device != "cuda")

    def _train(self, ctx: EvalContext, workdir: Path, stage: Path, name: str,
               stage_name: str) -> dict[str, Any]:
        """Build, probe and distil the draft in ``workdir`` in a training session."""
        out = fresh_dir(ctx.io_dir, f"out-{name}")
        s = self.s
        payload = {"target_dir": str(stage), "distill_path": str(stage / "distill.safetensors"),
                   "out_dir": str(out), "weights_name": name, "train_seed": int(s["timing_seed"]),
                   "train_s": float(s["train_s"]), "max_steps": int(s["max_steps"]),
                   "threads": int(s["threads"]), "device": ctx.device}
        session = ctx.session(TRAIN_ENTRY, payload, workdir=workdir, io_dir=ctx.io_dir,
                              timeout_s=ctx.timeout_s, writable=[out])
        try:
            if not session.ok:
                raise _Stop(session_failure(session.error, session.timed_out, stage_name,
                                             ctx.timeout_s))
            reply = session.request({"op": "train"},
                                    timeout_s=max(1.0, ctx.timeout_s - session.ready_s))
            if not reply.ok:
                raise _Stop(session_failure(f"training: {reply.reason}", reply.timed_out,
                                             stage_name, ctx.timeout_s))
        finally:
            session.close()
        try:
            record = training_record(reply.value, out / f"{name}.safetensors")
        except (TypeError, ValueError, KeyError) as exc:
            raise _Stop(EvalResult(CandidateState.FAILED, f"malformed training record: {exc}",
                                   stage_name)) from None
        record["train_s"] = reply.wall_s  # timed here: build, probe, features, fit, training
        return record

    def _sessions(self, ctx: EvalContext, workdir: Path, view: Path, weights: str,
                  deadline: float) -> DraftSessions:
        cfg = self.bundle().model.cfg
        payload = {"config": cfg.to_json(), "view_path": str(view), "weights": weights,
                   "train_seed": int(self.s["timing_seed"]), "threads": 1,
                   "device": ctx.device}
        counter = iter(range(1 << 30))

        def open_session(left: float) -> Any:
            # a fresh writable folder per session: the candidate's folder and the io dir
            # are read-only there, so one prompt's process leaves nothing for the next's
            scratch = fresh_dir(ctx.io_dir / "sessions", str(next(counter)))
            return _LimitedSession(ctx.session(DRAFT_ENTRY, payload, workdir=workdir,
                                               io_dir=ctx.io_dir, timeout_s=left,
                                               writable=[scratch], spin_s=self._spin_s()),
                                   scratch)

        return DraftSessions(open_session, vocab=cfg.vocab, n_layers=cfg.n_layers,
                             deadline=deadline)

    def _spin_s(self) -> float:
        mode = self.s["channel_spin"]
        on = mode == "on" or (mode == "auto" and (os.cpu_count() or 1) >= SPIN_MIN_CORES)
        return SPIN_S if on else 0.0

    # -- checks ------------------------------------------------------------------------
    def _check_greedy(self, model: Any, passes: list[Pass], who: str) -> str:
        for p in passes:
            for ref, out in zip(p.refs, p.outputs, strict=True):
                if len(out) != len(ref):
                    return f"{who}: k={p.k}: {len(out)} tokens for {len(ref)}"
        for p in passes:
            for i, (ref, got) in enumerate(zip(p.refs, p.outputs, strict=True)):
                prompt = p.prompts[i]
                self._check_reference(model, prompt, ref)
                div = first_divergence(model, prompt, got, ref, self.s["tie_tol"])
                if div is not None:
                    pos, tok, want, gap = div
                    return (f"{who}: greedy speculative output diverged from target-only "
                            f"decoding at k={p.k}, prompt {i}, position {pos}: got token {tok}, "
                            f"the target's is {want} (logit gap {gap:.3g})")
        return ""

    def _check_reference(self, model: Any, prompt: torch.Tensor, ref: list[int]) -> None:
        key = (*prompt.tolist(), -1, *ref)
        if key in self._checked:
            return
        div = cache_divergence(model, prompt, ref, self.s["tie_tol"])
        if div is not None:
            raise CacheMismatchError(
                f"the target's KV-cache decoding disagrees with its full forward at position "
                f"{div[0]} (token {div[1]}, full forward {div[2]}, logit gap {div[3]:.3g}): "
                "the attention kernel on this device computes something else with a cache; "
                "no draft can be judged")
        self._checked.add(key)

    def _check_sampling(self, model: Any, sample_prompt: torch.Tensor,
                        samples: list[list[int]]) -> str:
        if len(samples) != self.s["sampling_n"] or any(len(x) != 2 for x in samples):
            return f"sampling: expected {self.s['sampling_n']} samples of 2 tokens"
        p1, p2 = target_marginals(model, sample_prompt, self.s["temperature"])
        for pos, probs in ((0, p1), (1, p2)):
            counts = torch.bincount(torch.tensor([x[pos] for x in samples]),
                                    minlength=len(probs))[: len(probs)]
            ok, stat, thr, df = chi_square_check(counts, probs.cpu(), self.s["alpha"] / 2)
            if not ok:
                return (f"sampled speculative output's distribution at position {pos} differs "
                        f"from the target's: chi-square {stat:.1f} > {thr:.1f} (df {df}, "
                        f"false-alarm rate {self.s['alpha']})")
        return ""

    # -- the evaluation ------------------------------------------------------------------
    def _tensors(self, windows: list[list[int]], device: Any) -> list[torch.Tensor]:
        return [torch.tensor(p, dtype=torch.int64, device=device) for p in windows]

    def _measure(self, cand_dir: Path, ctx: EvalContext,
                 sets: list[list[list[int]]] | None = None) -> dict[str, Any]:
        """Train, check sampling, sweep k on ``sets[0]`` and measure the best k once on each
        further set (default: the night's secret sets, ``1 + repeats`` of them)."""
        s = self.s
        model = self._model(ctx.device)
        dev = model.embed.weight.device
        if sets is None:
            sets = self._prompt_sets(self._timing_seed(), 1 + int(s["repeats"]))
        per_prompt = self._per_prompt(ctx)
        stage = self._stage_training(ctx)
        try:
            rec = self._train(ctx, cand_dir, stage, "draft", "correctness")
        finally:
            shutil.rmtree(stage, ignore_errors=True)  # nothing of the target's body stays
        view = self._stage_view(ctx)
        start = time.perf_counter()
        sessions = self._sessions(ctx, cand_dir, view, rec["weights"], start + ctx.timeout_s)
        with threads(1), torch.no_grad():
            try:
                samples: list[list[int]] = []
                sample_prompt = torch.tensor(self._sample_prompt(ctx.seed), device=dev)
                if s["sampling_n"]:
                    samples = sample_outputs(model, sessions, sample_prompt,
                                             n=int(s["sampling_n"]), n_new=2,
                                             k=int(s["sampling_k"]),
                                             temperature=float(s["temperature"]),
                                             seed=ctx.seed % (2**31) + 1)
                    reason = self._check_sampling(model, sample_prompt, samples)
                    if reason:
                        raise _Stop(EvalResult(CandidateState.INVALID, reason, "correctness"))
                timed_plain(model, self._tensors(sets[0][:1], dev)[0], 8)  # warm-up
                sweep_prompts = self._tensors(sets[0], dev)
                sweep: dict[int, Pass] = {}
                first: Pass | None = None
                for k in s["ks"]:
                    # target-only decoding timed once per sweep prompt (the choice of k
                    # compares speculative times): 3 passes fewer, 10 s of a 50 s n-gram
                    # candidate on 2 cores (2026-12-01)
                    (sweep[int(k)],) = timed_pass(model, sweep_prompts, int(s["n_new"]),
                                                  [(sessions, int(k))], per_prompt, first)
                    first = first or sweep[int(k)]
                # Best k chosen on the sweep, then measured on prompts of its own: the
                # sweep's maximum alone would be biased upward by the choice.
                best = max(sweep, key=lambda k: sweep[k].speedup)
                repeats = []
                for chosen in sets[1:]:
                    (p,) = timed_pass(model, self._tensors(chosen, dev), int(s["n_new"]),
                                      [(sessions, best)], per_prompt)
                    repeats.append(p)
            except (RemoteFailure, DraftContractError, BusyDraftError) as exc:
                raise _Stop(decode_failure(exc, "correctness", ctx.timeout_s)) from None
        return {"train": rec, "sweep": sweep, "best_k": best, "repeats": repeats,
                "samples": samples, "start_s": sessions.start_s, "close_s": sessions.close_s,
                "rtt_s": sessions.rtt_s,
                "decode_s": time.perf_counter() - start, "sample_prompt": sample_prompt,
                "engine": model.describe()}

    def _run(self, cand_dir: Path, ctx: EvalContext) -> tuple[EvalResult | None, dict]:
        self._use(ctx)
        src = (cand_dir / "draft.py").read_bytes()
        key = f"{cand_dir}:{hashlib.sha256(src).hexdigest()}:{ctx.seed}"
        if key not in self._runs:
            try:
                self._runs = {key: {"resp": self._measure(cand_dir, ctx)}}
            except _Stop as stop:
                self._runs = {key: {"failed": stop.result}}
        run = self._runs[key]  # only the latest: a record holds every output
        return run.get("failed"), run.get("resp", {})

    def correctness(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        failed, resp = self._run(cand_dir, ctx)
        if failed is not None:
            return failed
        model = self._model(ctx.device)
        passes = [*resp["sweep"].values(), *resp["repeats"]]
        try:
            reason = self._check_greedy(model, passes, "draft")
        except CacheMismatchError as exc:  # the device's fault, not the candidate's
            return EvalResult(CandidateState.FAILED, str(exc), "correctness")
        if reason:
            return EvalResult(CandidateState.INVALID, reason, "correctness")
        n_prompts = sum(len(p.refs) for p in passes)
        report = (f"greedy: {n_prompts} timed decodes ({len(resp['sweep'])} values of k on "
                  f"{len(resp['sweep'][resp['best_k']].refs)} prompts, then "
                  f"{len(resp['repeats'])} fresh prompt sets at k={resp['best_k']}), each by "
                  f"a fresh draft process, identical to target-only decoding (ties within "
                  f"{self.s['tie_tol']} allowed)\n")
        if self.s["sampling_n"]:
            report += (f"sampling: {len(resp['samples'])} samples, chi-square at positions "
                       f"1-2 passed (alpha {self.s['alpha']})\n")
        return EvalResult(CandidateState.VALID, "", "correctness",
                          artifacts={"validation.txt": report})

    def performance(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        failed, resp = self._run(cand_dir, ctx)
        if failed is not None:
            return failed
        return EvalResult(CandidateState.VALID, "", "performance", **summarize(resp, self.s))

    def compare(self, cand_dir: Path, base_dir: Path, ctx: EvalContext,
                repeats: int) -> EvalResult:
        """Candidate and baseline trained once each, swept over k on one prompt set, then
        measured ``repeats`` times, each time on a fresh prompt set that both decode (every
        prompt: target-only decoding once, then both drafts in alternating order, each in
        a fresh process); the samples are speedups."""
        self._use(ctx)
        s = self.s
        model = self._model(ctx.device)
        dev = model.embed.weight.device
        sets = self._prompt_sets(ctx.seed, 1 + repeats)
        per_prompt = self._per_prompt(ctx)
        base_copy = fresh_dir(ctx.io_dir, "baseline")  # under the sandbox's root, like cand
        shutil.copyfile(base_dir / "draft.py", base_copy / "draft.py")
        folders = {"candidate": cand_dir, "baseline": base_copy}
        try:
            stage = self._stage_training(ctx)
            try:
                recs = {who: self._train(ctx, folder, stage, f"draft_{who}", "compare")
                        for who, folder in folders.items()}
            finally:
                shutil.rmtree(stage, ignore_errors=True)
            view = self._stage_view(ctx)
            deadline = time.perf_counter() + ctx.timeout_s
            sessions = {who: self._sessions(ctx, folder, view, recs[who]["weights"], deadline)
                        for who, folder in folders.items()}
            order = ("baseline", "candidate")
            passes: list[Pass] = []
            with threads(1), torch.no_grad():
                try:
                    sweep_prompts = self._tensors(sets[0], dev)
                    timed_plain(model, sweep_prompts[0], 8)
                    best: dict[str, int] = {}
                    scores: dict[str, dict[int, float]] = {who: {} for who in order}
                    first: Pass | None = None
                    for k in s["ks"]:
                        got = timed_pass(model, sweep_prompts, int(s["n_new"]),
                                         [(sessions[who], int(k)) for who in order],
                                         per_prompt, first)
                        first = first or got[0]
                        for who, p in zip(order, got, strict=True):
                            scores[who][int(k)] = p.speedup
                            passes.append(p)
                    for who in order:
                        best[who] = max(scores[who], key=scores[who].__getitem__)
                    samples: dict[str, list[float]] = {who: [] for who in order}
                    for chosen in sets[1:]:
                        got = timed_pass(model, self._tensors(chosen, dev), int(s["n_new"]),
                                         [(sessions[who], best[who]) for who in order],
                                         per_prompt)
                        for who, p in zip(order, got, strict=True):
                            samples[who].append(p.speedup)
                            passes.append(p)
                except (RemoteFailure, DraftContractError, BusyDraftError) as exc:
                    raise _Stop(decode_failure(exc, "compare", ctx.timeout_s)) from None
            try:
                reason = self._check_greedy(model, passes, "compare")
            except CacheMismatchError as exc:
                return EvalResult(CandidateState.FAILED, str(exc), "compare")
            if reason:
                return EvalResult(CandidateState.INVALID, reason, "compare")
        except _Stop as stop:
            return stop.result
        return EvalResult(CandidateState.VALID, "", "compare",
                          samples={k: tuple(v) for k, v in samples.items()},
                          metrics={"best_k_candidate": best["candidate"],
                                   "best_k_baseline": best["baseline"]})


class _LimitedSession:
    """A session whose every request is bounded by :data:`STEP_TIMEOUT_S` as well, and
    whose writable folder goes when it closes."""

    def __init__(self, session: Any, scratch: Path):
        self._s = session
        self._scratch = scratch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._s, name)

    def request(self, message: dict[str, Any], *, timeout_s: float) -> Any:
        return self._s.request(message, timeout_s=min(timeout_s, STEP_TIMEOUT_S))

    def close(self) -> Any:
        try:
            return self._s.close()
        finally:
            shutil.rmtree(self._scratch, ignore_errors=True)
