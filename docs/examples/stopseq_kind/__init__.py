"""A target kind of one's own: stop-sequence detection for a streaming server.

The candidate module defines ``first_stop(text, stops) -> int``: the index just past the
earliest occurrence of any of ``stops`` in ``text`` (where the server cuts the stream), or
-1 when none occurs. The evaluator holds the reference, draws fresh inputs, calls the
candidate across the sandbox's boundary and times every call from its own side.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path

from evaluators import EvalContext, Evaluator
from optimizer.errors import ConfigError
from optimizer.records import CandidateState, EvalResult

SERVE = "optimizer.sandbox.serve:functions"  # the generic server of candidate functions


def reference(text: str, stops: list[str]) -> int:
    ends = [text.find(s) + len(s) for s in stops if s and s in text]
    return min(ends) if ends else -1


def case(rng: random.Random, length: int) -> tuple[str, list[str]]:
    text = "".join(rng.choice("abcde \n") for _ in range(length))
    stops = ["".join(rng.choice("abcde \n") for _ in range(rng.randint(1, 6)))
             for _ in range(rng.randint(1, 8))]
    return text, stops


class StopSeqEvaluator(Evaluator):
    kind = "stopseq"

    def __init__(self, target):
        super().__init__(target)
        unknown = set(target.evaluator) - {"calls", "length"}
        if unknown:
            raise ConfigError("unknown key; allowed in [evaluator]: calls, length",
                              file=f"{target.rel_path}/target.toml",
                              key=f"evaluator.{sorted(unknown)[0]}")
        self.calls = int(target.evaluator.get("calls", 20))
        self.length = int(target.evaluator.get("length", 20_000))

    def prompt_text(self) -> str:
        return ("The program is a stop-sequence detector; every answer is compared with a "
                "reference on fresh random text, and each call is timed from outside.")

    def _session(self, cand_dir: Path, ctx: EvalContext):
        return ctx.session(SERVE, {"module": self.target.editable[0],
                                   "functions": ["first_stop"]}, workdir=cand_dir)

    def _run(self, cand_dir: Path, ctx: EvalContext, stage: str, n: int,
             length: int) -> tuple[EvalResult | None, list[float]]:
        rng = random.Random(ctx.seed)  # fresh per evaluation, never shown to the candidate
        times: list[float] = []
        with self._session(cand_dir, ctx) as session:
            if not session.ok:
                state = CandidateState.TIMEOUT if session.timed_out else CandidateState.FAILED
                return EvalResult(state, session.error, stage), []
            for i in range(n):
                text, stops = case(rng, length)
                reply = session.request({"op": "call", "fn": "first_stop",
                                         "args": [text, stops]}, timeout_s=ctx.timeout_s)
                if reply.timed_out:
                    return EvalResult(CandidateState.TIMEOUT, reply.reason, stage), []
                if not reply.ok:
                    return EvalResult(CandidateState.FAILED, reply.reason, stage), []
                want = reference(text, stops)
                if reply.value != want:
                    return EvalResult(CandidateState.INVALID, f"call {i}: returned "
                                      f"{reply.value!r}, the reference says {want}", stage), []
                times.append(reply.wall_s)
        return None, times

    def correctness(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        failed, _ = self._run(cand_dir, ctx, "correctness", 50, 200)
        return failed or EvalResult(CandidateState.VALID, "", "correctness")

    def performance(self, cand_dir: Path, ctx: EvalContext) -> EvalResult:
        failed, times = self._run(cand_dir, ctx, "performance", self.calls, self.length)
        if failed is not None:
            return failed
        t = statistics.median(times)
        return EvalResult(CandidateState.VALID, "", "performance", metrics={"time_s": t},
                          objectives=(t,), samples={"time_s": tuple(times)})
