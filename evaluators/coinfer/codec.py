"""The ``coinfer`` kind, ``codec`` mode: a codec for the hidden state that crosses a model
split between two machines, measured on the project's own trained language model.

The candidate's ``codec.py`` gives ``encode(hidden, meta) -> bytes`` and
``decode(payload, meta) -> array``. The trusted side (this process):

1. loads the speculative family's target model (the same cache and key as the speculative
   targets: :mod:`evaluators.coinfer.splitlm`) and draws prompts from its held-out tokens
   (never shown to a candidate) with a secret kept in the trusted cache;
2. runs the model to the cut (after ``layer`` blocks) and sends the states, ``[T, D]``
   float32, to ``encode`` in one sandboxed session; the bytes go, as they are, to ``decode``
   in another session (a separate process and folder: the two share nothing but the
   payload); the back half finishes the forward pass from the decoded tensor;
3. then decodes a greedy continuation of ``n_new`` tokens through the cut, one state per
   step (the back half's KV cache holds decoded states only).

``meta`` is ``{"layer", "d_model", "tokens", "start", "stream"}``: the cut, the width, the
rows of this call, the position of its first row and which prompt it continues (a codec may
keep state per stream, as a delta coder does). Token ids never cross.

Verdict: REJECTED for a codec file over ``max_source_bytes`` (no room for a copy of the
weights); INVALID for a payload that is not bytes or exceeds ``max_bytes_per_token``, a
decoded tensor of the wrong shape or not finite, a decoder that spent more CPU than its
budget (:mod:`evaluators.coinfer.cputime`: a share of what the layers before the cut cost,
so recovering the tokens and recomputing them does not fit), or a quality gate missed
(``max_kl_mean``, ``max_kl_p99``, ``min_top1``, ``min_greedy``;
:mod:`evaluators.coinfer.quality`). The weights live in the trusted cache, which the sandbox
hides from both sessions. The objective is ``bytes_per_token``: payload bytes over the rows
sent (prefill and continuation alike). ``held_out`` repeats the measurement on prompts from
the other half of the held-out tokens.

``mode = "kv"`` (:mod:`evaluators.coinfer.kv`) measures a codec for the KV cache of the
blocks before the cut instead, with the same sessions, checks, clocks and verdict; ``mode =
"states"``, the default, is the hidden-state codec above.
"""

from __future__ import annotations

import hashlib
import os
import random
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from evaluators._base import EvalContext, Evaluator, text_beside, valid_from_metrics
from evaluators.coinfer import kv
from evaluators.coinfer.cputime import SessionClock, budget_s
from evaluators.coinfer.quality import Tally
from evaluators.coinfer.splitlm import Split, greedy_reference
from evaluators.speculative.target import PRESETS, TargetBundle, load_or_build
from optimizer.errors import ConfigError
from optimizer.records import CandidateState, EvalResult

SERVE = "optimizer.sandbox.serve:functions"
# The gates, on the default target cut after layer 4, 32 prompts of 96 tokens (2 cores,
# 2026-12-05): bf16 KL 2e-7, top-1 0.999 (near-ties flip even there); int8 per token 7e-6,
# 0.993, greedy 0.97; 6 bits 1.3e-4, 0.980, 0.92; 5 bits 5.2e-4, 0.963, 0.89; int4 per token
# 2.4e-3, 0.919, 0.86. Top-1 is the gate that binds: the model's next-token distributions
# are flat (loss 4.45 nats), so a small KL already flips near-ties.
# The kv mode keeps these gates (the same cut, prompts and 16 continuation tokens, 2026-12-06,
# bench/results/coinfer-kv-codecs-2026-12-06.json): int8 per token KL 7e-7, top-1 1.0, greedy
# 1.0; 5 bits a value per token 6.4e-5, 0.994, 0.94; KIVI-style 4 bits 7.4e-5, 0.988, 0.88 pass.
# int4 per token 2.6e-4, 0.982, 0.82; 3 bits 1.5e-3, 0.979, 0.80; KIVI-style 2 bits 3.2e-3,
# 0.961, 0.68 miss the greedy gate, which binds here (the prompt's own distributions are
# exact in this mode, so KL and top-1 are read only where the front cache matters, on the
# continuation); 2 bits (KL 0.053, p99 0.36) and a decoder of zeros (0.24, p99 2.6, top-1
# 0.79, greedy 0.29) miss the KL gates too.
DEFAULTS: dict[str, Any] = {
    "mode": "states", "preset": "default", "cache_dir": "", "layer": 4, "prompts": 32,
    "prompt_len": 96, "n_new": 16, "max_kl_mean": 0.005, "max_kl_p99": 0.05, "min_top1": 0.95,
    "min_greedy": 0.85, "decode_cpu_share": 0.25, "max_bytes_per_token": 0,
    "max_source_bytes": 65536, "call_timeout_s": 10.0,
}
# The sessions' requests and the trusted forward passes run torch on one thread: on 2
# shared cores two threads stall on a busy neighbour (evaluators/speculative/harness.py).
THREADS = 1
MODES = ("states", "kv")


class _Stopped(Exception):
    def __init__(self, state: CandidateState, reason: str):
        super().__init__(reason)
        self.state, self.reason = state, reason


def _check_settings(target: Any) -> dict[str, Any]:
    where = f"{target.rel_path}/target.toml"
    unknown = sorted(set(target.evaluator) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"unknown key for kind 'coinfer'; allowed in [evaluator]: "
                          f"{', '.join(sorted(DEFAULTS))}", file=where,
                          key=f"evaluator.{unknown[0]}")
    for key, value in target.evaluator.items():
        default = DEFAULTS[key]
        if isinstance(default, str):
            ok = isinstance(value, str)
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok:
            raise ConfigError(f"must be a {type(default).__name__}, not {value!r}",
                              file=where, key=f"evaluator.{key}")
    mode = target.evaluator.get("mode", DEFAULTS["mode"])
    if mode not in MODES:
        raise ConfigError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)}", file=where,
                          key="evaluator.mode")
    s = {**DEFAULTS, **dict(target.evaluator)}
    if s["preset"] not in PRESETS:
        raise ConfigError(f"unknown preset {s['preset']!r}; known: {sorted(PRESETS)}",
                          file=where, key="evaluator.preset")
    layers = PRESETS[s["preset"]].n_layers
    if not 0 < int(s["layer"]) < layers:
        raise ConfigError(f"the cut must lie between blocks: 0 < layer < {layers}",
                          file=where, key="evaluator.layer")
    for key in ("prompts", "prompt_len", "n_new"):
        if int(s[key]) < 1:
            raise ConfigError("must be at least 1", file=where, key=f"evaluator.{key}")
    return s


class CodecEvaluator(Evaluator):
    kind = "coinfer"
    preload = ("numpy", "torch")
    # per-evaluation state lives in locals; the model is loaded once under a lock
    concurrent_evaluations = True

    def __init__(self, target: Any):
        super().__init__(target)
        self.s = _check_settings(target)
        self.codec_file = target.editable[0]
        self._lock = threading.Lock()
        self._bundle: TargetBundle | None = None
        self._results: dict[tuple[str, int], EvalResult] = {}

    def prompt_text(self) -> str:
        return text_beside(__file__, "prompt_kv.txt" if self.s["mode"] == "kv" else "prompt.txt")

    # -- the model, trained once and cached (the speculative family's target) -------------
    def trusted_cache(self, ctx: EvalContext) -> Path:
        """Where the model and the prompts' secret live: ``cache_dir`` if set, else the
        workspace's trusted cache (hidden from every sandbox)."""
        return Path(self.s["cache_dir"]) if self.s["cache_dir"] else ctx.cache()

    def bundle(self, ctx: EvalContext) -> TargetBundle:
        with self._lock:
            if self._bundle is None:
                self._bundle = load_or_build(self.s["preset"], self.trusted_cache(ctx))
            return self._bundle

    def values_per_token(self) -> int:
        """Values that cross per token: the state's width, or in the kv mode the front
        blocks' keys and values."""
        d_model = PRESETS[self.s["preset"]].d_model
        if self.s["mode"] == "kv":
            return kv.values_per_token(int(self.s["layer"]), d_model)
        return d_model

    def bf16_bytes_per_token(self) -> int:
        return 2 * self.values_per_token()

    def size_cap(self) -> int:
        """Payload bytes per token at most: the float32 tensor's own size by default."""
        cap = int(self.s["max_bytes_per_token"])
        return cap if cap > 0 else 4 * self.values_per_token()

    # -- stage 1 --------------------------------------------------------------------------
    def static_check(self, cand_dir: Path) -> EvalResult:
        res = super().static_check(cand_dir)
        if not res.ok:
            return res
        cap = int(self.s["max_source_bytes"])
        for rel in self.target.editable:
            size = (cand_dir / rel).stat().st_size
            if size > cap:
                return EvalResult(CandidateState.REJECTED,
                                  f"{rel} is {size:,} bytes, over the {cap:,}-byte cap on a "
                                  "codec's source (no room for tables as large as the "
                                  "model's weights)", "static")
        return res

    # -- the prompts ----------------------------------------------------------------------
    def secret(self, ctx: EvalContext) -> str:
        """A random secret kept in the trusted cache beside the model (made once): the
        prompts are the same for every candidate of the cache's nights (common random
        numbers, and a program evaluated again repeats its figures bit for bit) and no
        candidate can know them. A test pins its prompts by writing this file first."""
        path = self.trusted_cache(ctx) / "coinfer" / "secret"
        with self._lock:
            if not path.is_file():
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f".secret-{os.getpid()}")
                tmp.write_text(secrets.token_hex(16))
                os.replace(tmp, path)
            return path.read_text().strip()

    def prompts(self, bundle: TargetBundle, secret: str, which: str) -> list[torch.Tensor]:
        """Disjoint windows of the held-out tokens (which no candidate sees), drawn with the
        cache's secret: the first half of the held-out tokens for the search, the second for
        ``held_out``."""
        seed = int.from_bytes(hashlib.sha256(f"{secret}/{which}".encode()).digest()[:8], "big")
        tokens = bundle.heldout_tokens
        half = len(tokens) // 2
        lo, hi = (0, half) if which == "train" else (half, len(tokens))
        n, length = int(self.s["prompts"]), int(self.s["prompt_len"])
        slots = (hi - lo) // length
        if slots < n:
            raise ValueError(f"{n} prompts of {length} tokens do not fit the held-out tokens")
        chosen = random.Random(seed).sample(range(slots), n)
        return [tokens[lo + k * length : lo + (k + 1) * length].clone() for k in chosen]

    # -- the sessions ---------------------------------------------------------------------
    @contextmanager
    def _session(self, cand_dir: Path, ctx: EvalContext, fn: str) -> Iterator[Any]:
        """A session serving ``fn`` of the codec in a folder of its own."""
        ctx.io_dir.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=f"codec-{fn}-", dir=ctx.io_dir))
        try:
            workdir, io = folder / "codec", folder / "io"
            io.mkdir(parents=True)
            for rel in self.target.editable:
                dest = workdir / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(cand_dir / rel, dest)
            # writable nowhere: a file one side leaves is a channel the other could read
            session = ctx.session(SERVE, {"module": self.codec_file, "functions": [fn]},
                                  workdir=workdir, io_dir=io, writable=(),
                                  timeout_s=ctx.timeout_s + 10.0,
                                  ready_timeout_s=ctx.timeout_s)
            try:
                if not session.ok:
                    state = (CandidateState.TIMEOUT if session.timed_out
                             else CandidateState.FAILED)
                    raise _Stopped(state, session.error or f"the {fn} session did not start")
                yield session
            finally:
                session.close()
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _call(self, session: Any, fn: str, args: list[Any]) -> Any:
        reply = session.request({"op": "call", "fn": fn, "args": args},
                                timeout_s=float(self.s["call_timeout_s"]))
        if reply.timed_out:
            raise _Stopped(CandidateState.TIMEOUT, f"{fn}(): {reply.reason}")
        if not reply.ok:
            raise _Stopped(CandidateState.FAILED, f"{fn}(): {reply.reason}")
        return reply.value

    # -- one pass through the cut ---------------------------------------------------------
    def _through(self, enc: Any, dec: Any, array: np.ndarray, meta: dict[str, Any],
                 sizes: list[int]) -> np.ndarray:
        """``array`` (``meta["tokens"]`` tokens of it) encoded in one session and decoded in
        the other; the payload's size goes to ``sizes``."""
        payload = self._call(enc, "encode", [array, meta])
        if not isinstance(payload, bytes):
            raise _Stopped(CandidateState.INVALID, f"encode() returned "
                           f"{type(payload).__name__}, not bytes")
        rows = int(meta["tokens"])
        if len(payload) > self.size_cap() * rows:
            raise _Stopped(CandidateState.INVALID,
                           f"encode() gave {len(payload):,} bytes for {rows} tokens, over the "
                           f"cap of {self.size_cap()} bytes per token")
        sizes.append(len(payload))
        out = self._call(dec, "decode", [payload, meta])
        try:
            arr = np.asarray(out, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise _Stopped(CandidateState.INVALID, f"decode() returned no array: {exc}") from None
        if arr.shape != array.shape:
            raise _Stopped(CandidateState.INVALID, f"decode() returned shape {arr.shape}, "
                           f"expected {array.shape}")
        if not np.isfinite(arr).all():
            raise _Stopped(CandidateState.INVALID, "decode() returned NaN or Inf")
        return arr.copy()

    def _states_passes(self, split: Split, prompts: list[torch.Tensor], refs: list[list[int]],
                       through: kv.Through, tally: Tally) -> int:
        """The states mode: each prompt's states at the cut in one call, then its greedy
        continuation one state per call, the back half's cache filled from decoded states
        only; returns the rows that crossed."""
        rows = 0
        for stream, ids in enumerate(prompts):
            meta = {"layer": split.layer, "d_model": split.d_model,
                    "tokens": len(ids), "start": 0, "stream": stream}
            front, back = split.new_cache(), split.new_cache()
            hidden = split.front(ids, front)
            with torch.no_grad():
                exact, _ = split.model(ids[None])
            decoded = torch.from_numpy(through(hidden.numpy().copy(), meta))
            logits = split.back(decoded, back)
            tally.add_logits(exact[0], logits)
            rows += len(ids)
            n_new = len(refs[stream])
            got: list[int] = []
            nxt = int(logits[-1].argmax())
            for step in range(n_new):
                got.append(nxt)
                if step == n_new - 1:
                    break
                h = split.front(torch.tensor([nxt]), front)
                meta = {**meta, "tokens": 1, "start": len(ids) + step}
                row = torch.from_numpy(through(h.numpy().copy(), meta))
                nxt = int(split.back(row, back)[-1].argmax())
                rows += 1
            tally.add_greedy(refs[stream], got)
        return rows

    def _measure(self, cand_dir: Path, ctx: EvalContext, which: str) -> dict[str, float]:
        bundle = self.bundle(ctx)
        split = Split(bundle.model, int(self.s["layer"]))
        prompts = self.prompts(bundle, self.secret(ctx), which)
        n_new, kv_mode = int(self.s["n_new"]), self.s["mode"] == "kv"
        tally, sizes = Tally(), list[int]()
        before = torch.get_num_threads()
        torch.set_num_threads(THREADS)
        try:
            # the kv mode compares the n_new tokens after the first, which the exact last
            # prompt position gives
            refs = [greedy_reference(split, ids, n_new + int(kv_mode)) for ids in prompts]
            with self._session(cand_dir, ctx, "encode") as enc, \
                    self._session(cand_dir, ctx, "decode") as dec:
                enc_clock, dec_clock = SessionClock(enc), SessionClock(dec)
                enc_clock.start()
                dec_clock.start()
                t0 = time.perf_counter()

                def through(array: np.ndarray, meta: dict[str, Any]) -> np.ndarray:
                    return self._through(enc, dec, array, meta, sizes)

                run = kv.passes if kv_mode else self._states_passes
                rows = run(split, prompts, refs, through, tally)
                wall = time.perf_counter() - t0
                enc_cpu, dec_cpu = enc_clock.stop(), dec_clock.stop()
            # what recomputing the front costs: the prefill, and the continuation's steps
            # where states cross for them
            front_cpu = split.front_cpu_s(prompts, 0 if kv_mode else n_new - 1)
        finally:
            torch.set_num_threads(before)
        requests = len(sizes)
        metrics = tally.metrics()
        metrics.update({
            "bytes_per_token": sum(sizes) / rows,
            "bf16_bytes_per_token": float(self.bf16_bytes_per_token()),
            "front_cpu_s": front_cpu,
            "decode_budget_s": budget_s(front_cpu, float(self.s["decode_cpu_share"]), requests),
            "through_wall_s": wall,
        })
        metrics["vs_bf16"] = metrics["bf16_bytes_per_token"] / max(metrics["bytes_per_token"],
                                                                   1e-9)
        for name, used in (("encode", enc_cpu), ("decode", dec_cpu)):
            if used is not None:
                metrics[f"{name}_cpu_s"] = used
                metrics[f"{name}_cpu_us_per_token"] = 1e6 * used / rows
        return metrics

    def _verdict(self, metrics: dict[str, float], stage: str) -> EvalResult:
        s = self.s
        used, budget = metrics.get("decode_cpu_s"), metrics["decode_budget_s"]
        if used is None:
            return EvalResult(CandidateState.FAILED, "the decoder's CPU time could not be read",
                              stage, metrics=metrics)
        if used > budget:
            return EvalResult(CandidateState.INVALID,
                              f"decode() used {used:.3f} s of CPU, over its budget of "
                              f"{budget:.3f} s ({s['decode_cpu_share']:g} of the "
                              f"{metrics['front_cpu_s']:.3f} s the layers before the cut cost "
                              "here): a decoder may not recompute them", stage, metrics=metrics)
        gates = (("kl_mean", "max_kl_mean", False), ("kl_p99", "max_kl_p99", False),
                 ("top1_agreement", "min_top1", True), ("greedy_agreement", "min_greedy", True))
        for metric, key, at_least in gates:
            value, bound = metrics[metric], float(s[key])
            if (value < bound) if at_least else not (value <= bound):
                word = "below" if at_least else "above"
                return EvalResult(CandidateState.INVALID,
                                  f"{metric} = {value:.4g}, {word} the gate {key} = {bound:g}",
                                  stage, metrics=metrics)
        return valid_from_metrics(self.target, metrics, stage)

    def _run(self, cand_dir: Path, ctx: EvalContext, which: str, stage: str) -> EvalResult:
        try:
            metrics = self._measure(cand_dir, ctx, which)
        except _Stopped as exc:
            return EvalResult(exc.state, exc.reason, stage)
        except (FileNotFoundError, ValueError) as exc:
            return EvalResult(CandidateState.FAILED, str(exc), stage)
        return self._verdict(metrics, stage)

    # -- stages ---------------------------------------------------------------------------
    def correctness(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        res = self._run(cand_dir, ctx, "train", "correctness")
        if res.ok:  # performance reports the same measurement
            with self._lock:
                self._results[(str(cand_dir), ctx.seed)] = res
        return res

    def performance(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        with self._lock:
            kept = self._results.pop((str(cand_dir), ctx.seed), None)
        res = kept or self._run(cand_dir, ctx, "train", "performance")
        return EvalResult(res.state, res.reason, "performance", metrics=dict(res.metrics),
                          objectives=res.objectives, samples=res.samples)

    def held_out(self, cand_dir: Path, ctx: EvalContext) -> EvalResult | None:
        return self._run(cand_dir, ctx, "held_out", "held_out")
