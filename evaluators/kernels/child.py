"""Trusted entry functions that run inside the sandbox, next to a candidate's ``kernel.py``.

``check(payload, io_dir)``  runs the candidate on inputs the trusted side wrote, with outputs
poisoned, and writes outputs (and inputs as they were after the call) back for comparison.
``time_kernels(payload, io_dir)`` times candidate (and optionally baseline) on the GPU.
``session(payload, io_dir)`` is both for one evaluation in one process (a sandbox session:
``{"op": "check", ...}`` then ``{"op": "time", ...}``): the candidate is imported, and its
kernels compiled, once; two processes cost a GPU evaluation a second CUDA start, import and
compilation of every specialisation.

Nothing here decides correctness: the trusted side compares. Without CUDA, Triton runs in
its interpreter: ``TRITON_INTERPRET=1`` is set before triton or the candidate is imported.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from pathlib import Path
from typing import Any

from optimizer.sandbox.loader import load_module as _load

# call sequence per workload: (name, input set loaded into the live input tensors)
# A1 then B, then C written *into A's storage* (catches caches keyed by data pointer or
# shape), then A again into the same storage (bitwise determinism against A1). Further
# sets (S3, S4, ...: the rest of the target's distributions) follow, one call each on
# fresh tensors.
CALLS = (("A1", "A"), ("B", "B"), ("C", "C"), ("A2", "A"))


def _setup(device: str) -> Any:
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    return torch


class _Poison:
    """Whether fresh allocations are poisoned now: during checked calls, not timed ones."""

    on = True


@contextlib.contextmanager
def _unpoisoned() -> Any:
    """The harness's own allocations (inputs it draws, its staging buffer) in a check: not
    outputs, so not poisoned."""
    was, _Poison.on = _Poison.on, False
    try:
        yield
    finally:
        _Poison.on = was


def _install_poison(torch: Any) -> None:
    """Every torch.empty*/new_empty returns NaN (floats) or the max integer while
    ``_Poison.on``: memory a kernel never writes, or reads before writing, is visible in
    the output. Installed before the candidate is imported, so every route to the
    allocators is the wrapped one."""

    def fill(t: Any) -> Any:
        if _Poison.on and isinstance(t, torch.Tensor) and t.numel():
            with torch.no_grad():
                if t.is_floating_point():
                    t.fill_(float("nan"))
                elif t.dtype != torch.bool:
                    t.fill_(torch.iinfo(t.dtype).max)
        return t

    def wrap(fn: Any) -> Any:
        def poisoned(*args: Any, **kwargs: Any) -> Any:
            return fill(fn(*args, **kwargs))

        return poisoned

    for name in ("empty", "empty_like", "empty_strided"):
        setattr(torch, name, wrap(getattr(torch, name)))
    torch.Tensor.new_empty = wrap(torch.Tensor.new_empty)


def _poison_allocator(torch: Any, device: str, expect: list) -> None:
    """Empty the CUDA caching allocator, then leave NaN-filled blocks of the output sizes in
    it, so an output allocated by any route starts as NaN."""
    if device != "cuda":
        return
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    blocks = []
    for shape, dtype in expect:
        dt = getattr(torch, dtype)
        if dt.is_floating_point:
            blocks.append(torch.full(shape, float("nan"), dtype=dt, device=device))
    del blocks
    torch.cuda.synchronize()


def _storage_problems(torch: Any, outs: list, inputs: list, earlier: list, device: str) -> list:
    problems = []
    for i, o in enumerate(outs):
        if type(o) is not torch.Tensor:
            problems.append(f"output {i} is a {type(o).__name__}, not a plain torch.Tensor")
            continue
        if o.device.type != device:
            problems.append(f"output {i} is on {o.device}, inputs are on {device}")
        if not o.is_contiguous():
            problems.append(f"output {i} is not contiguous (strides {tuple(o.stride())})")
        ptr = o.untyped_storage().data_ptr()
        for j, t in enumerate(inputs):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == ptr:
                problems.append(f"output {i} aliases input {j} (same storage)")
        for e in earlier:
            if e.untyped_storage().data_ptr() == ptr:
                problems.append(
                    f"output {i} reuses the storage of an output returned by an earlier call "
                    f"that is still alive (state kept across calls)"
                )
    return problems


class _Candidate:
    """The candidate's module, imported once per process after the trip wires are set."""

    def __init__(self, device: str, module: str):
        self.torch = torch = _setup(device)
        _install_poison(torch)
        from evaluators.kernels.audit import install_tripwires, triton_launch_codes

        # before the candidate is imported: it must not capture the real mode-popping
        # functions, nor patch or shadow triton's launch code
        self.launch_codes = triton_launch_codes()
        install_tripwires()
        self.mod = _load(Path.cwd() / module, "candidate_kernel")


def check(payload: dict, io_dir: Path, cand: _Candidate | None = None) -> dict:
    cand = cand or _Candidate(payload["device"], payload.get("module", "kernel.py"))
    if not hasattr(cand.mod, "ModelNew"):
        return {"error": "kernel.py defines no ModelNew class"}
    _Poison.on = True
    try:
        return _check(payload, io_dir, cand)
    finally:
        _Poison.on = False


def _draw_sets(torch: Any, w: dict, reference: Any, device: str) -> dict[str, list]:
    """The workload's three input sets, drawn from their seeds on this device as the
    trusted side drew them (the same values; it holds their references). Poison is off:
    these are inputs, not outputs."""
    from evaluators.numerics import make_case, torch_dtype

    pdt = torch_dtype(w["param_dtype"]) if w.get("param_dtype") else None
    with _unpoisoned():
        return {k: list(make_case(reference, w["args"], w["init"], dist, int(seed), pdt,
                                  device).inputs)
                for k, (dist, seed) in w["draws"].items()}


def _check(payload: dict, io_dir: Path, cand: _Candidate) -> dict:
    device = payload["device"]
    torch, mod, launch_codes = cand.torch, cand.mod, cand.launch_codes
    from safetensors.torch import load_file

    from evaluators.kernels.audit import ForwardAudit
    from evaluators.numerics import as_list, digest

    reference = _load(Path(payload["reference"]), "trusted_reference")
    results = []
    # where the call's time goes (reported as cost metrics; the first call of a workload
    # includes compiling the kernel for its shapes and dtypes)
    phases = dict.fromkeys(("load", "first_call", "calls", "save"), 0.0)
    clock = time.perf_counter
    for w in payload["workloads"]:
        wid = w["id"]
        res: dict[str, Any] = {"id": wid, "problems": [], "drawn": {}, "post": {},
                               "repeat": []}
        results.append(res)
        t0 = clock()
        model = mod.ModelNew(*w["init"])
        params = load_file(str(io_dir / f"{wid}.params.safetensors"))
        if params:
            model.load_state_dict(params, strict=True)
        model = model.to(device)
        sets = _draw_sets(torch, w, reference, device)
        res["drawn"] = {k: {str(i): digest(t) for i, t in enumerate(s)
                            if isinstance(t, torch.Tensor)} for k, s in sets.items()}

        def fresh(s: list) -> list:
            return [t.clone() if isinstance(t, torch.Tensor) else t for t in s]

        live = fresh(sets["A"])
        earlier: list = []
        phases["load"] += clock() - t0
        extra = [(k, k) for k in sets if k not in ("A", "B", "C")]
        for call, src in (*CALLS, *extra):
            t0 = clock()
            if call == "B" or call.startswith("S"):  # B and the further sets: fresh tensors
                live_call = fresh(sets[src])
            else:
                if call != "A1":  # C, then A again, written into A's storage
                    for t, new in zip(live, sets[src], strict=True):
                        if isinstance(t, torch.Tensor):
                            t.copy_(new)
                live_call = live
            _poison_allocator(torch, device, w["expect"])
            audit = ForwardAudit(launch_codes)
            try:
                with torch.no_grad(), audit:
                    out = as_list(model(*live_call))
            except Exception:
                # torch compute that then crashed (numpy has no bfloat16) is still torch compute
                if not audit.problems():
                    raise
                res["problems"] += audit.problems()
                break
            if device == "cuda":
                torch.cuda.synchronize()
            t1 = clock()
            phases["first_call" if call == "A1" else "calls"] += t1 - t0
            res["problems"] += audit.problems()
            res["problems"] += _storage_problems(torch, out, live_call, earlier, device)
            earlier += [o for o in out if isinstance(o, torch.Tensor)]
            if call == "A2":  # only its bits are asked for: equal to A1's
                res["repeat"] = [digest(o) for o in out]
            else:
                _save_outputs(out, io_dir / f"{wid}.out.{call}.safetensors")
            if call in ("A1", "B") or call.startswith("S"):  # the inputs as the call left them
                res["post"][src] = {str(i): digest(t) for i, t in enumerate(live_call)
                                    if isinstance(t, torch.Tensor)}
            phases["save"] += clock() - t1
        del earlier, live, sets
    return {"workloads": results, "phases": {k: round(v, 3) for k, v in phases.items()}}


def time_kernels(payload: dict, io_dir: Path, cand_mod: Any = None) -> dict:
    """Interleaved CUDA-event timing of the candidate (cwd) and, if given, a baseline folder."""
    torch = _setup("cuda")
    if not torch.cuda.is_available():
        return {"error": "no CUDA device in the sandbox"}
    from evaluators import timing
    from evaluators.numerics import as_list, digest, make_case

    reference = _load(Path(payload["reference"]), "trusted_reference")
    if cand_mod is None:
        cand_mod = _load(Path.cwd() / payload.get("module", "kernel.py"), "candidate_kernel")
    impls = {"candidate": cand_mod}
    if payload.get("baseline_dir"):
        impls["baseline"] = _load(
            Path(payload["baseline_dir"]) / payload.get("module", "kernel.py"), "baseline_kernel"
        )
    copy_gbs = timing.copy_bandwidth_gbs()
    flusher = timing.L2Flusher("cuda")
    out: dict[str, Any] = {"copy_gbs": copy_gbs, "device_name": torch.cuda.get_device_name(),
                           "workloads": []}
    rng = random.Random(payload["seed"])
    for w in payload["workloads"]:
        dtype = getattr(torch, w["param_dtype"]) if w.get("param_dtype") else None
        # The timed calls rotate over several input sets drawn from the hidden seed (one
        # parameter set per model): a result kept from an earlier call, or keyed by input
        # storage, is the wrong answer for the next set, and the trusted side checks a
        # sample of timed outputs and every set again after the timing.
        sets = []
        for j, dist in enumerate(w["dists"]):
            # on the GPU, as the trusted side draws them for their references
            case = make_case(reference, w["args"], w["init"], dist, payload["seed"] + j, dtype,
                             "cuda")
            sets.append(list(case.inputs))
            if j == 0:
                params = case.params
        rotating = {}
        for name, mod in impls.items():
            model = mod.ModelNew(*w["init"])
            if params:
                model.load_state_dict(params, strict=True)
            rotating[name] = _Rotating(torch, model.to("cuda"), sets)
        reps = int(payload.get("reps", 100))
        n_blocks = int(payload.get("blocks", 1))
        capture = _Capture(_picks(rng, n_blocks, len(sets), reps, int(payload.get("checks", 3))),
                           rotating["candidate"], io_dir, str(w["id"]))
        blocks = []
        for b in range(n_blocks):
            capture.new_block(b)
            samples = timing.time_interleaved(rotating, reps=reps, flusher=flusher,
                                              capture=capture)
            blocks.append({k: {"event_ms": list(s.event_ms), "wall_ms": list(s.wall_ms)}
                           for k, s in samples.items()})
        models = {k: r.model for k, r in rotating.items()}
        captured = capture.captured
        # the kernel once more on every set after the timing: where a timed call of that set
        # was captured, its bits must be that call's (the trusted side compares digests),
        # else its outputs go back for the reference
        after = []
        for j, inputs in enumerate(sets):
            with torch.no_grad():
                result = models["candidate"](*inputs)
            torch.cuda.synchronize()
            if any(c["set"] == j for c in captured):
                after.append({"set": j, "digests": [digest(o) for o in as_list(result)]})
            else:
                file = f"{w['id']}.after.{j}.safetensors"
                _save_outputs(result, io_dir / file)
                after.append({"set": j, "file": file})
        out["workloads"].append({"id": w["id"], "blocks": blocks, "captured": captured,
                                 "after": after})
    return out


class _Session:
    """One evaluation's requests in one process (see the module docstring)."""

    def __init__(self, payload: dict, io_dir: Path):
        self.io_dir = io_dir
        self.cand = _Candidate(payload["device"], payload.get("module", "kernel.py"))

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op == "check":
            return check(request["payload"], self.io_dir, self.cand)
        if op == "time":
            return time_kernels(request["payload"], self.io_dir, self.cand.mod)
        raise ValueError(f"unknown request {op!r}")


def session(payload: dict, io_dir: Path) -> _Session:
    """The handler of a kernel evaluation's session (optimizer.sandbox.serve)."""
    return _Session(payload, io_dir)


class _Rotating:
    """One implementation's timed call: each call takes the next input set."""

    def __init__(self, torch: Any, model: Any, sets: list[list[Any]]):
        self.torch, self.model, self.sets = torch, model, sets
        self.calls = 0
        self.last = 0

    def __call__(self) -> Any:
        self.last = self.calls % len(self.sets)
        self.calls += 1
        with self.torch.no_grad():
            return self.model(*self.sets[self.last])


def _picks(rng: random.Random, blocks: int, n_sets: int, reps: int, checks: int
           ) -> set[tuple[int, int, int]]:
    """Which timed calls of the candidate are kept for checking, as (block, set, k): the
    k-th call on that set in that block. Each block covers every set before any twice
    (then no set needs its outputs sent again after the timing); which call of a set is
    chosen at random, so no call knows beforehand whether it is checked."""
    per_set = max(1, reps // max(1, n_sets))
    picks = set()
    for b in range(blocks):
        order = rng.sample(range(n_sets), n_sets)
        chosen: dict[int, list[int]] = {}
        for i in range(checks):
            j = order[i % n_sets]
            free = [k for k in range(per_set) if k not in chosen.get(j, [])]
            if free:
                chosen.setdefault(j, []).append(rng.choice(free))
        picks |= {(b, j, k) for j, ks in chosen.items() for k in ks}
    return picks


class _Capture:
    """Keeps the candidate's results of the chosen timed calls (see :func:`_picks`) for the
    trusted side."""

    def __init__(self, picks: set[tuple[int, int, int]], rotating: _Rotating, io_dir: Path,
                 wid: str):
        self.picks, self.rotating, self.io_dir, self.wid = picks, rotating, io_dir, wid
        self.block = 0
        self.seen: dict[int, int] = {}  # calls per set in this block
        self.captured: list[dict[str, Any]] = []

    def new_block(self, b: int) -> None:
        self.block, self.seen = b, {}

    def __call__(self, name: str, rep: int, result: Any) -> None:
        if name != "candidate":
            return
        j = self.rotating.last
        k = self.seen.get(j, 0)
        self.seen[j] = k + 1
        if (self.block, j, k) not in self.picks:
            return
        file = f"{self.wid}.cap.{len(self.captured)}.safetensors"
        _save_outputs(result, self.io_dir / file)
        self.captured.append({"file": file, "set": j, "block": self.block, "rep": rep})


# safetensors' names of the dtypes an output or input can have
_ST_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
              "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
              "bool": "BOOL", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}


class _Staging:
    """A pinned host buffer the process's writes reuse: a device-to-host copy into pageable
    memory ran at 1.1 GB/s on an NVIDIA H200 (2026-12-04, 168 MB: 0.15 s), into pinned
    memory at 54 GB/s (bench/kernels_transport_cost.py)."""

    buf: Any = None


def _host_bytes(torch: Any, t: Any) -> Any:
    """``t``'s bytes as a flat uint8 tensor in host memory (a view of the staging buffer for
    a GPU tensor, valid until the next call)."""
    t = t.detach().as_subclass(torch.Tensor).contiguous().reshape(-1)
    raw = t.view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
    if raw.is_cuda:
        n = raw.numel()
        try:
            if _Staging.buf is None or _Staging.buf.numel() < n:
                _Staging.buf = None
                with _unpoisoned():
                    _Staging.buf = torch.empty(max(n, 1 << 20), dtype=torch.uint8,
                                               pin_memory=True)
            stage = _Staging.buf[:n]
            stage.copy_(raw)
            return stage
        except RuntimeError:  # no pinned memory to be had: the pageable copy
            _Staging.buf = None
    return raw.to("cpu")


def write_tensors(tensors: dict, path: Path) -> None:
    """``tensors`` (name -> tensor; anything else becomes a NaN scalar, which the trusted
    side then judges) to a safetensors file at ``path``, each tensor's bytes written from
    host memory as they arrive (through the pinned staging buffer for a GPU tensor).
    ``safetensors.torch.save_file`` would first copy every tensor into a bytes object. The
    trusted side reads the file with safetensors' own checked loader."""
    import json

    import torch

    items = {name: (t if isinstance(t, torch.Tensor) else torch.tensor(float("nan")))
             for name, t in tensors.items()}
    header: dict[str, Any] = {}
    offset = 0
    for name, t in items.items():
        dt = _ST_DTYPES.get(str(t.dtype).removeprefix("torch."))
        if dt is None:  # a dtype this writer does not know: the library's own writer
            from safetensors.torch import save_file

            save_file({k: v.detach().as_subclass(torch.Tensor).to("cpu").contiguous()
                       for k, v in items.items()}, str(path))
            return
        n = t.numel() * t.element_size()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for t in items.values():
            if t.numel():
                f.write(memoryview(_host_bytes(torch, t).numpy()))


def _save_outputs(result: Any, path: Path) -> None:
    from evaluators.numerics import as_list

    write_tensors({str(i): o for i, o in enumerate(as_list(result))}, path)
