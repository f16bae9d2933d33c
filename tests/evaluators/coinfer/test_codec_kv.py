"""The coinfer kind's kv mode on the tiny target: the front blocks' KV cache crosses, the
server continues from it; the seed passes its gates, fewer bits cost quality, the payload is
measured and capped, and the known cheat (the tokens recovered, the first blocks' KV
recomputed) is refused with the weights hidden and with them leaked."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from evaluators.coinfer import CodecEvaluator
from evaluators.coinfer.kv import client_kv, passes, server_quality, values_per_token
from evaluators.coinfer.quality import Tally
from evaluators.coinfer.splitlm import Split, greedy_reference
from optimizer.errors import ConfigError
from optimizer.records import CandidateState
from optimizer.targets import TargetSpec, load_target
from optimizer.workbench import Workbench

ROOT = Path(__file__).resolve().parents[3]
TARGET = ROOT / "targets" / "coinfer" / "codec_kv"
CHEATS = ROOT / "tests" / "adversarial" / "cheats" / "coinfer" / "codec_kv"
# The tiny target (2 blocks of width 64, 2 heads of 32) cut after its first block; 4 prompts
# of 32 tokens and 8 continuation tokens: an evaluation takes a few seconds. The default
# gates; the prompts' secret is pinned in the tiny target's cache (tests/conftest.py).
SMALL = {"preset": "tiny", "layer": 1, "prompts": 4, "prompt_len": 32, "n_new": 8}
# bytes per token of the seed on it: one block's keys and values, a row of 64 values each,
# BITS bits a value and a float32 scale a row
WIDTH = 64


def small_target(**extra: Any) -> TargetSpec:
    return load_target(TARGET, ROOT, {"evaluator": {**SMALL, **extra}})


def seed_with(bits: int) -> dict[str, str]:
    text = (TARGET / "codec.py").read_text()
    new, n = re.subn(r"^BITS = \d+", f"BITS = {bits}", text, count=1, flags=re.M)
    assert n == 1
    return {"codec.py": new}


@pytest.fixture(scope="module")
def bench(tiny: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    with Workbench(small_target(), state_dir=tmp_path_factory.mktemp("coinfer-kv"),
                   cache_dir=tiny.folder.parent.parent) as b:
        yield b


# -- the pieces -------------------------------------------------------------------------


def test_client_kv_is_the_front_blocks_cache(tiny: Any) -> None:
    split = Split(tiny.model, 1)
    ids = tiny.heldout_tokens[:20]
    kv = client_kv(split, ids)
    cfg = tiny.model.cfg
    assert kv.dtype == np.float32
    assert kv.shape == (1, 2, cfg.n_heads, 20, cfg.d_model // cfg.n_heads)
    cache = tiny.model.new_cache(1)
    with torch.no_grad():
        tiny.model(ids[None], cache)
    assert np.allclose(kv[0, 0], cache.k[0][0, :, :20].numpy(), atol=1e-5)
    assert np.allclose(kv[0, 1], cache.v[0][0, :, :20].numpy(), atol=1e-5)
    assert values_per_token(4, 128) == 1024  # 4 blocks' keys and values of width 128


def test_the_server_is_exact_with_the_exact_cache_and_not_with_zeros(tiny: Any) -> None:
    split = Split(tiny.model, 1)
    ids = tiny.heldout_tokens[100:132]
    ref = greedy_reference(split, ids, 9)
    kv = client_kv(split, ids)
    exact, zeros = Tally(), Tally()
    server_quality(split, ids, kv, ref, exact)
    server_quality(split, ids, np.zeros_like(kv), ref, zeros)
    m = exact.metrics()
    assert m["kl_mean"] < 1e-8 and m["top1_agreement"] == 1.0 and m["greedy_agreement"] == 1.0
    assert len(exact.kls[0]) == 8  # one distribution per continuation token fed
    assert zeros.metrics()["kl_mean"] > 100 * max(m["kl_mean"], 1e-9)


def test_passes_send_one_call_per_prompt_with_the_kv_meta(tiny: Any) -> None:
    split = Split(tiny.model, 1)
    prompts = [tiny.heldout_tokens[i * 16 : (i + 1) * 16] for i in range(3)]
    refs = [greedy_reference(split, ids, 4) for ids in prompts]
    seen: list[dict[str, Any]] = []

    def through(array: np.ndarray, meta: dict[str, Any]) -> np.ndarray:
        seen.append(meta)
        return array

    assert passes(split, prompts, refs, through, Tally()) == 48
    assert [m["stream"] for m in seen] == [0, 1, 2]
    assert seen[0] == {"layer": 1, "heads": 2, "head_dim": 32, "tokens": 16, "start": 0,
                       "stream": 0, "what": "kv"}


def test_the_mode_is_checked_and_sizes_the_cap() -> None:
    with pytest.raises(ConfigError, match="unknown mode 'keys'; allowed: states, kv") as err:
        CodecEvaluator(small_target(mode="keys"))
    assert err.value.key == "evaluator.mode"
    with pytest.raises(ConfigError, match="must be a str"):
        CodecEvaluator(small_target(mode=1))
    ev = CodecEvaluator(small_target())
    assert ev.bf16_bytes_per_token() == 1 * 2 * WIDTH * 2
    assert ev.size_cap() == 1 * 2 * WIDTH * 4
    assert "KV cache" in ev.prompt_text()
    states = CodecEvaluator(load_target(ROOT / "targets" / "coinfer" / "codec", ROOT,
                                        {"evaluator": SMALL}))
    assert states.s["mode"] == "states" and states.size_cap() == 4 * WIDTH
    assert "hidden state" in states.prompt_text()


# -- evaluations in the sandbox -----------------------------------------------------------


@pytest.mark.slow
def test_seed_is_valid_with_its_figures(bench: Any) -> None:
    res = bench.evaluate()
    assert res.state is CandidateState.VALID, res.reason
    m = res.metrics
    assert m["bytes_per_token"] == 2 * (WIDTH + 4)  # keys and values, 8 bits, a scale each
    assert m["bf16_bytes_per_token"] == 2 * WIDTH * 2
    assert m["top1_agreement"] > 0.95 and m["kl_mean"] < 1e-3
    assert 0 <= m["decode_cpu_s"] <= m["decode_budget_s"]
    assert res.objectives == (m["bytes_per_token"],)


@pytest.mark.slow
def test_fewer_bits_are_fewer_bytes_and_a_larger_kl(bench: Any) -> None:
    eight = bench.evaluate()
    four, two = bench.evaluate(seed_with(4)), bench.evaluate(seed_with(2))
    assert four.metrics["bytes_per_token"] == 2 * (WIDTH * 4 / 8 + 4)
    assert two.metrics["bytes_per_token"] == 2 * (WIDTH * 2 / 8 + 4)
    assert (eight.metrics["kl_mean"] < four.metrics["kl_mean"] < two.metrics["kl_mean"])


@pytest.mark.slow
@pytest.mark.parametrize("cheat", ["ignores_payload", "oversized_payload",
                                   "recompute_from_tokens", "side_file"])
def test_cheats_are_not_valid(bench: Any, cheat: str) -> None:
    res = bench.evaluate({"codec.py": (CHEATS / cheat / "codec.py").read_text()})
    assert res.state in (CandidateState.INVALID, CandidateState.FAILED), res.reason
    if cheat == "ignores_payload":
        assert res.state is CandidateState.INVALID and "gate" in res.reason
    if cheat == "oversized_payload":
        assert res.state is CandidateState.INVALID and "cap" in res.reason
    if cheat == "recompute_from_tokens":  # the weights are out of the sandbox's sight
        assert res.state is CandidateState.FAILED and "no model weights" in res.reason


@pytest.mark.slow
def test_recomputing_the_front_kv_breaks_the_cpu_budget(
        tiny: Any, leak_weights: Callable[[str], str],
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The weights leaked to the codec (a copy where it looks first): the cheat then
    recovers every token from the first block's keys and recomputes the front blocks' KV,
    and only the decoder's CPU budget stands between it and a 2-byte payload."""
    text = leak_weights((CHEATS / "recompute_from_tokens" / "codec.py").read_text())
    with Workbench(small_target(), state_dir=tmp_path_factory.mktemp("coinfer-kv-leak"),
                   cache_dir=tiny.folder.parent.parent) as b:
        res = b.evaluate({"codec.py": text})
    assert res.state is CandidateState.INVALID, res.reason
    assert "CPU" in res.reason and "budget" in res.reason
    m = res.metrics
    assert m["bytes_per_token"] == 2  # the ids crossed: the cheat itself worked
    assert m["top1_agreement"] >= 0.9  # 1.0 seen on the tiny target: every id recovered

