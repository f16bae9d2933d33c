"""KernelBench import: a problem file becomes a loadable kernel target whose seed is marked
as a starting point, and a Triton rewrite of it passes the CPU checks."""

import textwrap
import tomllib

import pytest

from evaluators._base import EvalContext
from evaluators.kernels import NO_GPU, NO_GPU_UNCHECKED, KernelEvaluator
from evaluators.kernels.kernelbench import import_kernelbench
from optimizer.errors import ConfigError
from optimizer.sandbox import Sandbox
from optimizer.targets import load_target

PROBLEM = textwrap.dedent('''
    """Scaled ReLU with a learned scalar offset."""
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self, scale: float):
            super().__init__()
            self.scale = scale

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) * self.scale


    batch_size = 16
    dim = 1000


    def get_inputs():
        return [torch.randn(batch_size, dim)]


    def get_init_inputs():
        return [1.5]
''')

TRITON_REWRITE = textwrap.dedent('''
    import torch
    import torch.nn as nn
    import triton
    import triton.language as tl


    @triton.jit
    def _relu_scale(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(y_ptr + offs, tl.maximum(x, 0.0) * scale, mask=offs < n)


    class ModelNew(nn.Module):
        def __init__(self, scale: float):
            super().__init__()
            self.scale = scale

        def forward(self, x):
            y = torch.empty_like(x)
            _relu_scale[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), self.scale,
                                                         BLOCK=1024)
            return y
''')


def test_import_makes_a_target_whose_seed_is_a_marked_starting_point(tmp_path):
    problem = tmp_path / "19_ReLU_scaled.py"
    problem.write_text(PROBLEM)
    folder = import_kernelbench(problem, tmp_path / "targets")
    assert folder.name == "19_relu_scaled"
    assert (folder / "reference.py").read_text() == PROBLEM
    spec = load_target(folder, tmp_path)
    assert spec.kind == "kernel" and "(16, 1000) float32" in spec.description
    ev = KernelEvaluator(spec)
    assert [(w.device, w.init) for w in ev.config.workloads] == [("cuda", (1.5,)),
                                                                  ("cpu", (1.5,))]
    seed = (folder / "kernel.py").read_text()
    assert "STARTING POINT" in seed and "class ModelNew" in seed and "EVOLVE-BLOCK-START" in seed
    res = ev.static_check(folder)
    assert res.state.value == "REJECTED" and "torch" in res.reason
    with pytest.raises(ConfigError, match="exists"):
        import_kernelbench(problem, tmp_path / "targets")


def test_a_triton_rewrite_of_an_imported_problem_passes(tmp_path):
    problem = tmp_path / "relu.py"
    problem.write_text(PROBLEM)
    folder = import_kernelbench(problem, tmp_path / "targets", name="relu")
    (folder / "kernel.py").write_text(TRITON_REWRITE)
    spec = load_target(folder, tmp_path)
    io = tmp_path / "io"
    io.mkdir()
    ctx = EvalContext(Sandbox(), seed=20261130, scratch=tmp_path, io_dir=io)
    res = KernelEvaluator(spec).evaluate(folder, ctx)
    assert res.state.value == "PRUNED" and res.reason == NO_GPU, res.reason


def test_a_file_without_the_kernelbench_functions_is_refused(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    with pytest.raises(ConfigError, match="get_inputs"):
        import_kernelbench(bad, tmp_path / "out")


def _evaluate(folder, tmp_path):
    spec = load_target(folder, tmp_path)
    io = tmp_path / f"io-{len(list(tmp_path.glob('io-*')))}"
    io.mkdir()
    ctx = EvalContext(Sandbox(), seed=20261130, scratch=tmp_path, io_dir=io)
    return KernelEvaluator(spec).evaluate(folder, ctx)


def test_a_verdict_without_a_gpu_says_when_nothing_was_checked(tmp_path, capsys):
    """A problem too large for the CPU interpreter whose shapes are not size constants gets
    a GPU workload only: on a machine without a GPU the verdict must not claim a
    correctness check that did not run, even for a rewrite that is plainly wrong (here it
    drops the ReLU)."""
    problem = tmp_path / "big_relu.py"
    problem.write_text(PROBLEM.replace("torch.randn(batch_size, dim)", "torch.randn(16, 100000)")
                       .replace("batch_size = 16\ndim = 1000\n", ""))
    folder = import_kernelbench(problem, tmp_path / "targets", name="big_relu")
    toml = (folder / "target.toml").read_text()
    assert "kernelbench-cpu" not in toml
    assert "# no CPU workload: its input shapes are not module-level size constants" in toml
    (folder / "kernel.py").write_text(TRITON_REWRITE.replace("tl.maximum(x, 0.0)", "x"))
    res = _evaluate(folder, tmp_path)
    assert res.state.value == "PRUNED" and res.reason == NO_GPU_UNCHECKED, res.reason
    assert "verified" not in res.reason


def test_a_large_problem_gets_a_cpu_workload_at_reduced_sizes(tmp_path):
    """batch_size x dim = 1.6 M elements: dim is halved until the input fits the CPU limit,
    and the reduced workload checks a rewrite on the CPU: the wrong one is caught."""
    problem = tmp_path / "big_relu.py"
    problem.write_text(PROBLEM.replace("dim = 1000", "dim = 100000"))
    folder = import_kernelbench(problem, tmp_path / "targets", name="big_relu")
    data = tomllib.loads((folder / "target.toml").read_text())
    cpu = [w for w in data["evaluator"]["workloads"] if w["device"] == "cpu"]
    assert cpu and cpu[0]["args"] == {"dim": 3125}  # 16 x 3125 <= 65536 elements
    gpu = [w for w in data["evaluator"]["workloads"] if w["device"] == "cuda"]
    assert gpu[0]["args"] == {}  # the problem's own sizes on the GPU
    (folder / "kernel.py").write_text(TRITON_REWRITE.replace("tl.maximum(x, 0.0)", "x"))
    wrong = _evaluate(folder, tmp_path)
    assert wrong.state.value == "INVALID", wrong.reason
    (folder / "kernel.py").write_text(TRITON_REWRITE)
    right = _evaluate(folder, tmp_path)
    assert right.state.value == "PRUNED" and right.reason == NO_GPU, right.reason


def test_a_model_that_reads_the_sizes_itself_gets_no_reduced_workload(tmp_path):
    problem = tmp_path / "global_dim.py"
    problem.write_text(PROBLEM.replace("dim = 1000", "dim = 100000").replace(
        "return torch.relu(x) * self.scale", "return torch.relu(x.view(-1, dim)) * self.scale"))
    folder = import_kernelbench(problem, tmp_path / "targets", name="global_dim")
    toml = (folder / "target.toml").read_text()
    assert "kernelbench-cpu" not in toml and "reads sizes of its own" in toml
    assert (folder / "reference.py").read_text() == problem.read_text()


@pytest.mark.parametrize(("source", "needle"), [
    (PROBLEM.replace("def get_inputs():", "def get_inputs(:"), "syntax error"),
    (PROBLEM.replace("return [torch.randn(batch_size, dim)]", "raise RuntimeError('no data')"),
     "get_inputs()/get_init_inputs() raised RuntimeError: no data"),
    (PROBLEM.replace("import torch\n", "import torch\nraise ImportError('nope')\n", 1),
     "importing it raised ImportError: nope"),
])
def test_a_broken_problem_file_is_a_clear_error_and_writes_nothing(tmp_path, source, needle):
    problem = tmp_path / "broken.py"
    problem.write_text(source)
    with pytest.raises(ConfigError, match="broken.py") as err:
        import_kernelbench(problem, tmp_path / "targets")
    assert needle in str(err.value)
    assert not (tmp_path / "targets" / "broken").exists()


def test_a_docstring_with_any_unicode_gives_valid_toml(tmp_path):
    import tomllib

    problem = tmp_path / "emoji.py"
    doc = '"""Scaled ReLU \U0001f600 with a "quoted" offset\tand a tab."""'
    problem.write_text(PROBLEM.replace('"""Scaled ReLU with a learned scalar offset."""', doc))
    folder = import_kernelbench(problem, tmp_path / "targets")
    data = tomllib.loads((folder / "target.toml").read_text())
    assert "\U0001f600" in data["description"] and '"quoted"' in data["description"]


def test_a_problem_file_that_is_not_utf8_is_refused(tmp_path):
    problem = tmp_path / "latin1.py"
    problem.write_bytes(PROBLEM.replace("Scaled", "Sc\u00e4led").encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        import_kernelbench(problem, tmp_path / "targets")
