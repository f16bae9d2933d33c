"""Tensors across the channel (evaluators.kernels.tensors): every dtype a kernel may use
comes back bit for bit, a CPU tensor is sent as a snapshot, and a malformed description
from the candidate's side is a ValueError naming what is wrong."""

import numpy as np
import pytest
import torch

from evaluators.kernels import tensors
from optimizer.sandbox.channel import pack as frame
from optimizer.sandbox.channel import unpack as unframe


@pytest.mark.parametrize("name", tensors.DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3, 5), (2, 1, 7)])
def test_every_dtype_and_shape_round_trips_bitwise(name, shape):
    dtype = getattr(torch, name)
    t = (torch.randn(shape) * 100).to(dtype)
    if t.is_floating_point() and t.numel():
        t.view(-1)[0] = float("nan")
    # through the channel's own framing, as a session sends it
    parts = frame({"t": tensors.pack(t)})
    header, blob = bytes(parts[1]), bytearray(b"".join(bytes(p) for p in parts[2:]))
    back = tensors.unpack(unframe(header, blob)["t"])
    assert back.dtype == dtype and tuple(back.shape) == shape
    bits = lambda x: x.contiguous().reshape(-1).view(torch.uint8)  # noqa: E731
    assert bits(back).equal(bits(t))


def test_a_cpu_tensor_is_sent_as_a_snapshot():
    t = torch.arange(6, dtype=torch.float32)
    packed = tensors.pack(t)
    t.add_(1)  # the next call writes into the same storage
    assert tensors.unpack(packed).tolist() == [0, 1, 2, 3, 4, 5]
    shared = tensors.pack(t, copy=False)  # the trusted side's own, unchanging tensors
    t.add_(1)
    assert tensors.unpack(shared).tolist() == [2, 3, 4, 5, 6, 7]


def test_a_non_contiguous_or_subclassed_tensor_crosses_as_plain_data():
    class Sub(torch.Tensor):
        pass

    t = torch.arange(12.0).reshape(3, 4).t().as_subclass(Sub)
    back = tensors.unpack(tensors.pack(t))
    assert type(back) is torch.Tensor and back.equal(torch.arange(12.0).reshape(3, 4).t())


def good() -> dict:
    return tensors.pack(torch.ones(2, 3, dtype=torch.bfloat16))


@pytest.mark.parametrize("change, words", [
    (lambda d: d.update(dtype="object"), "dtype"),
    (lambda d: d.update(dtype=5), "dtype"),
    (lambda d: d.update(shape=[2, 4]), "bytes for shape"),
    (lambda d: d.update(shape=[2, -3]), "shape"),
    (lambda d: d.update(shape="2x3"), "shape"),
    (lambda d: d.update(shape=[True, 3]), "shape"),
    (lambda d: d.update(bytes=np.zeros(12, dtype=np.int8)), "uint8"),
    (lambda d: d.update(bytes=np.zeros((3, 4), dtype=np.uint8)), "flat"),
    (lambda d: d.update(bytes=b"\0" * 12), "uint8"),
    (lambda d: d.update(extra=1), "not a tensor"),
    (lambda d: d.pop("shape"), "not a tensor"),
])
def test_a_malformed_description_is_refused(change, words):
    d = good()
    change(d)
    with pytest.raises(ValueError, match=words):
        tensors.unpack(d, "output 0")
    with pytest.raises(ValueError, match="not a set"):
        tensors.unpack_all([d])


def test_a_dtype_that_cannot_cross_is_named():
    with pytest.raises(ValueError, match="complex64"):
        tensors.pack(torch.zeros(2, dtype=torch.complex64))
