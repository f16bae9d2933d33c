"""Every hostile program through `optimizer evaluate` on the built-in topk_sampling target.

Each program's first `# expected: STATE | reason` line says what must come out. Around each
call: the secret in the engine's environment never shows in any output, and neither the
target's folder nor HOME changes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from optimizer.cli import main

ROOT = Path(__file__).resolve().parents[4]
PROGRAMS = sorted((Path(__file__).parent / "programs").glob("*.py"))
SECRET = "sk-test-secret-4f1c9a77-never-leak"
# The memory bomb writes every page it allocates: up to the engine's default 16 GiB limit
# that took 41 s on a loaded 2-core machine. A 2 GiB sandbox (as an experiment's [sandbox]
# memory_mb sets it) reaches the same MemoryError in a second or two.
# the disk filler writes the whole 1 GiB file-size limit before it fails: 5-6 s on the
# development machine, past 8 s when its disk is busy
EXTRA_SETTINGS = {"memory_bomb": ["--set", "sandbox.memory_mb=2048"],
                  "disk_fill": ["--set", "timeout_s=30"]}


def _expected(program: Path) -> tuple[str, str]:
    for line in program.read_text().splitlines():
        if line.startswith("# expected:"):
            state, _, reason = line.removeprefix("# expected:").partition("|")
            return state.strip(), reason.strip()
    raise AssertionError(f"{program.name} has no '# expected:' line")


def _tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and ".git" not in p.parts):
        h.update(str(path).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@pytest.mark.slow
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_hostile_program_through_optimizer_evaluate(
    program: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY " + SECRET)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    home_before = _tree_digest(home)
    target_before = _tree_digest(ROOT / "targets/function/topk_sampling")

    candidate = tmp_path / "program.py"
    candidate.write_text(program.read_text())
    code = main(
        [
            "evaluate",
            str(ROOT / "targets/function/topk_sampling"),
            str(candidate),
            "--json",
            "--set",
            "timeout_s=8",
            *EXTRA_SETTINGS.get(program.stem, []),
        ]
    )
    out, err = capsys.readouterr()
    data = json.loads(out)
    state, reason = _expected(program)
    assert data["state"] == state, (data["state"], data["reason"][:500])
    assert reason in data["reason"]
    assert code == (0 if state == "VALID" else 1)
    assert SECRET not in out and SECRET not in err
    assert _tree_digest(home) == home_before
    assert _tree_digest(ROOT / "targets/function/topk_sampling") == target_before
    # the sandbox's own suite (test_hostile.py) checks a whole fake repo and state dir
