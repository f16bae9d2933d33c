"""`optimizer init`: a target made from code already in the user's repository evaluates
VALID the first time, or says exactly what to fill in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluators.scaffold import parse_arg, parse_dims
from optimizer.cli import main
from optimizer.errors import ConfigError
from optimizer.testing.own_repo import commit_all, make_serving_repo, vectorised_penalty

ROUTER = '''"""Our router: the replica with the fewest outstanding requests."""


def route(request, view):
    best = 0
    for i in range(view.n):
        if view.outstanding[i] < view.outstanding[best]:
            best = i
    return best
'''

# a Triton kernel of the user's model code, with its launcher
SCALE_KERNEL = '''"""y = x * alpha, elementwise."""
import torch
import triton
import triton.language as tl

BLOCK = 128


@triton.jit
def _scale_kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * alpha, mask=mask)


def scale(x, alpha):
    """Multiply every element of x by alpha."""
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    _scale_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, alpha, BLOCK=BLOCK)
    return y
'''


def add_router_and_kernel(repo: Path) -> None:
    """``router/policy.py`` and ``model/kernels/scale.py`` in ``repo``, committed."""
    (repo / "router").mkdir()
    (repo / "router" / "policy.py").write_text(ROUTER)
    (repo / "model" / "kernels").mkdir(parents=True)
    (repo / "model" / "__init__.py").write_text("")
    (repo / "model" / "kernels" / "__init__.py").write_text("")
    (repo / "model" / "kernels" / "scale.py").write_text(SCALE_KERNEL)
    commit_all(repo, "router and kernel")


SOURCE = "serving/sampling/penalty.py::apply_repetition_penalty"
DOMAIN = ["--arg", "logits: float32[B, V]", "--arg", "token_ids: int64[B, T] in -1..V",
          "--arg", "penalty: float in 1.0..2.0",
          "--dim", "B=1..16", "--dim", "V=2..1024", "--dim", "T=1..32"]


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    repo = make_serving_repo(tmp_path / "user-repo")
    monkeypatch.chdir(repo)
    return repo


def test_init_function_evaluates_valid_and_checks_rewrites(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "function", SOURCE, "--name", "penalty", *DOMAIN]) == 0
    folder = repo / "targets" / "penalty"
    assert "optimizer evaluate targets/penalty" in capsys.readouterr().out
    toml = (folder / "target.toml").read_text()
    assert 'editable = ["../../serving/sampling/penalty.py::apply_repetition_penalty"]' in toml
    assert (folder / "reference.py").read_text().endswith(
        (repo / "serving/sampling/penalty.py").read_text())

    assert main(["evaluate", "targets/penalty", "--json"]) == 0
    seed = json.loads(capsys.readouterr().out)
    assert seed["state"] == "VALID" and seed["metrics"]["fuzz_examples"] > 0

    rewrite = repo.parent / "penalty.py"
    rewrite.write_text(vectorised_penalty())
    assert main(["evaluate", "targets/penalty", str(rewrite), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "VALID"
    # wrong only where a token repeats in a row: the generated checks find it
    rewrite.write_text(vectorised_penalty().replace("ids >= 0", "ids > 0"))
    assert main(["evaluate", "targets/penalty", str(rewrite), "--json"]) == 1
    wrong = json.loads(capsys.readouterr().out)
    assert wrong["state"] == "INVALID" and "differ from the reference" in wrong["reason"]


def test_init_without_a_domain_says_what_to_fill_in(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "function", SOURCE]) == 0
    capsys.readouterr()
    assert main(["evaluate", "targets/apply_repetition_penalty", "--json"]) == 1
    reason = json.loads(capsys.readouterr().out)["reason"]
    assert "fill in ARGS" in reason and "logits, token_ids, penalty" in reason


@pytest.mark.parametrize(("argv", "says"), [
    (["init", "function", "serving/sampling/penalty.py::nope"], "defines no 'nope'"),
    (["init", "function", "serving/sampling/none.py::f"], "no such file"),
    (["init", "function", "serving/sampling/penalty.py"], "FILE.py::NAME"),
    (["init", "function", SOURCE, "--arg", "logits: float32[B]"], "neither a number nor a dim"),
    (["init", "function", SOURCE, "--arg", "x: float in 0..1"], "do not match the parameters"),
    (["init", "function", SOURCE, "--arg", "logits: float32[4]"], "--arg for token_ids"),
])
def test_init_bad_input_is_exit_2_with_nothing_written(
    repo: Path, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert says in capsys.readouterr().err
    assert not (repo / "targets").exists()


def test_init_refuses_an_existing_folder(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "function", SOURCE, *DOMAIN]) == 0
    assert main(["init", "function", SOURCE, *DOMAIN]) == 2
    assert "exists already" in capsys.readouterr().err


def test_the_argument_language() -> None:
    dims = parse_dims(["B=1..8", "V=2..64"])
    assert dims == {"B": (1, 8), "V": (2, 64)}
    arr = parse_arg("ids: int64[B, 4] in -1..V", dims)
    assert (arr.kind, arr.dtype, arr.shape, arr.low, arr.high) == (
        "array", "int64", ("B", 4), -1, "V")
    assert parse_arg("p: float in 0.5..2.0", dims).high == 2.0
    assert parse_arg("flag: bool", dims).kind == "bool"
    for bad in ("p: float", "x: complex in 0..1", "x float32[4]", "x: float33[4]"):
        with pytest.raises(ConfigError):
            parse_arg(bad, dims)
    with pytest.raises(ConfigError, match="NAME=LO..HI"):
        parse_dims(["B=8..1"])


def test_init_routing_on_the_teams_router(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add_router_and_kernel(repo)
    assert main(["init", "routing", "router/policy.py"]) == 0
    toml = (repo / "targets" / "policy" / "target.toml").read_text()
    assert 'editable = ["../../router/policy.py"]' in toml and 'kind = "routing"' in toml
    capsys.readouterr()
    assert main(["evaluate", "targets/policy", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["state"] == "VALID" and data["metrics"]["requests"] > 0
    (repo / "router" / "other.py").write_text("def pick(x):\n    return 0\n")
    assert main(["init", "routing", "router/other.py"]) == 2
    assert "route(request, view)" in capsys.readouterr().err


@pytest.mark.slow
def test_init_kernel_is_checked_on_the_cpu_through_the_interpreter(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("triton")
    add_router_and_kernel(repo)
    assert main(["init", "kernel", "model/kernels/scale.py::scale",
                 "--shape", "x: float32[6, 100]; alpha=0.5",
                 "--shape", "x: float32[3, 257]; alpha=1.5"]) == 0
    folder = repo / "targets" / "scale"
    assert 'editable = ["../../model/kernels/scale.py"]' in (folder / "target.toml").read_text()
    capsys.readouterr()
    assert main(["evaluate", "targets/scale", "--json"]) == 1  # no GPU: checked, not timed
    seed = json.loads(capsys.readouterr().out)
    assert seed["state"] in ("PRUNED", "VALID"), seed["reason"]
    assert "norm_err/cpu-0-float32" in seed["metrics"]
    wrong = repo.parent / "scale.py"
    wrong.write_text((repo / "model/kernels/scale.py").read_text().replace(
        "x * alpha", "x * alpha * 1.01"))
    assert main(["evaluate", "targets/scale", str(wrong), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["state"] == "INVALID"


def test_init_kernel_bad_shapes_are_exit_2(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    add_router_and_kernel(repo)
    assert main(["init", "kernel", "model/kernels/scale.py::scale"]) == 2
    assert "--shape 'x: float32[...]; alpha: float32[...]'" in capsys.readouterr().err
    assert main(["init", "kernel", "model/kernels/scale.py::scale",
                 "--shape", "x: float32[6, 100]"]) == 2
    assert "missing alpha" in capsys.readouterr().err
    assert main(["init", "kernel", "serving/sampling/penalty.py::apply_repetition_penalty",
                 "--shape", "logits: float32[2, 3]"]) == 2
    assert "does not use Triton" in capsys.readouterr().err
    assert not (repo / "targets").exists()
