"""What a speculative evaluation reports: failures as states, the training session's record
(believed only as far as it is plain and sane), and the metrics of a measurement."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from evaluators.speculative.checks import modelled_speedup
from evaluators.speculative.decoding import SpecStats
from evaluators.speculative.harness import BusyDraftError, Pass
from evaluators.speculative.remote import RemoteFailure
from optimizer.records import CandidateState, EvalResult


def session_failure(reason: str, timed_out: bool, stage: str, limit: float) -> EvalResult:
    if timed_out:
        return EvalResult(CandidateState.TIMEOUT, f"killed after the {limit:.1f} s wall-clock "
                          f"limit ({reason or 'no answer'})", stage)
    return EvalResult(CandidateState.FAILED, (reason or "the draft's process failed")[-4000:],
                      stage)


def decode_failure(exc: Exception, stage: str, limit: float) -> EvalResult:
    if isinstance(exc, RemoteFailure):
        return session_failure(str(exc), exc.timed_out, stage, limit)
    if isinstance(exc, BusyDraftError):
        return EvalResult(CandidateState.REJECTED, str(exc), stage)
    return EvalResult(CandidateState.FAILED, f"{type(exc).__name__}: {exc}", stage)


def training_record(value: Any, weights_path: Path) -> dict[str, Any]:
    """The training session's answer, believed only as far as it is plain and sane."""
    if not isinstance(value, dict):
        raise TypeError("not a dict")
    curve = []
    for point in value.get("curve") or []:
        step, secs, loss = int(point["step"]), float(point["seconds"]), float(point["loss"])
        if not (math.isfinite(secs) and math.isfinite(loss)):
            raise ValueError(f"non-finite training curve point {point!r:.80}")
        curve.append({"step": step, "seconds": secs, "loss": loss})
    weights = str(value.get("weights") or "")
    if weights:
        # only the file this session was told to write, a plain file (not a link)
        if Path(weights) != weights_path or weights_path.is_symlink() or \
                not weights_path.is_file():
            raise ValueError(f"weights at {weights!r:.120}, expected {weights_path}")
    return {"curve": curve, "weights": weights,
            "fit_s": float(value.get("fit_s") or 0.0), "data_s": float(value.get("data_s") or 0)}


def _costs(st: SpecStats, plain_s: float, prompts: int,
           n_new: int) -> tuple[float, float, float, float]:
    """Cost ratio ``c`` (a drafted token), verify ratio ``v`` (a verification pass), prefill
    ratio and the modelled speedup of ``prompts`` decodes, in target-only steps. A step is
    the target-only decode's time less its prompt forward, which costs what the
    speculative decode's did (the same engine, the same prompt)."""
    prefill_s = st.prefill_s / max(1, prompts)
    step_s = max(plain_s / max(1, prompts) - prefill_s, 1e-12) / n_new
    steps = max(1, st.target_steps)
    cost = (st.draft_s / st.drafted) / step_s if st.drafted else 0.0
    verify = (st.verify_s / steps) / step_s
    prefill = prefill_s / (n_new * step_s)
    return cost, verify, prefill, modelled_speedup(st.mean_accepted_len, st.drafted / steps,
                                                   cost, verify, prefill)


def summarize(resp: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    """Metrics, objective, samples and artifacts of a measurement (:meth:`_measure`)."""
    sweep: dict[int, Pass] = resp["sweep"]
    repeats: list[Pass] = resp["repeats"]
    best = int(resp["best_k"])
    n_tokens = len(repeats[0].refs) * s["n_new"]
    speedups = [p.speedup for p in repeats]
    metrics: dict[str, float] = {"speedup": statistics.median(speedups), "best_k": best}
    for k, p in sweep.items():
        assert p.stats is not None
        metrics[f"mean_accepted_len_k{k}"] = p.stats.mean_accepted_len
        metrics[f"speedup_sweep_k{k}"] = p.speedup
    st = SpecStats(best)
    for p in repeats:
        assert p.stats is not None
        st.add(p.stats)
    plain = [sum(p.plain_s) for p in repeats]
    spec = [sum(p.spec_s) for p in repeats]
    alpha = st.acceptance_rate
    cost, verify, prefill, _ = _costs(st, sum(plain), len(plain) * len(repeats[0].refs),
                                      s["n_new"])
    metrics.update({
        "mean_accepted_len": st.mean_accepted_len,
        "acceptance_rate": alpha,
        "cost_ratio": cost,
        "verify_ratio": verify,
        "prefill_ratio": prefill,
        # modelled per prompt set, like the objective: the median over the sets
        "expected_speedup": statistics.median(
            _costs(p.stats, sum(p.plain_s), len(p.refs), s["n_new"])[3]
            for p in repeats if p.stats is not None),
        "tokens_per_s_plain": n_tokens / statistics.median(plain),
        "tokens_per_s_spec": n_tokens / statistics.median(spec),
    })
    rec = resp["train"]
    starts = resp["start_s"] or [0.0]
    metrics.update({
        "train_s": rec["train_s"],
        "train_steps": rec["curve"][-1]["step"] if rec["curve"] else 0,
        "final_train_loss": rec["curve"][-1]["loss"] if rec["curve"] else 0.0,
        # what a fresh draft process per timed prompt costs (untimed): start until ready
        # (fork, target head, build, weights, warm-up) and the sandbox's clean-up after it
        "session_start_s": statistics.median(starts),
        "session_close_s": statistics.median(resp["close_s"] or [0.0]),
        "sessions": float(len(resp["start_s"])),
        # the channel's own share of a draft call: a null request's round trip (median over
        # sessions), beside a whole draft call (round trip and the draft's work), in ms
        "channel_rtt_ms": 1e3 * statistics.median(resp.get("rtt_s") or [0.0]),
        "draft_call_ms": 1e3 * st.draft_s / max(1, st.target_steps),
        "decode_phase_s": resp["decode_s"],
    })
    for i, rate in enumerate(st.acceptance_per_position()):
        metrics[f"accept_pos{i + 1}"] = rate
    artifacts = {
        "training_curve.json": json.dumps(rec["curve"]),
        "draft.json": json.dumps({"weights": rec["weights"], "format": "safetensors",
                                  "best_k": best}),
    }
    if resp.get("engine"):  # the decode engine's measured steps and the padding it chose
        artifacts["engine.json"] = json.dumps(resp["engine"])
    return {"metrics": metrics, "objectives": (metrics["speedup"],),
            "samples": {"speedup": tuple(speedups)}, "artifacts": artifacts}
