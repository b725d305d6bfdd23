"""Host tensors on the CPU lane: a tensor the candidate keeps on the host fails a launch, as on a GPU.

On a GPU, `torch.empty(n)` without a device, `torch.tensor([...])`, `x.cpu()`, or a plain tensor attribute
that `model.to(device)` does not move is host memory, and a Triton launch handed one raises ("Pointer
argument (at 0) cannot be accessed from Triton (cpu tensor?)"). On this lane every tensor is host memory
standing for the GPU's (cuda_standin.py), so the interpreter ran such launches: the commonest slip in
written Triton (an output allocated without `device=`) passed here and failed on every GPU, and data built
on the CPU lane taught it.

What is covered: tensors the candidate's frames (its module, not the problem's) make on the host, by
storage: torch's factories with no device or a CPU one (`*_like` and `x.new_*` follow their source, as they
do on a GPU), `.cpu()` and `.to("cpu")` (a copy here, as there), and views of those. Such a tensor reads
as on the CPU (`x.device`, `x.is_cuda`) to the candidate. A move to the GPU the lane stands for
(`.to("cuda")`, `.cuda()`, `.to(x.device)`) gives an unmarked copy, as a GPU's move does, and the harness's
`model.to(device)` unmarks what it moves (parameters and buffers, `moved`). A launch given a marked tensor
raises as the GPU's launcher does (`check`).

What is not covered: values computed from host tensors by torch ops (compute in forward is refused
anyway), arrays made through numpy, and a process with a GPU (its tensors' devices are real).
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

import torch
from triton.tools.tensor_descriptor import TensorDescriptor

# storage data_ptr -> the host storage there (weakly: a freed storage's address may come back as another's)
_HOST: dict[int, weakref.ref] = {}
_STATE = {"active": False}


def install() -> None:
    """Called by cuda_standin.install where the lane stands in for a GPU (no CUDA in this process):
    marking on, and every interpreted launch (not a warm-up, which launches nothing) checked first."""
    if _STATE["active"]:
        return
    from triton.runtime.interpreter import InterpretedFunction

    _STATE["active"] = True
    real_run = InterpretedFunction.run

    def run(self: InterpretedFunction, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        if not warmup:
            check(self.fn.__name__, args, kwargs)
        return real_run(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run


def active() -> bool:
    return _STATE["active"]


def mark(t: Any) -> Any:
    """Record `t` (a tensor, or a tuple/list of them) as host memory; returns it."""
    if not _STATE["active"]:
        return t
    for x in t if isinstance(t, (tuple, list)) else (t,):
        if isinstance(x, torch.Tensor) and not x.is_meta:
            s = _storage(x)
            if s.data_ptr():
                _HOST[s.data_ptr()] = weakref.ref(s)
    return t


def _storage(t: torch.Tensor) -> Any:
    return torch._C.TensorBase.untyped_storage(t)  # the C method: a subclass's override never runs here


def marked(t: Any) -> bool:
    """Whether `t` is a tensor whose storage the candidate put on the host."""
    if not _HOST or not isinstance(t, torch.Tensor) or t.is_meta:
        return False
    s = _storage(t)
    ref = _HOST.get(s.data_ptr())
    if ref is None:
        return False
    held = ref()
    if held is None:  # that storage was freed; this one reuses its address
        del _HOST[s.data_ptr()]
    return held is s


def unmark(t: torch.Tensor) -> None:
    _HOST.pop(_storage(t).data_ptr(), None)


def moved(model: torch.nn.Module) -> None:
    """What `model.to(device)` moves to the GPU (parameters and buffers) is device memory from here on."""
    if _HOST:
        for t in (*model.parameters(), *model.buffers()):
            unmark(t)


def host_device(device: Any) -> bool:
    """An explicit CPU placement: "cpu", "cpu:0", torch.device("cpu")."""
    if isinstance(device, torch.device):
        return device.type == "cpu"
    return isinstance(device, str) and (device == "cpu" or device.startswith("cpu:"))


def made_on_host(name: str, args: tuple, kwargs: dict, device: Any) -> bool:
    """Where a factory called with no CUDA device puts its tensor on a GPU: a CPU device asked for, or
    none (torch's default device); `*_like` and `as_tensor(t)` follow their source tensor's."""
    if device is not None:
        return host_device(device)
    if name.endswith("_like") or name == "as_tensor":
        src = args[0] if args else kwargs.get("input", kwargs.get("data"))
        if isinstance(src, torch.Tensor):
            return marked(src)
    return True


def copy_kwargs(t: torch.Tensor, args: tuple, kwargs: dict) -> dict:
    """`kwargs` asking `.to` for a copy where `t` is host memory moving to the GPU (a GPU copies it)."""
    return {**kwargs, "copy": True} if marked(t) and len(args) <= 2 else kwargs


def to_host(t: torch.Tensor, real_to: Callable, args: tuple, kwargs: dict) -> torch.Tensor:
    """`t.to(<host>)`: a GPU tensor copied to the host (marked); a host one as `.to` leaves it."""
    if marked(t):
        out = real_to(t, *args, **kwargs)
    else:
        out = real_to(t, *args, **{**kwargs, "copy": True}) if len(args) <= 2 else real_to(t, *args, **kwargs)
    return mark(out)


def check(name: str, args: tuple, kwargs: dict) -> None:
    """Raise as a GPU launch does for a host tensor among a launch's arguments (or a tensor descriptor's)."""
    if not _HOST:
        return
    for i, a in enumerate((*args, *kwargs.values())):
        # Triton's host tensor descriptor (TMA) holds its tensor as `base`: read from its own dict, so
        # no candidate-defined attribute runs inside the harness's check
        base = a if isinstance(a, torch.Tensor) else vars(a).get("base") if type(a) is TensorDescriptor else None
        if marked(base):
            raise ValueError(f"Pointer argument (at {i}) cannot be accessed from Triton (cpu tensor?): kernel "
                             f"{name} was handed host memory, which a GPU launch refuses (move it with "
                             f"`.to(x.device)`, or allocate it with `device=x.device`)")
