"""Which layer of the sandbox stops CUDA from starting in a candidate's process.

On an H100 machine whose kernel has Landlock (Firecracker, 6.18; 2026-12-06), every kernel
seed evaluated in the sandbox FAILED at CUDA's start with error 304 ("OS call failed or
operation not supported on this OS"); the H200 nights of 2026-12-02..04 ran on a kernel
without Landlock (gVisor, 4.4). This script starts CUDA in fresh child processes under
each layer alone and in the sandbox's order, so one short GPU call names the layer. It
named Landlock: the driver writes its threads' names to /proc/self/task/<tid>/comm, which
the sandbox's ruleset did not allow (the only refused call under strace); the sandbox now
does (``optimizer.sandbox.child.OWN_TASKS``).

    python bench/gpu_sandbox_probe.py [--json OUT]

Each row: the layers applied (in the child, before torch touches the GPU), then ok or the
error. Layers: ``limits`` (the rlimits a GPU sandbox sets: no address-space limit, CPU,
file size, open files, no core); ``nonewprivs`` (what Landlock sets first); ``landlock``
(writes beneath the work folder, /tmp, /dev and this process's threads only, as
``optimizer.sandbox.child.confine`` does); ``landlock-notasks`` (the same without the
threads: what failed); ``landlock-noscope`` (nor the signal scope); ``landlock-wide``
(writes everywhere: the ruleset alone); ``zygote`` (torch and triton imported in the
parent before the fork, as the warm sandbox does).

Then the project's own sandbox (``optimizer.sandbox.Sandbox``, settings as a kernel target's
GPU evaluation gets them) starts CUDA cold and warm, with Landlock on and off, so a row
shows whether the layers alone or their use in the sandbox break it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from optimizer.sandbox import landlock  # noqa: E402
from optimizer.sandbox.child import OWN_TASKS  # noqa: E402

LAYERS = ("limits", "nonewprivs", "landlock")


def _apply(layer: str, work: str) -> str:
    if layer == "limits":
        for rl, value in ((resource.RLIMIT_CPU, 600), (resource.RLIMIT_FSIZE, 1 << 30),
                          (resource.RLIMIT_NOFILE, 1024), (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(rl, (value, value))
        return ""
    if layer == "nonewprivs":
        ctypes.CDLL(None, use_errno=True).prctl(38, 1, 0, 0, 0)
        return ""
    if layer == "landlock":
        return landlock.restrict([work, tempfile.gettempdir(), "/dev", OWN_TASKS])
    if layer == "landlock-notasks":  # as before 2026-12-06: the threads' names unwritable
        return landlock.restrict([work, tempfile.gettempdir(), "/dev"])
    if layer == "landlock-noscope":  # without the threads' names and the signal scope
        return landlock.restrict([work, tempfile.gettempdir(), "/dev"], scopes=0)
    if layer == "landlock-wide":  # writes everywhere: the ruleset and its scope alone
        return landlock.restrict(["/"])
    raise ValueError(layer)


def _child(layers: tuple[str, ...], work: str, fd: int) -> None:
    out: dict[str, object] = {"layers": list(layers)}
    try:
        notes = [w for w in (_apply(layer, work) for layer in layers) if w]
        out["notes"] = notes
        import torch

        n = torch.cuda.device_count()
        x = torch.ones(1 << 20, device="cuda")
        out.update(ok=True, devices=n, sum=float(x.sum()))
    except BaseException as exc:  # noqa: BLE001 - the row says what broke
        out.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[:300]}")
    os.write(fd, json.dumps(out).encode())
    os._exit(0)


def _probe(layers: tuple[str, ...], work: str) -> dict[str, object]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        _child(layers, work, w)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data) if data else {"layers": list(layers), "ok": False,
                                           "error": "the child died without a word"}


_ENTRY = """
def main(payload, io_dir):
    import torch
    x = torch.ones(1 << 20, device="cuda")
    return {"ok": True, "devices": torch.cuda.device_count(), "sum": float(x.sum())}
"""


def _sandbox_rows(root: str) -> list[dict[str, object]]:
    from optimizer.sandbox.host import Sandbox, SandboxSettings

    rows: list[dict[str, object]] = []
    rw = Path(root) / "rw"
    work = rw / "cand"
    work.mkdir(parents=True)
    (work / "probe_entry.py").write_text(_ENTRY)
    for warm in (False, True):
        for lock in (True, False):
            settings = SandboxSettings(timeout_s=120, memory_mb=0, allow_gpu=True, warm=warm,
                                       landlock=lock, rw_root=rw, preload=("torch", "triton"))
            row: dict[str, object] = {"layers": ["sandbox", "warm" if warm else "cold",
                                                 *(["landlock"] if lock else [])]}
            try:
                with Sandbox(settings) as box:
                    res = box.call("probe_entry:main", {}, workdir=work)
                resp = res.response or {}
                row.update(ok=bool(resp.get("ok")), isolation=box.isolation,
                           error=str(resp.get("error") or res.error)[-600:],
                           stderr=res.stderr[-600:])
            except BaseException as exc:  # noqa: BLE001 - the row says what broke
                row.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[:300]}")
            rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the rows here too")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        cases: list[tuple[str, ...]] = [(), *((layer,) for layer in LAYERS), LAYERS,
                                        ("landlock-notasks",), ("landlock-noscope",),
                                        ("landlock-wide",)]
        for case in cases:
            rows.append(_probe(case, work))
        import torch  # noqa: F401 - the warm sandbox's parent imports these before forking
        import triton  # noqa: F401

        for case in [(), LAYERS]:
            row = _probe(case, work)
            row["layers"] = ["zygote", *case]
            rows.append(row)
        rows += _sandbox_rows(work)
    for row in rows:
        layers = "+".join(row["layers"]) or "none"  # type: ignore[arg-type]
        why = str(row.get("error") or "?").strip().splitlines() or ["?"]
        print(f"{layers:40s} {'ok' if row['ok'] else why[-1]}")
    if args.json:
        args.json.write_text(json.dumps({"landlock_abi": landlock.abi(), "rows": rows},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
