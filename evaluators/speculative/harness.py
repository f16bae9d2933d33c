"""The trusted decoding harness: target-only and speculative decoding timed in this process.

The target model, its decoding loop and the clock live here, in the evaluator's process,
which never imports draft code. A draft is reached through :class:`DraftSessions`: every
timed prompt gets a fresh sandboxed process (a new session, forked from the warm zygote)
that builds the draft and loads its distilled weights, and the decoding loop talks to it
through :class:`~evaluators.speculative.remote.RemoteDraft`, one round trip per step.

A pass decodes a list of prompts: for each prompt, target-only decoding is timed first
(while no process of the candidate exists: a draft cannot slow it down from beside it),
then a fresh draft's session is opened (untimed), speculative decoding is timed, and the
session is closed. Both are timed here with the same thread settings; on a GPU the clock
reads after a synchronisation. The target-only output is the greedy reference. Where a
process costs too much to start (a CUDA context: about a second), one session serves a
whole pass of distinct prompts instead, and must stay idle while target-only decoding is
timed beside it (the kernel's account of its CPU time says so).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from evaluators.speculative.decoding import SpecStats, plain_decode, speculative_decode
from evaluators.speculative.remote import RemoteDraft, RemoteFailure


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """Torch's intra-op threads set to ``n`` for a timed phase, restored afterwards. Batch-1
    decoding runs on one: with two, a busy neighbour process stalled the threads' hand-offs
    and single runs took 10-30x longer (measured on 2 shared cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def timed_plain(model: Any, prompt: torch.Tensor, n_new: int) -> tuple[list[int], float]:
    device = prompt.device
    _sync(device)
    t0 = time.perf_counter()
    out = plain_decode(model, prompt, n_new)
    _sync(device)
    return out, time.perf_counter() - t0


class DraftSessions:
    """Opens fresh sessions of one draft (``open_session(seconds_left)`` is the evaluator's
    ``ctx.session`` call with its payload, io dir and writable folder) and records what
    starting and closing them cost (untimed)."""

    def __init__(self, open_session: Callable[[float], Any], *, vocab: int, n_layers: int,
                 deadline: float):
        self._open = open_session
        self.vocab = vocab
        self.n_layers = n_layers
        self.deadline = deadline  # perf_counter: every session and request ends before it
        self.start_s: list[float] = []  # per session: until ready (untimed)
        self.close_s: list[float] = []
        self.rtt_s: list[float] = []  # per session: a null request's round trip (untimed)

    @contextlib.contextmanager
    def draft(self, sampled: bool = False) -> Iterator[RemoteDraft]:
        left = self.deadline - time.perf_counter()
        if left <= 0:
            raise RemoteFailure("the draft's decoding ran past its time limit", timed_out=True)
        t0 = time.perf_counter()
        session = self._open(left)
        try:
            if not session.ok:
                why = session.error or "the draft's process did not start"
                raise RemoteFailure(why, timed_out=bool(session.timed_out))
            remote = RemoteDraft(session, vocab=self.vocab, n_layers=self.n_layers,
                                 deadline=self.deadline, sampled=sampled)
            self.start_s.append(time.perf_counter() - t0)
            self.rtt_s.append(_null_round_trip(session, self.deadline))
            yield remote
        finally:
            t1 = time.perf_counter()
            session.close()
            self.close_s.append(time.perf_counter() - t1)


NULL_REQUESTS = 3


def _null_round_trip(session: Any, deadline: float) -> float:
    """The fastest of a few ``info`` requests, untimed: what the channel itself costs a
    decoding step (the rest of a draft call's time is the draft's own work)."""
    best = float("inf")
    for _ in range(NULL_REQUESTS):
        reply = session.request({"op": "info"},
                                timeout_s=max(0.1, deadline - time.perf_counter()))
        if not reply.ok:
            raise RemoteFailure(f"draft (info): {reply.reason}", timed_out=reply.timed_out)
        best = min(best, reply.wall_s)
    return best


@dataclass
class Pass:
    """One draft's measurements over one list of prompts at one k."""

    k: int
    prompts: list[torch.Tensor] = field(default_factory=list)
    plain_s: list[float] = field(default_factory=list)  # per prompt
    spec_s: list[float] = field(default_factory=list)
    outputs: list[list[int]] = field(default_factory=list)
    refs: list[list[int]] = field(default_factory=list)
    stats: SpecStats | None = None

    def __post_init__(self) -> None:
        self.stats = SpecStats(self.k)

    @property
    def speedup(self) -> float:
        return sum(self.plain_s) / max(sum(self.spec_s), 1e-12)


def timed_pass(model: Any, prompts: list[torch.Tensor], n_new: int,
               drafts: list[tuple[DraftSessions, int]], per_prompt: bool = True,
               plain: Pass | None = None) -> list[Pass]:
    """Every prompt: target-only decoding, then each draft (in an order rotated by prompt,
    so that neither draft of a comparison always goes first). ``per_prompt``: a fresh
    session for every prompt; otherwise one session per draft for the whole pass (its
    prompts are all different), and target-only decoding must not have cost the idle
    draft's process any CPU time (it could slow the baseline from beside it). ``plain``:
    an earlier pass over the same prompts whose target-only times and outputs are reused
    (the k sweep: its choice compares speculative times alone)."""
    passes = [Pass(k, list(prompts)) for _, k in drafts]
    with contextlib.ExitStack() as stack:
        held = [] if per_prompt else [stack.enter_context(s.draft()) for s, _ in drafts]
        for i, prompt in enumerate(prompts):
            if plain is not None:
                ref, plain_s = plain.refs[i], plain.plain_s[i]
            else:
                cpu0 = [r.session.cpu_s() for r in held]
                ref, plain_s = timed_plain(model, prompt, n_new)
                for r, before in zip(held, cpu0, strict=True):
                    _check_idle(r, before, plain_s)
            for j in range(len(drafts)):
                idx = (i + j) % len(drafts)
                sessions, k = drafts[idx]
                with contextlib.ExitStack() as one:
                    remote = held[idx] if held else one.enter_context(sessions.draft())
                    _sync(prompt.device)
                    t0 = time.perf_counter()
                    out, st = speculative_decode(model, remote, prompt, n_new, k)
                    _sync(prompt.device)
                    spec_s = time.perf_counter() - t0
                p = passes[idx]
                p.plain_s.append(plain_s)
                p.spec_s.append(spec_s)
                p.outputs.append(out)
                p.refs.append(ref)
                assert p.stats is not None
                p.stats.add(st)
    return passes


# /proc reports a process's CPU time in clock ticks (10 ms); an idle process waiting on its
# channel uses none, so its count does not move. More than two ticks (plus a tenth of the
# decode) while target-only decoding was timed beside it is work on the side.
IDLE_CPU_S = 0.02


def _check_idle(remote: RemoteDraft, before: float | None, plain_s: float) -> None:
    after = remote.session.cpu_s()
    if before is not None and after is not None and after - before > IDLE_CPU_S + 0.1 * plain_s:
        raise BusyDraftError(
            f"the draft's process used {after - before:.2f} s of CPU while it was idle and "
            f"target-only decoding ({plain_s:.2f} s) was timed beside it")


class BusyDraftError(RuntimeError):
    """A draft's process worked while it should have waited (work on the side)."""


def sample_outputs(model: Any, sessions: DraftSessions, prompt: torch.Tensor, *, n: int,
                   n_new: int, k: int, temperature: float, seed: int) -> list[list[int]]:
    """``n`` sampled continuations of ``prompt`` by speculative decoding with the remote
    draft (one session; the trusted side samples every token, draft tokens included)."""
    gen = torch.Generator().manual_seed(seed)
    with sessions.draft(sampled=True) as remote:
        return [speculative_decode(model, remote, prompt, n_new, k, temperature=temperature,
                                   generator=gen)[0] for _ in range(n)]


def fresh_dir(root: Path, name: str) -> Path:
    """An empty folder (a session's only writable place)."""
    path = root / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path
