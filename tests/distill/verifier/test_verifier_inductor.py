"""torch inductor's generated-module style (KernelBook, KernelLLM): the names the policy lets through, the
helper imports the replay keeps, and the guards module's allocators and views as the sandbox serves them.
The fixtures themselves run in test_verifier_pool.py (honest) and test_verifier_adversarial.py (hostile)."""
from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from distill.verifier import kernelsrc
from distill.verifier.static import check_source

HEAD = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"
KERNEL = "@triton.jit\ndef k(x_ptr, XBLOCK: tl.constexpr):\n    pass\n"
MODEL = "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"

INDUCTOR_HEAD = """import torch
from torch._inductor.select_algorithm import extern_kernels
import triton
import triton.language as tl
from torch._C import _cuda_getCurrentRawStream as get_raw_stream
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
import torch.nn as nn
assert_size_stride = torch._C._dynamo.guards.assert_size_stride
empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda
reinterpret_tensor = torch._C._dynamo.guards._reinterpret_tensor
"""
HELPER_KERNEL = """
@triton.jit
def triton_poi_fused_relu_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + xindex, xmask, eviction_policy='evict_last')
    tmp1 = triton_helpers.maximum(tl.full([1], 0, tl.int32), tmp0)
    tl.store(out_ptr0 + xindex, libdevice.tanh(tl_math.exp(tmp1)), xmask)
"""


def test_the_inductor_module_head_clears_the_static_layer():
    """Every import and binding inductor writes at the top of its modules was `forbidden` (torch.compile,
    introspection), though none is a compiler: KernelBook's whole corpus was refused by name."""
    rep = check_source(INDUCTOR_HEAD + HELPER_KERNEL + MODEL)
    assert rep.status is None, rep.findings
    with_guard = MODEL.replace("        return x", "        with torch.cuda._DeviceGuard(0):\n            return x")
    assert check_source(INDUCTOR_HEAD + HELPER_KERNEL + with_guard).status is None


@pytest.mark.parametrize("line,category", [
    # the rest of triton_helpers: a driver switch, the backend's options, the `triton` it imported
    ("from torch._inductor.runtime import triton_helpers\ntriton_helpers.set_driver_to_cpu()", "torch.compile"),
    ("from torch._inductor.runtime import triton_helpers\nd = triton_helpers.triton.runtime.driver", "torch.compile"),
    ("from torch._inductor.runtime import triton_helpers\nh = triton_helpers", "torch.compile"),
    ("from torch._inductor.runtime.triton_helpers import get_backend_options", "torch.compile"),
    ("import torch._inductor.runtime.triton_helpers as th", "torch.compile"),
    # the rest of inductor and of the guards module: compilers, caches, guard installers
    ("from torch._inductor import codecache", "torch.compile"),
    ("from torch._inductor.runtime.triton_heuristics import CachingAutotuner", "torch.compile"),
    ("from torch._inductor.select_algorithm import AlgorithmSelectorCache", "torch.compile"),
    ("g = torch._C._dynamo.guards.install_no_tensor_aliasing_guard", "introspection"),
    ("g = torch._C._dynamo.guards", "introspection"),
    ("from torch._C import _cuda_setDevice", "introspection"),
    # below an allowed name, a private or dunder part is judged as any other
    ("from torch._inductor.runtime.triton_helpers import maximum\nf = maximum.fn.__globals__", "introspection"),
    ("from torch._inductor.select_algorithm import extern_kernels\nf = extern_kernels.mm.__self__", "introspection"),
])
def test_what_inductor_names_beside_its_runtime_stays_refused(line, category):
    rep = check_source(HEAD + line + "\n" + KERNEL + MODEL)
    assert rep.status == "forbidden" and category in {f.category for f in rep.findings}, rep.findings


def test_the_kernels_module_keeps_triton_helpers_imports():
    """The replay's kernels module dropped `triton_helpers` and `libdevice, math as tl_math` (imported from
    torch): every inductor kernel then failed its replay with NameError (`not_triton`)."""
    ks = kernelsrc.extract(INDUCTOR_HEAD + HELPER_KERNEL + MODEL)
    assert ks.kernels == ["triton_poi_fused_relu_0"] and not ks.error
    assert "from torch._inductor.runtime import triton_helpers" in ks.text
    assert "from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math" in ks.text
    assert "extern_kernels" not in ks.text and "get_raw_stream" not in ks.text and "empty_strided" not in ks.text
    namespace: dict = {}
    exec(compile(ks.text, "<kernels>", "exec"), namespace)  # noqa: S102 - imports of triton and its helpers only
    assert "triton_poi_fused_relu_0" in namespace and "triton_helpers" in namespace
    # a name of triton_helpers beyond its kernel helpers is not imported by the replay
    other = kernelsrc.extract(INDUCTOR_HEAD.replace("libdevice, math as tl_math", "libdevice, set_driver_to_cpu")
                              + HELPER_KERNEL)
    assert "set_driver_to_cpu" in other.skipped and "set_driver_to_cpu" not in other.text


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func._schema.name)
        return func(*args, **(kwargs or {}))


def test_the_guards_allocators_and_views_go_through_the_dispatcher(monkeypatch):
    """The raw `_empty_strided_cuda` allocates below the dispatcher (no record, no poison) and the raw
    `_reinterpret_tensor` views past its storage's end unchecked (measured: 100 elements past a 6-element
    storage read host memory). Served by the sandbox, both are torch's dispatched, bounds-checked ops."""
    from distill.verifier.sandbox import inductor_rt

    guards = torch._C._dynamo.guards
    for name in ("_empty_strided_cuda", "_empty_strided_cpu", "_reinterpret_tensor"):
        monkeypatch.setattr(guards, name, getattr(guards, name))  # put back after the test
    monkeypatch.setattr(torch.cuda, "_DeviceGuard", torch.cuda._DeviceGuard)
    if hasattr(torch._C, "_cuda_getCurrentRawStream"):
        monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", torch._C._cuda_getCurrentRawStream)
    else:
        monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", None, raising=False)
    inductor_rt.install(gpu=False)
    with _Ops() as mode:
        buf = guards._empty_strided_cuda((3, 4), (4, 1), torch.float32)
        view = guards._reinterpret_tensor(buf, (4, 3), (1, 4), 0)
    assert buf.device.type == "cpu" and buf.shape == (3, 4) and buf.dtype == torch.float32
    assert view.data_ptr() == buf.data_ptr() and view.stride() == (1, 4)
    assert "aten::empty_strided" in mode.ops and "aten::as_strided" in mode.ops
    with pytest.raises(RuntimeError, match="out of bounds"):
        guards._reinterpret_tensor(torch.arange(6.0), (2,), (1,), 100)
    assert guards._reinterpret_tensor(torch.arange(6.0)[2:], (2,), (1,), 1).tolist() == [3.0, 4.0]
    if not torch.cuda.is_available():  # the stand-in GPU's guard and stream
        with torch.cuda._DeviceGuard(0):
            pass
        with pytest.raises(RuntimeError, match="invalid device ordinal"):
            torch.cuda._DeviceGuard(1)
        assert torch._C._cuda_getCurrentRawStream(0) == 0


def test_the_gpu_compile_check_sees_triton_helpers_through_jit_twins():
    """Triton's dependency walk read `triton_helpers.maximum` off the real module, an interpreted function
    under TRITON_INTERPRET: "Unsupported function referenced" (an honest inductor kernel was compile_error).
    A kernel's `triton_helpers` global is now a view whose helpers are JIT twins, made on first use too (a
    worker that imported triton_helpers after the backend was prepared)."""
    import torch._inductor.runtime.triton_helpers as triton_helpers
    from triton.runtime.interpreter import InterpretedFunction

    from distill.verifier.sandbox import gpu_compile

    if not isinstance(triton_helpers.maximum, InterpretedFunction):
        pytest.skip("the CPU lane's check: triton_helpers imported under TRITON_INTERPRET=1")
    gpu_compile.prepare()
    gpu_compile._STATE.library.pop(triton_helpers.__name__, None)
    view = gpu_compile._jit_value(triton_helpers)
    assert view is not triton_helpers and view.__name__ == triton_helpers.__name__
    assert isinstance(view.maximum, gpu_compile._Twin) and view.maximum.fn is triton_helpers.maximum.fn
    assert gpu_compile._jit_value(triton_helpers) is view  # one view per worker
