"""A discrete-event simulator of a serving cluster, advanced analytically between events.

Each replica runs continuous batching with a token budget per step: every running
sequence decodes one token, and the rest of the budget goes to chunked prefill of the
queue's head (FIFO). Between events (an arrival anywhere, a prefill finishing, a sequence
finishing, the KV cache running out) the batch is constant, so the replica advances in
one jump: progress is counted in (fractional) steps of constant composition, and the step
time is evaluated at the segment's midpoint KV size and prefill context (exact for the
linear terms of :class:`~evaluators.routing.hardware.StepModel`). Step quantisation is
ignored (a fluid model: an arrival joins the step in flight; error below one step).

KV: each replica holds ``kv_capacity_tokens``. A request entering prefill reserves its
whole context; decoding grows it by one token per step. When the cache is full, the
youngest running sequence is preempted (vLLM's recompute policy): it returns to the head
of the queue and later re-prefills its prompt and the tokens it had generated.

Prefix cache: an LRU of block hashes per replica, as large as the KV cache in blocks. A
request's cached prefix is looked up when it enters prefill and its blocks are inserted
when its prefill finishes. (Blocks held by running sequences are not subtracted from the
cache's room: hits are slightly optimistic when KV is nearly full.) A replica may have a
KV tier below HBM (host memory: ``ReplicaSpec.host_kv_tokens``): blocks the HBM cache drops
go there (an LRU of its own), a lookup goes on there after the HBM blocks run out, and a
hit there is brought up at admission, the replica's steps waiting for the transfer
(``host_s_per_token``; no overlap of the load with compute is assumed).

The policy is ``route(request, view) -> int``: it sees a :class:`RequestInfo` (no output
length: a real router does not know it) and a :class:`View` of every replica *now*.
Optional scheduler :class:`~evaluators.routing.sched.Hooks` replace each replica's FCFS
admission, full-budget prefill chunk and youngest-first eviction.

Disaggregated fleets (see :mod:`evaluators.routing.fleet`): a prefill-role replica hands a
request's KV to a decode replica after its prefill; the transfer queues on the prefill
replica's link and takes KV bytes / bandwidth; the request's first token is counted when
the KV lands, and the decode replica is the least loaded one at that moment. Replicas
that prefill are advanced before those that receive, so hand-offs arrive in time order.
A client tier serves its requests in closed form (no queue).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from evaluators.routing.api import RequestInfo, View
from evaluators.routing.fleet import Fleet, ReplicaSpec
from evaluators.routing.hardware import ModelShape, step_model
from evaluators.routing.sched import (
    QUEUE_WINDOW,
    DecisionError,
    Hooks,
    ReplicaState,
    Running,
    Waiting,
)
from evaluators.routing.workload import Workload

INF = math.inf


__all__ = ["DecisionError", "RequestInfo", "SimConfig", "SimResult", "View", "replay",
           "simulate"]


@dataclass(frozen=True)
class SimConfig:
    token_budget: int = 2048  # tokens per step (vLLM's max_num_batched_tokens for online serving)
    max_seqs: int = 256  # running sequences per replica (vLLM's max_num_seqs)
    kv_capacity_tokens: int | None = None  # override every replica's KV size (None: hardware)
    prefix_cache: bool = True
    max_queue: int | None = None  # waiting requests per replica before new ones are dropped
    kv_bytes_per_token: float = ModelShape().kv_bytes_per_token  # for KV hand-offs


class _Replica:
    __slots__ = ("m", "cap", "cache_cap", "clock", "S", "heap", "stack", "B", "kv_const",
                 "waiting", "wait_tokens", "head", "reserved", "pf_left", "pf_ctx", "cache",
                 "busy", "prefill_tokens", "decode_tokens", "preemptions", "max_queue_seen",
                 "index", "hands_off", "link_s_per_token", "link_free", "chunk", "accelerator",
                 "budget", "max_seqs", "kv_pad", "group", "host", "host_cap", "host_s_per_token",
                 "host_hit_tokens")

    def __init__(self, spec: ReplicaSpec, cfg: SimConfig, block_tokens: int):
        step = self.m = spec.step  # hardware.StepModel or deploy/instance.py's InstanceStep
        cap = (step.kv_capacity_tokens if spec.tier == "client"
               else cfg.kv_capacity_tokens or step.kv_capacity_tokens)
        # the replica's own engine (deployment mode), else the simulation's settings
        self.budget = spec.token_budget or cfg.token_budget
        self.max_seqs = spec.max_seqs or cfg.max_seqs
        self.kv_pad = spec.kv_pad  # KV tokens lost per running sequence (its partial block)
        self.group = spec.group  # deployment class: hand-offs stay within it
        self.index = 0
        self.accelerator = step.accelerator
        self.hands_off = False  # prefill role: KV goes to a decode replica after prefill
        self.link_s_per_token = 0.0
        self.link_free = 0.0
        self.chunk = spec.chunk or 1 << 30  # prefill tokens per step of the request in prefill
        self.cap = cap
        self.cache_cap = max(1, cap // block_tokens)
        self.clock = 0.0
        self.S = 0.0  # decode progress in steps
        self.heap: list[tuple[float, int, int]] = []  # (finish S, run token, request)
        self.stack: list[tuple[int, int]] = []  # join order for preemption
        self.B = 0
        self.kv_const = 0.0  # K = kv_const + B * S
        self.waiting: deque[int] = deque()
        self.wait_tokens = 0  # prompt tokens of waiting requests not yet in prefill
        self.head = -1  # request in prefill (admitted), -1 none
        self.reserved = 0
        self.pf_left = 0.0
        self.pf_ctx = 0.0
        self.cache: OrderedDict[int, None] = OrderedDict()
        self.host: OrderedDict[int, None] = OrderedDict()  # the tier below HBM, if any
        self.host_cap = spec.host_kv_tokens // block_tokens
        self.host_s_per_token = spec.host_s_per_token
        self.host_hit_tokens = 0
        self.busy = 0.0
        self.prefill_tokens = 0.0
        self.decode_tokens = 0.0
        self.preemptions = 0
        self.max_queue_seen = 0


def _run(store: OrderedDict[int, None], blocks: tuple[int, ...]) -> int:
    """How many leading blocks of ``blocks`` ``store`` holds."""
    n = 0
    for h in blocks:
        if h not in store:
            break
        n += 1
    return n


def _cached_blocks(rp: _Replica, blocks: tuple[int, ...]) -> tuple[int, int]:
    """Leading blocks of ``blocks`` in the replica's HBM prefix cache, then how many more
    follow in its host tier."""
    n = _run(rp.cache, blocks)
    return n, _run(rp.host, blocks[n:]) if rp.host_cap else 0


def _prefix_blocks(reps: list[_Replica], blocks: tuple[int, ...]) -> list[int]:
    """Leading blocks of ``blocks`` each replica has cached, in HBM or in its host tier (the
    router's view; one call for all replicas, as it runs for every request)."""
    out = []
    for rp in reps:
        cache, n = rp.cache, 0
        for h in blocks:
            if h not in cache:
                break
            n += 1
        if rp.host_cap:
            n += _run(rp.host, blocks[n:])
        out.append(n)
    return out


def _remember(rp: _Replica, blocks: tuple[int, ...]) -> None:
    """A prefilled prompt's blocks enter the HBM cache (most recent last); what it drops
    goes to the host tier, whose own least recent blocks go."""
    cache = rp.cache
    for h in blocks:
        if h in cache:
            cache.move_to_end(h)
        else:
            cache[h] = None
    host, room = rp.host, rp.host_cap
    while len(cache) > rp.cache_cap:
        h = cache.popitem(last=False)[0]
        if room:
            host[h] = None
            host.move_to_end(h)
    while len(host) > room:
        host.popitem(last=False)


@dataclass
class SimResult:
    """Per-request outcomes (lists indexed by request) and per-replica totals."""

    workload: Workload
    fleet: Fleet
    decisions: list[int]
    first_token: list[float]  # absolute time the first token left the replica; nan if dropped
    finish: list[float]  # absolute time the last token left the replica; nan if dropped
    rtt: list[float]
    cached: list[int]  # prompt tokens served from the prefix cache at first prefill
    dropped: list[bool]
    preempted: list[int]
    busy_s: list[float]
    prefill_tokens: list[float]
    decode_tokens: list[float]
    max_queue: list[int]
    queue_area: list[float]  # integral of queue length over time, per replica
    end_s: float
    decision_s: list[float]  # policy wall time per decision (only when timed)
    transfer_s: list[float] | None = None  # KV hand-off time per request (disaggregated)
    host_hit_tokens: list[int] | None = None  # prompt tokens brought up from the host tier


def simulate(workload: Workload, fleet: Fleet, route: Callable[[RequestInfo, View], int],
             config: SimConfig | None = None, *, time_policy: bool = False,
             hooks: Hooks | None = None) -> SimResult:
    """Run the whole workload through ``fleet`` with ``route`` choosing replicas; drain."""
    cfg = config or SimConfig()
    bt = workload.block_tokens
    reps = [_Replica(r, cfg, bt) for r in fleet.replicas]
    servers = [k for k, r in enumerate(fleet.replicas) if r.tier == "server"]
    receivers = ([k for k in servers if fleet.replicas[k].role == "decode"]
                 or [k for k in servers if fleet.replicas[k].role == "both"])
    clients = {k for k, r in enumerate(fleet.replicas) if r.tier == "client"}
    for k, (rp, spec) in enumerate(zip(reps, fleet.replicas, strict=True)):
        rp.index = k
        if spec.role == "prefill" and receivers:
            rp.hands_off = True
            rp.link_s_per_token = cfg.kv_bytes_per_token / (spec.kv_link_gb_s * 1e9)
    senders = [rp for rp in reps if rp.hands_off and rp.index not in clients]
    takers = [rp for rp in reps if not rp.hands_off and rp.index not in clients]
    disagg = fleet.disaggregated
    pending: list[tuple[float, int, int]] = []  # (KV lands, order, request)
    kv_ready = [False] * len(workload)
    transfer = [0.0] * len(workload)
    sched = hooks.schedule if hooks else None
    chunker = hooks.chunk_size if hooks else None
    evictor = hooks.evict if hooks else None
    log = hooks.log if hooks else None
    htimes = hooks.times if hooks else None
    n_rep = len(reps)
    N = len(workload)
    prompt, output, blocks = workload.prompt, workload.output, workload.blocks
    arrival = workload.arrival
    nan = math.nan
    first = [nan] * N
    finish = [nan] * N
    cached = [-1] * N
    gen = [0] * N  # tokens generated (at the last join or preemption)
    s_join = [0.0] * N
    contrib = [0.0] * N
    token = [0] * N
    dropped = [False] * N
    preempted = [0] * N
    decisions = [-1] * N
    rtt = [0.0] * N
    use_cache = cfg.prefix_cache
    run_seq = 0
    perf = time.perf_counter

    def state(rp: _Replica) -> ReplicaState:
        st = ReplicaState()
        st.now, st.index, st.accelerator = rp.clock, rp.index, rp.accelerator
        st.running, st.waiting = rp.B, len(rp.waiting)
        st.queued_tokens = rp.wait_tokens
        st.kv_capacity = rp.cap
        st.kv_used = int(rp.kv_const + rp.B * rp.S + rp.reserved)
        st.token_budget, st.max_seqs = rp.budget, rp.max_seqs
        return st

    def ask(hook: str, fn: Callable[..., object], *args: object) -> int:
        if htimes is not None:
            t0 = perf()
            out = fn(*args)
            htimes.append(perf() - t0)
        else:
            out = fn(*args)
        if type(out) is not int:
            raise DecisionError(f"{hook}() returned {out!r}; it must return an int")
        if log is not None:
            log[hook].append(out)
        return out

    def pick_waiting(rp: _Replica) -> None:
        """schedule(): move the chosen waiting request to the head of the queue."""
        window = []
        for j, rid in enumerate(rp.waiting):
            if j == QUEUE_WINDOW:
                break
            w = Waiting()
            w.id, w.arrival, w.prompt_tokens = rid, arrival[rid], prompt[rid]
            w.context_tokens = prompt[rid] + gen[rid]
            c = sum(_cached_blocks(rp, blocks[rid])) * bt if use_cache and not kv_ready[rid] else 0
            w.cached_tokens = min(c, prompt[rid])
            w.preempted, w.waited_s = preempted[rid], rp.clock - arrival[rid]
            window.append(w)
        j = ask("schedule", sched, window, state(rp))  # type: ignore[arg-type]
        if not 0 <= j < len(window):
            raise DecisionError(f"schedule() returned {j} with {len(window)} requests in view "
                                f"on replica {rp.index}; it must index the queue it was given")
        if j:
            rid = rp.waiting[j]
            del rp.waiting[j]
            rp.waiting.appendleft(rid)

    def waiting_info(rp: _Replica, rid: int, hit: int) -> Waiting:
        w = Waiting()
        w.id, w.arrival, w.prompt_tokens = rid, arrival[rid], prompt[rid]
        w.context_tokens, w.cached_tokens = prompt[rid] + gen[rid], min(hit, prompt[rid])
        w.preempted, w.waited_s = preempted[rid], rp.clock - arrival[rid]
        return w

    def pick_victim(rp: _Replica) -> tuple[int, int]:
        """evict(): the running sequence to preempt; the stack keeps only live entries."""
        live = [(tok, rid) for tok, rid in rp.stack if token[rid] == tok]
        rp.stack = live
        running = []
        for _, rid in live:
            r = Running()
            r.id, r.arrival, r.prompt_tokens = rid, arrival[rid], prompt[rid]
            r.context_tokens = int(contrib[rid] + rp.S)
            r.generated = gen[rid] + int(rp.S - s_join[rid] + 1e-9)
            r.preempted = preempted[rid]
            running.append(r)
        j = ask("evict", evictor, running, state(rp))  # type: ignore[arg-type]
        if not 0 <= j < len(live):
            raise DecisionError(f"evict() returned {j} with {len(live)} running sequences on "
                                f"replica {rp.index}; it must index the list it was given")
        return live.pop(j)

    def advance(rp: _Replica, t: float) -> None:
        nonlocal run_seq
        m = rp.m
        heap = rp.heap
        while True:
            # -- events due now ---------------------------------------------------------
            while heap:
                fs, tok, rid = heap[0]
                if token[rid] != tok:
                    heapq.heappop(heap)
                    continue
                if fs > rp.S + 1e-9:
                    break
                heapq.heappop(heap)
                token[rid] = -1
                finish[rid] = rp.clock
                gen[rid] = output[rid]
                rp.kv_const -= contrib[rid]
                rp.B -= 1
            head = rp.head
            if head >= 0 and rp.pf_left <= 1e-6:
                rp.reserved = 0
                rp.head = -1
                if first[head] != first[head]:  # nan: first prefill of this request
                    first[head] = rp.clock
                    gen[head] = 1
                if use_cache:
                    _remember(rp, blocks[head])
                left = output[head] - gen[head]
                if left <= 0:
                    finish[head] = rp.clock
                elif rp.hands_off:  # KV leaves by this replica's link, one transfer at a time
                    start = rp.link_free if rp.link_free > rp.clock else rp.clock
                    land = start + (prompt[head] + gen[head] - 1) * rp.link_s_per_token
                    rp.link_free = land
                    transfer[head] = land - rp.clock
                    first[head] = land
                    heapq.heappush(pending, (land, head, head))
                else:
                    run_seq += 1
                    token[head] = run_seq
                    s_join[head] = rp.S
                    c = prompt[head] + gen[head] + rp.kv_pad - rp.S
                    contrib[head] = c
                    rp.kv_const += c
                    rp.B += 1
                    heapq.heappush(heap, (rp.S + left, run_seq, head))
                    rp.stack.append((run_seq, head))
                continue
            B = rp.B
            kv = rp.kv_const + B * rp.S
            if B and kv + rp.reserved >= rp.cap - 1e-6:  # KV exhausted: preempt the youngest
                if evictor is not None and B > 1:
                    tok, rid = pick_victim(rp)
                else:
                    stack = rp.stack
                    while True:
                        tok, rid = stack.pop()
                        if token[rid] == tok:
                            break
                token[rid] = -1
                kv_ready[rid] = False
                rp.kv_const -= contrib[rid]
                rp.B -= 1
                gen[rid] += int(rp.S - s_join[rid] + 1e-9)
                preempted[rid] += 1
                rp.preemptions += 1
                rp.waiting.appendleft(rid)
                rp.wait_tokens += prompt[rid]
                continue
            if head < 0 and rp.waiting and B < rp.max_seqs:  # admit the next prefill
                if sched is not None and len(rp.waiting) > 1:
                    pick_waiting(rp)
                rid = rp.waiting[0]
                need = prompt[rid] + gen[rid]
                # vLLM keeps a 1% watermark of free KV so admissions do not thrash
                if kv + need + rp.kv_pad <= rp.cap - rp.cap // 100 or B == 0:
                    rp.waiting.popleft()
                    hit = 0
                    if kv_ready[rid]:  # handed-off KV: nothing to prefill
                        hit = need
                    else:
                        rp.wait_tokens -= prompt[rid]
                    if use_cache and not kv_ready[rid]:
                        n_hbm, n_host = _cached_blocks(rp, blocks[rid])
                        hit = min((n_hbm + n_host) * bt, need - 1)
                        if n_host and hit > n_hbm * bt:  # steps wait for the host's blocks
                            up = hit - n_hbm * bt
                            rp.host_hit_tokens += up
                            rp.clock += up * rp.host_s_per_token
                            rp.busy += up * rp.host_s_per_token
                    if cached[rid] < 0:
                        cached[rid] = min(hit, prompt[rid] - 1)
                    rp.head = head = rid
                    rp.reserved = need + rp.kv_pad
                    rp.pf_left = float(need - hit)
                    rp.pf_ctx = float(hit)
                    if chunker is not None and rp.pf_left > 0:
                        req = waiting_info(rp, rid, hit)
                        c = ask("chunk_size", chunker, req, state(rp))
                        if not 1 <= c <= rp.budget:
                            raise DecisionError(f"chunk_size() returned {c}; it must be in "
                                                f"1..{rp.budget} (the token budget per step)")
                        rp.chunk = c
            # -- one segment of constant composition -------------------------------------
            C = rp.budget - B if head >= 0 and rp.budget > B else 0
            if C > rp.chunk:
                C = rp.chunk
            if B == 0 and C == 0:  # idle
                if rp.clock < t < INF:
                    rp.clock = t
                return
            if rp.clock >= t:
                return
            n = INF
            if B:
                while token[heap[0][2]] != heap[0][1]:
                    heapq.heappop(heap)
                n = heap[0][0] - rp.S
                room = (rp.cap - kv - rp.reserved) / B
                if room < n:
                    n = room if room > 0.0 else 0.0
            if C:
                p = rp.pf_left / C
                if p < n:
                    n = p
            kmid = kv + B * n * 0.5
            cmid = rp.pf_ctx + C * n * 0.5
            dt = m.step_s(B, C, kmid, cmid)
            end = rp.clock + n * dt
            if end > t:
                n = (t - rp.clock) / dt
                end = t
            rp.busy += end - rp.clock
            rp.clock = end
            rp.S += n
            rp.decode_tokens += B * n
            if C:
                rp.pf_left -= C * n
                rp.pf_ctx += C * n
                rp.prefill_tokens += C * n

    views = View()
    views.n = n_rep
    views.block_tokens = bt
    h200 = step_model("H200").comp_per_token_s
    views.speed = [h200 / r.m.comp_per_token_s for r in reps]
    views.accelerator = [r.accelerator for r in fleet.replicas]
    views.pool = [r.pool for r in fleet.replicas]
    views.region = [r.region for r in fleet.replicas]
    views.price = [r.usd_per_hour for r in fleet.replicas]
    views.kv_capacity = [r.cap for r in reps]
    rtt_by_region: dict[str, list[float]] = {}
    queue_area = [0.0] * n_rep
    timings: list[float] = []
    last_t = 0.0

    def land_until(t: float) -> None:
        """Hand-offs that land by ``t``, in time order, to the least loaded receiver."""
        while pending and pending[0][0] <= t:
            tl, _, rid = heapq.heappop(pending)
            for rq in takers:
                advance(rq, tl)
            g = reps[decisions[rid]].group  # a deployment class's decode pool, if it has one
            mine = [j for j in receivers if reps[j].group == g] or receivers
            k = min(mine, key=lambda j: (len(reps[j].waiting) + reps[j].B
                                              + (reps[j].head >= 0), reps[j].kv_const
                                              + reps[j].B * reps[j].S + reps[j].reserved, j))
            if decisions[rid] in clients:  # tokens now stream from the server
                rtt[rid] = fleet.rtt(workload.region[rid], fleet.replicas[k].region)
            rq = reps[k]
            kv_ready[rid] = True
            rq.waiting.append(rid)
            advance(rq, tl)

    def advance_all(t: float) -> None:
        if disagg:  # senders first: their hand-offs must reach receivers in time order
            for rp in senders:
                advance(rp, t)
            land_until(t)
            for rp in takers:
                advance(rp, t)
        else:
            for rp in reps:
                advance(rp, t)

    for i in range(N):
        t = arrival[i]
        dtq = t - last_t
        last_t = t
        for k, rp in enumerate(reps):
            queue_area[k] += len(rp.waiting) * dtq
        advance_all(t)
        reg = workload.region[i]
        rtts = rtt_by_region.get(reg)
        if rtts is None:
            rtts = rtt_by_region[reg] = [fleet.rtt(reg, r.region) for r in fleet.replicas]
        views.now = t
        views.rtt_s = rtts
        views.queue = [len(rp.waiting) + (rp.head >= 0) for rp in reps]
        views.queued_tokens = [rp.wait_tokens + int(rp.pf_left if rp.head >= 0 else 0)
                               for rp in reps]
        views.running = [rp.B for rp in reps]
        views.outstanding = [q + b for q, b in zip(views.queue, views.running, strict=True)]
        views.kv_used = [(rp.kv_const + rp.B * rp.S + rp.reserved) / rp.cap for rp in reps]
        blk = blocks[i]
        views.prefix_blocks = _prefix_blocks(reps, blk)
        req = RequestInfo(i, t, prompt[i], blk, workload.session[i], reg)
        if time_policy:
            t0 = perf()
            k = route(req, views)
            timings.append(perf() - t0)
        else:
            k = route(req, views)
        if type(k) is not int or not 0 <= k < n_rep:
            raise DecisionError(
                f"route() returned {k!r} for request {i}; it must return an int replica "
                f"index in 0..{n_rep - 1}"
            )
        decisions[i] = k
        rp = reps[k]
        rtt[i] = rtts[k]
        if k in clients:  # the client's own device: no queue, no round trip
            rtt[i] = 0.0
            cached[i] = 0
            done = t + prompt[i] * rp.m.comp_per_token_s
            rp.prefill_tokens += prompt[i]
            rp.busy += done - t
            if fleet.replicas[k].role == "prefill" and receivers and output[i] > 1:
                up = prompt[i] * cfg.kv_bytes_per_token / (fleet.replicas[k].kv_link_gb_s * 1e9)
                transfer[i] = up
                first[i] = done + up
                gen[i] = 1
                heapq.heappush(pending, (done + up, i, i))
            else:
                first[i] = done
                finish[i] = done + (output[i] - 1) * rp.m.mem_base_s
                rp.decode_tokens += output[i] - 1
                rp.busy += finish[i] - done
            continue
        if prompt[i] + output[i] > rp.cap or (
            cfg.max_queue is not None and len(rp.waiting) >= cfg.max_queue
        ):
            dropped[i] = True
            continue
        rp.waiting.append(i)
        rp.wait_tokens += prompt[i]
        if len(rp.waiting) > rp.max_queue_seen:
            rp.max_queue_seen = len(rp.waiting)
        advance(rp, t)  # admit now if the replica is idle
    advance_all(INF)
    end_s = max([rp.clock for rp in reps] + [f for f in finish if f == f] + [last_t])
    return SimResult(
        workload=workload, fleet=fleet, decisions=decisions, first_token=first, finish=finish,
        rtt=rtt, cached=[max(c, 0) for c in cached], dropped=dropped, preempted=preempted,
        busy_s=[rp.busy for rp in reps], prefill_tokens=[rp.prefill_tokens for rp in reps],
        decode_tokens=[rp.decode_tokens for rp in reps],
        max_queue=[rp.max_queue_seen for rp in reps], queue_area=queue_area, end_s=end_s,
        decision_s=timings, transfer_s=transfer if disagg else None,
        host_hit_tokens=[rp.host_hit_tokens for rp in reps],
    )


def replay(decisions: list[int]) -> Callable[[RequestInfo, View], int]:
    """A policy that returns logged decisions (the trusted side re-simulates with it)."""

    def route(request: RequestInfo, view: View) -> int:
        return decisions[request.id]

    return route
