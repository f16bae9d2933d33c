"""Trusted session entries that run inside the sandbox, next to a candidate's ``draft.py``.

Only the draft runs here. The target's decoding, its verification, the clock and the
judge stay on the trusted side (:mod:`evaluators.speculative.harness`, in the evaluator's
own process, which never imports draft code), which reaches the draft across the channel
once per decoding step (:mod:`evaluators.speculative.remote`).

- :func:`train_server`: the training session. It loads the staged target (weights and the
  training split only: the held-out tokens are never staged), imports the draft, builds it,
  probes its decoding, distils it (:mod:`evaluators.speculative.distill`) and saves its own
  weights (safetensors) in the io dir. One request, ``{"op": "train"}``.
- :func:`draft_server`: one session per timed prompt. A fresh process (forked from the
  warm zygote) loads the target's embedding and head only
  (:class:`~evaluators.speculative.model.TargetHead`: it cannot run the target), builds the
  draft, loads the saved weights and warms it up, then answers the decoding loop:
  ``{"op": "info"}``, ``{"op": "step", "k", "reset"/"accept", "feats", "sampled"}`` and,
  when sampling, ``{"op": "pick", "token"}``.

Greedy steps pick the argmax here (a greedy output depends only on the drafted tokens,
which the trusted side verifies). Sampled steps hand every draft distribution to the
trusted side, which samples the token with its own generator and sends it back, so the
draft never chooses, or sees in advance, the randomness its ``q`` is judged by.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import stat
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from evaluators.speculative.api import Draft, TargetView
from evaluators.speculative.decoding import speculative_decode
from evaluators.speculative.distill import load_data, train_draft
from evaluators.speculative.model import LMConfig, TargetHead, TinyLM
from optimizer.sandbox.loader import load_module

# Entries bwrap's --dev creates (2026-12-01, bubblewrap 0.8.0); anything else in /dev was
# made by a call (see _wipe_shared_tmpfs).
_DEV_LINKS = {"ptmx": "pts/ptmx", "core": "/proc/kcore", "fd": "/proc/self/fd",
              "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
              "stderr": "/proc/self/fd/2"}
_DEV_KEEP = {"pts", "shm", "mqueue", "hugepages"}


def _wipe_shared_tmpfs() -> None:
    """Empty what one call could leave for the next in the warm process's namespace.

    Inside bubblewrap, /dev and /dev/shm are tmpfs mounts of the zygote's namespace that
    outlive a call, and Landlock allows writes beneath /dev: a file one session wrote to
    /dev/shm or /dev was read by the next (measured 2026-12-01). Run before any candidate
    code, so a draft cannot leave a memo there for the next prompt's process. Only inside
    bwrap (pid 1 is bwrap): outside it /dev is the host's and is left alone. Other state
    that outlives a call (System V IPC objects, extended attributes and timestamps of the
    files a call can see) is not wiped here; the harness never times a prompt twice for the
    objective, so nothing remembered about a prompt can pay (docs/speculative.md).
    """
    try:
        with open("/proc/1/comm") as fh:
            if fh.read().strip() != "bwrap":
                return
    except OSError:
        return
    for entry in list(os.scandir("/dev/shm")):
        _remove(entry.path)
    _clean_dev("/dev", top=True)


def _clean_dev(folder: str, top: bool) -> None:
    """Device nodes stay (the GPU's too, in /dev/dri when bound), so do bwrap's own links
    and mounts; whatever else is in /dev was left by a call."""
    for entry in list(os.scandir(folder)):
        mode = os.lstat(entry.path).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            continue
        if top and entry.name in _DEV_LINKS:
            if not stat.S_ISLNK(mode) or os.readlink(entry.path) != _DEV_LINKS[entry.name]:
                _remove(entry.path)  # a link's target can carry data too
                os.symlink(_DEV_LINKS[entry.name], entry.path)
        elif stat.S_ISDIR(mode) and not stat.S_ISLNK(mode):
            if top and entry.name in _DEV_KEEP:
                continue
            _clean_dev(entry.path, top=False)
            try:
                os.rmdir(entry.path)  # a folder bwrap made for bound devices keeps them
            except OSError:
                pass
        else:
            _remove(entry.path)


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def _device(p: dict[str, Any]) -> torch.device:
    if p.get("device") == "cuda" and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def _shared_prefixes(draft: Draft, model: torch.nn.Module) -> tuple[str, ...]:
    """State-dict keys of tensors the draft shares with the target (not the draft's own)."""
    target_ids = {id(t) for t in model.parameters()}
    shared = tuple(k for k, v in draft.state_dict(keep_vars=True).items() if id(v) in target_ids)
    return shared or ("\0",)


def own_state(draft: Draft, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The draft's own tensors (what its weights file holds): not those it shares with the
    target, and each tied tensor once."""
    own, seen = {}, set()
    shared = _shared_prefixes(draft, model)
    for k, v in draft.state_dict().items():
        if k.startswith(shared) or v.data_ptr() in seen:
            continue
        if v.numel():
            seen.add(v.data_ptr())
        own[k] = v.detach().cpu().contiguous()
    return own


def _build(mod: Any, view_of: torch.nn.Module, seed: int) -> Draft:
    torch.manual_seed(seed)  # initialisation: the same for every candidate of a night
    draft = mod.build(TargetView.of(view_of))
    if not isinstance(draft, Draft):
        raise TypeError("build() must return an evaluators.speculative.api.Draft")
    return draft


# -- training ----------------------------------------------------------------------------


class _Trainer:
    def __init__(self, payload: dict[str, Any], io_dir: Path):
        self.p = payload
        self.io_dir = io_dir
        torch.set_num_threads(int(payload.get("threads", 1)))
        folder = Path(payload["target_dir"])
        meta = json.loads((folder / "meta.json").read_text())
        self.device = _device(payload)
        self.model = TinyLM(LMConfig(**meta["config"]))
        self.model.load_state_dict(load_file(str(folder / "target.safetensors")))
        self.model.eval().to(self.device)
        for param in self.model.parameters():
            param.requires_grad_(False)
        self.train_tokens = load_file(str(folder / "tokens.safetensors"))["train"]
        self.mod = load_module(Path.cwd() / "draft.py", str(payload.get("module", "draft")))

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("op") != "train":
            raise ValueError(f"unknown request {request.get('op')!r}")
        p, model, mod = self.p, self.model, self.mod
        seed = int(p["train_seed"])
        draft = _build(mod, model, seed).to(self.device)
        _probe(model, draft, self.train_tokens.to(self.device))
        record: dict[str, Any] = {"curve": [], "train_s": 0.0, "data_s": 0.0, "fit_s": 0.0,
                                  "weights": ""}
        if draft.wants_data:
            t0 = time.perf_counter()
            data = load_data(Path(p["distill_path"]), model, tuple(draft.feature_layers))
            data = {k: (v.to(self.device) if v is not None else None) for k, v in data.items()}
            record["data_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            with torch.no_grad():
                draft.fit(data)
            record["fit_s"] = time.perf_counter() - t0
            if draft.trainable:
                record["curve"] = train_draft(
                    draft, data, lr=float(getattr(mod, "LR", 3e-3)),
                    batch=int(getattr(mod, "BATCH", 16)), max_s=float(p["train_s"]),
                    max_steps=int(p["max_steps"]), seed=seed,
                    weight_decay=float(getattr(mod, "WEIGHT_DECAY", 0.0)))
            record["train_s"] = time.perf_counter() - t0  # fitting and training
            own = own_state(draft, model)
            if own:
                path = Path(p["out_dir"]) / f"{p.get('weights_name', 'draft')}.safetensors"
                save_file(own, str(path))
                record["weights"] = str(path)
        return record


@torch.no_grad()
def _probe(model: TinyLM, draft: Draft, tokens: torch.Tensor) -> None:
    """Decode a few tokens with the untrained draft before distilling it. A draft whose
    decoding breaks (shapes, cache bookkeeping) fails here in milliseconds instead of after
    its whole training budget; the values it proposes do not matter yet."""
    was_training = draft.training
    draft.eval()
    speculative_decode(model, draft, tokens[:16], 8, 3)
    draft.train(was_training)


def train_server(payload: dict[str, Any], io_dir: Path) -> _Trainer:
    """Session entry: the staged target and the candidate's draft module, ready to train."""
    _wipe_shared_tmpfs()
    return _Trainer(payload, io_dir)


# -- one timed prompt --------------------------------------------------------------------


class DraftHandler:
    """Answers the trusted decoding loop's requests with one freshly built draft."""

    def __init__(self, draft: Draft, vocab: int, device: torch.device):
        self.draft = draft
        self.vocab = vocab
        self.device = device
        self._to_draft: queue.Queue[int] = queue.Queue()
        self._to_host: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._worker: threading.Thread | None = None

    def _feats(self, value: Any) -> torch.Tensor | None:
        if value is None:
            return None
        return torch.tensor(np.asarray(value), dtype=torch.float32, device=self.device)

    def handle(self, request: dict[str, Any]) -> Any:
        op = request.get("op")
        if op == "step":
            return self._step(request)
        if op == "pick":
            if self._worker is None:
                raise RuntimeError("pick without a sampled step in progress")
            self._to_draft.put(int(request["token"]))
            return self._next()
        if op == "info":
            return {"feature_layers": [int(i) for i in self.draft.feature_layers]}
        raise ValueError(f"unknown request {op!r}")

    @torch.no_grad()
    def _step(self, r: dict[str, Any]) -> Any:
        draft = self.draft
        if "reset" in r:
            draft.reset(torch.tensor(np.asarray(r["reset"]), dtype=torch.int64,
                                     device=self.device), self._feats(r.get("feats")))
        elif "accept" in r:
            draft.accept([int(t) for t in r["accept"]], self._feats(r.get("feats")))
        k = int(r["k"])
        if r.get("sampled"):
            return self._start_sampled(k)

        return [int(t) for t in draft.propose(k, greedy_pick)]

    # Sampling: the draft's propose runs in a worker thread; each pick sends its logits to
    # the trusted side and waits for the token the trusted side sampled.
    def _start_sampled(self, k: int) -> dict[str, Any]:
        def pick(logits: torch.Tensor) -> int:
            self._to_host.put(("logits", logits.detach().double().cpu().numpy()))
            return self._to_draft.get()

        def work() -> None:
            try:
                with torch.no_grad():
                    toks = [int(t) for t in self.draft.propose(k, pick)]
                self._to_host.put(("done", toks))
            except BaseException as exc:  # noqa: BLE001 - handed to the request that waits
                self._to_host.put(("error", exc))

        self._worker = threading.Thread(target=work, daemon=True)
        self._worker.start()
        return self._next()

    def _next(self) -> dict[str, Any]:
        kind, value = self._to_host.get()
        if kind == "logits":
            return {"logits": value}
        self._worker = None
        if kind == "done":
            return {"tokens": value}
        raise value


def _load_weights(draft: Draft, own: dict[str, torch.Tensor], view: torch.nn.Module) -> None:
    """The weights the training session saved, into a fresh build(). A buffer saved with
    another shape (the table draft's table grows in fit) is replaced by one of the saved
    shape first; keys left out because they were the target's or aliases of a saved tensor
    (tied modules) are not missing."""
    buffers = dict(draft.named_buffers())
    for key, value in own.items():
        if key in buffers and buffers[key].shape != value.shape:
            path, _, name = key.rpartition(".")
            module = draft.get_submodule(path) if path else draft
            module._buffers[name] = torch.empty_like(value, device=buffers[key].device)
    result = draft.load_state_dict(own, strict=False)
    state = draft.state_dict(keep_vars=True)
    loaded = {state[k].data_ptr() for k in own if k in state}
    shared = _shared_prefixes(draft, view)
    missing = [k for k in result.missing_keys
               if not k.startswith(shared) and state[k].data_ptr() not in loaded]
    if missing or result.unexpected_keys:
        raise RuntimeError(f"the draft's saved weights do not fit a fresh build(): missing "
                           f"{missing[:5]}, unexpected {result.unexpected_keys[:5]}")


def greedy_pick(logits: torch.Tensor) -> int:
    """The draft's process's ``pick`` when decoding is greedy: the argmax."""
    return int(logits.argmax())


greedy_pick.greedy = True  # type: ignore[attr-defined]


@torch.no_grad()
def _warm_up(draft: Draft, vocab: int, n_feats: int, device: torch.device) -> None:
    """A few untimed draft steps on a dummy sequence: every timed prompt runs in a fresh
    process, whose first calls would otherwise pay one-off costs (allocations, lazy init)
    inside the timed decode."""
    tokens = torch.arange(17, device=device) % vocab
    feats = torch.zeros(16, n_feats, device=device) if n_feats else None
    draft.reset(tokens, feats)
    for _ in range(2):
        draft.propose(4, greedy_pick)
        draft.accept([0], torch.zeros(1, n_feats, device=device) if n_feats else None)


def draft_server(payload: dict[str, Any], io_dir: Path) -> DraftHandler:
    """Session entry for one timed prompt (or the sampled check): a fresh draft with its
    distilled weights, warmed up, serving the trusted loop."""
    _wipe_shared_tmpfs()
    torch.set_num_threads(int(payload.get("threads", 1)))
    device = _device(payload)
    cfg = LMConfig(**payload["config"])
    view = TargetHead(cfg)
    view.load_state_dict(load_file(payload["view_path"]))
    view.eval().to(device)
    for param in view.parameters():
        param.requires_grad_(False)
    mod = load_module(Path.cwd() / "draft.py", str(payload.get("module", "draft")))
    draft = _build(mod, view, int(payload["train_seed"])).to(device)
    if payload.get("weights"):
        _load_weights(draft, load_file(payload["weights"]), view)
    draft.eval()
    n_feats = len(draft.feature_layers) * cfg.d_model
    try:
        _warm_up(draft, cfg.vocab, n_feats, device)
    except Exception as exc:
        raise RuntimeError(f"the draft failed on a dummy sequence before the timed prompt: "
                           f"{type(exc).__name__}: {exc}") from exc
    return DraftHandler(draft, cfg.vocab, device)
