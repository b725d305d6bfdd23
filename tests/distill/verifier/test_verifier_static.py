"""The static layer on its own: statuses and the findings a person can act on."""
from __future__ import annotations

import pytest

from distill.verifier.static import check_source
from tests.distill.verifier.conftest import MANIFEST, honest, hostile

HEAD = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"
KERNEL = "@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n    pass\n"
MODEL = "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"


@pytest.mark.parametrize("name", MANIFEST["honest"])
def test_honest_candidates_clear_the_static_layer(name):
    rep = check_source(honest(name))
    assert rep.status is None, rep.findings
    assert rep.kernels


def test_syntax_error_names_the_line():
    rep = check_source("def f(:\n    pass\n")
    assert rep.status == "syntax_error" and "line 1" in rep.reason


@pytest.mark.parametrize("src", [HEAD + MODEL, HEAD + KERNEL])
def test_missing_kernel_or_model_is_no_kernel(src):
    assert check_source(src).status == "no_kernel"


def test_kernel_forms_are_recognised():
    src = HEAD + "from triton import jit\n@jit\ndef a(x):\n    pass\n@triton.jit(do_not_specialize=['x'])\ndef b(x):\n" \
          "    pass\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef c(x):\n    pass\n" + MODEL
    assert check_source(src).kernels == ["a", "b", "c"]


@pytest.mark.parametrize("snippet,category", [
    ("import os", "process"), ("import subprocess", "process"), ("import socket", "network"),
    ("import ctypes", "ctypes"), ("import threading", "threads"), ("import signal", "signal"),
    ("import time", "timer"), ("import gc", "introspection"), ("import numpy", "foreign compute"),
    ("from torch import compile", "torch.compile"), ("import torch._dynamo", "torch.compile"),
    ("x = torch.os.getpid()", "process"), ("y = torch.cuda.graphs.gc", "introspection"),
    ("torch.allclose = None", "torch patching"), ("z = getattr(torch, 'com' + 'pile')", "introspection"),
    ("w = torch._C", "introspection"), ("f = open('x')", "file"), ("eval('1')", "dynamic code"),
    ("m = Model", "reference reuse"), ("q = __builtins__", "introspection"),
    ("try:\n    pass\nexcept Exception:\n    pass", "try/except fallback"),
])
def test_policy_denylist(snippet, category):
    rep = check_source(HEAD + snippet + "\n" + KERNEL + MODEL)
    assert rep.status == "forbidden"
    assert any(f.category == category for f in rep.findings), [str(f) for f in rep.findings]


def test_a_module_of_its_own_class_model_names_that_class_not_the_reference():
    """KernelBench answers often keep the prompt's `class Model` above ModelNew (`super(Model, self).__init__()`):
    `forbidden` as reference reuse, though the name is the module's own class. The reference's name stays
    refused where the module defines none, and imported or rebound it is no class of the module's."""
    own = "class Model(nn.Module):\n    def __init__(self):\n        super(Model, self).__init__()\n"
    assert check_source(HEAD + own + KERNEL + MODEL).status is None
    assert check_source(HEAD + own + "Model = 3\n" + KERNEL + MODEL).status == "forbidden"
    assert check_source(HEAD + "from problem import Model\n" + KERNEL + MODEL).status == "forbidden"
    assert check_source(HEAD + "m = Model\n" + KERNEL + MODEL).status == "forbidden"


def test_plain_getattr_and_private_self_attributes_are_fine():
    src = HEAD + KERNEL + "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n" \
          "        self._cache = None\n    def forward(self, x):\n        return getattr(x, 'shape')\n"
    assert check_source(src).status is None


@pytest.mark.parametrize("case", [c for c in MANIFEST["cases"] if c["status"] in ("syntax_error", "no_kernel")],
                         ids=lambda c: c["name"])
def test_manifest_static_statuses(case):
    assert check_source(hostile(case["name"])).status == case["status"]


def test_a_source_nested_past_the_limit_is_a_syntax_error_whatever_the_recursion_limit():
    """The verdict is the source's, not the process's: a recursion limit raised by an imported library
    (the `deep_expression` fixture passed the static check in a CI lane that had one) changes nothing."""
    import sys

    from distill.verifier import static

    deep = HEAD + KERNEL + MODEL.replace("return", "_ = " + "+".join(["1"] * (static.MAX_NESTING + 5)) + "\n        return", 1)
    shallow = HEAD + KERNEL + MODEL.replace("return", "_ = " + "+".join(["1"] * 150) + "\n        return", 1)
    old = sys.getrecursionlimit()
    try:
        for limit in (old, 100_000):
            sys.setrecursionlimit(limit)
            rep = check_source(deep)
            assert rep.status == "syntax_error" and "levels deep" in rep.reason, rep
            assert check_source(shallow).status is None
    finally:
        sys.setrecursionlimit(old)


def test_a_source_past_the_length_limit_is_a_syntax_error_before_any_parse():
    """Red-team pass 9: a 4 MB literal table cost the parent 42 s and 1.3 GB of parses under the pool's
    one parse lock; the verdict is the source's, and no parse runs."""
    from distill.verifier import kernelsrc, static, statecheck

    body = HEAD + KERNEL + MODEL
    fits = body + "\nT = [" + ",".join(["0.5"] * ((static.MAX_SOURCE_CHARS - len(body) - 16) // 4)) + "]\n"
    assert len(fits) <= static.MAX_SOURCE_CHARS and check_source(fits).status is None
    long = fits + "#" * (static.MAX_SOURCE_CHARS - len(fits) + 1)
    rep = check_source(long)
    assert rep.status == "syntax_error" and "past the verifier's limit" in rep.reason, rep
    assert static.unparsable(long) is not None
    assert statecheck.literals(long) == frozenset() and kernelsrc.extract(long).error


@pytest.mark.parametrize("use", ["s = torch.cuda.Stream()", "d = torch.cuda.current_device()",
                                 "v = torch.select(torch.ones(3), 0, 1)", "w = torch.signal.windows"])
def test_torch_namespaces_named_like_stdlib_modules_are_fine(use):
    # torch.cuda is not the `cuda` package; torch.select/signal are torch's own (a GPU-run regression)
    assert check_source(HEAD + use + "\n" + KERNEL + MODEL).status is None


@pytest.mark.parametrize("use", [
    "DEVICE = triton.runtime.driver.active.get_active_torch_device()",
    "from triton.runtime import driver\np = driver.active.utils.get_device_properties(0)['multiprocessor_count']",
    "c = triton.runtime.driver.active.get_current_target().backend == 'cuda'",
    "i = triton.runtime.driver.active.get_current_device()"])
def test_the_drivers_read_only_queries_of_tritons_tutorials_are_fine(use):
    assert check_source(HEAD + use + "\n" + KERNEL + MODEL).status is None


@pytest.mark.parametrize("use", [
    "x = triton.runtime.driver.active", "y = triton.runtime.driver.active.utils.load_binary",
    "z = triton.runtime.driver.active.get_benchmarker()", "triton.runtime.driver.set_active(None)",
    "from triton.runtime import driver\ndriver.active.launch_enter_hook = print",
    "from triton.runtime import driver\nd = driver", "from triton.runtime import driver\nf = getattr(driver, 'active')",
    "from triton.runtime import driver, jit", "from triton.runtime import driver as d\nu = d.active.utils"])
def test_the_rest_of_the_driver_stays_harness(use):
    """The allowed queries are names, not the driver: reaching anything else, or the driver itself under
    another name (which no dotted walk can follow), is refused."""
    rep = check_source(HEAD + use + "\n" + KERNEL + MODEL)
    assert rep.status == "forbidden" and any(f.category in ("harness", "torch patching") for f in rep.findings), rep


@pytest.mark.parametrize("use", [
    "torch.cuda.cudart().cudaHostRegister(0, 8, 0)", "from torch.cuda import cudart",
    "p = torch.cuda.caching_allocator_alloc(1024)", "torch.cuda.memory.caching_allocator_delete(0)",
    "s = torch.cuda.ExternalStream(0)", "from torch.cuda.streams import ExternalStream",
    "a = torch.cuda.memory.CUDAPluggableAllocator('x.so', 'a', 'f')", "torch.cuda.memory.change_current_allocator(a)",
    "torch.cuda.set_per_process_memory_fraction(1.0)", "torch.cuda.memory.set_per_process_memory_fraction(1.0)"])
def test_cuda_by_raw_handle_and_the_workers_memory_cap_are_refused(use):
    rep = check_source(HEAD + use + "\n" + KERNEL + MODEL)
    assert rep.status == "forbidden" and {f.category for f in rep.findings} <= {"ctypes", "harness"}, rep


@pytest.mark.parametrize("use", ["c = torch.to_dlpack(torch.ones(2))", "t = torch.from_dlpack(c)",
                                 "from torch import to_dlpack", "f = torch.from_dlpack",
                                 "from torch.utils.dlpack import to_dlpack"])
def test_dlpack_exchange_is_foreign_compute(use):
    """A tensor's memory handed to or taken from another library: no ATen op sees the values."""
    rep = check_source(HEAD + use + "\n" + KERNEL + MODEL)
    assert rep.status == "forbidden" and {f.category for f in rep.findings} <= {"foreign compute", "introspection"}, rep


@pytest.mark.parametrize("use", ["s = torch.cuda.Stream()", "m = torch.cuda.mem_get_info()",
                                 "torch.cuda.synchronize()", "e = torch.cuda.memory.empty_cache()"])
def test_the_rest_of_torch_cuda_stays_open(use):
    assert check_source(HEAD + use + "\n" + KERNEL + MODEL).status is None


GUARD = ("try:\n    from triton.language.extra.libdevice import tanh\n"
         "except {caught}:\n    {fallback}\n")


@pytest.mark.parametrize("caught,fallback", [
    ("ModuleNotFoundError", "from triton.language.extra.cuda.libdevice import tanh"),
    ("(ImportError, ModuleNotFoundError)", "from triton.language.extra.cuda.libdevice import tanh"),
    ("ImportError", "pass")])
def test_a_try_that_only_picks_an_import_path_is_fine(caught, fallback):
    """Libraries spanning Triton versions import libdevice this way; DESIGN refuses a fallback around
    compute, and none fits in imports alone."""
    assert check_source(HEAD + GUARD.format(caught=caught, fallback=fallback) + KERNEL + MODEL).status is None


@pytest.mark.parametrize("caught,fallback", [
    ("Exception", "from triton.language.extra.cuda.libdevice import tanh"),  # more than import errors
    ("ImportError", "tanh = torch.tanh"),                                    # a fallback that binds compute
    ("ImportError", "from triton.language.extra.cuda.libdevice import tanh\n    y = torch.ones(2) + 1"),
    ("ModuleNotFoundError", "import numpy as tanh")])                        # the import checked as any
def test_a_try_with_anything_but_imports_stays_refused(caught, fallback):
    rep = check_source(HEAD + GUARD.format(caught=caught, fallback=fallback) + KERNEL + MODEL)
    assert rep.status == "forbidden", rep


def test_init_handles_is_the_one_private_name_a_compiled_kernel_is_read_through():
    """The fused-softmax tutorial loads its warmed-up kernel (`k._init_handles()`) to read `n_regs`;
    every other private name stays introspection."""
    use = "kk = k.warmup(1, BLOCK=4, grid=(1,))\nkk._init_handles()\nr = kk.n_regs\n"
    assert check_source(HEAD + KERNEL + use + MODEL).status is None
    for other in ("kk._run", "kk._init_handles_x", "kk.__dict__"):
        rep = check_source(HEAD + KERNEL + use + f"z = {other}\n" + MODEL)
        assert rep.status == "forbidden" and rep.findings[0].category == "introspection", (other, rep)


@pytest.mark.parametrize("use", ["v = int(triton.__version__.split('.')[0]) >= 3", "w = torch.__version__",
                                 "import warnings\nwarnings.warn('empty input')"])
def test_version_checks_and_warnings_of_public_wrappers_are_fine(use):
    assert check_source(HEAD + use + "\n" + KERNEL + MODEL).status is None


@pytest.mark.parametrize("use", ["x = torch.__init__", "y = triton.__file__", "z = torch.__dict__"])
def test_other_module_dunders_stay_introspection(use):
    assert check_source(HEAD + use + "\n" + KERNEL + MODEL).status == "forbidden"


@pytest.mark.parametrize("use, ok", [
    ("from packaging.version import Version\nNEW = Version(triton.__version__) >= Version('3.0')", True),
    ("from packaging import version\nNEW = version.parse(triton.__version__).major >= 3", True),
    ("import packaging.version\nNEW = packaging.version.parse(triton.__version__)", True),
    ("import packaging", False), ("from packaging import tags", False), ("import packaging.markers", False)])
def test_version_parsing_is_the_one_part_of_packaging_a_candidate_may_use(use, ok):
    """Public kernels pick libdevice's import path by Triton's version through packaging.version."""
    rep = check_source(HEAD + use + "\n" + KERNEL + MODEL)
    assert (rep.status is None) == ok, [str(f) for f in rep.findings]


@pytest.mark.parametrize("use, ok", [
    ("@torch.library.custom_op('mylib::f', mutates_args=())\ndef f(x: torch.Tensor) -> torch.Tensor:\n    return x", True),
    ("from torch.library import triton_op, register_fake", True),
    ("lib = torch.library.Library('aten', 'IMPL')", False), ("torch.library.impl('aten::relu', 'CPU')(print)", False),
    ("from torch.library import define", False)])
def test_custom_operators_are_allowed_and_existing_operators_stay_out_of_reach(use, ok):
    rep = check_source(HEAD + use + "\n" + KERNEL + MODEL)
    assert (rep.status is None) == ok, [str(f) for f in rep.findings]


@pytest.mark.parametrize("use, ok", [
    ("w = torch.empty(4, 3)\nfan_in, _ = nn.init._calculate_fan_in_and_fan_out(w)", True),
    ("from torch.nn import init\nf = init._calculate_correct_fan(torch.empty(4, 3), 'fan_in')", True),
    ("import torch.nn.init as I\nfan_in, _ = I._calculate_fan_in_and_fan_out(torch.empty(4, 3))", True),
    ("nn.init._no_grad_uniform_(torch.empty(3), 0, 1)", False), ("g = nn.init._calculate_fan_in_and_fan_out.__globals__", False),
    ("g = nn.init._calculate_fan_in_and_fan_out._x", False)])
def test_the_fan_helpers_a_copied_reset_parameters_names_are_the_private_names_of_init_allowed(use, ok):
    """A copy of nn.Linear.reset_parameters (how a candidate mirrors the reference's weights) calls
    `nn.init._calculate_fan_in_and_fan_out`: a shape's fan, nothing else; init's other private names
    and anything below the helpers stay introspection."""
    rep = check_source(HEAD + "import torch.nn as nn\n" + use + "\n" + KERNEL + MODEL)
    assert (rep.status is None) == ok, [str(f) for f in rep.findings]


@pytest.mark.parametrize("use", [
    "g = torch.library.wrap_triton.__globals__", "g = torch.library.custom_op.__globals__['torch']",
    "from torch.library import triton_op\ng = triton_op.__wrapped__", "g = torch.compiler.disable.__globals__",
    "from torch.compiler import disable as d\ng = d.__code__",
    "g = triton.runtime.driver.active.get_current_target.__globals__",
    "from packaging.version import Version\ng = Version.__init__.__globals__", "g = torch.library.wrap_triton._x"])
def test_below_an_allowed_name_a_private_or_dunder_part_is_judged_as_any_other(use):
    """An allowed name exempted everything below it: `wrap_triton.__globals__` (the module dict of torch's
    own code, which no run-time audit event sees being read) passed the static layer."""
    rep = check_source(HEAD + use + "\n" + KERNEL + MODEL)
    assert rep.status == "forbidden" and any(f.category == "introspection" for f in rep.findings), rep


@pytest.mark.parametrize("use", ["@torch.compiler.disable\ndef f(x):\n    return x",
                                 "c = torch.compiler.is_compiling()", "from torch.compiler import disable"])
def test_what_a_wrapper_says_to_torch_compile_is_a_no_op_and_allowed(use):
    assert check_source(HEAD + use + "\n" + KERNEL + MODEL).status is None


@pytest.mark.parametrize("use", ["import packaging.version\nx = packaging.version.typing.sys.modules",
                                 "from packaging import version\nx = version.warnings.sys",
                                 "import packaging.version\nx = packaging.version.sys"])
def test_below_an_allowed_module_a_reexported_module_is_refused(use):
    """packaging.version is allowed for version checks; the modules it imports (sys, through typing or
    warnings) are not, as `torch.os` is not."""
    rep = check_source(HEAD + use + "\n" + KERNEL + MODEL)
    assert rep.status == "forbidden" and any(f.category == "introspection" for f in rep.findings), rep


@pytest.mark.parametrize("use, ok", [
    ("try:\n    from triton.language.extra.cuda.libdevice import tanh\nexcept ImportError:\n    tanh = tl.math.tanh", True),
    ("try:\n    from triton.language.extra import libdevice\nexcept ImportError:\n    libdevice = None", True),
    ("try:\n    from triton.language.extra.cuda.libdevice import tanh\nexcept ImportError:\n    tanh = torch.tanh", False),
    ("try:\n    from triton.language.extra import libdevice\nexcept ImportError:\n    libdevice = tl.math.fn()", False),
    ("try:\n    x = tl.math.tanh\nexcept Exception:\n    x = None", False)])
def test_a_version_shim_may_bind_a_name_in_its_fallback(use, ok):
    """A fallback that binds a name to another (no call) computes nothing; a call or a broad except stays a
    fallback around compute."""
    rep = check_source(HEAD + use + "\n" + KERNEL + MODEL)
    assert (rep.status is None) == ok, [str(f) for f in rep.findings]


# The program the importer runs is the text the parent read (red-team pass 8, cases.d/redteam8.json).
HIDDEN = "x = 1  # +AAo-import os\n"  # UTF-7: `+AAo-` is a newline, so the worker runs `import os`


@pytest.mark.parametrize("head", ["# -*- coding: utf-7 -*-\n", "#!/usr/bin/env python\n# vim: set fileencoding=utf-7 :\n",
                                  "\r# coding: utf-7\n", "\x0c# coding: utf-7\n", "# coding: cp037\n",
                                  "# -*- coding: latin-1 -*-\nname = 'é'\n", "# coding: no-such-codec\n"])
def test_an_encoding_declaration_that_makes_the_import_read_other_code_is_a_syntax_error(head):
    """A string parse ignores a PEP 263 declaration; the worker's import of the file honours it (CPython's
    tokenizer: after a lone carriage return too, where tokenize.detect_encoding does not)."""
    from distill.verifier.static import unparsable

    src = head + HIDDEN + HEAD + KERNEL + MODEL
    assert check_source(src).status == "syntax_error"
    assert unparsable(src) is not None  # the static checks off too


def test_an_encoding_declaration_that_only_moves_lines_is_a_syntax_error():
    """A newline decoded inside a comment adds no code, but every later line of the imported module (what
    Triton and the guard's line numbers read) moves by one."""
    assert check_source("# coding: utf-7\n# a +AAo-# b\n" + HEAD + KERNEL + MODEL).status == "syntax_error"


@pytest.mark.parametrize("head", ["# -*- coding: utf-8 -*-\n", "#!/usr/bin/env python3\n# coding=utf8\n",
                                  "# -*- coding: latin-1 -*-\n", "# -*- coding: ascii -*-\n", "# decoding the rows\n"])
def test_an_encoding_declaration_that_reads_the_same_program_is_kept(head):
    assert check_source(head + HEAD + KERNEL + MODEL).status is None


@pytest.mark.parametrize("sep", ["\x0c", "\x0b", "\x1c", "\x85", "\u2028", "\u2029"])
def test_the_kernels_module_keeps_each_line_where_the_syntax_tree_numbers_it(sep):
    """str.splitlines also breaks at these; the tree does not: a kept line took the line above it."""
    from distill.verifier import kernelsrc

    page = "\x0c\n" if sep == "\x0c" else ""  # a form feed may also stand alone, as a page break
    src = (HEAD + f"# a page {sep} break\n" + page + "import logging\nlog = logging.getLogger(__name__)\n"
           "BLOCK = 64\n\n" + KERNEL.replace("pass", "tl.store(x_ptr, 1.0)") + MODEL).replace("\n", "\r\n")
    ks = kernelsrc.extract(src)
    lines = ks.text.split("\n")
    assert not ks.error and ks.kernels == ["k"]
    assert "getLogger" not in ks.text and lines[src.split("\r\n").index("BLOCK = 64")] == "BLOCK = 64"
    assert "    tl.store(x_ptr, 1.0)" in lines
