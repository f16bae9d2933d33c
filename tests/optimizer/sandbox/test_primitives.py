"""The sandbox's primitives, each written once and shared by the engine and the kinds:
loading a file as a module, Landlock, the seccomp filter and reading /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from optimizer.sandbox import landlock, loader, procfs

ROOT = Path(__file__).resolve().parents[3]


def _child(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter (what it confines stays there)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


# -- loader -------------------------------------------------------------------------------
def test_each_load_runs_the_file_again_as_a_module_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "counter.py"
    path.write_text("import itertools\nCOUNT = []\nCOUNT.append(1)\n")
    first, second = loader.load_module(path), loader.load_module(path)
    assert first is not second and first.COUNT == second.COUNT == [1]
    assert first.__name__ != second.__name__
    assert sys.modules[first.__name__] is first
    named = loader.load_module(path, "_test_named_counter")
    assert sys.modules["_test_named_counter"] is named
    loose = loader.load_module(path, "_test_loose_counter", register=False)
    assert "_test_loose_counter" not in sys.modules and loose.COUNT == [1]


def test_a_file_python_cannot_import_is_not_importable(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("X = 1\n")
    with pytest.raises(loader.NotImportable, match="notes.txt"):
        loader.load_module(path)
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    with pytest.raises(SyntaxError):  # the file's own errors propagate as they are
        loader.load_module(broken)


# -- /proc --------------------------------------------------------------------------------
def test_procfs_sees_a_child_its_cpu_time_and_its_status() -> None:
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.3: pass\ntime.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (procfs.cpu_seconds(child.pid) or 0) < 0.25:
            time.sleep(0.05)
        assert child.pid in procfs.children_of(os.getpid())
        # the threads' children files agree with a scan of every process
        assert sorted(procfs.children_of(os.getpid())) == sorted(
            procfs.children().get(os.getpid(), []))
        assert child.pid in procfs.descendants(os.getppid())
        assert (procfs.cpu_seconds(child.pid) or 0) >= 0.25
        assert procfs.status(child.pid)["Threads"] == "1"
        assert b"time.sleep(30)" in procfs.cmdline(child.pid)
        # outside a PID namespace a process calls itself by its host pid
        assert procfs.host_pid(child.pid, os.getpid()) == child.pid
    finally:
        child.kill()
        child.wait()
    assert procfs.cpu_seconds(child.pid) is None and procfs.status(child.pid) == {}
    assert procfs.host_pid(1, None) is None


def test_schedstat_reads_this_threads_time() -> None:
    stat = procfs.Schedstat("/proc/thread-self")
    try:
        t = time.process_time()
        while time.process_time() - t < 0.05:
            pass
        on_cpu, _ = stat.read()
        assert on_cpu > 0
    finally:
        stat.close()
    assert procfs.Schedstat("/nonexistent").read() == (0, 0)


# -- Landlock -----------------------------------------------------------------------------
needs_landlock = pytest.mark.skipif(landlock.abi() < 1, reason="no Landlock on this kernel")


@needs_landlock
def test_landlock_confines_writes_to_the_folders_given(tmp_path: Path) -> None:
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    (outside / "r").write_text("read")
    res = _child("""
        import sys
        from optimizer.sandbox import landlock
        assert landlock.restrict([sys.argv[1]]) == ""
        open(sys.argv[1] + "/ok", "w").write("ok")
        print(open(sys.argv[1] + "/ok").read(), open(sys.argv[2] + "/r").read())  # reads open
        try:
            open(sys.argv[2] + "/no", "w")
        except PermissionError:
            print("refused")
        """, str(inside), str(outside))
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["ok", "read", "refused"]
    assert not (outside / "no").exists()


@needs_landlock
def test_landlock_with_readable_paths_confines_reads_too(tmp_path: Path) -> None:
    seen, hidden = tmp_path / "seen", tmp_path / "hidden"
    for folder in (seen, hidden):
        folder.mkdir()
        (folder / "f").write_text(folder.name)
    res = _child("""
        import os, sys
        import optimizer.sandbox.landlock as landlock
        paths = [p for p in sys.path if os.path.isdir(p)] + ["/usr", "/lib", "/etc"]
        assert landlock.restrict([], [*paths, sys.argv[1]], devices={"/dev/null": True}) == ""
        print(open(sys.argv[1] + "/f").read())
        open("/dev/null", "w").write("x")
        try:
            open(sys.argv[2] + "/f").read()
        except PermissionError:
            print("refused")
        """, str(seen), str(hidden))
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["seen", "refused"]


# -- seccomp ------------------------------------------------------------------------------
def test_the_filter_refuses_processes_and_allows_threads() -> None:
    res = _child("""
        import os, threading
        from optimizer.sandbox.seccomp import deny_processes
        why = deny_processes()
        if why:
            print("skip", why)
            raise SystemExit(0)
        done = []
        t = threading.Thread(target=lambda: done.append(1))
        t.start(); t.join()
        try:
            os.fork()
        except PermissionError:
            print("refused", len(done))
        """)
    assert res.returncode == 0, res.stderr
    if res.stdout.startswith("skip"):
        pytest.skip(res.stdout)
    assert res.stdout.split() == ["refused", "1"]
