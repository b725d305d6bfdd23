"""sandbox/hostmem.py in this process: marks by storage, views share them, a freed storage's address
reused by another is not a host tensor, and a launch's check raises as a GPU's launcher does. (Marking
through the lane's factories and moves runs in a worker: cases.d/hostmem.json.)"""
import numpy as np
import pytest
import torch
from triton.tools.tensor_descriptor import TensorDescriptor

from distill.verifier.sandbox import hostmem


@pytest.fixture()
def on(monkeypatch):
    monkeypatch.setitem(hostmem._STATE, "active", True)
    monkeypatch.setattr(hostmem, "_HOST", {})


def test_a_marked_storage_is_host_memory_through_its_views(on):
    h, d = torch.zeros(64), torch.zeros(64)
    hostmem.mark(h)
    assert hostmem.marked(h) and hostmem.marked(h[3:].view(61)) and hostmem.marked(h.reshape(8, 8).t())
    assert not hostmem.marked(d) and not hostmem.marked(h.clone())
    hostmem.unmark(h[1:])
    assert not hostmem.marked(h)


def test_another_storage_at_a_host_storages_address_is_not_host_memory(on):
    """Two storages over one block (two `from_numpy` of an array; or a freed block handed back): only the
    one marked is host memory, and asking about the other keeps the mark."""
    arr = np.zeros(1024, dtype=np.float32)
    h, other = torch.from_numpy(arr), torch.from_numpy(arr)
    assert h.untyped_storage().data_ptr() == other.untyped_storage().data_ptr()
    hostmem.mark(h)
    assert not hostmem.marked(other) and hostmem.marked(h)


def test_nothing_is_marked_where_the_lane_does_not_stand_in_for_a_gpu(monkeypatch):
    monkeypatch.setitem(hostmem._STATE, "active", False)
    monkeypatch.setattr(hostmem, "_HOST", {})
    h = torch.zeros(4)
    hostmem.mark(h)
    assert not hostmem.marked(h)


def test_a_launch_handed_host_memory_raises_as_a_gpus_launcher_does(on):
    h, d = torch.zeros(64), torch.zeros(64)
    hostmem.check("k", (d, 3), {"BLOCK": 16})
    hostmem.mark(h)
    with pytest.raises(ValueError, match=r"Pointer argument \(at 1\) cannot be accessed from Triton \(cpu tensor\?\)"):
        hostmem.check("k", (d, h[8:], 64), {})
    desc = TensorDescriptor.from_tensor(h.view(8, 8), [8, 8])
    with pytest.raises(ValueError, match="at 0"):
        hostmem.check("k", (desc,), {})


def test_what_model_to_moves_is_device_memory(on):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(hostmem.mark(torch.zeros(4)))
            self.register_buffer("b", hostmem.mark(torch.zeros(4)))
            self.plain = hostmem.mark(torch.zeros(4))

    m = M()
    hostmem.moved(m)
    assert not hostmem.marked(m.w) and not hostmem.marked(m.b) and hostmem.marked(m.plain)


@pytest.mark.parametrize("name,device,src_marked,host", [
    ("empty", None, None, True), ("empty", "cpu", None, True), ("empty", torch.device("cpu"), None, True),
    ("empty", "meta", None, False), ("empty_like", None, True, True), ("empty_like", None, False, False),
    ("as_tensor", None, False, False), ("tensor", None, None, True)])
def test_where_a_factory_puts_its_tensor_on_a_gpu(on, name, device, src_marked, host):
    src = torch.zeros(4)
    if src_marked:
        hostmem.mark(src)
    args = (src,) if src_marked is not None else ((4,) if name != "tensor" else ([1.0],))
    assert hostmem.made_on_host(name, args, {}, device) is host
