"""Run-time audit of a kernel candidate's ``forward``: the work must happen in Triton.

The AST check (:mod:`evaluators.kernels.static_checks`) cannot see compute hidden in operators
(``x * 2``, ``a @ b`` on tensors), behind ``getattr`` or aliases, or in ``torch.ops.aten``.
Every such route ends in the ATen dispatcher, so :class:`ForwardAudit` installs, around the
call, a ``TorchDispatchMode`` that sees every aten op and a ``TorchFunctionMode`` that sees
the ways data leaves torch without an aten op (``.numpy()``, ``.tolist()``, ``__array__``,
storages). A Triton launch takes raw pointers and issues no aten op on the GPU.

Attribution. ``TRITON_INTERPRET=1`` (the CPU path) copies every tensor argument to a host
buffer and back: ``new_empty``, ``set_``, ``empty``, ``copy_`` issued from
``triton/runtime/interpreter.py`` (measured with triton 3.8). An op is charged to the innermost
Python frame that is not torch's own code or this module. If that frame belongs to triton's
launch code (matched by the identity of its code object, collected before the candidate is
imported, so a forged ``co_filename`` does not count), the op must be one of the copies and
allocations in ``TRITON_OPS``; otherwise it is the candidate's and must be in
``CANDIDATE_OPS`` (allocation, views, layout, constant fills). Compute issued by a kernel body
running in the interpreter is charged to the candidate: its frame is innermost.

Tampering. The trusted caller keeps the audit object. After the call the audit checks that
both of its modes are still on their stacks, that its handlers and log are its own, and that
none of the functions that pop modes or exclude the Python dispatch key were called while it
was armed (:func:`install_tripwires` replaces them before the candidate is imported). This
is a trip wire in one process, not a security boundary: the sandbox, the static check and the
timing floor are the other layers.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _python_dispatch as pydispatch
from torch.utils._python_dispatch import TorchDispatchMode

# aten overload packets a host wrapper may run: allocate outputs and scratch, describe and
# re-view tensors, make them contiguous, fill with constants (atomic accumulators need zeros).
# No op here reads input values into a result except clone (an exact copy, same dtype).
CANDIDATE_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
    "new_full", "arange", "fill_", "zero_",
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "t", "transpose",
    "permute", "expand", "squeeze", "unsqueeze", "slice", "select", "narrow", "split",
    "split_with_sizes", "chunk", "unbind", "flatten", "unflatten", "alias", "detach",
    "contiguous", "clone", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "is_contiguous", "lift_fresh",
})
# what triton's own launch code issues: the interpreter's host copies, the autotuner's
# restore_value/reset_to_zero and do_bench's cache buffer
TRITON_OPS = CANDIDATE_OPS | {"set_", "copy_", "_to_copy"}
# torch-function-level routes by which data leaves torch without an aten op
ESCAPES = frozenset({
    "numpy", "__array__", "__array_wrap__", "tolist", "item", "__float__", "__int__",
    "__index__", "__bool__", "__complex__", "__dlpack__", "__reduce_ex__", "untyped_storage",
    "storage", "_typed_storage", "cpu",
})
# what pops a mode or hides the Python dispatch key without popping; every reference to
# these objects in a loaded torch module is replaced by a trip wire while the audit is armed
_TRIPWIRES = (
    ("torch._C", ("_pop_torch_dispatch_stack", "_pop_torch_function_stack", "_set_dispatch_mode",
                  "_unset_dispatch_mode", "_DisableTorchDispatch", "DisableTorchFunction",
                  "DisableTorchFunctionSubclass", "_ExcludeDispatchKeyGuard",
                  "_ForceDispatchKeyGuard", "_RestorePythonTLSSnapshot")),
    ("torch.utils._python_dispatch", ("_pop_mode", "_pop_mode_temporarily",
                                      "_disable_current_modes")),
    ("torch.overrides", ("_pop_mode", "_pop_mode_temporarily")),
    ("torch.utils._mode_utils", ("no_dispatch",)),
)
_TRITON_LAUNCH_MODULES = ("triton.runtime", "triton.testing", "triton.backends")
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_THIS = os.path.abspath(__file__)


class _Wires:
    """Trip wires over the mode-popping functions, installed once per process before the
    candidate is imported (a reference it captures at import time is already a wire).
    ``trips`` grows while ``armed``; torch's own Python mode handling
    (``handle_torch_function`` pops the function mode around a handler, measured with
    ``torch.nn.functional.softmax``) is exempt by the identity of the caller's code."""

    def __init__(self) -> None:
        self.armed = 0
        self.trips: list[str] = []
        self.internal: set[types.CodeType] = {torch.overrides.handle_torch_function.__code__}
        reals: dict[int, tuple[str, Any]] = {}
        for modname, names in _TRIPWIRES:
            mod = sys.modules.get(modname)
            for name in names:
                real = getattr(mod, name, None)
                if real is not None:
                    reals[id(real)] = (f"{modname}.{name}", real)
                    inner = getattr(real, "__wrapped__", real)
                    if isinstance(inner, types.FunctionType):
                        _codes(inner, set(), self.internal)  # their calls to each other
        wires = {k: self._wire(label, real) for k, (label, real) in reals.items()}
        for modname, mod in list(sys.modules.items()):
            if mod is None or not modname.startswith("torch"):
                continue
            for attr, value in list(vars(mod).items()):
                if id(value) in wires and value is reals[id(value)][1]:
                    setattr(mod, attr, wires[id(value)])

    def _wire(self, label: str, real: Any) -> Any:
        wires = self

        def wire(*args: Any, **kwargs: Any) -> Any:
            if wires.armed and sys._getframe(1).f_code not in wires.internal:
                wires.trips.append(label)
            return real(*args, **kwargs)

        return wire


_WIRES: _Wires | None = None


def install_tripwires() -> _Wires:
    """Replace every reference a loaded torch module holds to a mode-popping function by a
    trip wire; idempotent. Call before the candidate is imported."""
    global _WIRES
    if _WIRES is None:
        _WIRES = _Wires()
    return _WIRES


@dataclass(frozen=True)
class AuditEvent:
    op: str     # "aten.mul.Tensor" or a tensor method name
    where: str  # "kernel.py:12 in forward"


def _codes(obj: Any, seen: set[int], out: set[types.CodeType]) -> None:
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, types.CodeType):
        out.add(obj)
        for c in obj.co_consts:
            if isinstance(c, types.CodeType):
                _codes(c, seen, out)
    elif isinstance(obj, staticmethod | classmethod):
        _codes(obj.__func__, seen, out)
    elif isinstance(obj, property):
        for f in (obj.fget, obj.fset, obj.fdel):
            if f is not None:
                _codes(f, seen, out)
    elif isinstance(obj, types.FunctionType):
        _codes(obj.__code__, seen, out)
    elif isinstance(obj, type):
        for v in vars(obj).values():
            _codes(v, seen, out)


def triton_launch_codes() -> frozenset[types.CodeType]:
    """Code objects of triton's launch machinery (interpreter, JIT runner, autotuner, drivers)
    as loaded now; call before the candidate is imported."""
    import triton.runtime.interpreter  # noqa: F401  (the CPU launch path)

    seen: set[int] = set()
    out: set[types.CodeType] = set()
    for name, mod in list(sys.modules.items()):
        if mod is not None and name.startswith(_TRITON_LAUNCH_MODULES):
            for v in list(vars(mod).values()):
                if getattr(v, "__module__", None) == name or isinstance(v, types.CodeType):
                    _codes(v, seen, out)
    return frozenset(out)


def _packet(func: Any) -> str:
    # "aten::mul.Tensor" -> "mul"; OpOverload.name() has the namespace and overload
    return str(func.name()).split("::")[-1].split(".")[0]


class _Dispatch(TorchDispatchMode):
    def __init__(self, audit: ForwardAudit):
        super().__init__()
        self.audit = audit

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        self.audit._see(f"aten.{func.name().split('::')[-1]}", _packet(func), aten=True)
        return func(*args, **(kwargs or {}))


class _Function(TorchFunctionMode):
    def __init__(self, audit: ForwardAudit):
        super().__init__()
        self.audit = audit

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        name = getattr(func, "__name__", "")
        if name in ESCAPES:
            self.audit._see(f"Tensor.{name}", name, aten=False)
        return func(*args, **(kwargs or {}))


class ForwardAudit:
    """``with audit: out = model(*inputs)``, then ``audit.problems()``: empty when the call ran
    only allowed ops, else one line per finding (the first forbidden op, tampering)."""

    def __init__(self, trusted_codes: frozenset[types.CodeType] = frozenset()):
        self._triton = trusted_codes or triton_launch_codes()
        self._events: list[AuditEvent] = []
        self._count = 0
        self._tripped: list[str] = []
        self._dispatch = _Dispatch(self)
        self._function = _Function(self)
        self._handlers = (_Dispatch.__torch_dispatch__, _Function.__torch_function__,
                          ForwardAudit._see)

    # -- recording -------------------------------------------------------------------
    def _see(self, op: str, packet: str, aten: bool) -> None:
        frame: types.FrameType | None = sys._getframe(2)
        while frame is not None and (frame.f_code.co_filename.startswith(_TORCH_DIR)
                                     or os.path.abspath(frame.f_code.co_filename) == _THIS):
            frame = frame.f_back
        if frame is not None and frame.f_code in self._triton:
            if packet in TRITON_OPS or not aten:
                return
        elif aten and packet in CANDIDATE_OPS:
            return
        where = "an unknown frame"  # no frame outside torch: charged, never waved through
        if frame is not None:
            code = frame.f_code
            where = f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"
        self._count += 1
        self._events.append(AuditEvent(op, where))

    # -- arming ------------------------------------------------------------------------
    def __enter__(self) -> ForwardAudit:
        self._wires = install_tripwires()
        self._trip_start = len(self._wires.trips)
        self._function.__enter__()
        self._dispatch.__enter__()
        self._wires.armed += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        self._wires.armed -= 1
        trips = self._wires.trips
        self._tripped = trips[self._trip_start:] if len(trips) >= self._trip_start else \
            ["(trip log shortened)"]
        self._intact = self._modes_on_top()
        if self._intact:
            self._dispatch.__exit__(None, None, None)
            self._function.__exit__(None, None, None)
        else:
            self._remove_modes()

    def _modes_on_top(self) -> bool:
        dstack = pydispatch._get_current_dispatch_mode_stack()
        fstack = torch.overrides._get_current_function_mode_stack()
        return bool(dstack) and dstack[-1] is self._dispatch and bool(fstack) and \
            fstack[-1] is self._function

    def _remove_modes(self) -> None:
        # the stacks were changed by the call: take ours off wherever they are
        for stack_get, pop, push, mine in (
            (pydispatch._get_current_dispatch_mode_stack, torch._C._pop_torch_dispatch_stack,
             torch._C._push_on_torch_dispatch_stack, self._dispatch),
            (torch.overrides._get_current_function_mode_stack, torch._C._pop_torch_function_stack,
             torch._C._push_on_torch_function_stack, self._function),
        ):
            keep = [m for m in stack_get() if m is not mine]
            for _ in range(len(stack_get())):
                pop()
            for m in keep:
                push(m)

    # -- verdict -----------------------------------------------------------------------
    def events(self) -> Iterator[AuditEvent]:
        return iter(tuple(self._events))

    def problems(self) -> list[str]:
        out = []
        if not getattr(self, "_intact", False):
            out.append("the runtime torch audit was removed from the mode stack during forward "
                       "(a mode was popped or replaced); kernels must not touch torch's "
                       "dispatch or function modes")
        if self._tripped:
            out.append(f"forward called {sorted(set(self._tripped))[0]}, which disables the "
                       "runtime torch audit; kernels must not touch torch's dispatch state")
        if (type(self._dispatch) is not _Dispatch or type(self._function) is not _Function
                or self._handlers != (_Dispatch.__torch_dispatch__,
                                      _Function.__torch_function__, ForwardAudit._see)
                or self._count != len(self._events)):
            out.append("the runtime torch audit's handlers or log were altered during forward")
        if self._events:
            ev = self._events[0]
            more = f" (and {len(self._events) - 1} more)" if len(self._events) > 1 else ""
            kind = "torch compute" if ev.op.startswith("aten.") else "a copy out of torch"
            out.append(f"forward ran {kind} {ev.op} at {ev.where}{more} (runtime audit): only "
                       "allocation, views and constant fills may run in torch; do the work in "
                       "the Triton kernel")
        return out
