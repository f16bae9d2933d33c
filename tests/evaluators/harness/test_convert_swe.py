"""A coding agent's trajectories as a recorded workload: mini-swe-agent's ``.traj.json``
turned into the harness's recorded file (evaluators/harness/convert_swe.py), read back with
the replies verbatim, split by task, and the ``recorded`` workload's settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluators.harness import tokens as tok
from evaluators.harness.cache import Rules
from evaluators.harness.convert_swe import convert, main, program
from evaluators.harness.oracle import label
from evaluators.harness.replay import Replay
from evaluators.harness.trajectories import Tokenized, held_out, load_recorded
from optimizer.errors import ConfigError
from optimizer.records import CandidateState
from optimizer.targets import load_target

ROOT = Path(__file__).resolve().parents[3]

VIEW = "THOUGHT: Let me read the module.\n\n```bash\nsed -n '1,40p' pkg/core/units.py\n```"
FILE = "\n".join(f"{i:4d}  def helper_{i}(x):  # scale 7.25e3" for i in range(1, 41))


def _run(instance: str) -> dict:
    """A small hand-written mini-swe-agent run: a view, a format error, an edit that uses a
    value the view showed, the same view again, the submission."""
    return {"trajectory_format": "mini-swe-agent-1", "instance_id": instance,
            "info": {"exit_status": "Submitted", "model_stats": {"api_calls": 5}},
            "messages": [
                {"role": "system", "content": "You solve programming tasks in a shell."},
                {"role": "user", "content": "<pr_description>Units are off by 1000."
                                            "</pr_description>"},
                {"role": "assistant", "content": VIEW, "extra": {"response": {"id": "x"}}},
                {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{FILE}\n"
                                            "</output>"},
                {"role": "assistant", "content": "THOUGHT: I will think first."},
                {"role": "user", "content": "Please always provide EXACTLY ONE action in "
                                            "triple backticks, found 0 actions."},
                {"role": "assistant", "content": "THOUGHT: Fix helper_17.\n\n```bash\n"
                                                 "cd /testbed && sed -i 's/7.25e3/7.25/' "
                                                 "pkg/core/units.py\n```"},
                {"role": "user", "content": "<returncode>0</returncode>\n<output>\n</output>"},
                {"role": "assistant", "content": VIEW},
                {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{FILE}\n"
                                            "</output>"},
                {"role": "assistant", "content": "THOUGHT: Done.\n\n```bash\necho "
                                                 "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git "
                                                 "add -A && git diff --cached\n```"},
                {"role": "user", "content": "diff --git a/pkg/core/units.py b/pkg/core/units.py"},
            ]}


def test_program_names_the_command_past_its_preamble() -> None:
    assert program("cd /testbed && sed -n '1,20p' a.py") == "sed"
    assert program("# look first\ncat setup.py") == "cat"
    assert program("PYTHONPATH=. python reproduce.py") == "python"
    assert program("timeout 60 pytest -q tests/test_a.py") == "pytest"
    assert program("export X=1; /usr/bin/grep -rn foo .") == "grep"
    assert program("cat <<'EOF' > a.py\nprint(1)\nEOF") == "cat"
    assert program("'unbalanced") == "bash"


def test_convert_keeps_replies_verbatim_and_observations_as_tool_results() -> None:
    rec = convert(_run("pkg__pkg-1"), "swe")
    roles = [m["role"] for m in rec["traj"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user", "assistant",
                     "tool", "assistant", "tool", "assistant", "tool"]
    assert rec["task_id"] == "pkg__pkg-1" and rec["calls_in_text"] is True
    view = rec["traj"][2]
    assert view["content"] == VIEW and "extra" not in view
    assert json.loads(view["tool_calls"][0]["function"]["arguments"]) == {
        "command": "sed -n '1,40p' pkg/core/units.py"}
    assert [m["name"] for m in rec["traj"] if m["role"] == "tool"] == ["sed", "sed", "sed",
                                                                       "echo"]
    assert "tool_calls" not in rec["traj"][4]  # no command: the format error stays a user turn
    with pytest.raises(ValueError, match="mini-swe-agent-1"):
        convert({**_run("x"), "trajectory_format": "other"}, "swe")


def test_the_recorded_file_reads_back_with_replies_as_written(tmp_path: Path) -> None:
    src = tmp_path / "trajs"
    for name in ("pkg__pkg-1", "pkg__pkg-2", "lib__lib-7"):
        (src / name).mkdir(parents=True)
        (src / name / f"{name}.traj.json").write_text(json.dumps(_run(name)))
    out = tmp_path / "swe.json"
    assert main([str(src), "--out", str(out), "--limit", "2"]) == 0
    trajs = load_recorded(out)
    assert len(trajs) == 2 and all(t.name.startswith("swe/task-") for t in trajs)
    t = trajs[0]
    assert t.segments[2].text == VIEW  # the reply's text, not a re-rendered call
    assert t.calls == [2, 4, 6, 8, 10]
    assert t.segments[3].read and t.segments[3].read == t.segments[9].read  # a repeated view
    assert t.segments[5].role == "user"
    # the edit names a function the view's output showed, and a path the agent's own
    # earlier reply wrote (a policy that stubs that reply must pay for it)
    needs = label(t)
    assert [(n.span, n.sources) for n in needs[6]] == [("helper_17", (3,)),
                                                       ("pkg/core/units.py", (2,))]
    # replayed raw, each prompt is the recording's messages token for token
    rules = {"openai": Rules("openai", 2.5, 10.0, 1.25), "anthropic": Rules("anthropic")}
    replay = Replay(Tokenized([t]), {t.name: needs}, rules, 100_000)
    cost = replay.trajectory(t, lambda v: {"items": [s["id"] for s in v["segments"]]})
    assert cost.recoveries == 0 and cost.calls == 5
    want = sum(3 + len(tok.encode(s.role)) + len(tok.encode(s.text))
               for s in t.segments[:10]) + tok.REPLY_PRIMING
    assert cost.prompt_tokens[-1] == want


def test_the_split_is_by_task_and_stable() -> None:
    assert held_out("taubench/4", 5) and not held_out("taubench/5", 5)
    names = [f"swe/repo__repo-{i}" for i in range(200)]
    held = [n for n in names if held_out(n, 5)]
    assert 20 <= len(held) <= 60
    assert held == [n for n in names if held_out(n, 5)]


def test_the_recorded_workload_reads_its_file_and_says_where_it_belongs(tmp_path: Path,
                                                                        ) -> None:
    from evaluators.harness import HarnessEvaluator
    target = "targets/harness/context"

    def evaluator(settings: dict) -> HarnessEvaluator:
        return HarnessEvaluator(load_target(ROOT / target, ROOT, {"evaluator": settings}))

    with pytest.raises(ConfigError, match="recorded.file"):
        evaluator({"workload": "recorded"})
    with pytest.raises(ConfigError, match="recorded takes"):
        evaluator({"workload": "recorded", "recorded": {"file": "a.json", "every": 3}})
    src = tmp_path / "trajs"
    names = [f"pkg__pkg-{i}" for i in range(12)]
    for name in names:
        (src / name).mkdir(parents=True)
        (src / name / f"{name}.traj.json").write_text(json.dumps(_run(name)))
    main([str(src), "--out", str(tmp_path / "swe.json")])
    ev = evaluator({"workload": "recorded", "data_dir": str(tmp_path),
                    "recorded": {"file": "swe.json", "held_out_every": 3}})
    train, held = ev.trajectories("train"), ev.trajectories("held_out")
    assert len(train) + len(held) == 12 and held and train
    assert not {t.task for t in train} & {t.task for t in held}
    missing = evaluator({"workload": "recorded", "data_dir": str(tmp_path / "none"),
                         "recorded": {"file": "swe.json"}})
    res = missing._run(ROOT / target, None, "train", "correctness")  # type: ignore[arg-type]
    assert res.state is CandidateState.PRUNED and "swe.json is missing" in res.reason
