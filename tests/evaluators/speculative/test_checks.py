import pytest
import torch

from evaluators.speculative.checks import (
    chi_square_check,
    expected_speedup,
    first_divergence,
    modelled_speedup,
)
from evaluators.speculative.decoding import plain_decode


def test_expected_speedup_formula():
    # alpha 0.8, k 4, c 0.1: (1 - 0.8**5) / 0.2 = 3.3616 tokens per step, cost 1.4
    assert expected_speedup(0.8, 4, 0.1) == pytest.approx(3.3616 / 1.4)
    assert expected_speedup(0.0, 3, 0.2) == pytest.approx(1 / 1.6)
    assert expected_speedup(1.0, 3, 0.0) == pytest.approx(4.0)


def test_chi_square_keeps_its_false_alarm_rate_and_has_power():
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(30, generator=gen), 0).double()
    alarms = 0
    for _ in range(200):
        counts = torch.bincount(torch.multinomial(p, 500, True, generator=gen), minlength=30)
        alarms += not chi_square_check(counts, p, alpha=0.05)[0]
    assert alarms <= 25  # 10 expected at a 5% rate; 25 is p < 1e-4 under the null
    q = torch.softmax(torch.randn(30, generator=gen), 0).double()
    counts = torch.bincount(torch.multinomial(q, 500, True, generator=gen), minlength=30)
    assert not chi_square_check(counts, p, alpha=1e-3)[0]


def test_first_divergence_names_the_position(tiny):
    prompt = tiny.heldout_tokens[:24]
    ref = plain_decode(tiny.model, prompt, 20)
    assert first_divergence(tiny.model, prompt, ref, ref, 1e-4) is None
    bad = list(ref)
    bad[7] = (bad[7] + 1) % tiny.model.cfg.vocab
    pos, got, want, gap = first_divergence(tiny.model, prompt, bad, ref, 1e-4)
    assert (pos, got, want) == (7, bad[7], ref[7]) and gap > 1e-4
    assert first_divergence(tiny.model, prompt, bad, ref, float("inf")) is None


def test_cache_divergence_accepts_cached_decoding_and_catches_another_path(tiny):
    from evaluators.speculative.checks import cache_divergence
    from evaluators.speculative.decoding import plain_decode

    prompt = tiny.heldout_tokens[:24]
    out = plain_decode(tiny.model, prompt, 20)
    assert cache_divergence(tiny.model, prompt, out, 1e-4) is None
    bad = list(out)
    logits, _ = tiny.model(torch.cat([prompt, torch.tensor(out)])[None])
    bad[7] = int(logits[0, len(prompt) + 6].argsort()[-2])  # the runner-up: a real change
    pos, tok, want, gap = cache_divergence(tiny.model, prompt, bad, 1e-4)
    assert (pos, tok, want) == (7, bad[7], out[7]) and gap > 1e-4


def test_modelled_speedup_charges_the_verification_its_measured_cost():
    # 3 tokens a step from 4 drafts at 0.05 each: 3 / 1.2 with a free verification, but a
    # 5-token pass replayed as a CUDA graph costs 1.31 target steps (H200, 2026-12-02)
    assert modelled_speedup(3.0, 4.0, 0.05, 1.0) == pytest.approx(2.5)
    assert modelled_speedup(3.0, 4.0, 0.05, 1.31) == pytest.approx(3.0 / 1.51)
    assert modelled_speedup(1.0, 0.0, 0.0, 1.0) == pytest.approx(1.0)  # nothing drafted


def test_modelled_speedup_charges_the_prompt_forward_to_both_decodes():
    # 128 target-only steps after a prompt forward worth 8 of them: a draft at 4 tokens per
    # 1.25-step pass saves on the steps only, (128 + 8) / (128 / 4 * 1.25 + 8) = 2.83
    assert modelled_speedup(4.0, 3.0, 0.0, 1.25, prefill=8 / 128) == pytest.approx(136 / 48)
    assert modelled_speedup(4.0, 3.0, 0.0, 1.25) == pytest.approx(3.2)  # no prompt: 4 / 1.25
    assert modelled_speedup(1.0, 0.0, 0.0, 1.0, prefill=0.5) == pytest.approx(1.0)
