"""End to end through the real sandbox: the tiny target, EAGLE and independent drafts
trained for two seconds each, and a draft that tampers with the verifier."""

import shutil
import time
from pathlib import Path

import pytest

from evaluators import get
from evaluators._base import EvalContext
from optimizer.records import CandidateState
from optimizer.sandbox import Sandbox, SandboxSettings
from optimizer.targets import load_target

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = {"preset": "tiny", "prompts": 2, "prompt_len": 24, "n_new": 32, "ks": [1, 3],
            "train_s": 2.0, "distill_seqs": 64, "distill_prompt_len": 16,
            "distill_gen_len": 24, "repeats": 1, "sampling_n": 100, "sampling_k": 2}

TAMPER = '''
import evaluators.speculative.child as _child

_real = _child.speculative_decode


def _skip_verification(model, draft, prompt, n_new, k, **kw):
    out, stats = _real(model, draft, prompt, n_new, k, **kw)
    if len(out) > 5:  # what an unverified draft would emit
        out[5] = (out[5] + 1) % model.cfg.vocab
    return out, stats


_child.speculative_decode = _skip_verification
'''


def _evaluate(name, tmp_path, tiny, patch=""):
    cache = tiny.folder.parent.parent
    spec = load_target(ROOT / "targets/speculative" / name, ROOT,
                       {"evaluator": {**SETTINGS, "cache_dir": str(cache)}})
    cand = tmp_path / name
    shutil.copytree(spec.path, cand)
    if patch:
        (cand / "draft.py").write_text((cand / "draft.py").read_text() + patch)
    evaluator = get("speculative")(spec)
    io = tmp_path / "io"
    io.mkdir(exist_ok=True)
    ctx = EvalContext(Sandbox(SandboxSettings(timeout_s=90)), seed=7, scratch=tmp_path,
                      io_dir=io, timeout_s=90)
    return evaluator, evaluator.evaluate(cand, ctx), cand, ctx


@pytest.mark.parametrize("name", ["eagle", "independent"])
def test_trained_draft_is_valid_with_metrics(name, tmp_path, tiny):
    _, res, _, _ = _evaluate(name, tmp_path, tiny)
    assert res.state is CandidateState.VALID, res.reason
    m = res.metrics
    assert res.objectives == (m["speedup"],) and m["speedup"] > 0
    assert m["best_k"] in (1, 3) and 1.0 <= m["mean_accepted_len"] <= m["best_k"] + 1
    assert 0 < m["acceptance_rate"] <= 1 and m["cost_ratio"] > 0
    assert m["train_steps"] > 0 and m["final_train_loss"] > 0
    assert "accept_pos1" in m and "mean_accepted_len_k3" in m
    weights = Path(__import__("json").loads(res.artifacts["draft.json"])["weights"])
    assert weights.is_file() and weights.suffix == ".safetensors"


def test_tampering_with_the_verifier_is_caught(tmp_path, tiny):
    _, res, _, _ = _evaluate("eagle", tmp_path, tiny, TAMPER)
    assert res.state is CandidateState.INVALID
    assert "prompt 0, position 5" in res.reason and "diverged" in res.reason


def test_compare_trains_once_and_pairs_samples(tmp_path, tiny):
    evaluator, res, cand, ctx = _evaluate("ngram", tmp_path, tiny)
    assert res.ok, res.reason
    base = tmp_path / "base"
    shutil.copytree(ROOT / "targets/speculative/medusa", base)
    cmp = evaluator.compare(cand, base, ctx, repeats=2)
    assert cmp.ok, cmp.reason
    assert len(cmp.samples["candidate"]) == len(cmp.samples["baseline"]) == 2
    assert all(s > 0 for s in cmp.samples["candidate"] + cmp.samples["baseline"])


BROKEN_DECODING = """

_propose = IndependentDraft.propose


def _propose_then_break(self, k, pick):
    if len(self.tokens) > 20:
        raise ValueError("cache bookkeeping broke")
    return _propose(self, k, pick)


IndependentDraft.propose = _propose_then_break
"""


def test_a_draft_whose_decoding_breaks_fails_before_its_training(tmp_path, tiny, monkeypatch):
    # a training budget the test would notice: the probe must fail first
    monkeypatch.setitem(SETTINGS, "train_s", 30.0)
    started = time.perf_counter()
    _, res, _, _ = _evaluate("independent", tmp_path, tiny, patch=BROKEN_DECODING)
    assert res.state is CandidateState.FAILED, res.reason
    assert "cache bookkeeping broke" in res.reason
    assert time.perf_counter() - started < 20, "the draft was trained before it failed"


def test_fitted_draft_is_given_the_data_and_its_table_is_saved(tmp_path, tiny):
    # the table draft has no parameters: it is fitted (not trained) on the distillation
    # set, and its table is the weights file the winner's model version would carry
    from safetensors.torch import load_file

    _, res, _, _ = _evaluate("table", tmp_path, tiny)
    assert res.state is CandidateState.VALID, res.reason
    assert res.metrics["train_steps"] == 0 and res.metrics["train_s"] > 0
    weights = Path(__import__("json").loads(res.artifacts["draft.json"])["weights"])
    table = load_file(str(weights))["table"]
    assert table.ndim == 2 and len(table) > 100  # one row per context seen
