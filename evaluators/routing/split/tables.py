"""The split mode's tables: client device classes, hidden-state codecs, cellular uplinks.

Device classes: llama.cpp ``llama-bench`` throughputs of Llama-3-8B at Q4_K_M, the
1,024-token columns (``pp 1024`` prompt processing, ``tg 1024`` generation), from the
README of github.com/XiongjieDai/GPU-Benchmarks-on-LLM-Inference ("LLaMA 3" tables, NVIDIA
on RunPod and Apple Silicon, snapshots of May 2024). Native CUDA/Metal figures: a browser
client runs them times the profile's ``webgpu_factor`` (an assumption, default 0.5).

Codecs: bench/results/coinfer-codecs-2026-12-05.json (the coinfer/codec kind on the
project's 128-wide model, cut after block 4). Bytes per token there are for width 128;
the bits per element (bytes x 8 / 128: scales and outlier channels included) are carried
to the served width, ``bits x hidden / 8`` bytes a token (8,192 for bf16 at 4,096).

Uplinks: per-100-ms packet delivery opportunities derived from the Mahimahi cellular
traces (Winstein et al., NSDI 2013; ravinet/mahimahi ``traces/``), see :func:`derive`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PACKET_BYTES = 1500  # Mahimahi: one opportunity delivers one MTU-sized packet
BIN_S = 0.1  # the shipped traces' resolution


@dataclass(frozen=True)
class Device:
    name: str
    prefill_tok_s: float  # llama.cpp pp 1024, Llama-3-8B Q4_K_M, native backend
    decode_tok_s: float  # llama.cpp tg 1024


# XiongjieDai/GPU-Benchmarks-on-LLM-Inference README, "LLaMA 3", 8B Q4_K_M rows.
DEVICES: dict[str, Device] = {d.name: d for d in (
    Device("m1_7core_8gb", 87.26, 9.72),       # 13-inch M1 MacBook Air
    Device("m1_max_32core", 355.45, 34.49),    # 14-inch M1 Max MacBook Pro
    Device("m2_ultra_76core", 1023.89, 76.28),  # M2 Ultra Mac Studio
    Device("rtx_3070", 2283.62, 70.94),
    Device("rtx_3090", 3865.39, 111.74),
    Device("rtx_4090", 6898.71, 127.74),
)}


@dataclass(frozen=True)
class Codec:
    name: str
    bits_per_element: float
    kl_mean: float
    kl_p99: float
    top1: float
    greedy: float
    encode_us_per_element: float  # measured CPU time (numpy, 2 cores) per element

    def bytes_per_token(self, hidden: int) -> float:
        return self.bits_per_element * hidden / 8.0


def load_codecs(path: Path = HERE / "codecs.json") -> dict[str, Codec]:
    raw = json.loads(path.read_text())
    return {name: Codec(name, **row) for name, row in raw["codecs"].items()}


def derive_codecs(result: Mapping[str, object], width: int = 128) -> dict[str, object]:
    """The shipped codec table from a coinfer codec result file (its ``search`` rows)."""
    out: dict[str, object] = {}
    codecs = result["codecs"]
    assert isinstance(codecs, dict)
    for name, row in codecs.items():
        s = row["search"]
        out[name] = {"bits_per_element": s["bytes_per_token"] * 8.0 / width,
                     "kl_mean": s["kl_mean"], "kl_p99": s["kl_p99"],
                     "top1": s["top1_agreement"], "greedy": s["greedy_agreement"],
                     "encode_us_per_element": s["encode_cpu_us_per_token"] / width}
    return out


class Uplink:
    """A link's delivery opportunities, ``counts[i]`` in bin ``[i, i+1) x bin_s``, spread
    evenly within the bin (the k-th of n at ``(i + k/n) x bin_s``, k = 1..n), repeating
    with period ``len(counts) x bin_s`` as Mahimahi repeats its traces."""

    def __init__(self, name: str, counts: Iterable[int], bin_s: float = BIN_S):
        c = np.asarray(list(counts), dtype=np.int64)
        if c.ndim != 1 or c.size == 0 or (c < 0).any() or c.sum() == 0:
            raise ValueError(f"uplink {name!r}: counts must be non-negative with some > 0")
        self.name, self.bin_s, self.counts = name, float(bin_s), c
        self.cum = np.concatenate(([0], np.cumsum(c)))
        self.period = c.size * self.bin_s
        self.per_period = int(self.cum[-1])

    @property
    def mean_bps(self) -> float:
        return self.per_period * PACKET_BYTES * 8.0 / self.period

    def count_le(self, t: float) -> int:
        """Opportunities at times <= ``t`` since time 0 (``t`` >= 0)."""
        if t < 0:
            raise ValueError(f"uplink {self.name!r}: time {t} before the trace's start")
        k, rem = divmod(t, self.period)
        i = min(int(rem // self.bin_s), self.counts.size - 1)
        n = int(self.counts[i])
        within = min(n, int(math.floor((rem - i * self.bin_s) / self.bin_s * n + 1e-9)))
        return int(k) * self.per_period + int(self.cum[i]) + within

    def time_of(self, j: int) -> float:
        """The time of opportunity ``j`` (0-based, counted from time 0)."""
        k, r = divmod(j, self.per_period)
        i = int(np.searchsorted(self.cum, r, side="right")) - 1
        n = int(self.counts[i])
        return k * self.period + (i + (r - int(self.cum[i]) + 1) / n) * self.bin_s

    def finish(self, t: float, nbytes: float) -> float:
        """When ``nbytes`` handed to the link at ``t`` have crossed it: the last of the
        ``ceil(nbytes / 1500)`` opportunities after ``t`` (``t`` itself for 0 bytes)."""
        packets = math.ceil(nbytes / PACKET_BYTES)
        if packets <= 0:
            return t
        return self.time_of(self.count_le(t) + packets - 1)

    def observed_bps(self, t: float, window_s: float) -> float:
        """What a client that kept the link busy over ``(t - window_s, t]`` measured."""
        n = self.count_le(t) - self.count_le(t - window_s)
        return n * PACKET_BYTES * 8.0 / window_s


def load_uplinks(path: Path) -> dict[str, Uplink]:
    if not path.is_file():
        raise FileNotFoundError(f"uplink table {path} not found")
    raw = json.loads(path.read_text())
    bin_s = float(raw["bin_s"])
    return {name: Uplink(name, row["counts"], bin_s) for name, row in raw["links"].items()}


def derive(trace: Path, seconds: float, bin_s: float = BIN_S) -> list[int]:
    """Per-bin opportunity counts of a Mahimahi trace (one millisecond timestamp per line)
    over its first ``seconds`` (or all of it when shorter)."""
    ms = np.loadtxt(trace, dtype=np.int64, ndmin=1)
    if ms.size == 0:
        raise ValueError(f"{trace}: empty trace")
    end = min(float(ms[-1]) / 1000.0, seconds)
    nbins = max(1, int(math.ceil(end / bin_s - 1e-9)))
    ms = ms[ms < nbins * bin_s * 1000.0]
    return np.bincount((ms // int(round(bin_s * 1000))).astype(np.int64),
                       minlength=nbins)[:nbins].tolist()


def main(argv: list[str] | None = None) -> int:
    """``python -m evaluators.routing.split.tables NETWORK_DIR OUT.json [SECONDS]``: the
    shipped uplink table from the Mahimahi ``*.up`` traces of NETWORK_DIR."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        print(main.__doc__, file=sys.stderr)
        return 2
    src, out = Path(args[0]), Path(args[1])
    seconds = float(args[2]) if len(args) == 3 else 300.0
    links = {}
    for trace in sorted(src.glob("mahimahi_*.up")):
        name = trace.name.removeprefix("mahimahi_").removesuffix(".up").lower()
        name = name.replace("-", "_")
        links[name] = {"source": trace.name, "counts": derive(trace, seconds)}
    if not links:
        print(f"no mahimahi_*.up traces in {src}", file=sys.stderr)
        return 1
    out.write_text(json.dumps({
        "about": "Per-100-ms delivery opportunities of 1,500-byte packets on cellular "
                 "uplinks, the first "
                 f"{seconds:g} s of each Mahimahi trace (Winstein et al., NSDI 2013; "
                 "ravinet/mahimahi traces/), derived by python -m "
                 "evaluators.routing.split.tables.",
        "bin_s": BIN_S, "links": links}, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
