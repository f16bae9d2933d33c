"""A GPU night's start (loop.prepare_night): every slot's sandbox of every GPU target
started and every GPU evaluator's night-wide work done, at once, before the first
candidate; CPU targets are left alone, and a failure is said, not raised."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from optimizer import loop
from optimizer.night import RunSummary


class _Evaluator:
    def __init__(self, gpu: bool, fail: bool = False):
        self.gpu, self.fail, self.calls = gpu, fail, []

    def prepare(self, ctx) -> None:
        self.calls.append((ctx.device, threading.current_thread().name))
        time.sleep(0.3)
        if self.fail:
            raise RuntimeError("no references today")


class _Sandbox:
    started: list[str] = []

    def __init__(self, name: str):
        self.name = name

    def warm_up(self) -> None:
        time.sleep(0.3)
        _Sandbox.started.append(self.name)


def test_gpu_lanes_are_prepared_at_once_and_cpu_lanes_not(monkeypatch, tmp_path):
    gpu, broken, cpu = _Evaluator(True), _Evaluator(True, fail=True), _Evaluator(False)
    lanes = [SimpleNamespace(evaluator=e, target=SimpleNamespace(name=n, timeout_s=60),
                             slots=[SimpleNamespace(index=i) for i in range(3)])
             for e, n in ((gpu, "softmax"), (broken, "gemm"), (cpu, "routing"))]
    monkeypatch.setattr(loop, "device_for", lambda ev: "cuda" if ev.gpu else "cpu")
    folders = []

    def context(config, target, key, sandbox, **kw):
        io, scratch = tmp_path / f"io-{target.name}", tmp_path / f"scratch-{target.name}"
        io.mkdir()
        scratch.mkdir()
        folders.extend((io, scratch))
        return SimpleNamespace(io_dir=io, scratch=scratch, **kw)

    monkeypatch.setattr(loop, "fresh_context", context)
    for lane in lanes:
        lane.sandbox = lambda r, slot, name=lane.target.name: _Sandbox(f"{name}/{slot.index}")
    said: list[str] = []
    r = SimpleNamespace(summary=RunSummary("e", "n", "p"), say=said.append, config=None)
    _Sandbox.started = []
    t0 = time.monotonic()
    loop.prepare_night(r, lanes)  # type: ignore[arg-type]
    took = time.monotonic() - t0
    assert took < 1.5  # eight jobs of 0.3 s side by side, not one after another (2.4 s)
    assert gpu.calls and gpu.calls[0][0] == "cuda" and broken.calls and not cpu.calls
    assert sorted(_Sandbox.started) == [f"{t}/{i}" for t in ("gemm", "softmax")
                                        for i in range(3)]
    assert r.summary.prepare_s > 0
    assert len(said) == 1 and "8 jobs" in said[0] and "no references today" in said[0]
    assert len(folders) == 4 and not any(f.exists() for f in folders)  # failed one's too


def test_a_night_without_gpu_targets_prepares_nothing(monkeypatch):
    monkeypatch.setattr(loop, "device_for", lambda ev: "cpu")
    said: list[str] = []
    r = SimpleNamespace(summary=RunSummary("e", "n", "p"), say=said.append)
    lane = SimpleNamespace(evaluator=_Evaluator(False), target=SimpleNamespace(name="t"),
                           slots=[SimpleNamespace(index=0)])
    loop.prepare_night(r, [lane])  # type: ignore[arg-type]
    assert not said and r.summary.prepare_s == 0.0


def test_fewer_targets_than_slots_warm_each_slots_cpu_sandbox(monkeypatch):
    """The seeds' time starts every slot's sandbox of each CPU target (in the
    background); with as many targets as slots or more nothing starts ahead (a kernel
    night of 5 targets on 4 slots would start 20 processes of torch at once)."""
    monkeypatch.setattr(loop, "device_for", lambda ev: "cuda" if ev.gpu else "cpu")
    warmed: list[str] = []

    def lane(name: str, gpu: bool = False, alone: bool = False) -> SimpleNamespace:
        return SimpleNamespace(evaluator=_Evaluator(gpu), alone=alone,
                               warm_sandboxes=lambda r: warmed.append(name))

    loop.warm_the_slots(SimpleNamespace(),  # type: ignore[arg-type]
                        [lane("a"), lane("gpu", gpu=True), lane("alone", alone=True)], 4)
    assert warmed == ["a"]  # a GPU target's are prepare_night's; one alone has one slot
    warmed.clear()
    loop.warm_the_slots(SimpleNamespace(), [lane("a"), lane("b")], 2)  # type: ignore[arg-type]
    loop.warm_the_slots(SimpleNamespace(), [lane("a")], 1)  # type: ignore[arg-type]
    assert warmed == []


def test_a_lanes_sandboxes_start_in_the_background_and_close_after_their_start():
    from optimizer.lane import Lane

    events: list[str] = []

    class Sandbox:
        def __init__(self, index: int):
            self.index = index

        def warm_up(self) -> None:
            time.sleep(0.3)
            events.append(f"started {self.index}")

        def close(self) -> None:
            events.append(f"closed {self.index}")

    made: dict[int, Sandbox] = {}

    def sandbox(r, slot):
        return made.setdefault(slot.index, Sandbox(slot.index))

    lane = SimpleNamespace(slots=[SimpleNamespace(index=i) for i in range(3)], sandboxes=made,
                           sandbox=sandbox, target=SimpleNamespace(name="t"), warming=[])
    t0 = time.monotonic()
    Lane.warm_sandboxes(lane, SimpleNamespace())  # type: ignore[arg-type]
    assert time.monotonic() - t0 < 0.2 and events == []  # the caller goes on at once
    Lane.close_sandboxes(lane)  # type: ignore[arg-type]
    assert time.monotonic() - t0 < 0.9  # the three started side by side
    assert sorted(events[:3]) == [f"started {i}" for i in range(3)]
    assert sorted(events[3:]) == [f"closed {i}" for i in range(3)]
    assert made == {} and lane.warming == []
