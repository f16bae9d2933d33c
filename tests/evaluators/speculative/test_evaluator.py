"""End to end through the real sandbox (warm, as a night runs it): the tiny target, drafts
distilled for a second or two, and drafts that attack the measurement from their own
process. Only the draft runs there; the target, the decoding loop and the clock are this
process's, so none of the attacks may move the measured speedup."""

import json
import shutil
import time
from pathlib import Path

import pytest

import evaluators.speculative.evaluator as spec_eval
from evaluators import get
from evaluators._base import EvalContext
from optimizer.errors import ConfigError
from optimizer.records import CandidateState
from optimizer.sandbox import Sandbox, SandboxSettings
from optimizer.targets import load_target

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = {"preset": "tiny", "prompts": 2, "prompt_len": 24, "n_new": 32, "ks": [1, 3],
            "train_s": 2.0, "distill_seqs": 64, "distill_prompt_len": 16,
            "distill_gen_len": 24, "repeats": 1, "sampling_n": 100, "sampling_k": 2}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec-sandbox")
    sb = Sandbox(SandboxSettings(rw_root=root, timeout_s=90,
                                 preload=spec_eval.SpeculativeEvaluator.preload))
    yield sb, root
    sb.close()


def _evaluate(name, sandbox, tiny, patch="", timeout_s=90.0, settings=None, spy=None):
    sb, root = sandbox
    cache = tiny.folder.parent.parent
    spec = load_target(ROOT / "targets/speculative" / name, ROOT,
                       {"evaluator": {**SETTINGS, **(settings or {}), "cache_dir": str(cache)}})
    stamp = f"{name}-{time.monotonic_ns()}"
    cand = root / stamp
    shutil.copytree(spec.path, cand)
    if patch:
        (cand / "draft.py").write_text((cand / "draft.py").read_text() + patch)
    evaluator = get("speculative")(spec)
    io = root / f"io-{stamp}"
    io.mkdir()
    ctx = (spy or EvalContext)(sb, seed=7, scratch=root / f"scratch-{stamp}", io_dir=io,
                               timeout_s=timeout_s)
    return evaluator, evaluator.evaluate(cand, ctx), cand, ctx


@pytest.mark.parametrize("name", ["eagle", "independent"])
def test_trained_draft_is_valid_with_metrics(name, sandbox, tiny):
    _, res, _, _ = _evaluate(name, sandbox, tiny)
    assert res.state is CandidateState.VALID, res.reason
    m = res.metrics
    assert res.objectives == (m["speedup"],) and m["speedup"] > 0
    assert m["best_k"] in (1, 3) and 1.0 <= m["mean_accepted_len"] <= m["best_k"] + 1
    assert 0 < m["acceptance_rate"] <= 1 and m["cost_ratio"] > 0
    # a verification of k+1 tokens costs at least a little more than nothing, and the
    # prediction from the measured costs is of the measured speedup's order
    assert m["verify_ratio"] > 0.2 and 0.2 < m["expected_speedup"] / m["speedup"] < 5
    assert m["train_steps"] > 0 and m["final_train_loss"] > 0
    assert "accept_pos1" in m and "mean_accepted_len_k3" in m
    # one fresh process per timed decode: 2 prompts x (2 values of k + 1 repeat), plus the
    # sampled check's
    assert m["sessions"] == 7 and 0 < m["session_start_s"] < 5
    # a draft call is a round trip and the draft's own work: at least the null round trip
    assert 0 < m["channel_rtt_ms"] < 50 and m["draft_call_ms"] > m["channel_rtt_ms"]
    engine = json.loads(res.artifacts["engine.json"])
    assert engine["graphs"] is False and engine["pad_to"] == {}  # the CPU pads nothing
    weights = Path(json.loads(res.artifacts["draft.json"])["weights"])
    assert weights.is_file() and weights.suffix == ".safetensors"


def test_compare_trains_once_and_pairs_samples(sandbox, tiny):
    evaluator, res, cand, ctx = _evaluate("ngram", sandbox, tiny)
    assert res.ok, res.reason
    base = sandbox[1] / "base"
    shutil.copytree(ROOT / "targets/speculative/medusa", base, dirs_exist_ok=True)
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


def test_a_draft_whose_decoding_breaks_fails_before_its_training(sandbox, tiny):
    # a training budget the test would notice: the probe must fail first
    started = time.perf_counter()
    _, res, _, _ = _evaluate("independent", sandbox, tiny, patch=BROKEN_DECODING,
                             settings={"train_s": 30.0})
    assert res.state is CandidateState.FAILED, res.reason
    assert "cache bookkeeping broke" in res.reason
    assert time.perf_counter() - started < 20, "the draft was trained before it failed"


def test_fitted_draft_is_given_the_data_and_its_table_is_saved(sandbox, tiny):
    # the table draft has no parameters: it is fitted (not trained) on the distillation
    # set, and its table is the weights file the winner's model version would carry; every
    # timed prompt's fresh process loads it back (and drafts from it)
    from safetensors.torch import load_file

    _, res, _, _ = _evaluate("table", sandbox, tiny)
    assert res.state is CandidateState.VALID, res.reason
    assert res.metrics["train_steps"] == 0 and res.metrics["train_s"] > 0
    weights = Path(json.loads(res.artifacts["draft.json"])["weights"])
    table = load_file(str(weights))["table"]
    assert table.ndim == 2 and len(table) > 100  # one row per context seen
    assert res.metrics["mean_accepted_len"] > 1.5


# -- attacks from the draft's own process ----------------------------------------------------

# A draft that proposes nothing and, in its own process, slows target-only decoding
# (plain_decode wherever it is found, and the target's forward through the TargetView),
# stops or slows the clocks, and shrinks the decoding loop's statistics: in the former
# harness each of these won 2.5-3.8x. Here its process holds neither the target's
# decoding nor the clock.
TAMPER = '''
import sys as _sys
import time as _time

_real_clock = _time.perf_counter
_frozen = _real_clock()


def _thrice(real):
    def plain_decode(*args, **kwargs):
        real(*args, **kwargs)
        real(*args, **kwargs)
        return real(*args, **kwargs)
    return plain_decode


def _shrunk(real):
    def speculative_decode(*args, **kwargs):
        out, stats = real(*args, **kwargs)
        stats.total_s *= 0.1
        stats.draft_s *= 0.1
        return out, stats
    return speculative_decode


for _mod in list(_sys.modules.values()):
    _space = getattr(_mod, "__dict__", {})
    if callable(_space.get("plain_decode")):
        _space["plain_decode"] = _thrice(_space["plain_decode"])
    if callable(_space.get("speculative_decode")):
        _space["speculative_decode"] = _shrunk(_space["speculative_decode"])
for _name in ("perf_counter", "monotonic", "time"):
    setattr(_time, _name, lambda: _frozen)


def _slow_target(target):
    model = getattr(target.head, "__self__", None)
    if model is not None:
        real = model.forward
        def forward(ids, *args, **kwargs):
            for _ in range(2):  # the same tokens again, without the cache: pure extra work
                real(ids)
            return real(ids, *args, **kwargs)
        model.forward = forward
'''

NOTHING = '''

class NgramDraft(NgramDraft):  # noqa: F811
    def __init__(self, target):
        super().__init__(target)
        _slow_target(target)

    def propose(self, k, pick):
        return []
'''


def _ngram_with(tmp_text: str) -> str:
    seed = (ROOT / "targets/speculative/ngram/draft.py").read_text()
    return seed.replace("# EVOLVE-BLOCK-END", tmp_text + "\n# EVOLVE-BLOCK-END")


def _evaluate_text(text, sandbox, tiny, timeout_s=90.0, settings=None, spy=None):
    sb, root = sandbox
    spec = load_target(ROOT / "targets/speculative/ngram", ROOT, {"evaluator": {
        **SETTINGS, **(settings or {}), "cache_dir": str(tiny.folder.parent.parent)}})
    stamp = f"text-{time.monotonic_ns()}"
    cand = root / stamp
    shutil.copytree(spec.path, cand)
    (cand / "draft.py").write_text(text)
    io = root / f"io-{stamp}"
    io.mkdir()
    ctx = (spy or EvalContext)(sb, seed=7, scratch=root / f"scratch-{stamp}", io_dir=io,
                               timeout_s=timeout_s)
    evaluator = get("speculative")(spec)
    return evaluator, evaluator.evaluate(cand, ctx)


def test_tampering_in_the_drafts_process_changes_nothing(sandbox, tiny):
    _, honest = _evaluate_text(_ngram_with(NOTHING.replace("        _slow_target(target)\n",
                                                           "")), sandbox, tiny)
    _, cheat = _evaluate_text(_ngram_with(TAMPER + NOTHING), sandbox, tiny)
    for res in (honest, cheat):
        assert res.state is CandidateState.VALID, res.reason
        assert res.metrics["mean_accepted_len"] == 1.0  # it proposes nothing
        # one target step per token plus a round trip: never faster than the target alone
        assert res.metrics["speedup"] < 1.05, res.metrics
    # the same, not 3x: what it did in its process reached neither clock nor baseline
    assert 0.5 < cheat.metrics["speedup"] / honest.metrics["speedup"] < 2.0


# Remembers what the target said after every prompt, in every place a process could leave
# it for the next: its module, /dev/shm and /dev (the warm process's tmpfs), an extended
# attribute and the timestamps of its own draft.py (the former harness decoded the same
# prompts with one draft object again and again: 3.55x). Proposes only what it remembers.
MEMO = r'''
import os as _os
import pickle as _pickle

_MEMORY = {}
_HERE = _os.path.abspath(__file__)


def _load():
    for path in ("/dev/shm/memo", "/dev/memo"):
        try:
            with open(path, "rb") as fh:
                _MEMORY.update(_pickle.load(fh))
        except Exception:
            pass
    try:
        _MEMORY.update(_pickle.loads(_os.getxattr(_HERE, "user.memo")))
    except Exception:
        pass


def _save():
    blob = _pickle.dumps(_MEMORY)
    for path in ("/dev/shm/memo", "/dev/memo"):
        try:
            with open(path, "wb") as fh:
                fh.write(blob)
        except Exception:
            pass
    try:
        _os.setxattr(_HERE, "user.memo", blob[-60000:])
    except Exception:
        pass


class NgramDraft(NgramDraft):  # noqa: F811
    def __init__(self, target):
        super().__init__(target)
        _load()
        self.key = ()

    def reset(self, tokens, feats):
        super().reset(tokens, feats)
        self.key = tuple(self.tokens[:24])

    def accept(self, tokens, feats):
        super().accept(tokens, feats)
        if len(self.tokens) > len(_MEMORY.get(self.key, ())):
            _MEMORY[self.key] = list(self.tokens)
            _save()

    def propose(self, k, pick):
        seen = _MEMORY.get(self.key)
        n = len(self.tokens)
        if not seen or len(seen) <= n or seen[:n] != self.tokens:
            return []
        out = []
        for tok in seen[n : n + k]:
            logits = torch.full((self.vocab,), float("-inf"))
            logits[tok] = 0.0
            out.append(pick(logits))
        return out
'''


def test_memoising_across_prompts_gains_nothing(sandbox, tiny):
    _, res = _evaluate_text(_ngram_with(MEMO), sandbox, tiny, settings={"repeats": 2})
    assert res.state is CandidateState.VALID, res.reason
    # every prompt of the objective is one no draft process has seen before: nothing
    # remembered matches, nothing is proposed
    assert res.metrics["mean_accepted_len"] == 1.0, res.metrics
    assert res.metrics["speedup"] < 1.05


HANG = '''
import time as _time

_calls = [0]


class NgramDraft(NgramDraft):  # noqa: F811
    def propose(self, k, pick):
        _calls[0] += 1
        if _calls[0] > 6:  # past the warm-up: in the middle of a timed decode
            while True:
                _time.sleep(1)
        return super().propose(k, pick)
'''


def test_a_draft_that_hangs_mid_decode_is_timeout(sandbox, tiny, monkeypatch):
    monkeypatch.setattr(spec_eval, "STEP_TIMEOUT_S", 2.0)
    started = time.perf_counter()
    _, res = _evaluate_text(_ngram_with(HANG), sandbox, tiny, settings={"sampling_n": 0})
    assert res.state is CandidateState.TIMEOUT, res.reason
    assert time.perf_counter() - started < 30


def test_the_staged_files_hold_no_held_out_tokens(sandbox, tiny):
    """What a draft's processes can read (the io dir, while each of them runs, and every
    payload) holds no held-out window of the lengths timed, and the staged token file only
    the training split."""
    from safetensors import safe_open

    seen: list[tuple[str, dict, dict[str, bytes]]] = []

    class Spy(EvalContext):
        def session(self, entry, payload, **kw):
            files = {str(p.relative_to(self.io_dir)): p.read_bytes()
                     for p in self.io_dir.rglob("*") if p.is_file()}
            seen.append((entry, dict(payload), files))
            return super().session(entry, payload, **kw)

    evaluator, res = _evaluate_text(_ngram_with(""), sandbox, tiny, spy=Spy,
                                    settings={"repeats": 2})
    assert res.state is CandidateState.VALID, res.reason
    entries = {e for e, _, _ in seen}
    assert entries == {spec_eval.TRAIN_ENTRY, spec_eval.DRAFT_ENTRY}
    prompts = [p for s in evaluator._prompt_sets(evaluator._timing_seed(), 3) for p in s]
    import numpy as np

    # held-out windows that the training split happens to contain too (the standard
    # library repeats itself: licence headers, boilerplate) are no leak
    train = evaluator.bundle().train_tokens.numpy().tobytes()
    needles = [b for b in (np.asarray(p, dtype=np.int64).tobytes() for p in prompts)
               if b not in train]
    assert len(needles) > len(prompts) // 2
    for entry, payload, files in seen:
        assert "prompts" not in payload and "heldout" not in json.dumps(payload)
        for name, data in files.items():
            assert not any(n in data for n in needles), (entry, name)
    train_files = next(f for e, _, f in seen if e == spec_eval.TRAIN_ENTRY)
    assert "train/tokens.safetensors" in train_files
    path = next(Path(p) for p in [evaluator.bundle().folder / "train-tokens.safetensors"])
    with safe_open(str(path), "pt") as fh:
        assert set(fh.keys()) == {"train"}
    # the target's blocks leave with the training session: timed sessions get its head
    timed_files = [f for e, _, f in seen if e == spec_eval.DRAFT_ENTRY]
    assert timed_files and all(not any(n.startswith("train/") for n in f) for f in timed_files)


# A draft whose process spins a thread while it waits for the next request: beside the
# timed target-only decoding it competes for the cores (on 2 shared cores that slows the
# baseline). With one process per prompt it never exists then; with one per pass it is
# caught by the kernel's account of its CPU time.
BUSY = '''
import threading as _threading


def _spin():
    while True:
        pass


class NgramDraft(NgramDraft):  # noqa: F811
    def __init__(self, target):
        super().__init__(target)
        _threading.Thread(target=_spin, daemon=True).start()
'''


@pytest.mark.parametrize("mode", ["prompt", "pass"])
def test_one_process_per_pass_is_valid_and_a_busy_draft_is_rejected(mode, sandbox, tiny):
    _, res = _evaluate_text(_ngram_with(""), sandbox, tiny, settings={"draft_process": mode})
    assert res.state is CandidateState.VALID, res.reason
    # per prompt: 2 prompts x 3 passes + the sampled check; per pass: 3 + 1
    assert res.metrics["sessions"] == (7 if mode == "prompt" else 4)
    # 200 new tokens: target-only decoding of a prompt takes long enough (50-100 ms) for the
    # kernel's 10 ms CPU-time ticks to see a spinning thread beside it
    _, busy = _evaluate_text(_ngram_with(BUSY), sandbox, tiny,
                             settings={"draft_process": mode, "n_new": 200, "sampling_n": 0})
    if mode == "pass":
        assert busy.state is CandidateState.REJECTED, busy.reason
        assert "while it was idle" in busy.reason
    else:
        assert busy.state is CandidateState.VALID, busy.reason


def test_a_spinning_channel_keeps_an_honest_pass_valid_and_a_busy_one_rejected(sandbox, tiny):
    """Both sides busy-wait 5 ms for each message: the draft's process spins after its last
    answer, yet stays under the idle check while target-only decoding is timed beside it;
    one that spins a thread of its own does not."""
    _, res = _evaluate_text(_ngram_with(""), sandbox, tiny,
                            settings={"draft_process": "pass", "channel_spin": "on",
                                      "n_new": 200, "sampling_n": 0})
    assert res.state is CandidateState.VALID, res.reason
    assert 0 < res.metrics["channel_rtt_ms"] < 50
    # a draft that works on the side is still caught with the spin on: the channel's bounded
    # spin is not what it could hide behind
    _, busy = _evaluate_text(_ngram_with(BUSY), sandbox, tiny,
                             settings={"draft_process": "pass", "channel_spin": "on",
                                       "n_new": 200, "sampling_n": 0})
    assert busy.state is CandidateState.REJECTED, busy.reason
    assert "while it was idle" in busy.reason


def test_an_unknown_channel_spin_is_a_config_error():
    spec = load_target(ROOT / "targets/speculative/ngram", ROOT,
                       {"evaluator": {"channel_spin": "fast"}})
    with pytest.raises(ConfigError, match="auto, on, off"):
        get("speculative")(spec)


def test_a_train_s_that_fills_the_timeout_is_a_config_error():
    spec = load_target(ROOT / "targets/speculative/eagle", ROOT,
                       {"evaluator": {"train_s": 120.0}, "timeout_s": 120})
    with pytest.raises(ConfigError, match="raise timeout_s to at least 160") as err:
        get("speculative")(spec)
    assert err.value.key == "evaluator.train_s"
    fits = load_target(ROOT / "targets/speculative/eagle", ROOT,
                       {"evaluator": {"train_s": 120.0}, "timeout_s": 300})
    get("speculative")(fits)


LEAVE_MEMOS = '''
import os as _os

_left = [p for p in ("/dev/shm/memo", "/dev/memo", "/dev/memo-dir") if _os.path.exists(p)]
if _os.path.islink("/dev/core") and _os.readlink("/dev/core") != "/proc/kcore":
    _left.append("/dev/core")
if _left:
    raise RuntimeError(f"an earlier process left {_left}")
for _path in ("/dev/shm/memo", "/dev/memo"):
    try:
        with open(_path, "w") as _fh:
            _fh.write("from an earlier process")
    except OSError:
        pass
try:
    _os.makedirs("/dev/memo-dir", exist_ok=True)
    _os.unlink("/dev/core")
    _os.symlink("memo: from an earlier process", "/dev/core")
except OSError:
    pass
'''


def test_no_process_finds_what_an_earlier_one_left_in_dev(sandbox, tiny):
    # the draft's module raises at import if it finds an earlier process's memo: every
    # timed session imports it again after the sandbox's /dev and /dev/shm were used
    _, res = _evaluate_text(_ngram_with(LEAVE_MEMOS), sandbox, tiny)
    assert res.state is CandidateState.VALID, res.reason
