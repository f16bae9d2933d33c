"""The evaluator contract, as a pytest suite every kind runs.

What a kind must do, whatever it measures:

- its seed program ends VALID with finite objectives (or PRUNED with a reason where the
  machine lacks what the kind measures, when the kind's fixture allows it);
- a program that crashes is FAILED, one that hangs is TIMEOUT, one that does not parse is
  REJECTED, one that exits without delivering a result is FAILED, each with a reason that
  says so; the evaluator itself never raises;
- a changed program is confirmed the way the kind says (``confirmation()``): paired
  samples of candidate and baseline of equal length, or a held-out result;
- it measures from outside the candidate: a program that replaces the clocks of its own
  process (``time.perf_counter`` and friends) is measured exactly as if it had not.

Subclass :class:`EvaluatorContract` and provide the ``target`` fixture (class scope);
optionally ``seed_states``, ``changed_files``, ``workbench_options`` and the snippets.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from optimizer.edits import START
from optimizer.records import CandidateState, EvalResult
from optimizer.targets import TargetSpec
from optimizer.workbench import Workbench

CLOCKS_STOPPED = """
import time as _contract_time
_contract_frozen = _contract_time.perf_counter()
for _contract_name in ("perf_counter", "monotonic", "time", "process_time"):
    setattr(_contract_time, _contract_name, lambda _v=_contract_frozen: _v)
for _contract_name in ("perf_counter_ns", "monotonic_ns", "time_ns", "process_time_ns"):
    setattr(_contract_time, _contract_name, lambda _v=int(_contract_frozen * 1e9): _v)
"""


def with_prelude(source: str, code: str) -> str:
    """``source`` with ``code`` inserted at the top of its first EVOLVE-BLOCK (a legal edit)."""
    lines = source.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if START in line:
            return "".join([*lines[: i + 1], code.strip("\n") + "\n", *lines[i + 1 :]])
    return code.strip("\n") + "\n" + source


class EvaluatorContract:
    """The suite. Fixtures a kind's test class must or may override are at the top."""

    # -- fixtures a kind supplies ------------------------------------------------------
    @pytest.fixture(scope="class")
    @classmethod
    def target(cls) -> TargetSpec:
        raise NotImplementedError("provide a `target` fixture (class scope)")

    @pytest.fixture(scope="class")
    @classmethod
    def seed_states(cls) -> set[CandidateState]:
        """States the seed may end in here (add PRUNED where the machine cannot measure)."""
        return {CandidateState.VALID}

    @pytest.fixture(scope="class")
    @classmethod
    def changed_files(cls, target: TargetSpec) -> Mapping[str, str] | None:
        """A valid program other than the seed (for the confirmation test); None: skip."""
        return None

    @pytest.fixture(scope="class")
    @classmethod
    def workbench_options(cls) -> dict[str, Any]:
        """Keyword arguments of :class:`~optimizer.workbench.Workbench` (cache_dir, ...)."""
        return {}

    crash_code = "raise RuntimeError('contract: this program crashes at import')"
    hang_code = "while True:\n    pass"
    silent_exit_code = "import os as _contract_os\n_contract_os._exit(0)"
    syntax_error_code = "def (:\n    pass"
    hang_timeout_s = 4.0  # the hang is at import: any limit ends it; CI pays it per kind

    # -- helpers -----------------------------------------------------------------------
    @pytest.fixture(scope="class")
    @classmethod
    def bench(cls, target: TargetSpec, workbench_options: dict[str, Any],
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workbench]:
        root = tmp_path_factory.mktemp(f"contract-{target.name}")
        with Workbench(target, state_dir=root, **workbench_options) as bench:
            yield bench

    @pytest.fixture(scope="class")
    @classmethod
    def seed_result(cls, bench: Workbench) -> EvalResult:
        return bench.evaluate()

    @staticmethod
    def variant(target: TargetSpec, code: str) -> dict[str, str]:
        rel = target.editable[0]
        return {rel: with_prelude((target.path / rel).read_text(), code)}

    # -- the contract ------------------------------------------------------------------
    def test_seed_is_valid(self, seed_result: EvalResult, seed_states: set[CandidateState],
                           target: TargetSpec) -> None:
        assert seed_result.state in seed_states, f"{seed_result.state}: {seed_result.reason}"
        if seed_result.state is CandidateState.VALID:
            assert len(seed_result.objectives) == len(target.objectives)
            assert all(math.isfinite(v) for v in seed_result.objectives)
            assert target.primary.metric in seed_result.metrics
        else:
            assert seed_result.reason, "a seed that is not VALID must say why"
        assert seed_result.cost_s > 0

    def test_crash_is_failed(self, bench: Workbench, target: TargetSpec) -> None:
        res = bench.evaluate(self.variant(target, self.crash_code))
        assert res.state is CandidateState.FAILED, f"{res.state}: {res.reason}"
        assert "contract: this program crashes" in res.reason or "RuntimeError" in res.reason

    def test_hang_is_timeout(self, target: TargetSpec, workbench_options: dict[str, Any],
                             tmp_path_factory: pytest.TempPathFactory) -> None:
        root = tmp_path_factory.mktemp(f"contract-hang-{target.name}")
        with Workbench(target, state_dir=root, timeout_s=self.hang_timeout_s,
                       **workbench_options) as bench:
            res = bench.evaluate(self.variant(target, self.hang_code))
        assert res.state is CandidateState.TIMEOUT, f"{res.state}: {res.reason}"
        assert res.reason

    def test_syntax_error_is_rejected(self, bench: Workbench, target: TargetSpec) -> None:
        res = bench.evaluate(self.variant(target, self.syntax_error_code))
        assert res.state is CandidateState.REJECTED, f"{res.state}: {res.reason}"
        assert "syntax" in res.reason.lower()

    def test_a_result_that_never_arrives_is_a_state_with_a_reason(
            self, bench: Workbench, target: TargetSpec) -> None:
        res = bench.evaluate(self.variant(target, self.silent_exit_code))
        # REJECTED: a kind whose static rules refuse the code that would exit
        assert res.state in (CandidateState.FAILED, CandidateState.INVALID,
                             CandidateState.REJECTED), f"{res.state}: {res.reason}"
        assert res.reason

    def test_changed_candidate_is_confirmed_the_kinds_way(
            self, bench: Workbench, target: TargetSpec,
            changed_files: Mapping[str, str] | None) -> None:
        if changed_files is None:
            pytest.skip("the kind's fixture gives no changed program")
        res = bench.confirm(changed_files, repeats=3)
        if bench.evaluator.confirmation() == "paired":
            if res.state is CandidateState.PRUNED:
                assert res.reason
                return
            assert res.ok, res.reason
            cand, base = res.samples["candidate"], res.samples["baseline"]
            assert len(cand) == len(base) >= 3
            assert all(math.isfinite(x) and x > 0 for x in (*cand, *base))
        else:
            assert res.ok, res.reason
            assert target.primary.metric in res.metrics

    def test_measures_from_outside_the_candidate(
            self, bench: Workbench, target: TargetSpec, seed_result: EvalResult) -> None:
        """Stopped clocks in the candidate's process change nothing of the measurement."""
        res = bench.evaluate(self.variant(target, CLOCKS_STOPPED))
        if seed_result.state is not CandidateState.VALID:
            assert res.state is not CandidateState.VALID, "the clock cheat measured, the seed not"
            return
        if res.state is not CandidateState.VALID:
            return  # refused outright: not a win either
        metric, minimize = target.primary.metric, target.primary.minimize
        seed, cheat = seed_result.metrics[metric], res.metrics[metric]
        better = seed / cheat if minimize else cheat / seed
        if better >= 1.5:  # the seed was measured earlier, maybe on a busier machine: again now
            again = bench.evaluate()
            if again.state is CandidateState.VALID:
                seed = again.metrics[metric]
                better = seed / cheat if minimize else cheat / seed
        assert better < 1.5, (
            f"{metric} {seed:.4g} -> {cheat:.4g} with the candidate's clocks stopped: "
            "the measurement trusts a clock the candidate can replace")
