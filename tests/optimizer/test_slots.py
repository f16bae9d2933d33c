"""Slot placement: GPUs round the slots, cores split between them, shared timing locks."""

from __future__ import annotations

from pathlib import Path

import pytest

from optimizer import slots as slot_plan


def test_one_slot_is_the_serial_loop_unplaced() -> None:
    (only,) = slot_plan.plan(0, False, cpus=[0, 1])
    assert only.env() == {} and only.cpus == ()


def test_gpu_slots_go_round_the_gpus_and_share_a_gpus_lock() -> None:
    got = slot_plan.plan(4, True, gpus=["0", "1"], cpus=list(range(8)))
    assert [s.gpu for s in got] == ["0", "1", "0", "1"]
    assert [s.cpus for s in got] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert got[0].timing is got[2].timing and got[1].timing is got[3].timing
    assert got[0].timing is not got[1].timing
    assert got[1].env() == {"CUDA_VISIBLE_DEVICES": "1", slot_plan.CPUS_ENV: "2,3"}


def test_default_is_one_slot_per_visible_gpu() -> None:
    assert len(slot_plan.plan(0, True, gpus=["0", "1", "2"], cpus=list(range(6)))) == 3
    assert len(slot_plan.plan(0, False, gpus=["0", "1", "2"], cpus=list(range(6)))) == 1


def test_cpu_slots_own_their_cores_and_share_locks_only_when_cores_run_out() -> None:
    two = slot_plan.plan(2, False, cpus=[0, 1, 2])
    assert [s.cpus for s in two] == [(0, 1), (2,)] and two[0].timing is not two[1].timing
    three = slot_plan.plan(3, False, cpus=[5])
    assert all(s.cpus == (5,) for s in three)
    assert three[0].timing is three[1].timing is three[2].timing


def test_plans_given_one_lock_registry_share_each_devices_lock() -> None:
    """Two kinds in one night: the kernel kind's slot on GPU 0 and another GPU kind's
    share GPU 0's timing lock; CPU slots on the same cores share theirs; a plan of its own
    shares nothing."""
    locks: dict[object, object] = {}
    gpu_a = slot_plan.plan(2, True, gpus=["0", "1"], cpus=[0, 1], locks=locks)
    gpu_b = slot_plan.plan(2, True, gpus=["0", "1"], cpus=[0, 1], locks=locks)
    cpu_a = slot_plan.plan(2, False, cpus=[0, 1], locks=locks)
    cpu_b = slot_plan.plan(2, False, cpus=[0, 1], locks=locks)
    apart = slot_plan.plan(2, False, cpus=[0, 1])
    for a, b in ((gpu_a, gpu_b), (cpu_a, cpu_b)):
        assert [x.timing for x in a] == [x.timing for x in b]
        assert a[0].timing is not a[1].timing
    assert gpu_a[0].timing is not cpu_a[0].timing  # a GPU is not the cores beside it
    assert all(x.timing is not y.timing for x, y in zip(apart, cpu_a, strict=True))
    assert slot_plan.count(0, True, gpus=["0", "1", "2"]) == 3
    assert slot_plan.count(0, False, gpus=["0", "1", "2"]) == 1
    assert slot_plan.count(2, False) == 2


def test_visible_gpus_from_the_environment_or_the_device_nodes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert slot_plan.visible_gpus(tmp_path) == []  # no driver: no GPU
    for name in ("nvidiactl", "nvidia0", "nvidia1", "nvidia10", "nvidia-uvm"):
        (tmp_path / name).touch()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert slot_plan.visible_gpus(tmp_path) == ["0", "1", "10"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert slot_plan.visible_gpus(tmp_path) == ["3", "5"]
