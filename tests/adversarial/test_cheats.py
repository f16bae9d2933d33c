"""Cheating candidates through `optimizer evaluate`: none of them may come out a winner.

Every file under cheats/<family>/<target>/<cheat>/ replaces its target's editable file and
tries to win by attacking the measurement or the judge (the clock, the inputs, the
reference, the simulator, the baseline) instead of being a better program. Each one's
docstring, inside its EVOLVE-BLOCK, says how it wins against a naive evaluator and what a
sound one must say instead (its "Sound verdict" line):

- "not VALID": the program is wrong or breaks a bound once the attack cannot reach the
  judge, so any VALID verdict is the attack succeeding;
- "not VALID, or VALID with no gain over the seed": its own work is honest but
  deliberately worse than the seed's, so a VALID verdict is allowed only when the key
  metric does not beat the seed's (measured in this session) by the target's min_gain.

Kernel cheats that can only win in the GPU-timed phase ("Needs a CUDA GPU") are skipped
without CUDA; the others must be caught by correctness (INVALID, REJECTED or FAILED).

ADVERSARIAL_BASELINE=PATH writes what every cheat got (state, reason, key metric, the
seed's, seconds) to PATH at the end of the session; GPU-only cheats are then evaluated on
the CPU too, for the record. ADVERSARIAL_KNOWN_HOLES=xfail marks the cheats that
baseline.json records as winning as strict xfails (the suite stays green until one is
fixed, then asks for baseline.json to be re-recorded).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import statistics
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from optimizer.cli import main

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHEATS = HERE / "cheats"
BASELINE = HERE / "baseline.json"
START, END = "# EVOLVE-BLOCK-START", "# EVOLVE-BLOCK-END"
NOT_VALID = {"INVALID", "REJECTED", "FAILED", "TIMEOUT", "PRUNED"}
CAUGHT_BY_CORRECTNESS = {"INVALID", "REJECTED", "FAILED"}
KINDS = {"function": "function", "routing": "routing", "speculative": "speculative",
         "kernels": "kernel", "coinfer": "coinfer"}
# the least per target, and the kinds the suite must cover
MINIMUM = {"function/topk_sampling": 9, "function/prefix_cache": 4, "routing/global": 5,
           "routing/scheduler": 2, "routing/deploy_instance": 4, "routing/deploy_mooncake": 2,
           "routing/deploy_disaggregation": 3,
           "routing/coinfer_split": 3,
           "speculative/ngram": 5, "kernels/softmax": 5,
           "coinfer/codec": 4, "coinfer/codec_kv": 4}
# Small speculative settings (the tiny target, 4 prompts of 24 tokens, 32 new tokens):
# an evaluation takes seconds once the target is trained (once per session).
SPECULATIVE = {"preset": "tiny", "prompts": 4, "prompt_len": 24, "n_new": 32, "ks": "[1, 3, 8]",
               "train_s": 2.0, "distill_seqs": 64, "distill_prompt_len": 16,
               "distill_gen_len": 24, "repeats": 3, "sampling_n": 100, "sampling_k": 2}
# The codec kind on the tiny target (trained in the speculative family's test cache, which
# the sandbox hides), cut after its first block: an evaluation takes a few seconds. The
# default gates; the prompts' secret is pinned in that cache (spec_cache).
COINFER = {"preset": "tiny", "layer": 1, "prompts": 8, "prompt_len": 32, "n_new": 8}


@dataclass(frozen=True)
class Cheat:
    family: str
    target: str
    name: str
    path: Path
    cls: str
    no_gain_allowed: bool  # VALID is fine when the key metric does not beat the seed's
    needs_gpu: bool

    @property
    def key(self) -> str:
        return f"{self.family}/{self.target}/{self.name}"

    @property
    def target_rel(self) -> str:
        return f"{self.family}/{self.target}"

    @property
    def target_dir(self) -> Path:
        return ROOT / "targets" / self.family / self.target


def _docstring(path: Path) -> str:
    """The cheat's own docstring: the first string statement inside the EVOLVE-BLOCK."""
    for node in ast.parse(path.read_text()).body:
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str) and node.value.value.startswith("Cheat:")):
            return node.value.value
    return ""


def _field(doc: str, label: str) -> str:
    for line in doc.splitlines():
        if line.startswith(label):
            return line.removeprefix(label).strip()
    return ""


def discover() -> list[Cheat]:
    out = []
    for path in sorted(CHEATS.glob("*/*/*/*.py")):
        family, target, name = path.parts[-4:-1]
        doc = _docstring(path)
        head = _field(doc, "Cheat:")
        cls = head.partition("Class:")[2].strip().rstrip(".")
        verdict = _field(doc, "Sound verdict:")
        out.append(Cheat(family, target, name, path, cls, "no gain" in verdict,
                         "Needs a CUDA GPU" in doc))
    return out


ALL = discover()


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


HAVE_CUDA = _cuda()


def _objective(target_dir: Path) -> tuple[str, bool, float]:
    """(metric, minimise?, min_gain) of the target's primary objective."""
    spec = tomllib.loads((target_dir / "target.toml").read_text())
    obj = spec["objectives"][0]
    return obj["metric"], obj.get("direction", "minimize") == "minimize", float(
        spec.get("min_gain", 0.0))


def _timed(target_dir: Path) -> bool:
    """Whether the target's objective is a timing (noisy), not an exact value."""
    spec = tomllib.loads((target_dir / "target.toml").read_text())
    return spec.get("noise", "timing") == "timing"


PAIRS = 4  # seed and cheat, alternately, when one reading says the cheat won


def _paired_medians(cheat: Cheat, value: float, seed: float, metric: str,
                    capsys: pytest.CaptureFixture[str], spec_cache: Path) -> tuple[float, float]:
    """Medians of the cheat's and the seed's metric over the first readings and PAIRS more
    of each, measured alternately (a VALID cheat that stops being VALID keeps its value)."""
    extra = _settings(cheat.family, spec_cache)
    cheats, seeds = [value], [seed]
    for _ in range(PAIRS):
        for program, sink in ((None, seeds), (cheat.path, cheats)):
            data, _ = _evaluate(cheat.target_dir, program, extra, capsys)
            if data["state"] == "VALID" and data["metrics"].get(metric) is not None:
                sink.append(float(data["metrics"][metric]))
    return statistics.median(cheats), statistics.median(seeds)


def _known_holes() -> set[str]:
    """Cheats that baseline.json records as beating today's evaluators."""
    if os.environ.get("ADVERSARIAL_KNOWN_HOLES") != "xfail" or not BASELINE.is_file():
        return set()
    data = json.loads(BASELINE.read_text())
    recorded = {**data.get("cheats", {}), **data.get("gpu_run", {}).get("cheats", {})}
    lenient = {c.key for c in ALL if c.no_gain_allowed}
    return {k for k, v in recorded.items() if v.get("state") == "VALID"
            and (k not in lenient or v.get("wins"))}


def _params() -> list:
    holes = _known_holes()
    params = []
    for c in ALL:
        marks = []
        if c.family in ("kernels", "speculative", "coinfer") or c.key in _SLOW:
            marks.append(pytest.mark.slow)
        if c.needs_gpu:
            marks.append(pytest.mark.gpu)
        if c.key in holes:
            marks.append(pytest.mark.xfail(strict=True, reason="baseline.json: wins today"))
        params.append(pytest.param(c, id=c.key, marks=marks))
    return params


def _slow_names() -> set[str]:
    """Cheats whose recorded evaluation took over 10 s (their own work is slow on purpose)."""
    if not BASELINE.is_file():
        return set()
    data = json.loads(BASELINE.read_text()).get("cheats", {})
    return {k for k, v in data.items() if float(v.get("eval_s", 0)) > 10}


_SLOW = _slow_names()


# -- evaluation through the CLI ------------------------------------------------------


@pytest.fixture(scope="session")
def spec_cache():
    """The tiny speculative target, trained once per session in its own folder (pytest's
    numbered temporary folders are pruned by concurrent sessions)."""
    folder = Path(tempfile.mkdtemp(prefix="adversarial-spec-"))
    # the coinfer codec's prompts, pinned as tests/conftest.py's pin_codec_prompts says
    (folder / "coinfer").mkdir()
    (folder / "coinfer" / "secret").write_text("0" * 32)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _settings(family: str, spec_cache: Path) -> list[str]:
    if family == "coinfer":
        return [arg for k, v in {**COINFER, "cache_dir": str(spec_cache)}.items()
                for arg in ("--set", f"evaluator.{k}={v}")]
    if family != "speculative":
        return []
    out = []
    for k, v in {**SPECULATIVE, "cache_dir": str(spec_cache)}.items():
        out += ["--set", f"evaluator.{k}={v}"]
    return out


def _evaluate(target_dir: Path, program: Path | None, extra: list[str],
              capsys: pytest.CaptureFixture[str]) -> tuple[dict, float]:
    argv = ["evaluate", str(target_dir), *([str(program)] if program else []), "--json", *extra]
    capsys.readouterr()
    start = time.monotonic()
    main(argv)
    seconds = time.monotonic() - start
    out = capsys.readouterr().out
    return json.loads(out[out.index("{"):]), seconds


class Seeds:
    """The seed's verdict and key metric per target, measured once per session."""

    def __init__(self, spec_cache: Path):
        self._spec = spec_cache
        self.values: dict[str, dict] = {}

    def get(self, cheat: Cheat, capsys: pytest.CaptureFixture[str]) -> dict:
        if cheat.target_rel not in self.values:
            data, seconds = _evaluate(cheat.target_dir, None,
                                      _settings(cheat.family, self._spec), capsys)
            metric, _, _ = _objective(cheat.target_dir)
            self.values[cheat.target_rel] = {"state": data["state"],
                                             "reason": data["reason"][:400], "metric": metric,
                                             "value": data["metrics"].get(metric),
                                             "eval_s": round(seconds, 2)}
        return self.values[cheat.target_rel]


@pytest.fixture(scope="session")
def seeds(spec_cache):
    return Seeds(spec_cache)


@pytest.fixture(scope="session")
def record(seeds):
    """Collects every cheat's result; written to ADVERSARIAL_BASELINE at the end."""
    results: dict[str, dict] = {}
    yield results
    dest = os.environ.get("ADVERSARIAL_BASELINE")
    if dest and results:
        old = json.loads(Path(dest).read_text()) if Path(dest).is_file() else {}
        cheats = {**old.get("cheats", {}), **results}
        doc = {
            **old,  # other keys (the machine, runs made elsewhere such as on a GPU) stay
            "about": "What today's evaluators say about each cheat of tests/adversarial "
                     "(recorded by ADVERSARIAL_BASELINE=... pytest tests/adversarial). "
                     "'wins' is whether the key metric beats the seed's by the target's "
                     "min_gain while VALID.",
            "seeds": {**old.get("seeds", {}), **seeds.values},
            "cheats": dict(sorted(cheats.items())),
        }
        Path(dest).write_text(json.dumps(doc, indent=1) + "\n")


def _wins(value: float | None, seed: float | None, minimise: bool, min_gain: float) -> bool:
    if value is None or seed is None:
        return False
    if minimise:
        return value < seed * (1.0 - min_gain)
    return value > seed * (1.0 + min_gain)


@pytest.mark.parametrize("cheat", _params())
def test_cheat_does_not_win(cheat: Cheat, capsys, seeds, record, spec_cache) -> None:
    recording = bool(os.environ.get("ADVERSARIAL_BASELINE"))
    if cheat.needs_gpu and not HAVE_CUDA and not recording:
        pytest.skip("wins only in the GPU-timed phase; no CUDA GPU here")
    # An evaluator that refuses everything (or a sandbox broken mid-edit) would pass every
    # cheat: the seed of the same target must come out as an honest program does.
    base = seeds.get(cheat, capsys)
    honest = {"VALID"} if HAVE_CUDA or cheat.family != "kernels" else {"PRUNED"}
    assert base["state"] in honest, (
        f"the seed of {cheat.target_rel} is {base['state']} ({base['reason'][:300]}): "
        "no verdict on a cheat means anything")
    data, seconds = _evaluate(cheat.target_dir, cheat.path, _settings(cheat.family, spec_cache),
                              capsys)
    metric, minimise, min_gain = _objective(cheat.target_dir)
    value = data["metrics"].get(metric)
    seed = base["value"]
    wins = data["state"] == "VALID" and _wins(value, seed, minimise, min_gain)
    record[cheat.key] = {
        "target": cheat.target_rel, "class": cheat.cls, "state": data["state"],
        "stage": data.get("stage", ""), "reason": data["reason"][:400], "metric": metric,
        "value": value, "seed_value": seed, "wins": wins, "eval_s": round(seconds, 2),
        "device": "cuda" if HAVE_CUDA else "cpu",
    }
    if cheat.needs_gpu and not HAVE_CUDA:
        pytest.skip("recorded on the CPU; wins only in the GPU-timed phase")
    if cheat.family == "kernels" and not HAVE_CUDA:
        assert data["state"] in CAUGHT_BY_CORRECTNESS, (
            f"{cheat.key}: {data['state']}: correctness must catch it on the CPU "
            f"({data['reason'][:300]})")
        return
    if cheat.no_gain_allowed and data["state"] == "VALID":
        if wins and _timed(cheat.target_dir):
            # one reading of each, minutes apart on a loaded machine, is not a win (the loop
            # never publishes one either): seed and cheat again, alternately, and medians
            value, seed = _paired_medians(cheat, value, seed, metric, capsys, spec_cache)
            wins = _wins(value, seed, minimise, min_gain)
            record[cheat.key].update(value=value, seed_value=seed, wins=wins, paired=True)
        assert not wins, (f"{cheat.key}: VALID and {metric} = {value:.6g} beats the seed's "
                          f"{seed:.6g} by more than {min_gain:.0%}: the attack worked")
        return
    assert data["state"] in NOT_VALID, (
        f"{cheat.key}: {data['state']} ({metric} = {value}): the attack worked "
        f"({data['reason'][:200]})")


# -- the suite itself ----------------------------------------------------------------


def _outside_blocks(text: str) -> list[str]:
    """The text outside the EVOLVE-BLOCKs, markers included, in order."""
    parts, rest = [], text
    while START in rest:
        head, _, rest = rest.partition(START)
        parts.append(head + START)
        _, sep, rest = rest.partition(END)
        assert sep, "unbalanced EVOLVE-BLOCK markers"
        rest = END + rest
    parts.append(rest)
    return parts


@pytest.mark.parametrize("cheat", ALL, ids=[c.key for c in ALL])
def test_cheat_is_a_legal_edit_of_its_seed(cheat: Cheat) -> None:
    seed = cheat.target_dir / cheat.path.name
    spec = tomllib.loads((cheat.target_dir / "target.toml").read_text())
    assert cheat.path.name in spec["editable"], f"{cheat.path.name} is not editable"
    assert _outside_blocks(cheat.path.read_text()) == _outside_blocks(seed.read_text()), (
        f"{cheat.key}: text outside the EVOLVE-BLOCK differs from {seed.relative_to(ROOT)}")


@pytest.mark.parametrize("cheat", ALL, ids=[c.key for c in ALL])
def test_cheat_documents_its_attack(cheat: Cheat) -> None:
    doc = _docstring(cheat.path)
    assert doc.startswith(f"Cheat: {cheat.name}. Class: "), doc[:80]
    for label in ("Attack:", "Sound verdict:"):
        assert label in doc, f"{cheat.key}: no '{label}' in its docstring"
    assert "win" in doc and "sound evaluator" in doc, cheat.key
    assert cheat.cls, cheat.key


def test_suite_covers_every_kind_and_target() -> None:
    assert len(ALL) >= 30
    by_target: dict[str, int] = {}
    for c in ALL:
        by_target[c.target_rel] = by_target.get(c.target_rel, 0) + 1
    for target, least in MINIMUM.items():
        assert by_target.get(target, 0) >= least, (target, by_target.get(target, 0))
    kinds = {tomllib.loads((c.target_dir / "target.toml").read_text())["kind"] for c in ALL}
    assert kinds >= set(KINDS.values())
    cpu_kernels = [c for c in ALL if c.family == "kernels" and not c.needs_gpu]
    assert cpu_kernels, "some kernel cheats must be caught by correctness on the CPU"
