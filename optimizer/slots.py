"""Evaluation slots: how many sandboxes evaluate at once, and which device each owns.

A slot owns a device: one GPU (its sandboxed processes see only that GPU, through
``CUDA_VISIBLE_DEVICES``) or a group of CPU cores (its processes are pinned to them). Slots
on one device share that device's *timing lock*: an evaluator holds it around its timed
phases (``EvalContext.device_alone()``), so compilation and validation of several
candidates overlap while no two timings overlap on a device. One slot is the serial loop:
no pinning, no lock taken from anyone.

Placement is not a security boundary (a candidate may change its own affinity within what
the machine allows); it keeps honest candidates out of each other's way.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CPUS_ENV = "OPTIMIZER_SANDBOX_CPUS"  # read by the sandbox's processes at start


@dataclass(frozen=True)
class Slot:
    index: int
    gpu: str | None = None  # the GPU this slot owns (as CUDA_VISIBLE_DEVICES names it)
    cpus: tuple[int, ...] = ()  # cores its processes are pinned to; () = not pinned
    # held by a timed phase; re-entrant, so a stage that times inside a timed stage is fine
    timing: Any = field(default_factory=threading.RLock, compare=False)

    def env(self) -> dict[str, str]:
        """Environment of this slot's sandboxed processes."""
        out = {}
        if self.gpu is not None:
            out["CUDA_VISIBLE_DEVICES"] = self.gpu
        if self.cpus:
            out[CPUS_ENV] = ",".join(map(str, self.cpus))
        return out

    def describe(self) -> str:
        where = f"GPU {self.gpu}" if self.gpu is not None else "CPU"
        cores = f", cores {_ranges(self.cpus)}" if self.cpus else ""
        return f"slot {self.index}: {where}{cores}"


def visible_gpus(dev: Path = Path("/dev")) -> list[str]:
    """GPUs the engine may hand out: ``CUDA_VISIBLE_DEVICES`` when set, else the NVIDIA
    device nodes. Decided without importing torch (no CUDA context before the forks)."""
    if not (dev / "nvidiactl").exists():
        return []
    named = os.environ.get("CUDA_VISIBLE_DEVICES")
    if named is not None:
        return [g.strip() for g in named.split(",") if g.strip() and g.strip() != "-1"]
    nodes = [p.name for p in dev.glob("nvidia*") if re.fullmatch(r"nvidia\d+", p.name)]
    return sorted((n.removeprefix("nvidia") for n in nodes), key=int)


def count(slots: int, uses_gpu: bool, *, gpus: list[str] | None = None) -> int:
    """How many slots ``plan`` gives: ``slots``, or with 0 one per visible GPU for a kind
    that uses one, else 1."""
    gpu_list = (visible_gpus() if gpus is None else gpus) if uses_gpu else []
    return slots or max(1, len(gpu_list))


def plan(slots: int, uses_gpu: bool, *, gpus: list[str] | None = None,
         cpus: list[int] | None = None, locks: dict[object, Any] | None = None) -> list[Slot]:
    """``slots`` slots (0: one per visible GPU for a kind that uses one, else 1).

    GPU slots go round the GPUs (several slots on one GPU share its timing lock); the
    machine's cores are split between the slots, each slot a contiguous share. On the CPU
    each slot's cores are its device: slots share a lock only when there are more slots
    than cores. ``locks`` holds the timing locks by device: plans of several kinds given
    the same dict share the lock of each device they both use (a night of several targets
    on one machine)."""
    gpu_list = (visible_gpus() if gpus is None else gpus) if uses_gpu else []
    n = count(slots, uses_gpu, gpus=gpu_list)
    if n == 1:
        return [Slot(0, gpu_list[0] if len(gpu_list) > 1 else None)]
    cores = sorted(os.sched_getaffinity(0)) if cpus is None else sorted(cpus)
    groups = _split(cores, n)
    locks = {} if locks is None else locks
    out = []
    for i in range(n):
        gpu = gpu_list[i % len(gpu_list)] if gpu_list else None
        key: object = ("gpu", gpu) if gpu is not None else ("cpu", groups[i])
        out.append(Slot(i, gpu, groups[i], locks.setdefault(key, threading.RLock())))
    return out


def _split(cores: list[int], n: int) -> list[tuple[int, ...]]:
    """``n`` groups of ``cores``: contiguous and as even as can be; with fewer cores than
    groups, groups share a core round the list."""
    if not cores:
        return [()] * n
    if len(cores) < n:
        return [(cores[i % len(cores)],) for i in range(n)]
    size, extra = divmod(len(cores), n)
    out, at = [], 0
    for i in range(n):
        take = size + (1 if i < extra else 0)
        out.append(tuple(cores[at:at + take]))
        at += take
    return out


def _ranges(cpus: tuple[int, ...]) -> str:
    return ",".join(map(str, cpus))


def pin_from_env() -> None:
    """In a sandboxed process at start: pin to the slot's cores, if it has any."""
    named = os.environ.get(CPUS_ENV, "")
    if not named:
        return
    try:
        os.sched_setaffinity(0, {int(c) for c in named.split(",")})
    except (ValueError, OSError):
        pass  # a core the namespace does not offer: run unpinned rather than not at all
