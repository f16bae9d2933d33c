"""A kernel that reads a plain module-level value runs in the CPU interpreter but does not
compile for a GPU; the static check says so before any GPU time is spent."""

import importlib.util
from pathlib import Path

from evaluators.kernels.static_checks import check_source

_spec = importlib.util.spec_from_file_location(
    "adversarial_cases_globals", Path(__file__).with_name("adversarial.py"))
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)

SCALE_KERNEL = cases.KERNEL.replace("e = tl.exp(x - tl.max(x, axis=0))",
                                    "e = tl.exp(SCALE * (x - tl.max(x, axis=0)))")


def _rules(source):
    return [(f.rule, f.message) for f in check_source(source)]


def test_a_plain_global_read_in_a_kernel_is_flagged():
    found = _rules(cases._src(header=cases.HEADER + "SCALE = 1.0\n", kernel=SCALE_KERNEL))
    assert [r for r, _ in found] == ["gpu-global"]
    assert "SCALE = tl.constexpr(...)" in found[0][1]


def test_constexpr_globals_host_knobs_and_shadowing_parameters_pass():
    constexpr = cases._src(header=cases.HEADER + "SCALE = tl.constexpr(1.0)\n",
                           kernel=SCALE_KERNEL)
    assert _rules(constexpr) == []
    # a knob read on the host and passed in, under the same name as the kernel's parameter
    knob = cases._src(header=cases.HEADER + "BLOCK = 1024\n",
                      launch=cases.LAUNCH.replace("BLOCK=triton.next_power_of_2(x.shape[1])",
                                                  "BLOCK=max(BLOCK, triton.next_power_of_2("
                                                  "x.shape[1]))"))
    assert _rules(knob) == []
