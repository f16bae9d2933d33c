"""Request workloads: a seeded synthetic generator, trace loaders and time windows.

A :class:`Workload` is columns of equal length: arrival time (s), prompt and output length
(tokens), the prompt's block hashes (one id per ``block_tokens`` full prompt block; equal
ids mean an identical prefix up to and including that block, as in the Mooncake release),
a session id and the client's region. Loaders read Mooncake JSONL, Azure CSV, BurstGPT CSV
and Vidur's processed traces; the CSV traces carry no prefix information, so every request
gets private block ids and no prefix can be shared. :func:`merge` serves several workloads
together (a mix).
"""

from __future__ import annotations

import csv
import json
from collections import OrderedDict
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Workload:
    name: str
    arrival: tuple[float, ...]
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    blocks: tuple[tuple[int, ...], ...]
    session: tuple[int, ...]
    region: tuple[str, ...]
    block_tokens: int = 512

    def __post_init__(self) -> None:
        n = len(self.arrival)
        for col in ("prompt", "output", "blocks", "session", "region"):
            if len(getattr(self, col)) != n:
                raise ValueError(f"workload {self.name!r}: column {col!r} has the wrong length")
        if any(b < a for a, b in zip(self.arrival, self.arrival[1:], strict=False)):
            raise ValueError(f"workload {self.name!r}: arrivals must be sorted")

    def __len__(self) -> int:
        return len(self.arrival)

    @property
    def duration_s(self) -> float:
        return self.arrival[-1] - self.arrival[0] if self.arrival else 0.0

    def window(self, start_s: float, end_s: float) -> Workload:
        """Requests arriving in ``[start_s, end_s)`` (seconds from the first), re-based to 0."""
        t0 = self.arrival[0] if self.arrival else 0.0
        idx = [i for i, t in enumerate(self.arrival) if start_s <= t - t0 < end_s]
        base = self.arrival[idx[0]] if idx else 0.0
        return self._take(idx, f"{self.name}[{start_s:g}:{end_s:g}]", base)

    def head(self, n: int) -> Workload:
        return self._take(list(range(min(n, len(self)))), f"{self.name}[:{n}]", 0.0)

    def scale_rate(self, factor: float) -> Workload:
        """The same requests arriving ``factor`` times faster (load scaling)."""
        if factor <= 0:
            raise ValueError("rate factor must be positive")
        return replace(
            self, name=f"{self.name}x{factor:g}", arrival=tuple(t / factor for t in self.arrival)
        )

    def with_regions(self, regions: dict[str, float], seed: int) -> Workload:
        """Assign each session a client region drawn with the given weights."""
        names = sorted(regions)
        p = np.array([regions[k] for k in names], dtype=float)
        rng = np.random.default_rng(seed)
        sessions = sorted(set(self.session))
        drawn = rng.choice(len(names), len(sessions), p=p / p.sum())
        pick = {s: names[i] for s, i in zip(sessions, drawn, strict=True)}
        return replace(self, region=tuple(pick[s] for s in self.session))

    def _take(self, idx: list[int], name: str, base: float) -> Workload:
        return Workload(
            name=name,
            arrival=tuple(self.arrival[i] - base for i in idx),
            prompt=tuple(self.prompt[i] for i in idx),
            output=tuple(self.output[i] for i in idx),
            blocks=tuple(self.blocks[i] for i in idx),
            session=tuple(self.session[i] for i in idx),
            region=tuple(self.region[i] for i in idx),
            block_tokens=self.block_tokens,
        )


def merge(parts: list[Workload], name: str) -> Workload:
    """Several workloads served by one fleet: their requests in order of arrival, each
    part's block ids and sessions kept apart from the others' (no prefix is shared across
    parts). The parts must have the same block size."""
    if not parts:
        raise ValueError("a mix needs at least one part")
    sizes = {w.block_tokens for w in parts}
    if len(sizes) != 1:
        raise ValueError(f"the parts of a mix must have one block size, not {sorted(sizes)}")
    rows = []
    block_base = session_base = 0
    for w in parts:
        rows += [(w.arrival[i], w.prompt[i], w.output[i],
                  tuple(block_base + b for b in w.blocks[i]), session_base + w.session[i],
                  w.region[i]) for i in range(len(w))]
        block_base += 1 + max((max(b) for b in w.blocks if b), default=0)
        session_base += 1 + max(w.session, default=0)
    rows.sort(key=lambda r: r[0])
    cols = list(zip(*rows, strict=True)) if rows else [()] * 6
    return Workload(name=name, arrival=tuple(cols[0]), prompt=tuple(cols[1]),
                    output=tuple(cols[2]), blocks=tuple(cols[3]), session=tuple(cols[4]),
                    region=tuple(cols[5]), block_tokens=sizes.pop())


def _private_blocks(prompts: list[int], block_tokens: int) -> list[tuple[int, ...]]:
    out, next_id = [], 0
    for p in prompts:
        n = p // block_tokens
        out.append(tuple(range(next_id, next_id + n)))
        next_id += n
    return out


def load_mooncake(path: Path | str, region: str = "local") -> Workload:
    """Mooncake JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    rows.sort(key=lambda r: r["timestamp"])
    return Workload(
        name=Path(path).stem,
        arrival=tuple(r["timestamp"] / 1000.0 for r in rows),
        prompt=tuple(max(1, int(r["input_length"])) for r in rows),
        output=tuple(max(1, int(r["output_length"])) for r in rows),
        blocks=tuple(tuple(r["hash_ids"]) for r in rows),
        session=tuple(range(len(rows))),
        region=(region,) * len(rows),
        block_tokens=512,
    )


def _csv_trace(path: Path | str, time_col: str, in_col: str, out_col: str, block_tokens: int,
               region: str) -> Workload:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    times = []
    for r in rows:
        raw = r[time_col]
        try:
            times.append(float(raw))
        except ValueError:  # Azure: "2023-11-16 18:15:46.6805900" (7 fractional digits)
            head, _, frac = raw.partition(".")
            times.append(datetime.fromisoformat(head).timestamp() + float("0." + (frac or "0")))
    order = sorted(range(len(rows)), key=times.__getitem__)
    t0 = times[order[0]] if order else 0.0
    prompts = [max(1, int(float(rows[i][in_col]))) for i in order]
    return Workload(
        name=Path(path).stem,
        arrival=tuple(times[i] - t0 for i in order),
        prompt=tuple(prompts),
        output=tuple(max(1, int(float(rows[i][out_col]))) for i in order),
        blocks=tuple(_private_blocks(prompts, block_tokens)),
        session=tuple(range(len(rows))),
        region=(region,) * len(rows),
        block_tokens=block_tokens,
    )


def load_azure(path: Path | str, block_tokens: int = 512, region: str = "local") -> Workload:
    """Azure LLM inference trace CSV: ``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``."""
    return _csv_trace(path, "TIMESTAMP", "ContextTokens", "GeneratedTokens", block_tokens, region)


def load_burstgpt(path: Path | str, block_tokens: int = 512, region: str = "local") -> Workload:
    """BurstGPT CSV: ``Timestamp`` (s), ``Request tokens``, ``Response tokens``."""
    return _csv_trace(path, "Timestamp", "Request tokens", "Response tokens", block_tokens, region)


def load_vidur(path: Path | str, block_tokens: int = 512, region: str = "local") -> Workload:
    """Vidur's processed traces (e.g. Splitwise's Azure 2023 code and conversation traces):
    ``arrived_at`` (s), ``num_prefill_tokens``, ``num_decode_tokens``."""
    return _csv_trace(path, "arrived_at", "num_prefill_tokens", "num_decode_tokens",
                      block_tokens, region)


def load_trace(path: Path | str) -> Workload:
    """Pick the loader from the file: ``.jsonl`` is Mooncake, a CSV by its header."""
    path = Path(path)
    if path.suffix == ".jsonl":
        return load_mooncake(path)
    header = path.open().readline()
    if "ContextTokens" in header:
        return load_azure(path)
    if "Request tokens" in header:
        return load_burstgpt(path)
    if "num_prefill_tokens" in header:
        return load_vidur(path)
    raise ValueError(f"{path}: not a Mooncake JSONL, Azure, BurstGPT or Vidur CSV trace")


@dataclass(frozen=True)
class SyntheticSpec:
    """A seeded multi-tenant chat workload.

    Sessions start as a Poisson process (``burst_cv`` > 1 makes gamma inter-arrivals,
    i.e. bursts); each belongs to one of ``apps`` applications picked with Zipf(``zipf_s``)
    popularity, whose system prompt (``sys_blocks_max`` blocks at most) every turn shares.
    A session has a geometric number of turns (mean ``turns_mean``) separated by
    exponential think times; each turn's prompt is the previous prompt plus the previous
    answer plus a new lognormal user message, so earlier blocks are a shared prefix.
    """

    duration_s: float = 600.0
    sessions_per_s: float = 1.0
    burst_cv: float = 1.0
    apps: int = 64
    zipf_s: float = 1.1
    sys_blocks_max: int = 16
    turns_mean: float = 3.0
    think_s: float = 20.0
    user_median: float = 400.0
    user_sigma: float = 1.0
    output_median: float = 180.0
    output_sigma: float = 0.8
    max_prompt: int = 32768
    max_output: int = 2048
    block_tokens: int = 256


def synthetic(spec: SyntheticSpec, seed: int, name: str = "synthetic") -> Workload:
    """Generate the workload of ``spec``; the same seed gives the same requests."""
    rng = np.random.default_rng(seed)
    bt = spec.block_tokens
    mean_gap = 1.0 / spec.sessions_per_s
    shape = 1.0 / (spec.burst_cv**2)
    n_guess = int(spec.duration_s * spec.sessions_per_s * 1.5) + 16
    gaps = rng.gamma(shape, mean_gap / shape, n_guess)
    starts = np.cumsum(gaps)
    starts = starts[starts < spec.duration_s]
    ranks = np.arange(1, spec.apps + 1, dtype=float)
    pop = ranks**-spec.zipf_s
    apps = rng.choice(spec.apps, len(starts), p=pop / pop.sum())
    sys_len = rng.integers(1, spec.sys_blocks_max + 1, spec.apps) * bt
    next_id = spec.apps * spec.sys_blocks_max  # ids below this are system-prompt blocks
    reqs: list[tuple[float, int, int, tuple[int, ...], int]] = []
    for sid, (t, app) in enumerate(zip(starts, apps, strict=True)):
        turns = int(rng.geometric(1.0 / spec.turns_mean))
        sys_ids = tuple(int(app) * spec.sys_blocks_max + j for j in range(sys_len[app] // bt))
        history = int(sys_len[app])
        ids: tuple[int, ...] = sys_ids
        for _ in range(turns):
            user = int(min(rng.lognormal(np.log(spec.user_median), spec.user_sigma), 16384)) + 1
            out = int(min(rng.lognormal(np.log(spec.output_median), spec.output_sigma),
                          spec.max_output)) + 1
            prompt = history + user
            if prompt > spec.max_prompt:
                break
            full = prompt // bt
            fresh = full - len(ids)
            ids = ids + tuple(range(next_id, next_id + fresh))
            next_id += fresh
            reqs.append((float(t), prompt, out, ids, sid))
            # the block the prompt left partial is completed by the answer: new content
            history = prompt + out
            t += float(rng.exponential(spec.think_s))
    reqs.sort(key=lambda r: (r[0], r[4]))
    reqs = [r for r in reqs if r[0] < spec.duration_s]
    return Workload(
        name=name,
        arrival=tuple(r[0] for r in reqs),
        prompt=tuple(r[1] for r in reqs),
        output=tuple(r[2] for r in reqs),
        blocks=tuple(r[3] for r in reqs),
        session=tuple(r[4] for r in reqs),
        region=("local",) * len(reqs),
        block_tokens=bt,
    )


def prefix_reuse(w: Workload, cache_tokens: int | None = None) -> float:
    """The share of prompt tokens one LRU prefix cache of ``cache_tokens`` (None:
    unbounded) would serve if every request went through it: each prompt's leading blocks
    found in the cache, then all its blocks made the most recent."""
    bt = w.block_tokens
    cap = None if cache_tokens is None else cache_tokens // bt
    cache: OrderedDict[int, None] = OrderedDict()
    hit = total = 0
    for blocks, prompt in zip(w.blocks, w.prompt, strict=True):
        run = 0
        for h in blocks:
            if h not in cache:
                break
            run += 1
        hit += min(run * bt, prompt)
        total += prompt
        for h in blocks:
            cache[h] = None
            cache.move_to_end(h)
        while cap is not None and len(cache) > cap:
            cache.popitem(last=False)
    return hit / max(total, 1)
