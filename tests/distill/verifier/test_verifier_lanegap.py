"""The CPU lane's own gaps: closed where the interpreter can be taught, else no verdict on the candidate.

Through the session pool: a Triton builtin bound to a name of the kernel's module (a from-import, an
alias), or reached only as `triton.language.x`, runs as on a GPU (interp_shims.py); an honest kernel that uses PTX inline assembly, or a libdevice function
with no numpy twin, runs on a GPU but not in Triton's interpreter; the pool raises LaneError (a
ProblemError: no verdict) instead of charging a `runtime_error`. In this process: the mapping needs
both the interpreter's refusal in the reason and the construct in the source, so a forged reason or
an unused mention changes nothing that could pass; the GPU lane and other statuses are never mapped.
"""
from __future__ import annotations

import re

import pytest

from distill.verifier import LaneError, ProblemError, Verdict
from distill.verifier.lanegap import INLINE_ASM, NO_TWIN, check, lane_gap
from distill.verifier.sandbox import libdevice_np
from tests.distill.verifier.conftest import honest, problem

TANH = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(64, 100)]


def get_init_inputs():
    return []
'''

# Style: a fast tanh through PTX (tanh.approx.f32), as real-world GELU kernels write it. A GPU runs it.
ASM_TANH = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.language import inline_asm_elementwise as ptx


@triton.jit
def tanh_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = ptx("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        tanh_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
'''

ASM_REFUSAL = ("forward raised triton.runtime.errors.InterpreterError: "
               "NotImplementedError('inline_asm not supported in interpreter mode')")
J0_REFUSAL = ("forward raised NotImplementedError: libdevice function __nv_j0f has no CPU-interpreter "
              "implementation (distill/verifier/sandbox/libdevice_np.py); it runs only on a GPU")


# Style: builtins imported by name and renamed, as some public kernels import them.
BOUND_BUILTINS = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.language import maximum
from triton.language.math import exp as texp

tl_min = tl.minimum


@triton.jit
def kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl_min(maximum(texp(x), 0.5), 2.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
'''
CLAMPED_EXP = TANH.replace("torch.tanh(x)", "torch.exp(x).clamp(0.5, 2.0)")
# Style: the language reached only through `triton.` (the module never binds `tl`).
FULL_PATH = '''
import torch
import torch.nn as nn
import triton
import triton.language


@triton.jit
def kernel(x_ptr, y_ptr, n, BLOCK: triton.language.constexpr):
    offs = triton.language.program_id(0) * BLOCK + triton.language.arange(0, BLOCK)
    mask = offs < n
    x = triton.language.load(x_ptr + offs, mask=mask)
    triton.language.store(y_ptr + offs, triton.language.minimum(triton.language.exp(x), 2.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
'''


@pytest.mark.parametrize("problem_src,candidate", [(CLAMPED_EXP, BOUND_BUILTINS),
                                                   (TANH.replace("torch.tanh(x)", "torch.exp(x).clamp(max=2.0)"),
                                                    FULL_PATH)], ids=["bound-names", "full-path"])
def test_kernels_that_reach_builtins_by_other_names_run_as_on_a_gpu(pool, problem_src, candidate):
    v = pool.verify(problem_src, candidate)
    assert v.status == "pass", v.reason


def test_inline_assembly_is_the_lanes_gap_not_the_candidates_error(pool):
    with pytest.raises(LaneError, match="verify it on a GPU") as err:
        pool.verify(TANH, ASM_TANH)
    assert err.value.construct == INLINE_ASM and isinstance(err.value, ProblemError)


def test_a_libdevice_function_without_a_numpy_twin_is_the_lanes_gap(pool):
    source = honest("liger_geglu").replace("tanh_result = tanh(", "tanh_result = libdevice_j0(").replace(
        "from triton.language.extra.libdevice import tanh",
        "from triton.language.extra.libdevice import j0 as libdevice_j0")
    with pytest.raises(LaneError) as err:
        pool.verify(problem("liger_geglu"), source)
    assert err.value.construct == "libdevice.j0", err.value


def test_the_refusal_alone_or_the_construct_alone_is_the_candidates():
    plain = ASM_TANH.replace("ptx(", "tl.sigmoid(x) + 0 * len(").replace(
        "from triton.language import inline_asm_elementwise as ptx\n", "")
    assert lane_gap(ASM_TANH, ASM_REFUSAL) == INLINE_ASM
    assert lane_gap(plain, ASM_REFUSAL) is None                      # a forged refusal: no construct in the source
    assert lane_gap(ASM_TANH, "forward raised ValueError: bad shape") is None   # the construct, another error
    assert lane_gap(ASM_TANH, J0_REFUSAL) is None                    # another construct's refusal
    assert lane_gap("from triton.language.extra.libdevice import j0 as bessel\n", J0_REFUSAL) == "libdevice.j0"
    assert lane_gap("y = libdevice.y0(x)\n", J0_REFUSAL) is None     # uses y0, the refusal names j0
    assert lane_gap("j0 = 1\n", J0_REFUSAL) is None                  # a variable is not the libdevice function
    assert lane_gap("def f(:\n", ASM_REFUSAL) is None                # unparsable source: nothing to map


def test_only_a_cpu_lane_runtime_or_construction_error_is_mapped():
    failing = Verdict("runtime_error", ASM_REFUSAL)
    with pytest.raises(LaneError):
        check(failing, ASM_TANH, "cpu")
    with pytest.raises(LaneError):                                   # reached in the constructor
        check(Verdict("compile_error", "constructing ModelNew failed: " + ASM_REFUSAL), ASM_TANH, "cpu")
    check(failing, ASM_TANH, "cuda")                                 # a GPU runs inline assembly: its verdict stands
    check(Verdict("wrong_output", ASM_REFUSAL), ASM_TANH, "cpu")     # it ran: the output is the candidate's
    check(Verdict("pass"), ASM_TANH, "cpu")


STREAM_REFUSAL = "forward raised builtins.RuntimeError: torch.cuda.Stream requires CUDA support"


def test_a_second_stream_is_the_lanes_gap_not_the_candidates_error(pool):
    """An honest kernel launched on its own stream, waited for both ways, passes on a GPU; the CPU lane
    runs every launch in order and could not show a race, so it gives no verdict rather than charging it."""
    source = honest("add").replace("class ModelNew(nn.Module):", SIDE_STREAM_MODEL + "\n\nclass Unused(nn.Module):")
    assert "torch.cuda.Stream" in source
    with pytest.raises(LaneError) as err:
        pool.verify(problem("add"), source)
    assert err.value.construct == "torch.cuda.Stream", err.value
    assert lane_gap("s = torch.cuda.Stream()\n", STREAM_REFUSAL) == "torch.cuda.Stream"
    assert lane_gap("s = torch.cuda.current_stream()\n", STREAM_REFUSAL) is None   # a forged refusal


SIDE_STREAM_MODEL = '''class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = torch.cuda.Stream()

    def forward(self, a, b):
        out = torch.empty_like(a)
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            add_kernel[(triton.cdiv(a.numel(), 256),)](a, b, out, a.numel(), BLOCK=256)
        torch.cuda.current_stream().wait_stream(self.stream)
        return out'''


def test_no_twin_is_exactly_the_libdevice_functions_the_interpreter_lacks():
    import triton.language.extra.cuda.libdevice as cuda_libdevice

    with open(cuda_libdevice.__file__) as fh:
        text = fh.read()
    lacking = set()
    for chunk in re.split(r"\n(?:@core\.extern\n)?def ", text)[1:]:
        symbols = re.findall(r'"(__nv_\w+)"', chunk)
        if symbols and not set(symbols) & set(libdevice_np.SYMBOLS):
            lacking.add(chunk.split("(", 1)[0])
    assert lacking == NO_TWIN
