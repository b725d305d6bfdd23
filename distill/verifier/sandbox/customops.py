"""The candidate's own operators run as the Python functions they wrap, inside the watch.

`torch.library.custom_op` and `triton_op` (PyTorch's documented ways to make a kernel's wrapper an
operator) put an operator of the candidate's namespace in the dispatcher. A dispatch mode sees it as
one op (`tf::add`): counted as compute, with the ops and launches inside it unseen, since a mode is
off while the operator it intercepted runs. The modes here (provenance.AuditMode, StreamWatch) run
such an operator as its function instead, with the mode on: every op and launch inside is audited,
recorded for the replay and blocked as forward's own are. Nothing is hidden by this: the function is
candidate code the operator would have run anyway, and the replay rebuilds what it did from its
recorded ops and launches alone.

What it simplifies: an operator is the candidate's when torch's registry of custom ops holds it and
did not when this module was imported (before any candidate code ran), outside torch's own
namespaces; its function is the one registered for the first tensor argument's device, else the
one it was made with. Autograd, fake and vmap registrations are not consulted (forward runs
eagerly).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch._library import custom_ops

_BEFORE = frozenset(custom_ops.OPDEFS.keys())
_TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "quantized", "_c10d_functional", "c10d"})


def own_function(func: Any, args: tuple, kwargs: dict) -> Callable | None:
    """The Python function behind `func` when it is an operator the candidate registered, else None."""
    qualname = func._schema.name
    if qualname in _BEFORE or qualname.split("::", 1)[0] in _TORCH_NAMESPACES:
        return None
    opdef = custom_ops.OPDEFS.get(qualname)
    if opdef is None:
        return None
    device = next((a.device.type for a in (*args, *kwargs.values()) if type(a) is torch.Tensor), None)
    fns = opdef._backend_fns
    return fns.get(device) or fns.get(None) or opdef._init_fn
