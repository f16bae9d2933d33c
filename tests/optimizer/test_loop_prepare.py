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
