"""Bubblewrap command lines and the scrubbed environment of sandboxed processes.

The mount layout (paths inside are the same as outside, so no path translation is needed):

- an empty tmpfs root; a fresh ``/proc`` of the new PID namespace; a minimal ``/dev``;
- tmpfs (size-capped) over ``/tmp`` and ``/dev/shm``; tmpfs over ``/home``, ``/root`` and
  the engine's ``$HOME`` (nothing of the homes is visible unless bound again below);
- read-only: ``/usr``, ``/bin``, ``/lib*``, ``/sbin``, an allow-list of ``/etc`` (never all
  of it: run as root, the sandbox uid maps to root outside, so the owner bits of root's
  files apply and ``/etc/shadow`` would be readable), the interpreter's prefix, the venv,
  the project, the workspace and ``extra_ro``;
- tmpfs over the state dir (mlflow.db, optuna.db, logs stay hidden);
- writable: the paths the caller names (the writable root, or one call's workdir/io_dir).

Order matters to bwrap: later mounts cover earlier ones, so tmpfs first, then read-only
binds, then the state-dir tmpfs, then writable binds.
"""

from __future__ import annotations

import fnmatch
import functools
import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

SANDBOX_UID = 65534  # "nobody" inside the user namespace; never 0 (root could remount /)

# Variables a candidate may see; everything else is dropped.
ENV_ALLOW = (
    "PATH",
    "LANG",
    "LC_ALL",
    "TZ",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_HOME",
    "LD_LIBRARY_PATH",  # the CUDA driver and toolkit libraries live there on GPU machines
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "TRITON_INTERPRET",
    "TRITON_CACHE_DIR",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
)
# Dropped even when allow-listed or passed in extra_env.
SECRET_PATTERNS = ("*KEY*", "*TOKEN*", "*SECRET*", "*PASSWORD*", "*CREDENTIAL*")

ETC_ALLOW = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "nsswitch.conf",
    "passwd",
    "group",
    "hosts",
    "alternatives",
    "ssl",
    "ca-certificates",
    "mime.types",
)
SYSTEM_RO = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32", "/opt")


def is_secret(name: str) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pat) for pat in SECRET_PATTERNS)


def scrubbed_env(extra: Mapping[str, str], fixed: Mapping[str, str]) -> dict[str, str]:
    """Allow-listed variables of this process, then ``extra``, then ``fixed``; no secrets."""
    env = {k: os.environ[k] for k in ENV_ALLOW if k in os.environ}
    env.update(extra)
    env.update(fixed)
    return {k: v for k, v in env.items() if not is_secret(k)}


@functools.lru_cache(maxsize=1)
def probe() -> str:
    """ "" when bwrap can build our sandbox here, else why not (cached per process)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bwrap (bubblewrap) is not installed"
    cmd = [
        exe, "--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID),
        "--gid", str(SANDBOX_UID), "--die-with-parent", "--new-session",
        "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "/bin/true",
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=20, env={}, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap cannot run: {exc}"
    if proc.returncode != 0:
        msg = proc.stderr.decode(errors="replace").strip()[-300:]
        return f"bwrap cannot create namespaces here: {msg or proc.returncode}"
    return ""


def _nested_order(paths: Iterable[Path]) -> list[Path]:
    """Unique existing paths, parents before children (so children are mounted on top)."""
    seen: dict[str, Path] = {}
    for p in paths:
        if p is None:
            continue
        resolved = Path(os.path.realpath(p))
        seen.setdefault(str(resolved), resolved)
    return sorted(seen.values(), key=lambda p: (len(p.parts), str(p)))


def bwrap_argv(
    *,
    ro: Iterable[Path],
    rw: Iterable[Path],
    hidden: Iterable[Path],
    env: Mapping[str, str],
    chdir: Path,
    tmp_mb: int,
    allow_gpu: bool,
) -> list[str]:
    """The bwrap prefix (ending in ``--``) for the given read-only/writable/hidden paths."""
    exe = shutil.which("bwrap") or "bwrap"
    argv = [
        exe,
        "--unshare-all",  # user, ipc, pid, net, uts, cgroup namespaces: no network
        "--unshare-user",
        "--uid", str(SANDBOX_UID),
        "--gid", str(SANDBOX_UID),
        "--die-with-parent",  # PR_SET_PDEATHSIG: the namespace dies with the engine
        "--new-session",  # no TIOCSTI into the engine's terminal
        "--clearenv",
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", str(tmp_mb * 1024 * 1024), "--tmpfs", "/tmp",
        "--size", str(tmp_mb * 1024 * 1024), "--tmpfs", "/dev/shm",
    ]  # fmt: skip
    for name, value in env.items():
        argv += ["--setenv", name, value]
    homes = {"/home", "/root", str(Path.home())}
    for home in sorted(homes, key=len):
        argv += ["--tmpfs", home]
    for system in SYSTEM_RO:
        argv += ["--ro-bind-try", system, system]
    for name in ETC_ALLOW:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    argv += ["--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu"]
    for ro_path in _nested_order(ro):
        argv += ["--ro-bind-try", str(ro_path), str(ro_path)]
    for hidden_path in _nested_order(hidden):
        argv += ["--tmpfs", str(hidden_path)]
    if allow_gpu:
        argv += ["--ro-bind-try", "/sys", "/sys"]
        argv += ["--ro-bind-try", "/proc/driver/nvidia", "/proc/driver/nvidia"]
        for dev in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*")):
            argv += ["--dev-bind-try", dev, dev]
    for rw_path in _nested_order(rw):
        argv += ["--bind", str(rw_path), str(rw_path)]
    argv += ["--chdir", str(os.path.realpath(chdir)), "--"]
    return argv


def default_ro(workspace: Path | None, extra: Iterable[Path], project_root: Path) -> list[Path]:
    """What every evaluation needs to read: interpreter prefix, venv, project, workspace."""
    paths = [Path(sys.base_prefix), Path(sys.prefix), Path(sys.executable).parent, project_root]
    if workspace is not None:
        paths.append(workspace)
    paths.extend(extra)
    # import roots a .pth file of the environment adds (packages installed elsewhere):
    # without them the sandboxed interpreter's `site` skips them and imports fail
    paths.extend(p for p in (Path(e) for e in sys.path if e) if p.is_absolute() and p.is_dir()
                 and not any(p.is_relative_to(q) for q in paths))
    return paths
