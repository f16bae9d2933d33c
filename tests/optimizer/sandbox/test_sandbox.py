"""Sandbox unit tests: settings, environment, command line, response validation, both paths.

The hostile-candidate suite lives in tests/optimizer/sandbox/hostile/.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

import optimizer.sandbox.host as sandbox_mod
from optimizer.errors import IsolationError, SandboxError
from optimizer.sandbox import Sandbox, SandboxSettings
from optimizer.sandbox.bwrap import SANDBOX_UID, bwrap_argv, probe, scrubbed_env
from optimizer.sandbox.child import landlock_abi
from optimizer.sandbox.pipes import describe_exit, parse_response

BWRAP = pytest.mark.skipif(bool(probe()), reason=f"bwrap unavailable: {probe()}")

PROBE_ENTRY = '''
import os
from pathlib import Path


def run(payload, io_dir):
    out = {"pid": os.getpid(), "uid": os.getuid(), "cwd": os.getcwd(), "n": payload["n"] * 2,
           "cores": sorted(os.sched_getaffinity(0))}
    (io_dir / "data.bin").write_bytes(b"abc")
    if payload.get("look"):
        out["procs"] = sorted(p for p in os.listdir("/proc") if p.isdigit())
        out["state"] = sorted(os.listdir(payload["look"]["state"]))
        try:
            Path(payload["look"]["workspace"], "planted.txt").write_text("x")
            out["workspace_writable"] = True
        except OSError:
            out["workspace_writable"] = False
    if payload.get("signal_parent"):
        try:
            os.kill(os.getppid(), 0)  # signal 0: only the permission check
            out["can_signal_parent"] = True
        except PermissionError:
            out["can_signal_parent"] = False
    if payload.get("name_thread"):
        import threading

        def name(where):
            try:
                Path(where.format(tid=threading.get_native_id())).write_text("worker")
                out[where] = True
            except OSError:
                out[where] = False

        for where in ("/proc/self/task/{tid}/comm", "/proc/self/oom_score_adj"):
            t = threading.Thread(target=name, args=(where,))
            t.start()
            t.join()
    if payload.get("triton_cache"):
        import triton

        cache = triton.knobs.cache.dir
        os.makedirs(cache, exist_ok=True)
        out.update(triton_cache=cache, home=os.environ["HOME"])
    if payload.get("sleep"):
        import time
        time.sleep(payload["sleep"])
    return out
'''


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    ws = tmp_path / "ws"
    state = ws / ".optimizer"
    rw = state / "worktrees"
    cand, io = rw / "c0001", rw / "_io" / "c0001"
    for d in (cand, io, state / "scratch"):
        d.mkdir(parents=True)
    (state / "mlflow.db").write_text("db")
    (cand / "probe_entry.py").write_text(PROBE_ENTRY)
    return {"ws": ws, "state": state, "rw": rw, "cand": cand, "io": io}


def _settings(layout: dict[str, Path], **kw) -> SandboxSettings:
    base = dict(timeout_s=10.0, workspace=layout["ws"], state_dir=layout["state"],
                rw_root=layout["rw"], memory_mb=2048)  # fmt: skip
    base.update(kw)
    return SandboxSettings(**base)


# -- pure functions -------------------------------------------------------------------


def test_secrets_are_dropped_even_when_passed_explicitly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.setenv("LANG", "C.UTF-8")
    env = scrubbed_env(
        {"HF_TOKEN": "t", "db_password": "p", "AWS_SECRET_ACCESS_KEY": "s", "OK_VAR": "1"},
        {"HOME": "/tmp"},
    )
    assert env["LANG"] == "C.UTF-8" and env["OK_VAR"] == "1" and env["HOME"] == "/tmp"
    assert not {"OPENAI_API_KEY", "HF_TOKEN", "db_password", "AWS_SECRET_ACCESS_KEY"} & set(env)


@pytest.mark.parametrize(
    ("data", "total", "ok", "reason"),
    [
        (b'{"a": 1}', 8, True, ""),
        (b"[1, 2]", 6, False, "not a JSON object"),
        (b'{"a": tr', 8, False, "truncated"),
        (b"", 0, False, ""),
        (b'{"a": 1}', 10_000, False, "exceed"),
    ],
)
def test_parse_response(data: bytes, total: int, ok: bool, reason: str) -> None:
    value, why = parse_response(data, total, cap=100)
    assert (value is not None) is ok
    assert reason in why and (bool(why) or ok or not data)


def test_describe_exit_names_signals_and_limits() -> None:
    assert describe_exit(3) == "exit code 3"
    assert "SIGKILL" in describe_exit(-9) and "memory" in describe_exit(-9)
    assert "CPU-time limit" in describe_exit(-24)


def test_bwrap_argv_mount_order(tmp_path: Path) -> None:
    ws, state = tmp_path / "ws", tmp_path / "ws" / ".optimizer"
    rw = state / "worktrees"
    argv = bwrap_argv(ro=[ws], rw=[rw], hidden=[state], env={"A": "1"}, chdir=rw,
                      tmp_mb=64, allow_gpu=False)  # fmt: skip
    joined = " ".join(argv)
    assert f"--uid {SANDBOX_UID}" in joined and SANDBOX_UID != 0
    for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in argv
    pos = {k: argv.index(v) for k, v in (("home", "/root"), ("ws", str(ws)),
                                         ("state", str(state)), ("rw", str(rw)))}  # fmt: skip
    assert pos["home"] < pos["ws"] < pos["state"] < pos["rw"]  # later mounts cover earlier
    assert argv[pos["state"] - 1] == "--tmpfs" and argv[pos["rw"] - 1] == "--bind"
    assert "/etc" not in argv  # never all of /etc (shadow would be readable as root)
    assert not any("nvidia" in a for a in argv)


# -- settings and fallback ------------------------------------------------------------


def test_unknown_isolation_is_an_error() -> None:
    with pytest.raises(SandboxError, match="expected 'auto'"):
        Sandbox(SandboxSettings(isolation="docker"))


def test_missing_bwrap_warns_once_or_raises_when_required(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sandbox_mod, "probe", lambda: "bwrap (bubblewrap) is not installed")
    monkeypatch.setattr(sandbox_mod, "_warned", False)
    with pytest.raises(IsolationError, match="apt-get install bubblewrap"):
        Sandbox(SandboxSettings(require_isolation=True))
    with caplog.at_level(logging.WARNING, logger="optimizer.sandbox"):
        first, second = Sandbox(SandboxSettings()), Sandbox(SandboxSettings())
    assert first.isolation == second.isolation == "rlimits"
    warnings = [r for r in caplog.records if "isolation is reduced" in r.getMessage()]
    assert len(warnings) == 1


# -- calls ----------------------------------------------------------------------------


@pytest.mark.parametrize("isolation", ["bwrap", "rlimits"])
@pytest.mark.parametrize("warm", [True, False])
def test_call_delivers_json_and_io_files(layout, isolation: str, warm: bool) -> None:
    if isolation == "bwrap" and probe():
        pytest.skip(probe())
    with Sandbox(_settings(layout, isolation=isolation, warm=warm)) as sb:
        res = sb.call("probe_entry:run", {"n": 21}, workdir=layout["cand"], io_dir=layout["io"])
        assert res.error == "" and res.response is not None and res.response["n"] == 42
        assert (layout["io"] / "data.bin").read_bytes() == b"abc"
        assert (sb._zygote is not None) is warm  # warm calls go through the zygote
        if isolation == "bwrap":
            assert res.response["uid"] == SANDBOX_UID


@pytest.mark.parametrize("warm", [True, False])
def test_a_slots_sandbox_runs_on_the_slots_cores(layout, warm: bool) -> None:
    from optimizer import slots as slot_plan

    core = max(os.sched_getaffinity(0))
    slot = slot_plan.plan(2, False, cpus=[core])[0]  # two slots sharing this one core
    with Sandbox(_settings(layout, warm=warm, extra_env=slot.env())) as sb:
        res = sb.call("probe_entry:run", {"n": 1}, workdir=layout["cand"])
    assert res.response is not None, res.error or res.stderr
    assert res.response["cores"] == [core]


def test_io_dir_defaults_to_a_temporary_one(layout) -> None:
    with Sandbox(_settings(layout, isolation="rlimits")) as sb:
        res = sb.call("probe_entry:run", {"n": 1}, workdir=layout["cand"])
    assert res.response == {**res.response, "n": 2}
    assert not list(layout["rw"].glob(".sbx-io-*"))  # removed after the call


@BWRAP
@pytest.mark.parametrize("warm", [True, False])
def test_bwrap_hides_state_and_processes_and_keeps_workspace_read_only(layout, warm) -> None:
    look = {"state": str(layout["state"]), "workspace": str(layout["ws"])}
    with Sandbox(_settings(layout, warm=warm)) as sb:
        res = sb.call("probe_entry:run", {"n": 1, "look": look}, workdir=layout["cand"],
                      io_dir=layout["io"])  # fmt: skip
    assert res.response is not None, res.error
    assert res.response["state"] == ["worktrees"]  # mlflow.db, scratch: hidden by a tmpfs
    assert res.response["workspace_writable"] is False
    assert len(res.response["procs"]) <= 4  # bwrap init, (zygote), the child: a new PID ns
    assert not (layout["ws"] / "planted.txt").exists()


def test_workdir_outside_rw_root_takes_the_cold_path(layout, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "probe_entry.py").write_text(PROBE_ENTRY)
    with Sandbox(_settings(layout)) as sb:
        res = sb.call("probe_entry:run", {"n": 2}, workdir=other, io_dir=layout["io"])
        assert res.response is not None and res.response["n"] == 4
        assert sb._zygote is None


def test_zygote_is_restarted_after_it_dies(layout) -> None:
    with Sandbox(_settings(layout)) as sb:
        sb.warm_up()
        zygote = sb._zygote
        assert zygote is not None and zygote.proc is not None
        os.killpg(zygote.proc.pid, 9)
        zygote.proc.wait()
        res = sb.call("probe_entry:run", {"n": 3}, workdir=layout["cand"], io_dir=layout["io"])
        assert res.response is not None and res.response["n"] == 6
        assert zygote.starts == 2


def test_a_warm_up_from_a_thread_that_ends_outlives_it(layout) -> None:
    # bwrap's --die-with-parent kills the sandbox when the thread that forked it ends
    import threading

    with Sandbox(_settings(layout)) as sb:
        t = threading.Thread(target=sb.warm_up)
        t.start()
        t.join()
        time.sleep(0.3)  # a kill on the thread's end has landed by now
        zygote = sb._zygote
        assert zygote is not None and zygote.alive
        res = sb.call("probe_entry:run", {"n": 4}, workdir=layout["cand"], io_dir=layout["io"])
        assert res.response is not None and res.response["n"] == 8, res.error
        assert zygote.starts == 1


def test_a_call_during_a_warm_up_waits_for_it_and_starts_no_spare(layout) -> None:
    import threading

    with Sandbox(_settings(layout)) as sb:
        t = threading.Thread(target=sb.warm_up)
        t.start()
        res = sb.call("probe_entry:run", {"n": 1}, workdir=layout["cand"], io_dir=layout["io"])
        t.join()
        assert res.response is not None and res.response["n"] == 2, res.error
        assert sb._zygote is not None and sb._zygote.starts == 1 and not sb._spare


@pytest.mark.parametrize("warm", [True, False])
def test_timeout_is_reported_and_the_next_call_works(layout, warm: bool) -> None:
    with Sandbox(_settings(layout, warm=warm)) as sb:
        start = time.perf_counter()
        res = sb.call("probe_entry:run", {"n": 1, "sleep": 30}, workdir=layout["cand"],
                      io_dir=layout["io"], timeout_s=1.0)  # fmt: skip
        assert res.timed_out and res.response is None and "timed out after 1.0 s" in res.error
        assert time.perf_counter() - start < 5
        res = sb.call("probe_entry:run", {"n": 5}, workdir=layout["cand"], io_dir=layout["io"])
        assert res.response is not None and res.response["n"] == 10


@pytest.mark.skipif(landlock_abi() < 1, reason="Landlock unavailable")
@pytest.mark.parametrize("warm", [True, False])
def test_landlock_lets_a_thread_name_itself_and_nothing_more_of_proc(layout, warm) -> None:
    """The CUDA driver names its threads (/proc/self/task/<tid>/comm) and fails to start
    when it cannot; the rest of /proc stays unwritable (oom_score_adj, say, as root)."""
    with Sandbox(_settings(layout, isolation="rlimits", warm=warm)) as sb:
        res = sb.call("probe_entry:run", {"n": 1, "name_thread": True}, workdir=layout["cand"],
                      io_dir=layout["io"])  # fmt: skip
    assert res.response is not None, res.error
    assert res.response["/proc/self/task/{tid}/comm"] is True
    assert res.response["/proc/self/oom_score_adj"] is False


@pytest.mark.parametrize("warm", [True, False])
def test_triton_caches_in_the_calls_own_home(layout, warm: bool) -> None:
    """Triton, imported in the zygote, took the engine's home for its cache: a confined
    call could not write there (every GPU seed FAILED), and calls must not share one."""
    settings = _settings(layout, isolation="rlimits", warm=warm, preload=("triton",),
                         memory_mb=0, extra_env={"TRITON_INTERPRET": "1"})
    with Sandbox(settings) as sb:
        res = sb.call("probe_entry:run", {"n": 1, "triton_cache": True}, workdir=layout["cand"],
                      io_dir=layout["io"])  # fmt: skip
    assert res.response is not None, res.error
    home = res.response["home"]
    assert home != os.environ.get("HOME") and res.response["triton_cache"].startswith(home)


@pytest.mark.skipif(landlock_abi() < 6, reason="Landlock signal scoping needs ABI 6")
@pytest.mark.parametrize("warm", [True, False])
def test_landlock_keeps_the_fallback_from_signalling_its_parent(layout, warm: bool) -> None:
    with Sandbox(_settings(layout, isolation="rlimits", warm=warm)) as sb:
        res = sb.call("probe_entry:run", {"n": 1, "signal_parent": True}, workdir=layout["cand"],
                      io_dir=layout["io"])  # fmt: skip
    assert res.response is not None and res.response["can_signal_parent"] is False
