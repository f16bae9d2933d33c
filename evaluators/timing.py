"""GPU timing with CUDA events: L2 flushed, warmed up, interleaved, checked for plausibility.

Runs where the kernels run (a sandboxed child or a trusted benchmark script); imports torch
only, and creates no CUDA context at import time.

- Every repetition first writes a buffer larger than L2 (H200: 60 MB of L2, we write
  256 MB), so a kernel is never timed on inputs that are still cached.
- After the flush the GPU spins for about 0.1 ms (``torch.cuda._sleep``) before the start
  event, so the host has enqueued the timed call before the GPU gets to it: host launch
  time is never between the events, however long a program's Python path is.
- Implementations are interleaved repetition by repetition, so clock and thermal drift
  falls on all of them alike.
- Each repetition records device events *and* the host wall clock after a full
  ``torch.cuda.synchronize()``. Work launched on a side stream is not between the events of
  the current stream, but the synchronize waits for it: a wall time far above the event time
  exposes it. (Side-stream work that fits inside the flush and spin before the start event
  would pass this check; the static check, which forbids streams, is the first line.)
- A median below ``bytes moved / copy bandwidth`` (with a 25% margin for read-heavy kernels,
  whose read bandwidth exceeds the copy's) is physically implausible and rejected.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

L2_FLUSH_BYTES = 256 * 1024 * 1024
# A kernel may read faster than a device-to-device copy moves bytes; beyond this factor of
# the measured copy bandwidth a time is not believed.
PLAUSIBLE_BW_FACTOR = 1.25
# Side-stream rule: wall clock more than 3x the event time plus 0.3 ms. Python launch
# overhead of a Triton kernel is 20-60 us, far inside that margin.
SIDE_STREAM_FACTOR = 3.0
SIDE_STREAM_SLACK_MS = 0.3
# GPU clock cycles of the spin between flush and start event: 0.1 ms at the H200's 1.98 GHz,
# more than a Triton launch from Python takes (20-60 us).
HEADSTART_CYCLES = 200_000


@dataclass(frozen=True)
class Samples:
    event_ms: tuple[float, ...]
    wall_ms: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.event_ms)

    @property
    def wall_median(self) -> float:
        return statistics.median(self.wall_ms)

    def spread(self) -> tuple[float, float]:
        """10th and 90th percentile of the event times."""
        xs = sorted(self.event_ms)
        return xs[int(0.1 * (len(xs) - 1))], xs[int(0.9 * (len(xs) - 1))]


class L2Flusher:
    def __init__(self, device: torch.device | str, nbytes: int = L2_FLUSH_BYTES):
        self.buf = torch.empty(nbytes // 4, dtype=torch.int32, device=device)

    def flush(self) -> None:
        self.buf.zero_()


def copy_bandwidth_gbs(device: torch.device | str = "cuda", nbytes: int = 1 << 30,
                       reps: int = 20) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 2, dtype=torch.int16, device=device).random_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del src, dst
    return 2 * nbytes / (statistics.median(times) * 1e-3) / 1e9


def time_interleaved(
    fns: Mapping[str, Callable[[], Any]],
    reps: int = 100,
    warmup: int = 5,
    flusher: L2Flusher | None = None,
    capture: Callable[[str, int, Any], None] | None = None,
) -> dict[str, Samples]:
    """Time each function ``reps`` times, alternating between them every repetition.

    ``capture(name, rep, result)`` sees every timed call's result after the repetition's
    clocks have stopped (the caller keeps the ones it will check)."""
    if reps < 1:
        raise ValueError("reps must be >= 1")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    events: dict[str, list[tuple[Any, Any, Any]]] = {k: [] for k in fns}
    walls: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for i in range(reps):
        order = names if i % 2 == 0 else names[::-1]
        for name in order:
            pre = torch.cuda.Event(enable_timing=True)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            pre.record()
            # The flush and a spin are enqueued, not waited for: while they run, the host
            # prepares the launch, so the events time the kernel and not the host.
            # Synchronizing here instead put the Python launch path between the events: a
            # 0.125 ms softmax read as 0.24 ms on an H200 (2026-11-29).
            if flusher is not None:
                flusher.flush()
            torch.cuda._sleep(HEADSTART_CYCLES)
            start.record()
            result = fns[name]()
            end.record()
            torch.cuda.synchronize()
            walls[name].append((time.perf_counter() - t0) * 1e3)
            events[name].append((pre, start, end))
            if capture is not None:
                capture(name, i, result)
            del result
    out = {}
    for k in names:
        ev = tuple(s.elapsed_time(e) for _, s, e in events[k])
        # wall clock of the kernel part: the whole repetition less the flush's device time
        wall = tuple(w - p.elapsed_time(s) for w, (p, s, _) in zip(walls[k], events[k],
                                                                   strict=True))
        out[k] = Samples(ev, wall)
    return out


def implausible(samples: Samples, bytes_moved: int, copy_gbs: float) -> str | None:
    """A reason when the measurement cannot be believed, else None."""
    floor_ms = bytes_moved / (copy_gbs * 1e9) * 1e3 / PLAUSIBLE_BW_FACTOR
    med = samples.median
    if med < floor_ms:
        return (
            f"median {med:.4f} ms is below the memory floor {floor_ms:.4f} ms "
            f"({bytes_moved / 1e6:.1f} MB at {PLAUSIBLE_BW_FACTOR}x the measured copy "
            f"bandwidth {copy_gbs:.0f} GB/s): the work was not all done between the events"
        )
    if samples.wall_median > SIDE_STREAM_FACTOR * med + SIDE_STREAM_SLACK_MS:
        return (
            f"wall clock {samples.wall_median:.3f} ms vs device events {med:.3f} ms: work ran "
            f"outside the timed stream (side stream or host-side compute)"
        )
    return None


def summary(samples: Samples, bytes_moved: int, copy_gbs: float) -> dict[str, float]:
    p10, p90 = samples.spread()
    med = samples.median
    gbs = bytes_moved / (med * 1e-3) / 1e9 if med > 0 else float("inf")
    return {
        "ms": med,
        "ms_p10": p10,
        "ms_p90": p90,
        "wall_ms": samples.wall_median,
        "gbs": gbs,
        "frac_copy_bw": gbs / copy_gbs if copy_gbs else 0.0,
    }


def tensor_bytes(objs: Any) -> int:
    """Bytes of every tensor in a (nested) list/tuple, each counted once."""
    if isinstance(objs, torch.Tensor):
        return objs.numel() * objs.element_size()
    if isinstance(objs, list | tuple):
        return sum(tensor_bytes(o) for o in objs)
    return 0
