"""The ``speculative`` kind: a draft model for speculative decoding of a fixed target.

One sandboxed call per candidate (:func:`evaluators.speculative.child.run_draft`) distils
the draft within its budget, decodes the prompts this side chose (fresh held-out windows
per evaluation) and times plain against speculative decoding; ``correctness`` makes the
call and checks it, ``performance`` turns the same response into metrics, so the draft
is trained once. The verdicts stay here: greedy outputs are compared with target-only
decoding computed in this process, sampled outputs are tested against the target's exact
token distributions, and the child's timings must fit inside the sandbox's wall clock.

``[evaluator]`` settings (all optional): ``preset`` ("default" | "tiny"), ``cache_dir``,
``prompts``, ``prompt_len``, ``n_new``, ``ks``, ``train_s``, ``max_steps``,
``distill_seqs``, ``distill_prompt_len``, ``distill_gen_len``, ``repeats``, ``sampling_n``,
``sampling_k``, ``temperature``, ``alpha``, ``tie_tol``, ``threads``, ``timing_seed`` (the
held-out prompts timed and checked, and the draft's initialisation, for every candidate of
a target).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import statistics
from pathlib import Path
from typing import Any

import torch

from evaluators._base import EvalContext, Evaluator, result_from_call, text_beside
from evaluators.speculative.checks import (
    cache_divergence,
    chi_square_check,
    expected_speedup,
    first_divergence,
    target_marginals,
)
from evaluators.speculative.decoding import plain_decode
from evaluators.speculative.distill import shared_data
from evaluators.speculative.target import PRESETS, TargetBundle, load_or_build
from optimizer.errors import ConfigError
from optimizer.records import CandidateState, EvalResult, Outputs

# 16 timed prompts and 1,024 distillation sequences (2026-11-30, default target, independent
# seed draft, same training seed): timed on 4 prompts it measured 1.41x, on 16 prompts (those
# 4 among them) 1.15x; two trainings on 256 sequences accepted 0.46-0.77 on those 4 prompts;
# on 16 prompts 1,024 sequences raised acceptance from 0.69-0.72 to 0.75-0.79. Generating
# 1,024 sequences takes 10 s once per target; timing 16 prompts adds about 6 s a candidate.
DEFAULTS: dict[str, Any] = {
    "preset": "default", "cache_dir": "", "prompts": 16, "prompt_len": 64, "n_new": 96,
    "ks": [1, 2, 3, 4, 5, 6, 8], "train_s": 15.0, "max_steps": 100_000, "distill_seqs": 1024,
    "distill_prompt_len": 32, "distill_gen_len": 64, "repeats": 3, "sampling_n": 200,
    "sampling_k": 3, "temperature": 1.0, "alpha": 1e-3, "tie_tol": 1e-4, "threads": 1,
    "timing_seed": 0,
}


class CacheMismatchError(RuntimeError):
    """The target's cached decoding is not its full forward here: nothing can be judged."""


class SpeculativeEvaluator(Evaluator):
    kind = "speculative"
    preload = ("torch",)
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
        if self.s["preset"] not in PRESETS:
            raise ConfigError(f"unknown preset {self.s['preset']!r}; known: {sorted(PRESETS)}",
                              file=where, key="evaluator.preset")
        self._bundle: TargetBundle | None = None
        self._cache_dir: Path | None = None
        self._runs: dict[str, tuple[dict[str, Any], float]] = {}
        self._refs: dict[str, list[list[int]]] = {}

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

    def _prompts(self, seed: int) -> tuple[list[list[int]], list[int]]:
        held = self.bundle().heldout_tokens
        gen = torch.Generator().manual_seed(seed)
        n, plen = self.s["prompts"], self.s["prompt_len"]
        starts = torch.randint(0, len(held) - plen, (n + 1,), generator=gen).tolist()
        prompts = [held[s : s + plen].tolist() for s in starts[:n]]
        return prompts, held[starts[n] : starts[n] + 32].tolist()

    def _reference(self, prompts: list[list[int]]) -> list[list[int]]:
        key = hashlib.sha256(json.dumps(prompts).encode()).hexdigest()
        if key not in self._refs:
            model = self.bundle().model
            refs = [plain_decode(model, torch.tensor(p), self.s["n_new"]) for p in prompts]
            for i, (p, ref) in enumerate(zip(prompts, refs, strict=True)):
                div = cache_divergence(model, torch.tensor(p), ref, self.s["tie_tol"])
                if div is not None:
                    raise CacheMismatchError(
                        f"the target's KV-cache decoding disagrees with its full forward on "
                        f"prompt {i} at position {div[0]} (token {div[1]}, full forward "
                        f"{div[2]}, logit gap {div[3]:.3g}): the attention kernel on this "
                        "device computes something else with a cache; no draft can be judged")
            self._refs[key] = refs
        return self._refs[key]

    def _stage_target(self, ctx: EvalContext) -> Path:
        """Copy the cached target into the io dir, fresh for every call.

        The sandbox hides the state dir (where the cache lives) and /tmp from the child;
        the io dir is what it sees. A fresh copy each time (about 10 MB, milliseconds)
        means a candidate that overwrote its copy cannot affect the next one.
        """
        dest = ctx.io_dir / "target"
        dest.mkdir(parents=True, exist_ok=True)
        src = self.bundle().folder
        assert src is not None
        for name in ("meta.json", "tokenizer.json", "target.safetensors", "tokens.safetensors"):
            shutil.copyfile(src / name, dest / name)
        shutil.copyfile(self._distill_file(), dest / "distill.safetensors")
        return dest

    def _distill_file(self) -> Path:
        """Distillation sequences shared by every candidate of this target (generated once,
        next to the cached target; a fixed seed, so candidates differ only in their draft)."""
        s, bundle = self.s, self.bundle()
        assert bundle.folder is not None
        return shared_data(bundle.model, bundle.train_tokens, bundle.folder,
                           n_seqs=s["distill_seqs"], prompt_len=s["distill_prompt_len"],
                           gen_len=s["distill_gen_len"])

    def _payload(self, ctx: EvalContext, prompts: list[list[int]], sample_prompt: list[int],
                 **extra: Any) -> dict[str, Any]:
        s = self.s
        target_dir = self._stage_target(ctx)
        return {
            "target_dir": str(target_dir), "distill_path": str(target_dir / "distill.safetensors"),
            "prompts": prompts,
            "n_new": s["n_new"],
            "ks": list(s["ks"]), "repeats": s["repeats"], "seed": ctx.seed % (2**31),
            "train_s": float(s["train_s"]), "max_steps": int(s["max_steps"]),
            "distill_seqs": s["distill_seqs"], "distill_prompt_len": s["distill_prompt_len"],
            "distill_gen_len": s["distill_gen_len"], "threads": s["threads"],
            "sampling": {"prompt": sample_prompt, "n": s["sampling_n"], "n_new": 2,
                         "k": s["sampling_k"], "temperature": s["temperature"]}
            if s["sampling_n"] else None,
            **extra,
        }

    # -- checks ------------------------------------------------------------------------
    def _check_greedy(self, prompts, outputs: dict[str, list[list[int]]], who: str) -> str:
        refs = self._reference(prompts)
        model = self.bundle().model
        for k, outs in outputs.items():
            if len(outs) != len(prompts):
                return f"{who}: k={k}: {len(outs)} outputs for {len(prompts)} prompts"
            for i, (got, ref) in enumerate(zip(outs, refs, strict=True)):
                div = first_divergence(model, torch.tensor(prompts[i]), [int(t) for t in got],
                                       ref, self.s["tie_tol"])
                if div is not None:
                    pos, tok, want, gap = div
                    return (f"{who}: greedy speculative output diverged from target-only "
                            f"decoding at k={k}, prompt {i}, position {pos}: got token {tok}, "
                            f"the target's is {want} (logit gap {gap:.3g})")
        return ""

    def _check_sampling(self, sample_prompt: list[int], samples: list[list[int]]) -> str:
        if not self.s["sampling_n"]:
            return ""
        if len(samples) != self.s["sampling_n"] or any(len(x) != 2 for x in samples):
            return f"sampling: expected {self.s['sampling_n']} samples of 2 tokens"
        p1, p2 = target_marginals(self.bundle().model, torch.tensor(sample_prompt),
                                  self.s["temperature"])
        for pos, probs in ((0, p1), (1, p2)):
            counts = torch.bincount(torch.tensor([x[pos] for x in samples]),
                                    minlength=len(probs))[: len(probs)]
            ok, stat, thr, df = chi_square_check(counts, probs, self.s["alpha"] / 2)
            if not ok:
                return (f"sampled speculative output's distribution at position {pos} differs "
                        f"from the target's: chi-square {stat:.1f} > {thr:.1f} (df {df}, "
                        f"false-alarm rate {self.s['alpha']})")
        return ""

    # -- stages --------------------------------------------------------------------------
    def _run(self, cand_dir: Path, ctx: EvalContext) -> tuple[EvalResult | None, dict, float]:
        self._use(ctx)
        src = (cand_dir / "draft.py").read_bytes()
        key = f"{cand_dir}:{hashlib.sha256(src).hexdigest()}:{ctx.seed}"
        if key in self._runs:
            resp, wall = self._runs[key]
            return None, resp, wall
        # Timed prompts and the draft's initialisation are the same for every candidate
        # (common random numbers): with fresh ones, the seed draft's mean accepted length
        # moved between 3.9 and 7.5 from one draw of 4 prompts to the next, and by 2.8-3.3
        # between training seeds on the same prompts (2 cores, 2026-11-29), which buried the
        # knobs' effects. The sampled check and the winners' compare stay fresh.
        fixed = int(self.s["timing_seed"])
        prompts, _ = self._prompts(fixed)
        _, sample_prompt = self._prompts(ctx.seed)
        call = ctx.run("evaluators.speculative.child:run_draft",
                       self._payload(ctx, prompts, sample_prompt, train_seed=fixed),
                       workdir=cand_dir)
        failed = result_from_call(call, "correctness")
        if failed is not None:
            return failed, {}, call.wall_s
        resp = {**call.response, "_prompts": prompts, "_sample_prompt": sample_prompt}
        self._runs = {key: (resp, call.wall_s)}  # only the latest: responses are large
        return None, resp, call.wall_s

    def correctness(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        failed, resp, wall = self._run(cand_dir, ctx)
        if failed is not None:
            return failed
        try:
            reason = self._check_greedy(resp["_prompts"], resp["outputs"], "draft")
        except CacheMismatchError as exc:  # the device's fault, not the candidate's
            return EvalResult(CandidateState.FAILED, str(exc), "correctness")
        reason = reason or self._check_sampling(resp["_sample_prompt"], resp["samples"])
        if reason:
            return EvalResult(CandidateState.INVALID, reason, "correctness")
        timed = resp["plain_s"] + sum(resp["plain_repeats"]) + sum(resp["spec_repeats"]) + sum(
            st["total_s"] for st in resp["stats"].values()) + resp["train_s"]
        if timed > wall or resp.get("child_s", 0) > wall:
            return EvalResult(CandidateState.REJECTED,
                              f"implausible timing: the child reports {timed:.2f} s of work in a "
                              f"call that took {wall:.2f} s of wall clock", "correctness")
        n = len(resp["outputs"])
        report = (f"greedy: {len(resp['_prompts'])} held-out prompts x {n} values of k, "
                  f"identical to target-only decoding (ties within {self.s['tie_tol']} allowed)"
                  f"\nsampling: {len(resp['samples'])} samples, chi-square at positions 1-2 "
                  f"passed (alpha {self.s['alpha']})\n")
        return EvalResult(CandidateState.VALID, "", "correctness",
                          artifacts={"validation.txt": report})

    def performance(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        failed, resp, _ = self._run(cand_dir, ctx)
        if failed is not None:
            return failed
        return EvalResult(CandidateState.VALID, "", "performance", **summarize(resp, self.s))

    def compare(self, cand_dir: Path, base_dir: Path, ctx: EvalContext,
                repeats: int) -> EvalResult:
        self._use(ctx)
        prompts, sample_prompt = self._prompts(ctx.seed)
        base_copy = ctx.io_dir / "baseline"  # the child sees the io dir, maybe not base_dir
        base_copy.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(base_dir / "draft.py", base_copy / "draft.py")
        payload = self._payload(ctx, prompts, sample_prompt, base_dir=str(base_copy))
        payload["repeats"] = repeats
        call = ctx.run("evaluators.speculative.child:compare_drafts", payload, workdir=cand_dir)
        failed = result_from_call(call, "compare")
        if failed is not None:
            return failed
        resp = call.response
        for who in ("candidate", "baseline"):
            out = {str(resp["best_k"][who]): resp["outputs"][who]}
            try:
                reason = self._check_greedy(prompts, out, who)
            except CacheMismatchError as exc:
                return EvalResult(CandidateState.FAILED, str(exc), "compare")
            if reason:
                return EvalResult(CandidateState.INVALID, reason, "compare")
        return EvalResult(CandidateState.VALID, "", "compare",
                          samples={k: tuple(v) for k, v in resp["speedups"].items()})


def summarize(resp: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    """Metrics, objective, samples and artifacts of a ``run_draft`` response."""
    stats = {int(k): v for k, v in resp["stats"].items()}
    n_tokens = len(resp["_prompts"]) * s["n_new"]
    step_s = resp["plain_s"] / n_tokens
    speedups = [p / q for p, q in zip(resp["plain_repeats"], resp["spec_repeats"], strict=True)]
    best = int(resp["best_k"])
    metrics: dict[str, float] = {"speedup": statistics.median(speedups), "best_k": best}
    for k, st in stats.items():
        metrics[f"mean_accepted_len_k{k}"] = st["tokens"] / max(1, st["target_steps"])
        metrics[f"speedup_sweep_k{k}"] = resp["plain_s"] / st["total_s"]
    st = stats[best]
    alpha = sum(st["accepted"]) / max(1, sum(st["reached"]))
    cost = (st["draft_s"] / max(1, st["drafted"])) / step_s if st["drafted"] else 0.0
    metrics.update({
        "mean_accepted_len": metrics[f"mean_accepted_len_k{best}"],
        "acceptance_rate": alpha,
        "cost_ratio": cost,
        "expected_speedup": expected_speedup(alpha, best, cost),
        "tokens_per_s_plain": n_tokens / statistics.median(resp["plain_repeats"]),
        "tokens_per_s_spec": n_tokens / statistics.median(resp["spec_repeats"]),
        "train_s": resp["train_s"],
        "train_steps": resp["curve"][-1]["step"] if resp["curve"] else 0,
        "final_train_loss": resp["curve"][-1]["loss"] if resp["curve"] else 0.0,
    })
    for i, (a, r) in enumerate(zip(st["accepted"], st["reached"], strict=True)):
        metrics[f"accept_pos{i + 1}"] = a / r if r else 0.0
    artifacts = {
        "training_curve.json": json.dumps(resp["curve"]),
        "draft.json": json.dumps({"weights": resp["weights"], "format": "safetensors",
                                  "best_k": best}),
    }
    return {"metrics": metrics, "objectives": (metrics["speedup"],),
            "samples": {"speedup": tuple(speedups)}, "artifacts": artifacts}
