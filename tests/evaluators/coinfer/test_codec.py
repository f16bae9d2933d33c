"""The coinfer codec kind on the tiny target: the seed passes its gates, a lossy codec fails
them, the trusted side measures the payload and the decoder's CPU, and the known cheat (the
tokens recovered, the first layers recomputed) is INVALID even with the weights in reach."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from evaluators.coinfer.cputime import budget_s
from evaluators.coinfer.quality import Tally, kl_per_position, prefix_agreement
from evaluators.coinfer.splitlm import Split, greedy_reference
from optimizer.errors import ConfigError
from optimizer.records import CandidateState
from optimizer.targets import TargetSpec, load_target
from optimizer.workbench import Workbench

ROOT = Path(__file__).resolve().parents[3]
TARGET = ROOT / "targets" / "coinfer" / "codec"
CHEATS = ROOT / "tests" / "adversarial" / "cheats" / "coinfer" / "codec"
# The tiny target (2 blocks of width 64) cut after its first block; 4 prompts of 32 tokens
# and 8 greedy tokens: an evaluation takes a few seconds. The default gates; the prompts'
# secret is pinned in the tiny target's cache (tests/conftest.py).
SMALL = {"preset": "tiny", "layer": 1, "prompts": 4, "prompt_len": 32, "n_new": 8}


def small_target(**extra: Any) -> TargetSpec:
    return load_target(TARGET, ROOT, {"evaluator": {**SMALL, **extra}})


def seed_with(name: str, value: int) -> dict[str, str]:
    text = (TARGET / "codec.py").read_text()
    new, n = re.subn(rf"^{name} = \d+", f"{name} = {value}", text, count=1, flags=re.M)
    assert n == 1
    return {"codec.py": new}


@pytest.fixture(scope="module")
def bench(tiny: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    cache = tiny.folder.parent.parent
    with Workbench(small_target(), state_dir=tmp_path_factory.mktemp("coinfer"),
                   cache_dir=cache) as b:
        yield b


# -- the pieces -------------------------------------------------------------------------


def test_split_halves_make_the_whole_model(tiny: Any) -> None:
    split = Split(tiny.model, 1)
    ids = tiny.heldout_tokens[:40]
    with torch.no_grad():
        whole, _ = tiny.model(ids[None])
    assert torch.allclose(split.back(split.front(ids)), whole[0], atol=1e-4)
    # cached, one token at a time, each half with its own cache
    front, back = split.new_cache(), split.new_cache()
    rows = [split.back(split.front(ids[i : i + 1], front), back) for i in range(len(ids))]
    assert torch.allclose(torch.cat(rows), whole[0], atol=1e-4)
    with pytest.raises(ValueError, match="between the blocks"):
        Split(tiny.model, 2)


def test_greedy_reference_is_the_models_argmax_chain(tiny: Any) -> None:
    split = Split(tiny.model, 1)
    ids = tiny.heldout_tokens[:16]
    out = greedy_reference(split, ids, 3)
    seq = ids.tolist()
    for tok in out:
        with torch.no_grad():
            logits, _ = tiny.model(torch.tensor([seq]))
        assert tok == int(logits[0, -1].argmax())
        seq.append(tok)


def test_quality_figures() -> None:
    exact = torch.tensor([[2.0, 0.0, -1.0], [0.0, 3.0, 0.0]])
    assert kl_per_position(exact, exact).abs().max() < 1e-12
    shifted = torch.tensor([[0.0, 2.0, -1.0], [0.0, 3.0, 0.0]])
    kl = kl_per_position(exact, shifted)
    assert kl[0] > 0.5 and kl[1] == 0
    tally = Tally()
    tally.add_logits(exact, shifted)
    tally.add_greedy([1, 2, 3, 4], [1, 2, 9, 4])  # agreeing after a divergence does not count
    m = tally.metrics()
    assert m["top1_agreement"] == 0.5 and m["greedy_agreement"] == 0.5
    assert m["kl_mean"] == pytest.approx(float(kl.mean()))
    assert prefix_agreement([5, 6], [5, 6]) == 1.0


def test_budget_grows_with_the_front_and_the_requests() -> None:
    assert budget_s(1.0, 0.25, 0) < budget_s(2.0, 0.25, 0) < budget_s(2.0, 0.25, 100)
    assert budget_s(1.0, 0.25, 0) < 0.3


def test_unknown_and_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown key"):
        from evaluators.coinfer import CodecEvaluator
        CodecEvaluator(small_target(bogus=1))
    from evaluators.coinfer import CodecEvaluator
    with pytest.raises(ConfigError, match="between blocks"):
        CodecEvaluator(small_target(layer=2))


# -- evaluations in the sandbox -----------------------------------------------------------


@pytest.mark.slow
def test_seed_is_valid_with_its_figures(bench: Any) -> None:
    res = bench.evaluate()
    assert res.state is CandidateState.VALID, res.reason
    m = res.metrics
    assert m["bytes_per_token"] == 64 + 4  # width 64 at 8 bits, a float32 scale per token
    assert m["bf16_bytes_per_token"] == 128
    assert m["top1_agreement"] > 0.95 and m["kl_mean"] < 0.02
    assert 0 <= m["decode_cpu_s"] <= m["decode_budget_s"]
    assert res.objectives == (m["bytes_per_token"],)


@pytest.mark.slow
def test_fewer_bits_are_fewer_bytes_until_the_gates_refuse(bench: Any) -> None:
    six = bench.evaluate(seed_with("BITS", 6))
    assert six.state is CandidateState.VALID, six.reason
    assert six.metrics["bytes_per_token"] == 64 * 6 / 8 + 4
    assert six.metrics["kl_mean"] > bench.evaluate().metrics["kl_mean"]
    # the tiny target barely depends on its state at the cut: strict gates refuse 2 bits
    with Workbench(small_target(max_kl_mean=1e-5), state_dir=bench.root / "strict",
                   cache_dir=bench.cache_dir) as strict:
        two = strict.evaluate(seed_with("BITS", 2))
    assert two.state is CandidateState.INVALID, two.reason
    assert "kl_mean" in two.reason and "gate" in two.reason


@pytest.mark.slow
@pytest.mark.parametrize("cheat", ["recompute_from_tokens", "side_file", "ignores_payload",
                                   "oversized_payload"])
def test_cheats_are_not_valid(bench: Any, cheat: str) -> None:
    res = bench.evaluate({"codec.py": (CHEATS / cheat / "codec.py").read_text()})
    assert res.state in (CandidateState.INVALID, CandidateState.FAILED), res.reason
    if cheat == "oversized_payload":
        assert "cap" in res.reason
    if cheat == "ignores_payload":
        assert "gate" in res.reason


@pytest.mark.slow
def test_recomputing_the_first_layers_breaks_the_cpu_budget(
        tiny: Any, leak_weights: Callable[[str], str],
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The weights leaked to the codec (a copy where it looks first): the cheat then
    recovers every token and recomputes the first layers, and only the decoder's CPU budget
    stands between it and a 32x smaller payload."""
    text = leak_weights((CHEATS / "recompute_from_tokens" / "codec.py").read_text())
    state = tmp_path_factory.mktemp("coinfer-leak")
    with Workbench(small_target(), state_dir=state, cache_dir=tiny.folder.parent.parent) as b:
        res = b.evaluate({"codec.py": text})
    assert res.state is CandidateState.INVALID, res.reason
    assert "CPU" in res.reason and "budget" in res.reason
    m = res.metrics
    assert m["bytes_per_token"] == 2  # the ids crossed: the cheat itself worked
    assert m["top1_agreement"] >= 0.75  # 0.875-1.0 seen on the tiny target: ids mostly recovered
