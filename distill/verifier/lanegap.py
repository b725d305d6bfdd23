"""What the CPU lane cannot judge: a construct Triton's interpreter cannot run is the lane's gap, not the candidate's error.

Keeps: one check, made by the parent after a CPU-lane verification. A `runtime_error` (or a
`compile_error`: the construct reached in the constructor) whose reason is the lane refusing a
construct that the candidate's source really uses becomes `LaneError`: PTX inline assembly
(`tl.inline_asm_elementwise`, which only a GPU can run), a libdevice function with no numpy twin
(`NO_TWIN`: the Bessel functions, `rcp64h`), or a second stream (`torch.cuda.Stream()`: work on it may
race with the current stream on a GPU, which this lane, running every launch in order, could never
show, so the stand-in GPU of cuda_standin.py has one stream only). A GPU runs all three, so a
`runtime_error` there would charge an honest kernel for the verifier's limit (in RL, a zero reward that
teaches the policy to avoid a correct construct; in refinement, a reason that tells the teacher its
kernel is wrong). `LaneError` is a ProblemError, so every caller treats it as no verdict: verify_many
returns it, the reward scores it "error", a pipeline records `verifier_error`, `tritonforge verify`
exits 2 and says to verify on a GPU.

Trust: the reason comes from the worker, which the candidate runs in, so it is only a claim; the
construct must also be in the source the parent holds (its AST, not the worker's word). A candidate
that forges the reason, or names a construct it never reaches, gets no verdict instead of a failing
one: never a pass. Simplifies: only the interpreter's own refusals are mapped; a construct that runs
there but computes differently from a GPU is the interpreter shims' business (interp_shims.py).
"""
from __future__ import annotations

import ast

from distill.verifier import static
from distill.verifier.problemio import ProblemError
from distill.verifier.verdict import Verdict

__all__ = ["LaneError", "check", "lane_gap"]

INLINE_ASM = "inline_asm_elementwise"
# libdevice's functions (`libdevice.<name>`) none of whose symbols sandbox/libdevice_np.py evaluates; a test
# holds this to that module's table.
NO_TWIN = frozenset({"j0", "j1", "y0", "y1", "jn", "yn", "cyl_bessel_i1", "rcp64h"})
# How the interpreter (and the libdevice shim) say they refused each kind of construct.
_REFUSALS = {
    "inline assembly": "inline_asm not supported in interpreter mode",
    "libdevice": "has no CPU-interpreter implementation",
    "stream": "torch.cuda.Stream requires CUDA support",
}
STREAM = "torch.cuda.Stream"
# The statuses a refusal arrives as: in forward, or in the constructor (`self.stream = torch.cuda.Stream()`).
_STATUSES = frozenset({"runtime_error", "compile_error"})


class LaneError(ProblemError):
    """The CPU lane's interpreter cannot run a construct the candidate uses; a GPU can judge it.
    `construct` names it (`inline_asm_elementwise`, or the libdevice function)."""

    def __init__(self, message: str, construct: str) -> None:
        super().__init__(message)
        self.construct = construct


def _names(source: str) -> set[str]:
    """Attribute names and imported names the source mentions (`tl.inline_asm_elementwise`, `libdevice.j0`,
    `from ...libdevice import j0 as bessel`): how a kernel reaches a construct, whatever it is renamed to."""
    try:
        tree = static.parse(source)
    except (SyntaxError, ValueError):
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.add(node.name.rsplit(".", 1)[-1])
    return found


def lane_gap(source: str, reason: str) -> str | None:
    """The construct the CPU lane refused, where `reason` is that refusal and `source` uses the construct."""
    names = _names(source)
    if _REFUSALS["inline assembly"] in reason and INLINE_ASM in names:
        return INLINE_ASM
    if _REFUSALS["stream"] in reason and "Stream" in names:
        return STREAM
    if _REFUSALS["libdevice"] in reason:
        for name in sorted(NO_TWIN & names):
            if f"__nv_{name}" in reason:   # the shim names the symbol: __nv_j0f, __nv_jn, __nv_rcp64h
                return f"libdevice.{name}"
    return None


def check(verdict: Verdict, source: str, device: str) -> None:
    """Raise LaneError where a CPU-lane `runtime_error` or `compile_error` is the lane refusing what the
    source uses."""
    if device != "cpu" or verdict.status not in _STATUSES:
        return
    construct = lane_gap(source, verdict.reason)
    if construct is not None:
        raise LaneError(f"the CPU lane cannot judge {construct}, which the candidate uses; "
                        "no verdict here: verify it on a GPU (--device cuda)", construct)
