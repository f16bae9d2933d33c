"""The metrics of a measurement: the modelled speedup against the measured one."""

import pytest

from evaluators.speculative.decoding import SpecStats
from evaluators.speculative.harness import Pass
from evaluators.speculative.results import summarize


def _pass(k: int, prompts: int, *, step: float, prefill: float, steps: int, drafted: int,
          tokens: int, draft_s: float, verify_s: float) -> Pass:
    """``prompts`` decodes of 100 tokens whose speculative time is exactly its parts."""
    p = Pass(k)
    for _ in range(prompts):
        st = SpecStats(k, target_steps=steps, tokens=tokens, drafted=drafted,
                       draft_s=draft_s, verify_s=verify_s, prefill_s=prefill)
        p.refs.append([0] * 100)
        p.plain_s.append(prefill + 100 * step)
        p.spec_s.append(prefill + draft_s + verify_s)
        assert p.stats is not None
        p.stats.add(st)
    return p


def test_the_modelled_speedup_is_the_measured_one_when_the_decode_is_only_its_parts():
    # two prompt sets of different acceptance: 25 and 40 verification passes for 100 tokens
    fast = _pass(4, 3, step=0.002, prefill=0.01, steps=25, drafted=100, tokens=100,
                 draft_s=25 * 0.0004, verify_s=25 * 0.0026)
    slow = _pass(4, 3, step=0.002, prefill=0.01, steps=40, drafted=160, tokens=100,
                 draft_s=40 * 0.0004, verify_s=40 * 0.0026)
    resp = {"sweep": {4: fast}, "repeats": [fast, slow, slow], "best_k": 4,
            "train": {"train_s": 1.0, "curve": [], "weights": ""}, "start_s": [], "close_s": [],
            "decode_s": 1.0}
    m = summarize(resp, {"n_new": 100})["metrics"]
    assert m["speedup"] == pytest.approx(slow.speedup)  # the median set
    assert m["expected_speedup"] == pytest.approx(m["speedup"])
    assert m["prefill_ratio"] == pytest.approx(0.01 / 0.2)
    assert m["verify_ratio"] == pytest.approx(1.3)
    assert m["cost_ratio"] == pytest.approx(0.0004 / 4 / 0.002)
    # what the model does not know about (the loop's own time) shows as a gap
    for p in (fast, slow):
        p.spec_s = [t + 0.02 for t in p.spec_s]
    m = summarize(resp, {"n_new": 100})["metrics"]
    assert m["expected_speedup"] > 1.1 * m["speedup"]
