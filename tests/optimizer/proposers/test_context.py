"""The LLM proposer's context policies: what each shows, what stays cached, and the config."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from optimizer.config import CONTEXT_POLICIES, LLMConfig
from optimizer.proposers._base import ProposalContext
from optimizer.proposers.context import POLICIES, ContextPolicy, policy
from optimizer.proposers.prompt import PromptBook, user_prompt
from optimizer.records import ArchiveEntry, CandidateState
from optimizer.targets import Objective, TargetSpec

ROOT = Path(__file__).resolve().parents[3]
MOST = 8  # max_feedback: epochs of 4


def _entry(i: int, state: CandidateState = CandidateState.VALID) -> ArchiveEntry:
    failed = state is not CandidateState.VALID
    return ArchiveEntry(
        id=f"c{i:04d}", parent_id="c0000", files={"program.py": f"X = {i}\n"}, knobs={},
        state=state, reason=f"row {i} mismatched\nexpected 1.0, got 2.0" if failed else "",
        metrics={} if failed else {"time_s": 1.0 / (i + 1)},
        objectives=() if failed else (1.0 / (i + 1),),
        artifacts={"validation_report.txt": f"REPORT-{i} " * 20} if failed else {},
    )  # fmt: skip


def _ctx(tmp_path: Path, inspirations: tuple[ArchiveEntry, ...] = ()) -> ProposalContext:
    target = TargetSpec(
        name="toy", kind="function", path=tmp_path, rel_path="targets/toy",
        description="a toy", editable=("program.py",), objectives=(Objective("time_s"),),
    )  # fmt: skip
    seed = ArchiveEntry(id="c0000", parent_id=None, files={"program.py": "X = 0\n"}, knobs={},
                        state=CandidateState.VALID, metrics={"time_s": 1.0}, objectives=(1.0,))
    return ProposalContext(target=target, parent=seed, seed=seed, inspirations=inspirations)


def test_the_config_knows_every_policy_by_name() -> None:
    assert set(CONTEXT_POLICIES) == set(POLICIES)
    assert LLMConfig().context == "append-only"
    with pytest.raises(ValueError, match="context must be one of append-only, masked"):
        LLMConfig(context="everything")
    with pytest.raises(ValueError, match="not 'everything'"):
        policy("everything")


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_shows_the_newest_and_at_most_the_limit(name: str) -> None:
    p: ContextPolicy = policy(name)
    assert p.window(0, MOST) == 0
    for n in range(1, 40):
        first = p.window(n, MOST)
        assert 0 <= first < n and n - first <= MOST  # the newest is always shown
        assert n - first >= min(n, MOST // 2 + 1)  # and never fewer than half the limit


@pytest.mark.parametrize("name", ["append-only", "masked"])
def test_within_an_epoch_the_log_only_grows(name: str) -> None:
    p = policy(name)
    for n in range(1, 40):
        before = [(i, p.brief(i, n, MOST)) for i in range(p.window(n, MOST), n)]
        after = [(i, p.brief(i, n + 1, MOST)) for i in range(p.window(n + 1, MOST), n + 1)]
        if n % (MOST // 2):  # within an epoch: same entries, shown the same way
            assert after[: len(before)] == before


def test_sliding_moves_its_first_entry_on_every_call_past_the_limit() -> None:
    p = policy("sliding")
    assert [p.window(n, MOST) for n in (8, 9, 10, 11)] == [0, 1, 2, 3]


def test_masked_leaves_out_the_previous_epochs_reports_and_says_so(tmp_path: Path) -> None:
    history = [_entry(i, CandidateState.INVALID) for i in range(1, 11)]  # 10: epoch from 8
    settings = LLMConfig(max_feedback=MOST)
    full = user_prompt(_ctx(tmp_path), settings, history, (), policy("append-only"))
    masked = user_prompt(_ctx(tmp_path), settings, history, (), policy("masked"))
    shown = range(5, 11)  # append-only shows c0005..c0010 at n = 10
    assert all(f"REPORT-{i} " in full for i in shown)
    assert all(f"REPORT-{i} " not in masked for i in range(5, 9))  # the previous epoch
    assert all(f"REPORT-{i} " in masked for i in (9, 10))  # this epoch keeps its reports
    assert masked.count("(reports left out: validation_report.txt)") == 4
    assert "Reason: row 5 mismatched\n" in masked and "expected 1.0, got 2.0" in full
    assert len(masked) < len(full)


def test_sliding_shows_the_archives_inspirations_of_each_call(tmp_path: Path) -> None:
    first, second = (_entry(100),), (_entry(200),)  # c0200 is not better: kept when frozen
    for name, expect_new in (("append-only", False), ("sliding", True)):
        book = PromptBook(LLMConfig(context=name))
        book.messages(_ctx(tmp_path, first))
        user = book.messages(_ctx(tmp_path, second))[1]["content"]
        assert ("c0200" in user) is expect_new, name
        assert ("c0100" in user) is not expect_new, name


def _bench() -> Any:
    path = ROOT / "bench" / "proposer_context.py"
    spec = importlib.util.spec_from_file_location("proposer_context", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_bench_counts_the_reports_a_prompt_shows(tmp_path: Path) -> None:
    bench = _bench()
    history = [_entry(i, CandidateState.INVALID) for i in range(1, 11)]
    settings = LLMConfig(max_feedback=MOST)
    full = user_prompt(_ctx(tmp_path), settings, history, (), policy("append-only"))
    masked = user_prompt(_ctx(tmp_path), settings, history, (), policy("masked"))
    def report(i: int) -> int:  # the report's line and its newline
        return len((f"REPORT-{i} " * 20).strip()) + 1

    assert bench._report_chars(full) == sum(report(i) for i in range(5, 11))
    assert bench._report_chars(masked) == report(9) + report(10)
