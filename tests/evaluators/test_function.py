"""The `function` kind through the real sandbox, and `optimizer evaluate` on built-in targets."""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path

import pytest

import evaluators
from evaluators._base import EvalContext
from optimizer.cli import main
from optimizer.records import CandidateState
from optimizer.sandbox import Sandbox, SandboxSettings
from optimizer.targets import load_target

ROOT = Path(__file__).resolve().parents[2]
TOPK = ROOT / "targets/function/topk_sampling"
SEED = (TOPK / "program.py").read_text()


def _evaluate(tmp_path: Path, program: str, timeout_s: float = 30.0):
    target = load_target(TOPK, ROOT)
    cand = tmp_path / "rw" / "cand"
    shutil.copytree(TOPK, cand)
    (cand / "program.py").write_text(program)
    io_dir, scratch = tmp_path / "rw" / "io", tmp_path / "scratch"
    io_dir.mkdir()
    scratch.mkdir()
    evaluator = evaluators.get("function")(target)
    fields = {"timeout_s": timeout_s}
    with Sandbox(SandboxSettings(**fields)) as sandbox:
        ctx = EvalContext(sandbox, secrets.randbits(63), scratch, io_dir, timeout_s=timeout_s)
        return evaluator.evaluate(cand, ctx)


def test_seed_is_valid_with_metrics(tmp_path: Path) -> None:
    res = _evaluate(tmp_path, SEED)
    assert res.state is CandidateState.VALID, res.reason
    assert res.objectives[0] == res.metrics["time_s"] > 0


@pytest.mark.parametrize(
    ("program", "state", "needle"),
    [
        (
            SEED.replace("keep = (cum - probs) < top_p", "keep = cum < top_p"),
            CandidateState.INVALID,
            "wrong answer",
        ),
        (
            SEED.replace("out[start + rows, idx] = probs", "pass"),
            CandidateState.INVALID,
            "wrong answer",
        ),
        (
            SEED.replace("return out", "return out.astype('float64')"),
            CandidateState.INVALID,
            "dtype",
        ),
        (
            SEED.replace("def filter_probs", "def filter_probz"),
            CandidateState.FAILED,
            "filter_probs",
        ),
        (SEED + "\nraise SystemExit(0)\n", CandidateState.FAILED, "SystemExit"),
        (SEED + "\nraise KeyboardInterrupt\n", CandidateState.FAILED, "KeyboardInterrupt"),
        (SEED + "\nimport os\nos._exit(0)\n", CandidateState.FAILED, "no result"),
        (
            SEED.replace(
                "def filter_probs(logits, top_k, top_p):",
                "def filter_probs(logits, top_k, top_p):\n    while True:\n        pass",
            ),
            CandidateState.TIMEOUT,
            "killed",
        ),
        ("def filter_probs(:\n", CandidateState.REJECTED, "syntax error"),
    ],
)
def test_bad_candidates_get_a_state_and_reason(
    tmp_path: Path, program: str, state: CandidateState, needle: str
) -> None:
    res = _evaluate(tmp_path, program, timeout_s=4.0)
    assert res.state is state, (res.state, res.reason)
    assert needle in res.reason


def test_cli_evaluate_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", str(ROOT / "targets/function/prefix_cache"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "VALID" and 0.3 < data["metrics"]["hit_ratio"] < 0.6


def test_cli_evaluate_from_another_directory_uses_the_targets_repository(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # run from /tmp (a directory the sandbox replaces with its own): the workspace is the
    # git repository holding the target, so the candidate's folder stays visible to it
    monkeypatch.chdir("/tmp")
    assert main(["evaluate", str(ROOT / "targets/function/prefix_cache"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "VALID"


def test_cli_evaluate_candidate_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "policy.py"
    bad.write_text(
        (ROOT / "targets/function/prefix_cache/policy.py")
        .read_text()
        .replace("SAMPLE_SIZE = 2 ", "SAMPLE_SIZE = 0 ")
    )
    assert main(["evaluate", str(ROOT / "targets/function/prefix_cache"), str(bad)]) == 1
    assert "SAMPLE_SIZE must be an int in 1..64" in capsys.readouterr().out


def test_cli_evaluate_unknown_file_name_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.py"
    other.write_text("x = 1\n")
    code = main(["evaluate", str(ROOT / "targets/function/prefix_cache"), str(other), str(other)])
    assert code == 2
    assert "matches no editable file" in capsys.readouterr().err


def test_cli_evaluate_unknown_sandbox_key_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["evaluate", str(ROOT / "targets/function/prefix_cache"),
                 "--set", "sandbox.memory_gb=2"])
    assert code == 2
    err = capsys.readouterr().err
    assert "sandbox.memory_gb" in err and "memory_mb" in err


def test_a_program_wrong_only_off_the_hand_written_cases_is_caught_by_fuzzing(
        tmp_path: Path) -> None:
    """Right on every hand-written case (their vocabularies are 300 tokens and more) but
    wrong on small vocabularies: the target's declared domain, fuzzed, finds it."""
    program = SEED.replace(
        "    return out\n",
        "    if vocab < 64:\n        out = out * np.float32(0.99)\n    return out\n", 1)
    res = _evaluate(tmp_path, program)
    assert res.state is CandidateState.INVALID, res.reason
    assert "on filter_probs(array(" in res.reason, res.reason


def test_the_topk_reference_is_the_full_stable_sort_ties_included() -> None:
    import importlib.util

    import numpy as np

    spec = importlib.util.spec_from_file_location("topk_evaluate", TOPK / "evaluate.py")
    ev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ev)
    rng = np.random.default_rng(7)
    for trial in range(200):
        rows, vocab = int(rng.integers(1, 8)), int(rng.integers(1, 300))
        x = (rng.integers(-4, 4, (rows, vocab)) if trial % 2 else
             rng.standard_normal((rows, vocab))).astype(np.float32)  # odd trials: many ties
        k = int(rng.integers(-2, vocab + 3))
        want = np.argsort(-x.astype(np.float64), axis=1, kind="stable")[:, :max(1, min(k, vocab))]
        assert np.array_equal(ev._top_order(x.astype(np.float64), max(1, min(k, vocab))), want)


def test_a_seed_saved_with_a_byte_order_mark_is_valid_and_one_not_utf8_is_refused(
        tmp_path: Path) -> None:
    res = _evaluate(tmp_path, "\ufeff" + SEED)
    assert res.state is CandidateState.VALID, res.reason
    cand = tmp_path / "latin"
    shutil.copytree(TOPK, cand)
    (cand / "program.py").write_bytes(SEED.replace("A first", "A f\u00efrst").encode("latin-1"))
    from optimizer.errors import ConfigError

    with pytest.raises(ConfigError, match="not UTF-8"):
        load_target(cand, tmp_path)
    res = evaluators.get("function")(load_target(TOPK, ROOT)).static_check(cand)
    assert res.state is CandidateState.REJECTED and "not UTF-8" in res.reason


# -- which phase holds the device's timing lock --------------------------------------------
IO_EVALUATE = """
import time

from evaluators.function.harness import load_stand_in, timed


def validate(path):
    load_stand_in(path).cost()


def evaluate(path):
    mod = load_stand_in(path)
    time.sleep(WAIT_S)  # waiting on I/O: no clock decides the metric here
    value, seconds = timed(mod.cost)
    return {"cost": float(value), "call_s": seconds}
"""


class _CountingLock:
    """A device lock that counts how often, and for how long, it was held."""

    def __init__(self) -> None:
        import threading

        self._lock = threading.RLock()
        self.held = 0
        self.held_s = 0.0
        self._since = 0.0

    def __enter__(self) -> None:
        import time

        self._lock.acquire()
        self.held += 1
        self._since = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        import time

        self.held_s += time.perf_counter() - self._since
        self._lock.release()


def _io_target(tmp_path: Path, noise: str, timed: str | None, wait_s: float):
    from evaluators.function.toy import TOY_PROGRAM, TOY_TARGET

    folder = tmp_path / "targets" / "io"
    folder.mkdir(parents=True)
    setting = f'\n[evaluator]\nrepeats = 1\ntimed = "{timed}"\n' if timed else (
        "\n[evaluator]\nrepeats = 1\n")
    (folder / "target.toml").write_text(
        TOY_TARGET.replace('noise = "deterministic"', f'noise = "{noise}"') + setting)
    (folder / "program.py").write_text(TOY_PROGRAM)
    (folder / "evaluate.py").write_text(IO_EVALUATE.replace("WAIT_S", str(wait_s)))
    return load_target(folder, tmp_path)


def _performance_in_threads(tmp_path: Path, target, slots: int, lock: object) -> float:
    """``slots`` evaluations of the seed at once, one per thread, sharing ``lock`` as the
    slots of one device do; the wall time they took together."""
    import threading
    import time

    evaluator = evaluators.get("function")(target)
    results = []
    with Sandbox(SandboxSettings(timeout_s=60)) as sandbox:
        def one(i: int) -> None:
            io_dir, scratch = tmp_path / "rw" / f"io{i}", tmp_path / f"scratch{i}"
            io_dir.mkdir(parents=True)
            scratch.mkdir()
            ctx = EvalContext(sandbox, secrets.randbits(63), scratch, io_dir, timeout_s=60,
                              device_lock=lock)
            results.append(evaluator.performance(target.path, ctx))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(slots)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
    assert [r.state for r in results] == [CandidateState.VALID] * slots, results
    return wall


@pytest.mark.parametrize(("noise", "timed", "held"), [
    ("deterministic", None, "never"),  # a deterministic metric times nothing by default
    ("timing", None, "evaluate"),  # a timed one times all of evaluate() by default
    ("timing", "calls", "calls"),
    ("timing", "nothing", "never"),
    ("deterministic", "evaluate", "evaluate"),
])
def test_only_the_timed_phase_holds_the_device(tmp_path: Path, noise: str, timed: str | None,
                                               held: str) -> None:
    target = _io_target(tmp_path, noise, timed, wait_s=0.3)
    lock = _CountingLock()
    _performance_in_threads(tmp_path, target, 1, lock)
    if held == "never":
        assert lock.held == 0
    elif held == "evaluate":
        assert lock.held == 1 and lock.held_s >= 0.3  # around the whole call, its wait too
    else:
        assert lock.held == 1 and lock.held_s < 0.3  # around the timed call alone


def test_a_bad_timed_setting_is_a_config_error(tmp_path: Path) -> None:
    from optimizer.errors import ConfigError

    target = _io_target(tmp_path, "timing", "sometimes", wait_s=0.0)
    with pytest.raises(ConfigError, match="evaluate.*calls.*nothing"):
        evaluators.get("function")(target)


def test_evaluations_that_wait_on_io_overlap_on_one_device(tmp_path: Path) -> None:
    """Four slots on one device, each evaluation waiting 0.5 s: together about one wait
    when nothing is timed, four waits in a row when all of evaluate() is."""
    free = _performance_in_threads(
        tmp_path / "free", _io_target(tmp_path / "free", "deterministic", None, 0.5), 4,
        _CountingLock())
    held = _performance_in_threads(
        tmp_path / "held", _io_target(tmp_path / "held", "deterministic", "evaluate", 0.5), 4,
        _CountingLock())
    assert held > 4 * 0.5
    assert free < held - 1.0, (free, held)


def _candidates_per_second(repo: Path, slots: int, n: int) -> float:
    """A night of the toy target with ``slots`` slots: candidates per second of its search,
    from the seed's line to the n-th candidate's (the I/O-bound figure of the slots, with
    ``SLOW_EVALUATE`` and ``TOY_EVAL_S`` set)."""
    import time

    from optimizer.config import load_experiment
    from optimizer.loop import run

    cfg = load_experiment(
        repo / "experiments/toy.toml",
        [f"budget.max_candidates={n + 1}", "budget.minutes=30", "stats.minimize_trials=0",
         "targets.toy.evaluator.repeats=1", f"run.slots={slots}",
         f"proposer.concurrency={slots}", f"state_dir=.optimizer-{slots}"],
        workspace=repo)
    stamps: list[float] = []
    run(cfg, say=lambda line: stamps.append(time.monotonic()) if "] c0" in line else None)
    if len(stamps) <= n:
        raise RuntimeError(f"the toy night evaluated {len(stamps)} candidates, not {n + 1}")
    return n / (stamps[n] - stamps[0])


@pytest.mark.slow
def test_four_slots_evaluate_three_times_the_candidates_of_one_when_io_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy target's evaluate() waits 0.5 s and uses no CPU (a deterministic metric):
    its evaluations hold no device lock, so four slots evaluate about four at once."""
    from evaluators.function import toy

    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("TOY_EVAL_S", "0.5")
    repo = toy.make_toy_repo(tmp_path / "repo", toy.SLOW_EVALUATE)
    one = _candidates_per_second(repo, 1, 16)
    four = _candidates_per_second(repo, 4, 32)
    # Measured on 2 cores (2026-12-05): 3.29x to 3.42x, where holding the lock around every
    # evaluate() gave 2.0x to 2.9x; on 2026-12-06 on a quiet machine: median 3.41x (six
    # pairs), 3.46x with the 0.5 ms GIL switch interval and the slots' sandboxes started
    # while the seed is evaluated (bench/slots_io_bound.py). These nights last 9 and 5 s;
    # over nights of 14 s each (24 candidates and 96), counting the VALID ones (each waited
    # the 0.5 s), four slots evaluate 3.7-3.8x (bench/results/slots-io-bound-2026-12-06.json).
    assert four >= 3.0 * one, (one, four)
