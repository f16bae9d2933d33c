"""The loop records what a speculative evaluation leaves: the distillation curve as an
MLflow metric over steps and the draft's weights as artifacts of the candidate's run."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

from mlflow.tracking import MlflowClient

from optimizer.config import load_experiment
from optimizer.loop import run
from optimizer.tracking import Tracker

ROOT = Path(__file__).resolve().parents[3]
SETTINGS = {
    "preset": "tiny",
    "prompts": 2,
    "prompt_len": 24,
    "n_new": 32,
    "ks": [1, 3],
    "train_s": 2.0,
    "distill_seqs": 64,
    "distill_prompt_len": 16,
    "distill_gen_len": 24,
    "repeats": 1,
    "sampling_n": 100,
    "sampling_k": 2,
}


def _toml_value(v: object) -> str:
    return repr(v).replace("'", '"') if not isinstance(v, str) else f'"{v}"'


def test_curve_and_weights_reach_mlflow(tmp_path: Path, tiny) -> None:  # noqa: ANN001
    repo = tmp_path / "repo"
    target = repo / "targets/speculative/independent"
    shutil.copytree(ROOT / "targets/speculative/independent", target)
    cache = tiny.folder.parent.parent
    settings = ", ".join(
        f"{k} = {_toml_value(v)}" for k, v in {**SETTINGS, "cache_dir": str(cache)}.items()
    )
    (repo / "experiments").mkdir()
    (repo / "experiments/spec.toml").write_text(
        textwrap.dedent(f"""
        name = "spec"
        [budget]
        minutes = 5
        max_candidates = 2
        [[targets]]
        path = "targets/speculative/independent"
        [targets.settings]
        evaluator = {{ {settings} }}
    """)
    )
    (repo / ".gitignore").write_text(".optimizer/\n")
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "init",
        ],
        check=True,
    )
    cfg = load_experiment(repo / "experiments/spec.toml", workspace=repo)
    summary = run(cfg, say=lambda s: None)
    assert summary.targets[0].states.get("VALID", 0) >= 1, summary.targets[0]

    client = MlflowClient(cfg.tracking_uri)
    exp = client.get_experiment_by_name("spec")
    (seed_run,) = client.search_runs([exp.experiment_id], "tags.`optimizer.candidate` = 'c0001'")
    history = client.get_metric_history(seed_run.info.run_id, "distill_loss")
    assert len(history) >= 2 and history[0].step < history[-1].step
    files = [a.path for a in client.list_artifacts(seed_run.info.run_id, "draft")]
    assert files and all(f.endswith(".safetensors") for f in files)

    # A night whose second candidate wins has registered that winner's draft already.
    before = client.search_model_versions("name='spec_independent'")
    tracker = Tracker(cfg.tracking_uri, "spec", cfg.state_dir / "mlartifacts")
    version = tracker.register_model(seed_run.info.run_id, "draft", "spec_independent")
    assert version == str(len(before) + 1)
    mv = client.get_model_version("spec_independent", version)
    assert mv.run_id == seed_run.info.run_id and mv.source.endswith("/draft")
