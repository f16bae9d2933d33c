"""LLMProposer against a real local HTTP server speaking the OpenAI chat-completions API."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from optimizer.accounting import Ledger, Prices
from optimizer.config import LLMConfig
from optimizer.errors import ConfigError
from optimizer.proposers import llm, prompt
from optimizer.proposers._base import ProposalContext
from optimizer.proposers.llm import LLMProposer, api_key
from optimizer.proposers.prompt import feedback_window, system_prompt
from optimizer.records import ArchiveEntry, CandidateState, Usage
from optimizer.targets import Objective, TargetSpec


def _load_server_module() -> Any:
    path = Path(__file__).with_name("fake_openai_server.py")
    spec = importlib.util.spec_from_file_location("fake_openai_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fake = _load_server_module()
Reply = fake.Reply

PROGRAM = '''\
"""Row-wise softmax over the last dimension."""

import math

BLOCK = 64  # knob: choices=[32, 64, 128]


# EVOLVE-BLOCK-START
def softmax_row(row):
    # lists, not arrays: the evaluator passes plain Python lists
    peak = max(row)
    exps = [math.exp(x - peak) for x in row]
    total = sum(exps)
    return [e / total for e in exps]


def softmax(rows):
    # lists, not arrays: the evaluator passes plain Python lists
    out = []
    for row in rows:
        out.append(softmax_row(row))
    return out
# EVOLVE-BLOCK-END


def entry(rows):
    return softmax(rows)
'''

GOOD = """SUMMARY: one pass fewer by dividing by the total once
program.py
<<<<<<< SEARCH
    total = sum(exps)
    return [e / total for e in exps]
=======
    inv = 1.0 / sum(exps)
    return [e * inv for e in exps]
>>>>>>> REPLACE
"""

PRICES = {"price_input_per_m": 1.25, "price_cached_input_per_m": 0.125, "price_output_per_m": 10.0}


def _target(tmp_path: Path) -> TargetSpec:
    return TargetSpec(
        name="softmax_py",
        kind="kernel",
        path=tmp_path,
        rel_path="targets/softmax_py",
        description="Row-wise softmax used by the sampler; rows of 4k to 128k floats.",
        editable=("program.py",),
        objectives=(Objective("time_s"),),
    )


def _entry(id_: str, files: dict[str, str], **kw: Any) -> ArchiveEntry:
    kw.setdefault("state", CandidateState.VALID)
    return ArchiveEntry(id=id_, parent_id=kw.pop("parent_id", None), files=files, knobs={}, **kw)


def _ctx(tmp_path: Path, parent: ArchiveEntry | None = None, **kw: Any) -> ProposalContext:
    seed = _entry("c0000", {"program.py": PROGRAM}, metrics={"time_s": 0.012}, objectives=(0.012,))
    return ProposalContext(target=_target(tmp_path), parent=parent or seed, seed=seed, **kw)


def _proposer(server: Any, **kw: Any) -> tuple[LLMProposer, list[float]]:
    sleeps: list[float] = []
    cassette = kw.pop("cassette", None)
    settings = LLMConfig(
        base_url=server.base_url,
        model="fake-model",
        api_key_env="OPTIMIZER_TEST_NO_SUCH_KEY",
        timeout_s=kw.pop("timeout_s", 5.0),
        max_retries=kw.pop("max_retries", 2),
        **{**PRICES, **kw},
    )
    return LLMProposer(settings, cassette=cassette, seed=7, sleep=sleeps.append), sleeps


def test_good_edit_is_applied_and_priced_from_server_usage(tmp_path: Path) -> None:
    with fake.FakeOpenAIServer([Reply(GOOD)]) as server:
        proposer, _ = _proposer(server, max_tokens=900)
        proposal = proposer.propose(_ctx(tmp_path))
    assert proposal.rejected is None
    assert "inv = 1.0 / sum(exps)" in proposal.files["program.py"]
    assert proposal.summary == "one pass fewer by dividing by the total once"
    assert proposal.proposer == "llm:fake-model" and proposal.usage.model == "fake-model"
    reported = server.usages[0]
    cached = reported["prompt_tokens_details"]["cached_tokens"]
    expected = (
        (reported["prompt_tokens"] - cached) * 1.25
        + cached * 0.125
        + reported["completion_tokens"] * 10.0
    ) / 1e6
    assert proposal.usage.prompt_tokens == reported["prompt_tokens"]
    assert proposal.usage.completion_tokens == reported["completion_tokens"]
    assert proposal.usage.usd == pytest.approx(expected, rel=1e-12)
    request = server.requests[0]
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["max_tokens"] == 900 and "prompt_cache_key" not in request
    assert "temperature" not in request and "reasoning_effort" not in request
    assert "SEARCH" in proposal.prompt and proposal.response == GOOD


def _block(search: str, replace: str, path: str = "program.py") -> str:
    return f"SUMMARY: x\n{path}\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


BAD = [
    (Reply(_block("    total = sum(exps )\n", "pass\n")), "closest text is lines 13-13"),
    (
        Reply(_block("    # lists, not arrays: the evaluator passes plain Python lists\n", "")),
        "occurs 2",
    ),
    (Reply(_block("BLOCK = 64  # knob: choices=[32, 64, 128]\n", "BLOCK = 32\n")), "outside"),
    (Reply(_block("a\n", "b\n", path="evaluate.py")), "'evaluate.py' may not be edited"),
    (Reply("I would use a faster exp."), "contains no edit"),
    (Reply(""), "empty answer"),
    (Reply(GOOD, finish_reason="length"), "cut off at the token limit"),
    (
        Reply(
            _block("    total = sum(exps)\n", "    total = sum(exps)\nK = 5  # knob: int 9..20\n")
        ),
        "bad knob declaration",
    ),
]


@pytest.mark.parametrize(("reply", "reason"), BAD, ids=[r for _, r in BAD])
def test_unusable_answers_become_rejections(tmp_path: Path, reply: Any, reason: str) -> None:
    with fake.FakeOpenAIServer([reply]) as server:
        proposer, _ = _proposer(server)
        proposal = proposer.propose(_ctx(tmp_path))
    assert proposal.rejected is not None and reason in proposal.rejected
    assert proposal.files == {"program.py": PROGRAM}
    assert proposal.usage.calls == 1 and len(server.requests) == 1


def test_429_honours_retry_after_then_succeeds(tmp_path: Path) -> None:
    script = [Reply(status=429, headers={"Retry-After": "7"}), Reply(GOOD)]
    with fake.FakeOpenAIServer(script) as server:
        proposer, sleeps = _proposer(server)
        proposal = proposer.propose(_ctx(tmp_path))
    assert proposal.rejected is None and sleeps == [7.0] and len(server.requests) == 2


def test_500_and_garbled_json_back_off_with_seeded_jitter(tmp_path: Path) -> None:
    def run() -> list[float]:
        script = [Reply(status=500), Reply(raw=b'{"choices": [garbled'), Reply(GOOD)]
        with fake.FakeOpenAIServer(script) as server:
            proposer, sleeps = _proposer(server, retry_base_s=2.0)
            assert proposer.propose(_ctx(tmp_path)).rejected is None
        return sleeps

    first, second = run(), run()
    assert first == second  # deterministic under the seed
    assert 1.0 <= first[0] <= 2.0 and 2.0 <= first[1] <= 4.0  # equal jitter on 2 s, 4 s


def test_retries_exhausted_is_a_rejection_with_the_last_reason(tmp_path: Path) -> None:
    with fake.FakeOpenAIServer([Reply(status=503)] * 3) as server:
        proposer, sleeps = _proposer(server, max_retries=2)
        proposal = proposer.propose(_ctx(tmp_path))
    assert proposal.rejected is not None
    assert "gave up after 3 attempt(s): HTTP 503" in proposal.rejected
    assert len(sleeps) == 2 and len(server.requests) == 3


def test_client_errors_are_not_retried(tmp_path: Path) -> None:
    with fake.FakeOpenAIServer([Reply(status=401), Reply(GOOD)]) as server:
        proposer, sleeps = _proposer(server)
        proposal = proposer.propose(_ctx(tmp_path))
    assert proposal.rejected is not None and "HTTP 401" in proposal.rejected
    assert sleeps == [] and len(server.requests) == 1


def test_slow_answer_times_out(tmp_path: Path) -> None:
    with fake.FakeOpenAIServer([Reply(GOOD, delay_s=1.5)]) as server:
        proposer, _ = _proposer(server, timeout_s=0.3, max_retries=0)
        proposal = proposer.propose(_ctx(tmp_path))
    assert proposal.rejected is not None and "did not answer within 0.3 s" in proposal.rejected


def test_missing_usage_is_estimated_not_free(tmp_path: Path) -> None:
    with fake.FakeOpenAIServer([Reply(GOOD, usage=False)]) as server:
        proposer, _ = _proposer(server)
        proposal = proposer.propose(_ctx(tmp_path))
    prompt_chars = len(fake.prompt_text(server.requests[0]))
    assert proposal.usage.prompt_tokens == prompt_chars // 4 and proposal.usage.usd > 0


def test_feedback_reaches_the_next_prompt(tmp_path: Path) -> None:
    rejected = _entry(
        "c0003",
        {"program.py": PROGRAM},
        state=CandidateState.REJECTED,
        reason="edit rejected: program.py: SEARCH block 1 does not occur exactly",
        summary="vectorised exp",
    )
    invalid = _entry(
        "c0004",
        {"program.py": PROGRAM},
        state=CandidateState.INVALID,
        reason="max relative error 3.1e-02 above 1e-05",
        artifacts={"validation.txt": "shape (4, 4096): rel-norm 3.1e-02 FAIL"},
    )
    ctx = _ctx(tmp_path, feedback=(invalid, rejected))
    with fake.FakeOpenAIServer([Reply(GOOD)]) as server:
        proposer, _ = _proposer(server)
        proposer.propose(ctx)
    user = server.requests[0]["messages"][1]["content"]
    for text in ("c0003 (REJECTED", "does not occur exactly", "c0004 (INVALID", "rel-norm 3.1e-02"):
        assert text in user
    assert user.index("c0003") < user.index("c0004")  # oldest first: the log only grows


def test_successive_prompts_share_a_cacheable_prefix(tmp_path: Path) -> None:
    """At least 80% of each prompt is a prefix identical to the previous call's."""
    variants = [PROGRAM.replace("peak = max(row)", f"peak = max(row)  # v{i}") for i in range(4)]
    parents = [
        _entry(f"c{i:04d}", {"program.py": v}, metrics={"time_s": 0.01 - i * 1e-3})
        for i, v in enumerate(variants)
    ]
    history: list[ArchiveEntry] = []
    with fake.FakeOpenAIServer([Reply(GOOD)] * 4) as server:
        proposer, _ = _proposer(server)
        for i, parent in enumerate(parents):
            ctx = _ctx(tmp_path, parent=parent, feedback=tuple(reversed(history)), iteration=i)
            proposer.propose(ctx)
            history.append(
                _entry(f"c{10 + i:04d}", {"program.py": variants[i]}, reason=f"measured {i}")
            )
    texts = [fake.prompt_text(r) for r in server.requests]
    for before, after in zip(texts, texts[1:], strict=False):
        shared = fake._common_prefix(before, after)
        assert shared / len(after) >= 0.80, shared / len(after)
    usages = server.usages[1:]
    share = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages) / sum(
        u["prompt_tokens"] for u in usages
    )
    assert share >= 0.80


def test_system_prompt_is_stable_and_names_the_contract(tmp_path: Path) -> None:
    import evaluators.kernels.evaluator as kernel_kind
    from evaluators._base import text_beside

    target = _target(tmp_path)
    kind_text = text_beside(kernel_kind.__file__)  # what the kernel kind's evaluator says
    first = system_prompt(target, {"program.py": PROGRAM}, kind_text=kind_text,
                          trusted_files={"reference.py": "REFERENCE = 1\n"})
    assert first == system_prompt(target, {"program.py": PROGRAM}, kind_text=kind_text,
                                  trusted_files={"reference.py": "REFERENCE = 1\n"})
    for text in ("<<<<<<< SEARCH", "File: program.py", "# knob:", "float64 reference", PROGRAM,
                 "reference.py (trusted, not editable)", "REFERENCE = 1"):
        assert text in first
    generic = system_prompt(target, {"program.py": PROGRAM})  # a kind with no text of its own
    assert "float64 reference" not in generic and "(kind: kernel)" in generic


def test_cassette_records_every_exchange(tmp_path: Path) -> None:
    path = tmp_path / "night.jsonl"
    with fake.FakeOpenAIServer([Reply(GOOD), Reply(status=400)]) as server:
        proposer, _ = _proposer(server, cassette=path)
        proposer.propose(_ctx(tmp_path))
        proposer.propose(_ctx(tmp_path))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["target"], r["index"]) for r in records] == [("softmax_py", 0), ("softmax_py", 1)]
    assert records[0]["response"] == GOOD and records[0]["error"] is None
    assert records[0]["messages"] == server.requests[0]["messages"]
    assert records[0]["usage"]["prompt_tokens"] == server.usages[0]["prompt_tokens"]
    assert "HTTP 400" in records[1]["error"] and records[1]["elapsed_s"] >= 0


def test_models_by_weight_are_seeded(tmp_path: Path) -> None:
    models = (("small", 3.0), ("large", 1.0))
    with fake.FakeOpenAIServer([Reply(GOOD)] * 40) as server:
        proposer, _ = _proposer(server, models=models)
        picks = [proposer.propose(_ctx(tmp_path)).usage.model for _ in range(40)]
    assert [r["model"] for r in server.requests] == picks
    assert 20 <= picks.count("small") <= 38 and picks.count("large") >= 2


def test_bandit_favours_the_model_that_improves(tmp_path: Path) -> None:
    settings = LLMConfig(
        base_url="http://127.0.0.1:9/v1",
        models=(("a", 1.0), ("b", 1.0)),
        selection="bandit",
        api_key_env="OPTIMIZER_TEST_NO_SUCH_KEY",
    )
    proposer = LLMProposer(settings, seed=3)
    proposer._parents["c0000"] = (1.0, True)
    for i in range(20):
        for model, value in (("a", 0.5), ("b", 2.0)):  # a improves, b never does
            proposer.observe(
                _entry(
                    f"x{i}{model}",
                    {},
                    parent_id="c0000",
                    objectives=(value,),
                    proposer=f"llm:{model}",
                )
            )
    picks = [proposer._pick_model() for _ in range(50)]
    assert picks.count("a") >= 45
    proposer.close()


def test_settings_validation_and_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="selection"):
        LLMConfig(selection="random")
    assert LLMConfig(models=[["m", 2]]).models == (("m", 2.0),)  # type: ignore[arg-type]
    monkeypatch.delenv("OPTIMIZER_TEST_NO_SUCH_KEY", raising=False)
    with pytest.raises(ConfigError, match="OPTIMIZER_TEST_NO_SUCH_KEY is not set"):
        api_key(LLMConfig(api_key_env="OPTIMIZER_TEST_NO_SUCH_KEY"))
    with pytest.raises(ConfigError, match="OPTIMIZER_TEST_NO_SUCH_KEY"):
        api_key(
            LLMConfig(
                base_url="https://api.example.com/v1", api_key_env="OPTIMIZER_TEST_NO_SUCH_KEY"
            )
        )
    local = LLMConfig(
        base_url="http://localhost:11434/v1", api_key_env="OPTIMIZER_TEST_NO_SUCH_KEY"
    )
    assert api_key(local) == "not-needed"
    monkeypatch.setenv("OPTIMIZER_TEST_NO_SUCH_KEY", "sk-test")
    assert api_key(LLMConfig(api_key_env="OPTIMIZER_TEST_NO_SUCH_KEY")) == "sk-test"


def test_ledger_totals_cache_share_and_estimate() -> None:
    prices = Prices(1.25, 0.125, 10.0)
    ledger = Ledger(prices)
    assert ledger.estimate_next_usd("t") == pytest.approx(prices.usd(12_000, 0, 4_000))
    a = Usage(10_000, 8_000, 1_000, prices.usd(10_000, 8_000, 1_000), 1, "m1")
    b = Usage(20_000, 0, 3_000, prices.usd(20_000, 0, 3_000), 1, "m2")
    ledger.record("t", a, candidate="c0001")
    ledger.record("t", b, candidate="c0002")
    ledger.record("u", Usage())  # an offline proposal: nothing to count
    ledger.mark_improvement("t", candidate="c0002", model="m2")
    s = ledger.summary()
    assert s["calls"] == 2 and s["prompt_tokens"] == 30_000 and s["cached_tokens"] == 8_000
    assert s["usd"] == pytest.approx(a.usd + b.usd)
    assert s["cache_hit_share"] == pytest.approx(8_000 / 30_000)
    assert s["tokens_per_improvement"] == 34_000 and s["usd_per_improvement"] == pytest.approx(
        a.usd + b.usd
    )
    assert s["per_candidate"]["c0002"]["improvements"] == 1 and "u" not in s["per_target"]
    # the dearest call plus the rise from a to b: prompts grow as the feedback log does
    assert ledger.estimate_next_usd("t") == pytest.approx(b.usd + (b.usd - a.usd))
    assert ledger.estimate_next_usd("new") == pytest.approx(max(a.usd, b.usd))
    assert ledger.usd == pytest.approx(a.usd + b.usd)


@pytest.mark.llm
@pytest.mark.skipif(not os.environ.get("OPTIMIZER_LLM_TEST_URL"), reason="no real endpoint set")
def test_real_endpoint_answers_in_the_edit_format(tmp_path: Path) -> None:
    settings = LLMConfig(
        base_url=os.environ["OPTIMIZER_LLM_TEST_URL"],
        model=os.environ.get("OPTIMIZER_LLM_TEST_MODEL", "gpt-5-mini"),
    )
    proposer = LLMProposer(settings)
    proposal = proposer.propose(_ctx(tmp_path))
    proposer.close()
    assert proposal.usage.calls == 1 and proposal.response


def test_feedback_window_only_grows_between_epochs() -> None:
    history = [_entry(f"c{i:04d}", {}) for i in range(1, 21)]
    windows = [feedback_window(history[:n], 8) for n in range(1, 21)]
    for n, (before, after) in enumerate(zip(windows, windows[1:], strict=False), start=2):
        assert after[-1] is history[n - 1] and len(after) <= 8
        if n > 8:
            assert len(after) >= 5
        if after[0] is before[0]:
            assert after[: len(before)] == before  # append-only: the cached prefix survives
        else:
            assert (n - 1) % 4 == 0  # restarts only at an epoch boundary


def test_prompt_names_stay_importable_from_llm() -> None:
    # replay.py, config.py and older callers import the prompt builders from llm.py.
    for name in ("PromptBook", "system_prompt", "user_prompt", "worked_example",
                 "feedback_window", "render_messages", "DIFF_SHARE"):  # fmt: skip
        assert getattr(llm, name) is getattr(prompt, name), name
    assert set(llm.__all__) <= set(dir(llm))


def test_where_an_evaluation_spent_its_time_stays_out_of_prompts_and_pull_texts(
    tmp_path: Path,
) -> None:
    from optimizer.records import ArchiveEntry, CandidateState
    from optimizer.winners import _metric_lines

    metrics = {"time_s": 0.25, "stage_s/correctness": 3.5, "cost_s/check_call": 1.25}
    seed = ArchiveEntry(id="c0001", parent_id=None, files={"program.py": PROGRAM}, knobs={},
                        state=CandidateState.VALID, objectives=(0.25,), metrics=metrics)
    text = system_prompt(_target(tmp_path), {"program.py": PROGRAM}, seed=seed)
    assert "time_s=0.25" in text and "stage_s" not in text and "cost_s" not in text
    lines = _metric_lines(metrics, {**metrics, "time_s": 0.125})
    assert lines == ["- time_s: 0.25 -> 0.125"]
