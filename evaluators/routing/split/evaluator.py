"""The routing kind's split mode (``mode = "split"``): server dollars per million tokens
under TTFT and TPOT SLOs, with a quality budget on the codec.

The candidate's program defines ``split(request) -> dict``. It runs in the routing kind's
sandboxed session (evaluators/routing/child.py: Landlock, no processes, a private copy of
the editable file; the uplink table, the workload and the settings are out of its reach)
and is asked once per request, in arrival order, with what a real client knows then:
its prompt length, its device class and that device's (browser) throughputs, the uplink
throughput it observed over the last ``observe_s`` seconds, the round trip, the model's
shape and the codec table's bytes per token. It answers
``{"layers": k, "codec": name, "decode": "server" | "split"}``; ``layers = 0`` is
server-only and always legal. Everything else is trusted (evaluators/routing/split/model.py).

Stages: correctness asks every request of the training workload and checks each answer
(a known codec within the quality budget, 0 <= layers < the model's layers, a known
decode mode: anything else is INVALID with the request and the reason); performance asks
again in a fresh session (the same answers, or INVALID) and simulates: INVALID when TTFT
p90 or TPOT p90 misses the SLO, else the objective ``server_usd_per_mtok`` with the share
of requests kept on the server and the latency percentiles; held_out does the same on
each held-out case (other uplinks and device mixes; the mean of their dollars). The
baselines (plain policy files, our code) run in-process once per evaluator and case.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from evaluators._base import EvalContext, Evaluator, valid_from_metrics
from evaluators.routing.baselines import editable_digest, load_module
from evaluators.routing.config import parse_settings
from evaluators.routing.remote import PolicyStopped, _start
from evaluators.routing.split import settings as st
from evaluators.routing.split.model import Choice, Outcome, pct, run
from optimizer.records import CandidateState, EvalResult

BASELINES_DIFFER = 0.05  # baselines closer than this to each other: a workload is a tie

ENTRY = "evaluators.routing.child:serve_policy"
CALL_TIMEOUT_S = 2.0


class ChoiceError(ValueError):
    pass


def check_choice(value: Any, cfg: st.SplitConfig) -> Choice:
    """The answer as a :class:`Choice`, or ChoiceError naming what is wrong."""
    if type(value) is not dict or set(value) != {"layers", "codec", "decode"}:
        raise ChoiceError(f"expected {{'layers', 'codec', 'decode'}}, got {value!r}"[:300])
    k, codec, decode = value["layers"], value["codec"], value["decode"]
    total = cfg.profile.model.layers
    if type(k) is not int or not 0 <= k < total:
        raise ChoiceError(f"layers = {k!r}: an int from 0 (server-only) to {total - 1}")
    if decode not in ("server", "split"):
        raise ChoiceError(f"decode = {decode!r}: 'server' or 'split'")
    if codec not in cfg.codecs:
        raise ChoiceError(f"codec {codec!r} is not in the measured table: "
                          f"{sorted(cfg.codecs)}")
    if k > 0:
        why = st.quality_failure(cfg.codecs[codec], cfg.quality)
        if why:
            raise ChoiceError(f"codec {codec!r} fails the quality budget: {why}")
    return Choice(k, str(codec), str(decode))


def request_facts(case: st.Case, i: int, cfg: st.SplitConfig) -> dict[str, Any]:
    """What request i's client knows when it sends it (never the trace ahead)."""
    cl, prof = case.clients[i], cfg.profile
    t = cl.offset_s + case.workload.arrival[i]
    m = prof.model
    return {"prompt_tokens": int(case.workload.prompt[i]), "device": cl.device.name,
            "prefill_tok_s": cl.device.prefill_tok_s * prof.webgpu_factor,
            "decode_tok_s": cl.device.decode_tok_s * prof.webgpu_factor,
            "uplink_bps": cl.link.observed_bps(t, prof.observe_s), "rtt_s": prof.rtt_s,
            "layers": m.layers, "hidden": m.hidden, "kv_heads": m.kv_heads,
            "head_dim": m.head_dim, "text_bytes_per_token": prof.text_bytes_per_token,
            "codecs": {n: c.bytes_per_token(m.hidden) for n, c in sorted(cfg.codecs.items())}}


class SplitEvaluator(Evaluator):
    kind = "routing"
    preload = ("numpy",)

    def __init__(self, target: Any):
        super().__init__(target)
        self.cfg = parse_settings(target, st.parse)
        self.baselines = self._load_baselines()
        self._answers: dict[str, list[Any]] = {}  # (digest, case) -> raw answers
        self._outcomes: dict[tuple[str, str], dict[str, float]] = {}

    def prompt_text(self) -> str:
        return Path(__file__).with_name("prompt.txt").read_text()

    def _load_baselines(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        out = {}
        for path in sorted(self.cfg.baselines.glob("*.py")) if self.cfg.baselines else []:
            out[path.stem] = load_module(path).split  # our own files: trusted code
        return out

    def _digest(self, cand_dir: Path) -> str:
        return editable_digest(cand_dir, self.target.editable)

    # -- the candidate: one fresh session per stage, one call per request -----------------
    def _ask(self, cand_dir: Path, ctx: EvalContext, case: st.Case,
             stage: str) -> tuple[EvalResult | None, list[Choice]]:
        rel = self.target.editable[0]
        files = {r: Path(r).name for r in self.target.editable}
        payload = {"module": Path(rel).name, "functions": ["split"]}
        raw: list[Any] = []
        with ctx.session_on_copy(cand_dir, files, ENTRY, payload, "split-") as session:
            if not session.ok:
                state = CandidateState.TIMEOUT if session.timed_out else CandidateState.FAILED
                return EvalResult(state, session.error or "the session did not start",
                                  stage), []
            try:
                _start(session, min(ctx.timeout_s, 60.0), ctx.timeout_s)
            except PolicyStopped as exc:
                return EvalResult(exc.state, exc.reason, stage), []
            for i in range(len(case.workload)):
                reply = session.request({"op": "split", "d": request_facts(case, i, self.cfg)},
                                        timeout_s=CALL_TIMEOUT_S)
                if reply.timed_out:
                    return EvalResult(CandidateState.TIMEOUT, f"split() gave no answer for "
                                      f"request {i} within {CALL_TIMEOUT_S:g} s", stage), []
                if not reply.ok:
                    return EvalResult(CandidateState.FAILED, f"split() failed at request "
                                      f"{i}: {reply.reason}"[:4000], stage), []
                raw.append(reply.value)
        key = f"{self._digest(cand_dir)}:{case.name}"
        if self._answers.setdefault(key, raw) != raw:
            return EvalResult(CandidateState.INVALID, "split() answered differently in a "
                              "fresh process: answers must depend only on the request", stage), []
        choices = []
        for i, value in enumerate(raw):
            try:
                choices.append(check_choice(value, self.cfg))
            except ChoiceError as exc:
                return EvalResult(CandidateState.INVALID, f"request {i}: {exc}", stage), []
        return None, choices

    # -- measurement ---------------------------------------------------------------------
    def simulate(self, case: st.Case, choices: list[Choice]) -> Outcome:
        return run(case.workload, list(case.clients), choices, self.cfg.codecs,
                   self.cfg.fleet, self.cfg.sim, self.cfg.profile)

    def figures(self, case: st.Case, choices: list[Choice]) -> dict[str, float]:
        o = self.simulate(case, choices)
        k = np.array([c.layers for c in choices], dtype=float)
        m = {"server_usd_per_mtok": o.server_usd / max(o.tokens / 1e6, 1e-12),
             "share_server_only": float((k == 0).mean()) if k.size else 1.0,
             "share_split_decode": float(np.mean([c.layers > 0 and c.decode == "split"
                                                  for c in choices])) if choices else 0.0,
             "mean_client_layers": float(k.mean()) if k.size else 0.0,
             "upload_mb_mean": float(o.upload_bytes.mean() / 1e6) if k.size else 0.0,
             "drops": float(o.dropped)}
        for q in (50, 90, 99):
            m[f"ttft_p{q}_s"] = pct(o.ttft_s, q)
            m[f"tpot_p{q}_s"] = pct(o.tpot_s, q)
        m["meets_slo"] = float(m["ttft_p90_s"] <= self.cfg.slo_ttft_s
                               and m["tpot_p90_s"] <= self.cfg.slo_tpot_s and o.dropped == 0)
        return m

    def baseline_figures(self, case: st.Case) -> dict[str, dict[str, float]]:
        out = {}
        for name, fn in self.baselines.items():
            if (name, case.name) not in self._outcomes:
                choices = [check_choice(fn(request_facts(case, i, self.cfg)), self.cfg)
                           for i in range(len(case.workload))]
                self._outcomes[(name, case.name)] = self.figures(case, choices)
            out[name] = self._outcomes[(name, case.name)]
        return out

    def _with_baselines(self, m: dict[str, float], case: st.Case,
                        suffix: str) -> tuple[dict[str, float], str]:
        rows = self.baseline_figures(case)
        ok = {n: r for n, r in rows.items() if r["meets_slo"]}
        out = {f"{k}{suffix}": v for k, v in m.items()}
        if ok:
            best = min(ok, key=lambda n: (ok[n]["server_usd_per_mtok"], n))
            b = ok[best]["server_usd_per_mtok"]
            out[f"best_baseline_server_usd_per_mtok{suffix}"] = b
            out[f"vs_best_baseline{suffix}"] = b / m["server_usd_per_mtok"]
        lines = [f"case {case.name}: baselines (server $/Mtok, share server-only, TTFT p90, "
                 "TPOT p90, meets SLO)"]
        lines += [f"{n} | {r['server_usd_per_mtok']:.4f} | {r['share_server_only']:.2f} | "
                  f"{r['ttft_p90_s']:.3f} | {r['tpot_p90_s']:.4f} | {bool(r['meets_slo'])}"
                  for n, r in sorted(rows.items())]
        return out, "\n".join(lines) + "\n"

    def _measure(self, cand_dir: Path, ctx: EvalContext, case: st.Case,
                 stage: str) -> tuple[EvalResult | None, dict[str, float]]:
        bad, choices = self._ask(cand_dir, ctx, case, stage)
        if bad is not None:
            return bad, {}
        m = self.figures(case, choices)
        if not m["meets_slo"]:
            return EvalResult(CandidateState.INVALID, f"{case.name}: misses the SLO: TTFT p90 "
                              f"{m['ttft_p90_s']:.3f} s (<= {self.cfg.slo_ttft_s:g}), TPOT p90 "
                              f"{m['tpot_p90_s']:.4f} s (<= {self.cfg.slo_tpot_s:g}), drops "
                              f"{m['drops']:g}", stage, metrics=m), {}
        return None, m

    # -- stages --------------------------------------------------------------------------
    def correctness(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        bad, choices = self._ask(cand_dir, ctx, self.cfg.train, "correctness")
        if bad is not None:
            return bad
        return EvalResult(CandidateState.VALID, "", "correctness", metrics={
            "requests": float(len(choices))})

    def performance(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        stage, case = "performance", self.cfg.train
        bad, m = self._measure(cand_dir, ctx, case, stage)
        if bad is not None:
            return bad
        metrics, table = self._with_baselines(m, case, "")
        return self._result(metrics, stage, {f"baselines_{case.name}.txt": table})

    def held_out(self, cand_dir: Path, ctx: EvalContext) -> EvalResult | None:
        if not self.cfg.held_out:
            return None
        stage, metrics, tables, values = "held_out", {}, {}, []
        for case in self.cfg.held_out:
            bad, m = self._measure(cand_dir, ctx, case, stage)
            if bad is not None:
                return bad
            part, tables[f"baselines_{case.name}.txt"] = self._with_baselines(
                m, case, f"/{case.name}")
            metrics.update(part)
            values.append(m["server_usd_per_mtok"])
        metrics["server_usd_per_mtok"] = float(np.mean(values))
        return self._result(metrics, stage, tables)

    def _result(self, metrics: dict[str, float], stage: str,
                artifacts: dict[str, str]) -> EvalResult:
        return valid_from_metrics(self.target, metrics, stage, artifacts=artifacts)

    def final_check(self, cand_dir: Path, ctx: EvalContext) -> EvalResult | None:
        """The winner against the best baseline that meets the SLO, per workload
        (evidence.md, the pull branch's text); INVALID where it costs more than that
        baseline on a held-out workload whose baselines differ by more than 5% (where
        they do not, the row is a tie)."""
        stage, rows, lost = "final_check", [], []
        cases = [("training", self.cfg.train)] + [("held-out", c) for c in self.cfg.held_out]
        for which, case in cases:
            bad, m = self._measure(cand_dir, ctx, case, stage)
            if bad is not None:
                return bad
            ok = {n: r["server_usd_per_mtok"] for n, r in self.baseline_figures(case).items()
                  if r["meets_slo"]}
            usd = m["server_usd_per_mtok"]
            if not ok:
                rows.append(f"| {case.name} | {which} | {usd:.4f} | - | - | - | no baseline "
                            "meets the SLO |")
                continue
            best = min(ok, key=lambda n: (ok[n], n))
            spread = max(ok.values()) / min(ok.values()) - 1.0
            ratio = ok[best] / usd if usd > 0 else float("inf")
            verdict = ("tie (baselines within 5%)" if spread <= BASELINES_DIFFER
                       else "wins" if ratio > 1.0 else "equal" if ratio == 1.0 else "loses")
            rows.append(f"| {case.name} | {which} | {usd:.4f} | {best} | {ok[best]:.4f} | "
                        f"{ratio:.3f} | {verdict} |")
            if which == "held-out" and verdict == "loses":
                lost.append(f"{case.name}: {ratio:.3f}x {best}'s server $ per million tokens")
        text = ("### Server $ per million tokens against the best baseline, per workload\n\n"
                f"Baselines that meet the SLO (TTFT p90 <= {self.cfg.slo_ttft_s:g} s, TPOT p90 "
                f"<= {self.cfg.slo_tpot_s:g} s): {', '.join(sorted(self.baselines))}. "
                "Above 1 the winner is cheaper.\n\n"
                "| workload | set | winner $/Mtok | best baseline | its $/Mtok | best / winner "
                "| verdict |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
        if lost:
            return EvalResult(CandidateState.INVALID, "loses to the best baseline on held-out "
                              "workload " + "; ".join(lost), stage,
                              artifacts={"evidence.md": text})
        return EvalResult(CandidateState.VALID, "held-out: no workload where the best baseline "
                          "is cheaper", stage, artifacts={"evidence.md": text})


__all__ = ["ChoiceError", "SplitEvaluator", "check_choice", "request_facts"]
