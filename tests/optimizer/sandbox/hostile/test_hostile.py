"""Hostile candidates against the sandbox: the engine goes on, nothing outside leaks or changes.

Every program in ``programs/`` is run through ``Sandbox.call`` with the trusted entry in
``candidates/hostile_entry.py``, in both isolation modes (bwrap where it works, and the
rlimits fallback for the cases that are safe without namespaces). For each case:

- the outcome (state and reason) is the one the program's ``# expected:`` line names;
- a benign call right after it succeeds (the engine, and the warm zygote, go on);
- no file of the fake repository, state dir, home, another candidate's worktree or
  /etc/passwd changed;
- no secret (an API key in the engine's environment, the trusted scratch, a fake ssh key)
  appears in stdout, stderr, the response or any file the candidate could write;
- processes and threads it started are gone once the call returns.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from evaluators._base import result_from_call
from optimizer.sandbox import Sandbox, SandboxSettings
from optimizer.sandbox.bwrap import probe
from optimizer.sandbox.child import landlock_abi

HERE = Path(__file__).parent
PROGRAMS = {p.stem: p for p in sorted((HERE / "programs").glob("*.py"))}
ENTRY = HERE / "candidates" / "hostile_entry.py"
API_KEY = "sk-test-secret-9b1e7c2d4a"
SCRATCH_SECRET = "trusted-seed-5512377"
SSH_SECRET = "-----BEGIN FAKE KEY----- q8v3x"
SECRETS = (API_KEY, SCRATCH_SECRET, SSH_SECRET)

# Cases that are only contained by namespaces: without bwrap they would reach the real
# file system, network or processes (as root, kill(-1) would hit the whole machine).
BWRAP_ONLY = {
    "fork_bomb", "proc_environ", "home_files", "network", "kill_parent", "kill_everything",
    "read_scratch",
}  # fmt: skip
# Writes outside the worktree: Landlock confines them in both modes, and in the warm
# zygote (where the whole writable root is mounted) it is what protects sibling worktrees.
LANDLOCK = {"write_state_dir", "write_repo", "write_home", "symlink_escape",
            "tamper_other_candidate"}  # fmt: skip
TIMEOUTS = {"stdout_flood": 30.0, "memory_bomb": 15.0}  # slack for a loaded machine
BEATS = {"setsid_escapee": "escapee.beat", "threads_left": "thread.beat"}

GOOD_PROGRAM = PROGRAMS["env_secrets"].read_text().replace("    _attack()\n", "")


def expected(path: Path) -> tuple[str, str]:
    for line in path.read_text().splitlines():
        if line.startswith("# expected:"):
            state, _, reason = line.removeprefix("# expected:").partition("|")
            return state.strip(), reason.strip()
    raise AssertionError(f"{path} has no '# expected: STATE | reason' line")


def reference(logits: np.ndarray, top_k: int, top_p: float) -> np.ndarray:
    """The engine's own reference (float64), computed outside the candidate's process."""
    order = np.argsort(-logits.astype(np.float64), axis=1, kind="stable")[:, :top_k]
    vals = np.take_along_axis(logits.astype(np.float64), order, axis=1)
    p = np.exp(vals - vals[:, :1])
    p /= p.sum(axis=1, keepdims=True)
    p = np.where(np.cumsum(p, axis=1) - p < top_p, p, 0.0)
    p /= p.sum(axis=1, keepdims=True)
    out = np.zeros(logits.shape)
    np.put_along_axis(out, order, p, axis=1)
    return out


@dataclass
class World:
    repo: Path
    state: Path
    rw_root: Path
    home: Path
    port: int
    hits: list[bytes] = field(default_factory=list)

    def snapshot(self) -> dict[str, str]:
        """Content hash of every file outside the candidates' own folders."""
        out: dict[str, str] = {}
        roots = [self.repo, self.home, self.rw_root / "other"]
        for root in roots:
            for path in sorted(root.rglob("*")):
                if self.rw_root in path.parents and (self.rw_root / "other") not in path.parents:
                    continue  # the calls' own worktrees and io dirs
                if path.is_symlink():
                    out[str(path)] = "link:" + os.readlink(path)
                elif path.is_file():
                    out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
                else:
                    out[str(path)] = "dir"
        out["/etc/passwd"] = hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest()
        return out


def _listen(world: World, server: socket.socket) -> None:
    while True:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        world.hits.append(conn.recv(100) or b"connected")
        conn.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("hostile")
    repo, home = root / "repo", root / "home"
    state = repo / ".optimizer"
    rw_root = state / "worktrees"
    for d in (repo / ".git", state / "scratch", rw_root / "other", home / ".ssh"):
        d.mkdir(parents=True)
    (repo / "evaluate.py").write_text("def validate(path):\n    pass\n")
    (repo / ".git" / "config").write_text("[core]\n")
    (state / "mlflow.db").write_bytes(b"SQLite format 3\0")
    (state / "optuna.db").write_bytes(b"SQLite format 3\0")
    (state / "scratch" / "seed.txt").write_text(SCRATCH_SECRET)
    (rw_root / "other" / "program.py").write_text("# another candidate\n")
    (home / ".ssh" / "id_rsa").write_text(SSH_SECRET)
    (home / ".netrc").write_text(f"machine api.example.com password {API_KEY}\n")
    (home / ".bashrc").write_text("# bashrc\n")
    server = socket.create_server(("127.0.0.1", 0))
    w = World(repo, state, rw_root, home, server.getsockname()[1])
    threading.Thread(target=_listen, args=(w, server), daemon=True).start()
    mp = pytest.MonkeyPatch()
    mp.setenv("OPENAI_API_KEY", API_KEY)
    mp.setenv("HOME", str(home))
    yield w
    mp.undo()
    server.close()


@pytest.fixture(scope="module", params=["bwrap", "rlimits"])
def sandbox(request: pytest.FixtureRequest, world: World):
    if request.param == "bwrap" and probe():
        pytest.skip(f"bwrap unavailable here: {probe()}")
    settings = SandboxSettings(
        timeout_s=3.0,
        memory_mb=1024,
        file_mb=16,
        max_procs=64,
        max_output_bytes=64_000,
        max_response_bytes=1_000_000,
        workspace=world.repo,
        state_dir=world.state,
        rw_root=world.rw_root,
        preload=("numpy",),
        isolation=request.param,
        extra_env={"MY_SERVICE_TOKEN": API_KEY, "OMP_NUM_THREADS": "1"},
    )
    with Sandbox(settings) as sb:
        sb.warm_up()
        yield sb


def _prepare(world: World, tag: str, program: str) -> tuple[Path, Path, np.ndarray]:
    workdir, io = world.rw_root / tag, world.rw_root / "_io" / tag
    for d in (workdir, io):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    (workdir / "program.py").write_text(program)
    shutil.copy(ENTRY, workdir / "hostile_entry.py")
    hints = {"repo": str(world.repo), "state_dir": str(world.state), "home": str(world.home),
             "port": world.port}  # fmt: skip
    (workdir / "hints.json").write_text(json.dumps(hints))
    logits = np.random.default_rng(7).standard_normal((6, 300)).astype(np.float32) * 3
    np.save(io / "logits.npy", logits)
    return workdir, io, logits


def _run(sb: Sandbox, world: World, tag: str, program: str, timeout: float):
    workdir, io, logits = _prepare(world, tag, program)
    call = sb.call("hostile_entry:run", {"top_k": 10, "top_p": 0.9}, workdir=workdir,
                   io_dir=io, timeout_s=timeout)  # fmt: skip
    failed = result_from_call(call, "hostile")
    if failed is not None:
        return call, failed.state.value, failed.reason, workdir, io
    try:
        probs = np.load(io / "probs.npy", allow_pickle=False)
    except (OSError, ValueError) as exc:
        return call, "FAILED", f"unreadable output: {exc}", workdir, io
    ok = probs.shape == logits.shape and np.abs(probs - reference(logits, 10, 0.9)).max() < 1e-5
    return call, "VALID" if ok else "INVALID", "", workdir, io


def _assert_no_secret(call, *folders: Path) -> None:
    texts = [call.stdout, call.stderr, call.error, json.dumps(call.response)]
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink():
                texts.append(path.read_bytes().decode("latin-1"))
    for secret in SECRETS:
        assert not any(secret in t for t in texts), f"secret {secret[:12]}... leaked"


@pytest.mark.parametrize("case", sorted(PROGRAMS))
def test_hostile_candidate_is_contained(sandbox: Sandbox, world: World, case: str) -> None:
    if sandbox.isolation != "bwrap" and case in BWRAP_ONLY:
        pytest.skip("contained only with bwrap (namespaces)")
    if case in LANDLOCK and not landlock_abi():
        pytest.skip("writes outside the worktree are confined by Landlock, absent here")
    want_state, want_reason = expected(PROGRAMS[case])
    before = world.snapshot()
    hits = len(world.hits)
    tag = f"{sandbox.isolation}-{case}"
    call, state, reason, workdir, io = _run(
        sandbox, world, tag, PROGRAMS[case].read_text(), TIMEOUTS.get(case, 3.0)
    )
    assert state == want_state, f"{case}: {state} ({reason}); stderr: {call.stderr[-800:]}"
    assert want_reason in reason, f"{case}: reason {reason!r} lacks {want_reason!r}"
    if case in BEATS:
        beat = workdir / BEATS[case]
        first = beat.read_text()
        time.sleep(0.25)
        assert beat.read_text() == first, f"{case}: a process outlived the call"
    assert world.snapshot() == before, f"{case}: files outside the worktree changed"
    assert len(world.hits) == hits, f"{case}: reached a listener on loopback: {world.hits}"
    _assert_no_secret(call, workdir, io)
    if case == "monkeypatch_compare":  # the engine's clock is not the candidate's
        assert call.wall_s >= 0.3 > call.response["elapsed_s"]
    if case == "stdout_flood":
        assert len(call.stdout) < 64_000 + 200 and "more bytes dropped" in call.stdout
    # the engine goes on: the next call in the same sandbox succeeds
    _, state, reason, _, _ = _run(sandbox, world, f"{tag}-next", GOOD_PROGRAM, 10.0)
    assert state == "VALID", f"after {case}: {state} ({reason})"


def test_every_program_names_its_outcome() -> None:
    assert len(PROGRAMS) >= 20
    states = {expected(p)[0] for p in PROGRAMS.values()}
    assert states <= {"VALID", "INVALID", "FAILED", "TIMEOUT"}
