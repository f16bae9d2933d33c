"""Sessions: a sandboxed child serving requests while the trusted side holds the clock.

Values cross as plain data and arrays only; every request is timed from the trusted side;
a hang, a crash, an exception or an import failure is a value with a reason."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from optimizer.sandbox import Sandbox, SandboxSettings
from optimizer.sandbox.channel import BoundaryError, Encoder, decode

PROGRAM = '''
import threading, time
import numpy as np

def echo(*args, **kwargs):
    return {"args": list(args), "kwargs": kwargs}

def double(x):
    return x * 2

def sleep(s):
    time.sleep(s)
    return s

def spin_threads(seconds, n):
    def work():
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    ts = [threading.Thread(target=work) for _ in range(n)]
    for t in ts: t.start()
    for t in ts: t.join()
    return n

def boom():
    raise ValueError("nope")

def die():
    import os
    os._exit(3)

def lazy():
    class Lazy(np.ndarray):
        pass
    return np.arange(4.0).view(Lazy)

def thing():
    return object()

def stop_clocks():
    for name in ("perf_counter", "monotonic", "time"):
        setattr(time, name, lambda: 0.0)
    return True
'''


@pytest.fixture(params=["warm", "cold"])
def sandbox(request: pytest.FixtureRequest, tmp_path: Path):
    root = tmp_path / "worktrees"
    (root / "c").mkdir(parents=True)
    (root / "c" / "prog.py").write_text(PROGRAM)
    warm = request.param == "warm"
    sb = Sandbox(SandboxSettings(rw_root=root if warm else None, preload=("numpy",),
                                 timeout_s=60))
    yield sb, root / "c", root / "io"
    sb.close()


FUNCS = ["echo", "double", "sleep", "spin_threads", "boom", "die", "lazy", "thing",
         "stop_clocks"]


def _open(sb, workdir, io, **kw):
    return sb.open_session("optimizer.sandbox.serve:functions",
                           {"module": "prog.py", "functions": FUNCS}, workdir=workdir,
                           io_dir=io, **kw)


def test_values_cross_as_what_they_were(sandbox) -> None:
    sb, workdir, io = sandbox
    with _open(sb, workdir, io, shm_bytes=1 << 22) as s:
        assert s.ok, s.error
        value = (1, 2.5, float("inf"), "x", None, True, [1, [2]], {"k": (3,)}, b"\x00\x01")
        r = s.request({"op": "call", "fn": "echo", "args": list(value), "kwargs": {"a": 1}},
                      timeout_s=10)
        assert r.ok, r.reason
        got = r.value["args"]
        assert got[:2] == [1, 2.5] and math.isinf(got[2]) and got[3:6] == ["x", None, True]
        assert got[6] == [1, [2]] and got[7] == {"k": (3,)} and got[8] == b"\x00\x01"
        assert r.value["kwargs"] == {"a": 1}
        small = np.arange(12, dtype=np.float16).reshape(3, 4)
        big = np.random.default_rng(0).standard_normal((300, 300))  # through shared memory
        for arr in (small, big, np.float32(1.5)):
            r = s.request({"op": "call", "fn": "double", "args": [arr]}, timeout_s=10)
            assert r.ok, r.reason
            assert np.asarray(r.value).dtype == np.asarray(arr).dtype
            assert np.array_equal(r.value, arr * 2)
        r = s.request({"op": "call", "fn": "lazy"}, timeout_s=10)
        assert type(r.value) is np.ndarray  # a subclass arrives as a plain array
        r = s.request({"op": "call", "fn": "thing"}, timeout_s=10)
        assert not r.ok and "cannot cross the boundary" in r.error
        r = s.request({"op": "call", "fn": "boom"}, timeout_s=10)
        assert not r.ok and "ValueError: nope" in r.error
        r = s.request({"op": "call", "fn": "open"}, timeout_s=10)
        assert not r.ok and "not a function this target lets the harness call" in r.error
    assert s.result is not None and s.result.response == {"served": 8}


def test_a_request_cut_by_the_sessions_own_limit_is_a_timeout(sandbox) -> None:
    """The session's limit (here 2 s) can fire before the request's own (10 s): the
    answer is a timeout either way, never a death with a reason (a hostile program's
    infinite loop was judged FAILED so on a busy machine)."""
    sb, workdir, io = sandbox
    s = _open(sb, workdir, io, timeout_s=2)
    try:
        assert s.ok, s.error
        r = s.request({"op": "call", "fn": "sleep", "args": [30]}, timeout_s=10)
        assert r.timed_out and not r.died
    finally:
        s.close()


def test_the_trusted_side_holds_the_clock(sandbox) -> None:
    sb, workdir, io = sandbox
    with _open(sb, workdir, io) as s:
        r = s.request({"op": "call", "fn": "spin_threads", "args": [0.3, 2]}, timeout_s=10,
                      cpu=True)
        assert r.ok and r.cpu_s is not None and r.cpu_s > 0.2  # another thread's time counts
        assert s.request({"op": "call", "fn": "stop_clocks"}, timeout_s=10).ok
        r = s.request({"op": "call", "fn": "sleep", "args": [0.2]}, timeout_s=10, cpu=True)
        assert r.ok and 0.19 < r.wall_s < 2.0
        assert r.cpu_s is not None and r.cpu_s < 0.1  # sleeping costs no CPU


def test_a_hang_is_killed_and_a_crash_reported(sandbox) -> None:
    sb, workdir, io = sandbox
    with _open(sb, workdir, io) as s:
        start = time.perf_counter()
        r = s.request({"op": "call", "fn": "sleep", "args": [30]}, timeout_s=0.5)
        assert r.timed_out and not r.ok and time.perf_counter() - start < 10
    with _open(sb, workdir, io) as s:
        r = s.request({"op": "call", "fn": "die"}, timeout_s=10)
        assert r.died and "exit code 3" in r.reason, r.reason


def test_an_import_failure_is_a_reason(sandbox, tmp_path: Path) -> None:
    sb, workdir, io = sandbox
    (workdir / "bad.py").write_text("raise RuntimeError('broken at import')\n")
    s = sb.open_session("optimizer.sandbox.serve:functions", {"module": "bad.py"},
                        workdir=workdir, io_dir=io)
    assert not s.ok and "broken at import" in s.error
    s.close()
    (workdir / "slow.py").write_text("import time\ntime.sleep(60)\n")
    s = sb.open_session("optimizer.sandbox.serve:functions", {"module": "slow.py"},
                        workdir=workdir, io_dir=io, ready_timeout_s=1.0)
    assert not s.ok and s.timed_out and "not ready" in s.error
    s.close()


def test_a_start_the_launch_limit_ends_is_a_timeout(sandbox) -> None:
    # the process's own limit kills it before the ready wait gives up: still a timeout,
    # never a failure (the race once made a hanging policy FAILED instead of TIMEOUT)
    sb, workdir, io = sandbox
    (workdir / "slow.py").write_text("import time\ntime.sleep(60)\n")
    s = sb.open_session("optimizer.sandbox.serve:functions", {"module": "slow.py"},
                        workdir=workdir, io_dir=io, timeout_s=1.0, ready_timeout_s=5.0)
    assert not s.ok and s.timed_out and "not ready" in s.error, s.error
    s.close()


def test_a_spinning_session_answers_as_a_blocking_one(sandbox) -> None:
    sb, workdir, io = sandbox
    with _open(sb, workdir, io, shm_bytes=1 << 22, spin_s=0.005) as s:
        assert s.ok and s.spin_s == 0.005, s.error
        for i in range(50):  # many round trips, each side spinning for the other
            r = s.request({"op": "call", "fn": "echo", "args": [i, "x"], "kwargs": {"k": i}},
                          timeout_s=10)
            assert r.ok and r.value == {"args": [i, "x"], "kwargs": {"k": i}}, r.reason
        big = np.random.default_rng(0).standard_normal((300, 300))  # through shared memory
        for arr in (np.arange(12.0), big):
            r = s.request({"op": "call", "fn": "double", "args": [arr]}, timeout_s=10)
            assert r.ok and np.array_equal(r.value, arr * 2), r.reason
        r = s.request({"op": "call", "fn": "boom"}, timeout_s=10)
        assert not r.ok and "ValueError: nope" in r.error
    assert s.result is not None and s.result.response == {"served": 53}
    with pytest.raises(ValueError):
        _open(sb, workdir, io, spin_s=-1.0)


def test_a_spinning_request_still_times_out(sandbox) -> None:
    sb, workdir, io = sandbox
    with _open(sb, workdir, io, spin_s=0.005) as s:
        start = time.perf_counter()
        r = s.request({"op": "call", "fn": "sleep", "args": [30]}, timeout_s=0.5)
        assert r.timed_out and not r.died and time.perf_counter() - start < 10
    with _open(sb, workdir, io, spin_s=5.0) as s:  # a spin longer than the request's limit
        assert s.ok, s.error
        r = s.request({"op": "call", "fn": "sleep", "args": [30]}, timeout_s=0.3)
        assert r.timed_out and 0.25 < r.wall_s < 2.0, r.wall_s


def test_a_child_that_dies_while_the_harness_spins_is_a_death(sandbox) -> None:
    sb, workdir, io = sandbox
    for spin_s in (0.005, 5.0):  # EOF ends the spin too: no waiting out a long one
        with _open(sb, workdir, io, spin_s=spin_s) as s:
            r = s.request({"op": "call", "fn": "die"}, timeout_s=10)
            assert r.died and not r.timed_out and "exit code 3" in r.reason, r.reason
            assert r.wall_s < 2.0, r.wall_s


def test_spinning_is_bounded_on_both_sides(sandbox) -> None:
    """Each side spins for at most spin_s and then sleeps: an idle child costs no CPU past
    its spin, and the harness waiting on a slow answer spins only at the start."""
    sb, workdir, io = sandbox
    with _open(sb, workdir, io, spin_s=0.005) as s:
        assert s.request({"op": "call", "fn": "double", "args": [1]}, timeout_s=10).ok
        cpu0 = s.cpu_s()
        time.sleep(0.3)
        cpu1 = s.cpu_s()
        assert cpu0 is not None and cpu1 is not None and cpu1 - cpu0 < 0.1
    with _open(sb, workdir, io, spin_s=0.2) as s:  # a spin long enough to see in the clocks
        assert s.request({"op": "call", "fn": "double", "args": [1]}, timeout_s=10).ok
        cpu0 = s.cpu_s()
        time.sleep(0.5)
        cpu1 = s.cpu_s()
        assert cpu0 is not None and cpu1 is not None and cpu1 - cpu0 > 0.05  # it spun
        ours = time.process_time()
        r = s.request({"op": "call", "fn": "sleep", "args": [0.6]}, timeout_s=10)
        ours = time.process_time() - ours
        assert r.ok and 0.05 < ours < 0.45, ours  # spun at the start, then slept


def test_the_codec_refuses_what_has_behaviour() -> None:
    class Sneaky:
        pass

    for value in (Sneaky(), {1: 2}, np.array([object()]), lambda: 1):
        with pytest.raises(BoundaryError):
            Encoder().encode(value)
    enc = Encoder()
    tree = enc.encode({"a": np.zeros(3)})
    tree["__dict__"]["a"]["__nd__"][0] = "|O"  # a forged object dtype on the way in
    with pytest.raises(BoundaryError):
        decode(tree, bytearray(24))


def test_records_of_plain_values_cross_whole_and_the_odd_ones_still_checked() -> None:
    import collections

    record = {"id": 3, "role": "tool", "tokens": 12, "w": 0.5, "uses": [1, 2], "x": None}
    def cross(value):
        return decode(json.loads(json.dumps(Encoder().encode(value))), bytearray())

    for value in (record, [record, dict(record, id=4)], {"l": [1, float("inf")], "t": (1,)},
                  collections.OrderedDict(a=1), [[1, "stub"], [2, "head", 64]],
                  [record, {"a": {"b": (1,)}}], [[1, 2], [3, [4]]],
                  [[1, "stub"], [2, float("inf")]], [[1, (2, 3)], [4]], [[1], {"a": 2}]):
        assert cross(value) == value
    back = cross({"f": float("nan"), "g": 1.5})
    assert math.isnan(back["f"]) and back["g"] == 1.5
    assert Encoder().encode({"a": [1, 2]}) == {"__dict__": {"a": [1, 2]}}
    assert Encoder().encode({"a": [1, float("inf")]})["__dict__"]["a"][1] == {"__f__": "inf"}
    with pytest.raises(BoundaryError):
        Encoder().encode({"a": 1, 2: "b"})  # a key that is not a string, even among plain values
    with pytest.raises(BoundaryError):
        Encoder().encode([record, {3: 1}])


def test_two_sessions_run_at_once_in_separate_processes(tmp_path: Path) -> None:
    root = tmp_path / "worktrees"
    (root / "c").mkdir(parents=True)
    (root / "c" / "prog.py").write_text(PROGRAM)
    with Sandbox(SandboxSettings(rw_root=root, preload=("numpy",), timeout_s=60)) as sb:
        a, b = _open(sb, root / "c", root / "io-a"), _open(sb, root / "c", root / "io-b")
        try:
            assert a.ok and b.ok and a.pid != b.pid
            assert a.request({"op": "call", "fn": "stop_clocks"}, timeout_s=10).ok
            r = b.request({"op": "call", "fn": "sleep", "args": [0.1]}, timeout_s=10)
            assert r.ok and r.wall_s >= 0.09
            # a plain call meanwhile gets a third warm process
            res = sb.call("optimizer.sandbox.serve:load_module", {}, workdir=root / "c")
            assert res.response is not None or res.error
        finally:
            a.close()
            b.close()


MEMO = '''
import ctypes, os

def leave():
    with open("/dev/shm/memo", "w") as fh:
        fh.write("the answer")
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.shmget(0x5EED, 4096, 0o1666)  # IPC_CREAT | 0666

def find():
    libc = ctypes.CDLL(None, use_errno=True)
    return {"file": os.path.exists("/dev/shm/memo"), "shm": libc.shmget(0x5EED, 4096, 0o666)}
'''


@pytest.mark.skipif(bool(__import__("optimizer.sandbox.bwrap", fromlist=["probe"]).probe()),
                    reason="needs bubblewrap (namespaces)")
def test_nothing_left_in_shared_memory_reaches_the_next_process(tmp_path: Path) -> None:
    root = tmp_path / "worktrees"
    (root / "c").mkdir(parents=True)
    (root / "c" / "memo.py").write_text(MEMO)
    with Sandbox(SandboxSettings(rw_root=root, timeout_s=60)) as sb:
        def ask(fn: str):
            with sb.open_session("optimizer.sandbox.serve:functions",
                                 {"module": "memo.py", "functions": [fn]},
                                 workdir=root / "c", io_dir=root / "io") as s:
                r = s.request({"op": "call", "fn": fn}, timeout_s=10)
                assert r.ok, r.reason
                return r.value

        assert ask("leave") >= 0  # a segment was made
        assert ask("find") == {"file": False, "shm": -1}


def test_a_workbench_hides_its_cache_from_candidates(tmp_path: Path) -> None:
    from optimizer.targets import load_target
    from optimizer.workbench import Workbench

    root = Path(__file__).resolve().parents[3]
    cache = tmp_path / "ws" / ".optimizer" / "cache"
    cache.mkdir(parents=True)
    (cache / "secret.txt").write_text("held-out tokens")
    target = load_target(root / "targets/function/topk_sampling", root)
    program = (target.path / "program.py").read_text().replace(
        "def filter_probs(logits, top_k, top_p):",
        "def filter_probs(logits, top_k, top_p):\n"
        f"    assert not __import__('os').path.exists({str(cache / 'secret.txt')!r}), 'seen'")
    with Workbench(target, workspace=tmp_path / "ws", cache_dir=cache) as bench:
        res = bench.evaluate({"program.py": program})
    from optimizer.sandbox.bwrap import probe

    if probe():
        pytest.skip("without bubblewrap the cache cannot be hidden")
    assert res.ok, res.reason
