"""CUDA placements from the candidate's code on the CPU lane: factories, moves, a module's moves.

Public KernelBench answers allocate with `device="cuda"` (or `device=x.device`, which the lane answers
`cuda:0`: cuda_standin.py), move with `x.to("cuda")`, `x.cuda()`, `model.cuda()`: on a torch without CUDA
each raised "Torch not compiled with CUDA enabled". From the candidate's frames a CUDA placement means the
lane's CPU, which stands for the GPU; what the candidate puts on the host instead is marked so
(hostmem.py), so a launch handed it fails as on a GPU, and its move to the GPU is a copy, as there.
Installed by cuda_standin (also in a process that has a GPU, where its placements are real: only the
marking is off there). Trusted code is never rewritten.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

import torch

from distill.verifier.sandbox import hostmem

# torch's factories that take a `device=`: asked for a CUDA device from the candidate's frames, they
# allocate on the lane's CPU instead.
_FACTORIES = ("empty", "empty_like", "empty_strided", "empty_permuted", "zeros", "zeros_like", "ones", "ones_like",
              "full", "full_like", "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm",
              "normal", "arange", "linspace", "logspace", "eye", "tril_indices", "triu_indices", "scalar_tensor",
              "tensor", "as_tensor")
# The same for a tensor's own factories (`x.new_empty(shape, device=x.device)`).
_NEW = ("new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "new_tensor")


def cuda_device(device: Any) -> bool:
    """A CUDA device however it is spelled: "cuda", "cuda:1", torch.device("cuda"), or an ordinal."""
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device == "cuda" or device.startswith("cuda:")
    return type(device) is int


def install(candidate: Callable[[Any], bool]) -> None:
    """`torch.empty_like(x, device='cuda')`, `x.to('cuda')`, `x.cuda()` and `model.cuda()` (common in
    public KernelBench answers) raised here ("Torch not compiled with CUDA enabled"). From the
    candidate's frames a CUDA placement now means the lane's CPU, which stands for the GPU: factories
    allocate there, and moves to CUDA keep the tensor or module where it is (dtype changes still apply).
    What the candidate's own module puts on the host instead is marked so (hostmem.py), and a move of
    such a tensor to the GPU copies it, as on a GPU. Trusted code is never rewritten."""
    own = _own(candidate)

    for name in _FACTORIES:
        real = getattr(torch, name)

        def factory(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            if not candidate(frame):
                return _real(*args, **kwargs)
            device = kwargs.get("device")
            if cuda_device(device):
                kwargs["device"] = "cpu"
                return _real(*args, **kwargs)
            out = _real(*args, **kwargs)
            return hostmem.mark(out) if hostmem.made_on_host(_name, args, kwargs, device) and own(frame) else out

        factory.__name__ = factory.__qualname__ = name
        factory.__doc__ = real.__doc__
        setattr(torch, name, factory)

    for name in _NEW:
        real = getattr(torch.Tensor, name)

        def method(self: torch.Tensor, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            if not candidate(frame):
                return _real(self, *args, **kwargs)
            device = kwargs.get("device")
            if cuda_device(device):
                kwargs["device"] = "cpu"
                return _real(self, *args, **kwargs)
            out = _real(self, *args, **kwargs)  # `x.new_*` follows x's device unless told otherwise
            host = hostmem.host_device(device) or device is None and hostmem.marked(self)
            return hostmem.mark(out) if host and own(frame) else out

        method.__name__ = method.__qualname__ = name
        method.__doc__ = real.__doc__
        setattr(torch.Tensor, name, method)

    real_to, real_cuda, real_cpu = torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu

    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        frame = sys._getframe(1)
        if not candidate(frame):
            return real_to(self, *args, **kwargs)
        first, device = args[0] if args else None, kwargs.get("device")
        if cuda_device(first) or cuda_device(device):  # to the GPU: a host tensor's move is a copy there
            args = ("cpu", *args[1:]) if cuda_device(first) else args
            kwargs = {**kwargs, "device": "cpu"} if cuda_device(device) else kwargs
            return real_to(self, *args, **hostmem.copy_kwargs(self, args, kwargs))
        if isinstance(first, torch.Tensor):  # `.to(other)`: other's device
            if hostmem.marked(first) and own(frame):
                return hostmem.to_host(self, real_to, args, kwargs)
            return real_to(self, *args, **hostmem.copy_kwargs(self, args, kwargs))
        if hostmem.host_device(first) or hostmem.host_device(device):
            return hostmem.to_host(self, real_to, args, kwargs) if own(frame) else real_to(self, *args, **kwargs)
        out = real_to(self, *args, **kwargs)  # a dtype or layout change stays where it was
        return hostmem.mark(out) if out is not self and hostmem.marked(self) else out

    def cuda(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if not candidate(sys._getframe(1)):
            return real_cuda(self, *args, **kwargs)
        return real_to(self, copy=True) if hostmem.marked(self) else self

    def cpu(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        frame = sys._getframe(1)
        if not (candidate(frame) and own(frame)) or hostmem.marked(self):
            return real_cpu(self, *args, **kwargs)
        return hostmem.mark(real_to(self, "cpu", copy=True))  # the GPU's tensor copied to the host

    torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu = to, cuda, cpu

    module_to, module_cuda = torch.nn.Module.to, torch.nn.Module.cuda

    def module_to_(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if candidate(sys._getframe(1)):
            device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)
            if device is not None and device.type == "cuda":
                hostmem.moved(self)
                return self if dtype is None else module_to(self, dtype=dtype, non_blocking=non_blocking)
        return module_to(self, *args, **kwargs)

    def module_cuda_(self: torch.nn.Module, device: Any = None) -> Any:
        if candidate(sys._getframe(1)):
            hostmem.moved(self)
            return self
        return module_cuda(self, device)

    torch.nn.Module.to, torch.nn.Module.cuda = module_to_, module_cuda_


def _own(candidate: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """Whether a candidate-side frame is the candidate's own code rather than its problem's (which makes
    the inputs the harness then places on the device)."""
    def own(frame: Any) -> bool:
        return candidate(frame) and not frame.f_code.co_filename.startswith("<problem ")
    return own
