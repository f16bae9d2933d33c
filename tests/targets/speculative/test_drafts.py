"""Contract suite every speculative draft target passes (seed program, untrained)."""

import importlib.util
import re
from pathlib import Path

import pytest
import torch

from evaluators.speculative.api import Draft, TargetView
from evaluators.speculative.decoding import plain_decode, speculative_decode
from evaluators.speculative.distill import make_data
from optimizer.targets import load_target

ROOT = Path(__file__).resolve().parents[3]
FOLDERS = sorted(p.parent for p in (ROOT / "targets" / "speculative").glob("*/target.toml"))
KNOB = re.compile(r"^([A-Z_]+) = (\S+)\s+# knob: (.+)$", re.M)


def _module(folder: Path):
    spec = importlib.util.spec_from_file_location(f"draft_{folder.name}", folder / "draft.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_family_member_is_present():
    assert {f.name for f in FOLDERS} >= {"independent", "eagle", "medusa", "ngram"}


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_target_toml_and_knobs(folder):
    spec = load_target(folder, ROOT)
    assert spec.kind == "speculative" and spec.editable == ("draft.py",)
    assert spec.primary.metric == "speedup" and not spec.primary.minimize
    src = (folder / "draft.py").read_text()
    start, end = src.index("EVOLVE-BLOCK-START"), src.index("EVOLVE-BLOCK-END")
    knobs = KNOB.findall(src)
    assert knobs, "a draft declares its knobs in the editable block"
    for name, _, _ in knobs:
        assert start < src.index(f"{name} = ") < end


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_seed_draft_is_lossless_and_trainable(folder, tiny):
    model = tiny.model
    draft = _module(folder).build(TargetView.of(model))
    assert isinstance(draft, Draft)
    prompt = tiny.heldout_tokens[40:72]
    ref = plain_decode(model, prompt, 40)
    for k in (1, 3, 5):
        out, stats = speculative_decode(model, draft, prompt, 40, k)
        assert out == ref, f"k={k}"
        assert stats.tokens >= 39 and stats.target_steps <= 40
    if draft.trainable:
        data = make_data(model, tiny.train_tokens, n_seqs=4, prompt_len=8, gen_len=8,
                         feature_layers=tuple(draft.feature_layers), seed=0)
        loss = draft.loss(data)
        loss.backward()
        assert torch.isfinite(loss)
        assert any(p.grad is not None for p in draft.parameters() if p.requires_grad)
        assert [n for n, p in model.named_parameters() if p.grad is not None] == []
