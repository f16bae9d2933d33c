"""The routing kind's split mode: the uplink replay, the accounting on a toy, the quality
budget, the policy's view of the trace, and the seed through the kind's contract."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import pytest

from evaluators import get
from evaluators.routing.fleet import build_fleet
from evaluators.routing.hardware import step_model
from evaluators.routing.sim import SimConfig, simulate
from evaluators.routing.split.evaluator import ChoiceError, check_choice, request_facts
from evaluators.routing.split.model import Choice, Client, Profile, run
from evaluators.routing.split.tables import DEVICES, Codec, Device, Uplink, derive
from evaluators.routing.workload import Workload
from optimizer.records import CandidateState
from optimizer.targets import TargetSpec, load_target
from optimizer.testing.evaluators import EvaluatorContract
from tests.evaluators.routing.conftest import candidate

ROOT = Path(__file__).resolve().parents[3]
TARGET = ROOT / "targets/routing/coinfer_split"
SEED = (TARGET / "policy.py").read_text()
NETWORK = ROOT.parent / "shared" / "data" / "network"


# -- the uplink replay --------------------------------------------------------------------
def test_a_transfer_finishes_at_the_packet_opportunity_that_completes_it() -> None:
    # bins of 0.1 s with 2, 0 and 1 opportunities: at 0.05, 0.10 and 0.30, then every 0.3 s
    link = Uplink("toy", [2, 0, 1])
    assert link.finish(0.0, 3000) == pytest.approx(0.10)  # two packets: 0.05 and 0.10
    assert link.finish(0.0, 3001) == pytest.approx(0.30)  # a third packet
    assert link.finish(0.10, 1) == pytest.approx(0.30)  # the one at 0.10 has passed
    assert link.finish(0.10, 1500 * 2) == pytest.approx(0.35)  # repeats: 0.30, 0.35
    assert link.finish(0.2, 1500 * 4) == pytest.approx(0.60)  # 0.30, 0.35, 0.40, 0.60
    assert link.finish(5.0, 0) == 5.0
    assert link.observed_bps(0.3, 0.3) == pytest.approx(3 * 1500 * 8 / 0.3)


def test_a_derived_trace_keeps_every_opportunity(tmp_path: Path) -> None:
    trace = tmp_path / "t.up"
    trace.write_text("\n".join(str(ms) for ms in [0, 5, 5, 99, 100, 250, 250, 250]) + "\n")
    assert derive(trace, 60.0) == [4, 1, 3]


def test_bad_tables_are_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        Uplink("empty", [0, 0])
    with pytest.raises(ValueError, match="before the trace"):
        Uplink("toy", [1]).count_le(-1.0)


# -- the accounting on a toy --------------------------------------------------------------
TOY = Codec("toy", 16.0, 0.0, 0.0, 1.0, 1.0, 0.0)
PROF = Profile(webgpu_factor=0.5, rtt_s=0.05, text_bytes_per_token=4.0, observe_s=1.0)


def _toy(choice: Choice) -> tuple[Any, float, float]:
    work = Workload("toy", (0.0,), (1000,), (1,), ((0,),), (0,), ("local",))
    client = Client(Device("toy", 1000.0, 50.0), Uplink("flat", [10]), 1.0)  # 150 kB/s
    fleet = build_fleet([{"accelerator": "H200", "count": 1}])
    o = run(work, [client], [choice], {"toy": TOY}, fleet, SimConfig(), PROF)
    return o, float(o.ttft_s[0]), o.server_usd


def _lone(prompt: int) -> float:
    """The routing simulator's time for a lone prompt on one H200 (its first token)."""
    work = Workload("lone", (0.0,), (prompt,), (1,), ((0,),), (0,), ("local",))
    res = simulate(work, build_fleet([{"accelerator": "H200", "count": 1}]),
                   lambda req, view: 0, SimConfig(prefix_cache=False))
    return res.first_token[0]


def test_server_only_costs_what_the_server_model_says() -> None:
    o, ttft, usd = _toy(Choice(0, "toy", "server"))
    step = step_model("H200")
    assert _lone(1000) == pytest.approx(step.prefill_s(1000), rel=0.03)
    upload = 1000 * 4.0 / 1500  # 2.67 packets: 3, the last at 1.0 + 3 x 0.01 s
    assert o.at_server_s[0] == pytest.approx(math.ceil(upload) * 0.01)
    assert ttft == pytest.approx(0.03 + _lone(1000) + PROF.rtt_s)
    assert usd == pytest.approx(_lone(1000) * step.usd_per_hour / 3600)


def test_a_split_moves_server_dollars_down_and_ttft_up_by_the_hand_figures() -> None:
    _, ttft0, usd0 = _toy(Choice(0, "toy", "split"))
    o, ttft, usd = _toy(Choice(16, "toy", "split"))
    step = step_model("H200")
    client = 1000 * 0.5 / (1000 * 0.5)  # half the layers at 500 tokens/s: 1 s
    packets = math.ceil((1000 * 4.0 + 1000 * 4096 * 2) / 1500)  # text + bf16 state: 5,464
    assert o.at_server_s[0] == pytest.approx(client + packets * 0.01)
    saved = _lone(1000) - _lone(500)  # the server computes 16 of 32 layers: 500 tokens' worth
    assert usd0 - usd == pytest.approx(saved * step.usd_per_hour / 3600)
    assert ttft - ttft0 == pytest.approx(client + (packets - 3) * 0.01 - saved)


def test_decoding_on_the_server_uploads_the_client_layers_kv() -> None:
    o_split, _, _ = _toy(Choice(8, "toy", "split"))
    o_server, _, _ = _toy(Choice(8, "toy", "server"))
    kv = 1000 * 8 * 2 * 8 * 128 * 2  # tokens x layers x (K, V) x kv heads x head dim x 2 B
    assert o_server.upload_bytes[0] - o_split.upload_bytes[0] == kv


# -- the answer's rules -------------------------------------------------------------------
FAST = {"evaluator": {"held_out": [], "workload": {
    "kind": "profile", "profile": "azure2023_conversation", "seed": 3, "duration_s": 20}}}


def _target(overrides: dict[str, Any] | None = None) -> TargetSpec:
    return load_target(TARGET, ROOT, copy.deepcopy(overrides or FAST))


@pytest.fixture(scope="module")
def evaluator() -> Any:
    return get("routing")(_target())


@pytest.mark.parametrize("answer, reason", [
    ({"layers": 8, "codec": "seed_bits4", "decode": "server"}, "fails the quality budget"),
    ({"layers": 8, "codec": "seed_bits3", "decode": "split"}, "fails the quality budget"),
    ({"layers": 8, "codec": "zero_bytes", "decode": "split"}, "not in the measured table"),
    ({"layers": 32, "codec": "bf16", "decode": "split"}, "an int from 0"),
    ({"layers": True, "codec": "bf16", "decode": "split"}, "an int from 0"),
    ({"layers": 4, "codec": "bf16", "decode": "client"}, "'server' or 'split'"),
    ({"layers": 4, "codec": "bf16", "decode": "split", "bytes": 0}, "expected"),
])
def test_a_bad_answer_is_refused_with_its_reason(evaluator: Any, answer: dict,
                                                 reason: str) -> None:
    with pytest.raises(ChoiceError, match=reason):
        check_choice(answer, evaluator.cfg)


def test_server_only_is_legal_with_any_codec_name_of_the_table(evaluator: Any) -> None:
    assert check_choice({"layers": 0, "codec": "seed_bits3", "decode": "server"},
                        evaluator.cfg).layers == 0


def test_the_policy_sees_only_the_past_of_its_uplink(evaluator: Any) -> None:
    case = evaluator.cfg.train
    i = len(case.workload) // 2
    facts = request_facts(case, i, evaluator.cfg)
    cl = case.clients[i]
    t = cl.offset_s + case.workload.arrival[i]
    link = cl.link
    assert facts["uplink_bps"] == link.observed_bps(t, evaluator.cfg.profile.observe_s)
    # change the trace after t only: what the policy is told does not change
    counts = link.counts.copy()
    b = int((t % link.period) // link.bin_s) + 1
    counts[b % counts.size:] = 0 if b < counts.size else counts[b % counts.size:]
    future = Uplink(link.name, counts if counts.sum() else link.counts, link.bin_s)
    assert future.observed_bps(t, evaluator.cfg.profile.observe_s) == facts["uplink_bps"]
    assert set(facts) >= {"prompt_tokens", "device", "uplink_bps", "codecs"}
    assert "output_tokens" not in facts and "offset_s" not in facts


def test_device_table_has_its_source_figures() -> None:
    assert DEVICES["rtx_4090"].prefill_tok_s == 6898.71
    assert DEVICES["m1_7core_8gb"].decode_tok_s == 9.72


# -- through the sandbox ------------------------------------------------------------------
@pytest.fixture(scope="module")
def sandbox(mode_sandbox: Any) -> Any:
    return mode_sandbox


def _evaluate(tmp_path: Path, sandbox: Any, source: str, stage: str = "performance"):
    cand, ctx = candidate(tmp_path, sandbox, "policy.py", source)
    ev = get("routing")(_target())
    ev.correctness(cand, ctx)
    return ev, getattr(ev, stage)(cand, ctx)


def test_a_codec_that_fails_the_budget_is_invalid(tmp_path: Path, sandbox: Any) -> None:
    source = re.sub(r"^CLIENT_SHARE = 0.0", "CLIENT_SHARE = 0.25", SEED, flags=re.M)
    source = re.sub(r'^CODEC = "seed_bits5"', 'CODEC = "int4_token"', source, flags=re.M)
    source = re.sub(r"^MIN_PROMPT = 1024", "MIN_PROMPT = 64", source, flags=re.M)
    source = re.sub(r"^MIN_UPLINK_MBPS = 4.0", "MIN_UPLINK_MBPS = 0.5", source, flags=re.M)
    source = re.sub(r"^MIN_PREFILL_TOK_S = 1000.0", "MIN_PREFILL_TOK_S = 20.0", source,
                    flags=re.M)
    _, res = _evaluate(tmp_path, sandbox, source)
    assert res.state is CandidateState.INVALID
    assert "int4_token" in res.reason and "quality budget" in res.reason


def test_the_seed_keeps_every_request_on_the_server(tmp_path: Path, sandbox: Any) -> None:
    _, res = _evaluate(tmp_path, sandbox, SEED)
    assert res.state is CandidateState.VALID, res.reason
    assert res.metrics["share_server_only"] == 1.0
    assert res.metrics["vs_best_baseline"] == pytest.approx(1.0)


@pytest.mark.skipif(not (NETWORK / "mahimahi_Verizon-LTE-short.up").is_file(),
                    reason="the raw Mahimahi traces are not on this machine")
def test_the_shipped_uplinks_match_the_raw_traces() -> None:
    import json

    shipped = json.loads((TARGET / "uplinks.json").read_text())["links"]
    assert shipped["verizon_lte_short"]["counts"] == derive(
        NETWORK / "mahimahi_Verizon-LTE-short.up", 300.0)


class TestRoutingSplitMode(EvaluatorContract):
    @pytest.fixture(scope="class")
    @classmethod
    def target(cls) -> TargetSpec:
        return _target()

    @pytest.fixture(scope="class")
    @classmethod
    def changed_files(cls, target: TargetSpec) -> dict[str, str]:
        return {"policy.py": re.sub(r"^MIN_PROMPT = 1024", "MIN_PROMPT = 2048", SEED,
                                    flags=re.M)}


# -- the final check: the winner against the best baseline, per workload ---------------------
HELD = {"evaluator": {**FAST["evaluator"], "held_out": [{
    "name": "fast-links", "workload": {"kind": "profile", "profile": "azure2023_conversation",
                                       "seed": 4, "duration_s": 20},
    "devices": {"rtx_4090": 1.0}, "uplinks": ["tmobile_lte_short"], "seed": 11}]}}


def _final(tmp_path: Path, sandbox: Any, cheaper: tuple[float, ...] | None) -> Any:
    """The seed's final check; ``cheaper``: stand-in baselines at these fractions of the
    seed's own $ per million tokens (None: the target's real baselines)."""
    cand, ctx = candidate(tmp_path, sandbox, "policy.py", SEED)
    ev = get("routing")(_target(HELD))
    if cheaper is not None:
        real = ev.baseline_figures

        def stand_in(case: Any) -> dict[str, dict[str, float]]:
            usd = real(case)["server_only"]["server_usd_per_mtok"]  # the seed's own figure
            return {f"b{i}": {"server_usd_per_mtok": usd * f, "meets_slo": 1.0}
                    for i, f in enumerate(cheaper)}

        ev.baseline_figures = stand_in
    return ev.final_check(cand, ctx)


def test_the_final_check_writes_the_table_and_passes_the_seed(tmp_path: Path,
                                                             sandbox: Any) -> None:
    res = _final(tmp_path, sandbox, None)
    assert res.state is CandidateState.VALID, res.reason
    text = res.artifacts["evidence.md"]
    assert "| training |" in text and "| held-out |" in text and "fast-links" in text


def test_a_winner_that_costs_more_than_a_baseline_on_held_out_is_refused(
        tmp_path: Path, sandbox: Any) -> None:
    res = _final(tmp_path, sandbox, (0.8, 1.2))
    assert res.state is CandidateState.INVALID
    assert "fast-links" in res.reason and "b0" in res.reason
    assert "loses" in res.artifacts["evidence.md"]


def test_baselines_within_five_percent_of_each_other_are_a_tie(tmp_path: Path,
                                                               sandbox: Any) -> None:
    res = _final(tmp_path, sandbox, (0.97, 0.99))
    assert res.state is CandidateState.VALID, res.reason
    assert "tie" in res.artifacts["evidence.md"]
