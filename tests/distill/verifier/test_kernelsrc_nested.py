"""Nested kernels in the kernels module (kernelsrc.py): a @triton.jit function held by a class or made
by a factory is moved to the top level when its names mean the same there, and refused with a
reason naming what it closes over when they do not."""
from __future__ import annotations

import pytest

from distill.verifier import kernelsrc

SOURCE = '''import torch
import triton
import triton.language as tl

SCALE = tl.constexpr(2.0)


class ModelNew(torch.nn.Module):
    @staticmethod
    @triton.autotune(configs=[triton.Config({"B": 64})], key=["n"])
    @triton.jit
    def _kernel(x_ptr, n, B: tl.constexpr):
        offs = tl.arange(0, B)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE, mask=offs < n)

    class Inner:
        @triton.jit
        def k(x_ptr):
            tl.store(x_ptr, 1.0)


def make():
    @triton.jit
    def add_kernel(x_ptr):
        tl.store(x_ptr, SCALE)

    def build():
        @triton.jit
        def deeper(x_ptr):
            tl.store(x_ptr, 3.0)
        return deeper
    return add_kernel, build()
'''


def test_nested_kernels_move_to_the_top_level_under_names_of_their_own_at_their_lines():
    ks = kernelsrc.extract(SOURCE)
    assert ks.hoisted == {"ModelNew._kernel": "ModelNew___kernel", "ModelNew.Inner.k": "ModelNew__Inner__k",
                          "make.<locals>.add_kernel": "make__add_kernel",
                          "make.<locals>.build.<locals>.deeper": "make__build__deeper"}, ks.skipped
    assert set(ks.hoisted.values()) <= set(ks.kernels)
    src, out = SOURCE.splitlines(), ks.text.splitlines()
    at = next(i for i, line in enumerate(src) if "def _kernel" in line)
    assert out[at] == "def ModelNew___kernel(x_ptr, n, B: tl.constexpr):" and out[at + 1] == src[at + 1][4:]
    assert out[at - 1] == "@triton.jit" and "autotune" not in ks.text and "staticmethod" not in ks.text
    assert "class" not in ks.text and "def make(" not in ks.text and "def build(" not in ks.text
    namespace: dict = {}
    exec(compile(ks.text, "<kernels>", "exec"), namespace)  # noqa: S102 - imports of triton only
    assert all(type(namespace[n]).__name__ in ("JITFunction", "InterpretedFunction") for n in ks.hoisted.values())
    assert namespace["ModelNew___kernel"].fn.__name__ == "ModelNew___kernel"


@pytest.mark.parametrize("snippet, name, why", [
    # a factory's argument in a default: evaluated once where the def ran, in no closure a launch records
    ("def make(c):\n    @triton.jit\n    def k(x_ptr, B: tl.constexpr = c):\n        tl.store(x_ptr, B)\n    return k\n",
     "make.<locals>.k", "it uses c"),
    # a class attribute in a default is the class's, not the module's
    ("class C:\n    SCALE = 5\n    @triton.jit\n    def k(x_ptr, B: tl.constexpr = SCALE):\n        tl.store(x_ptr, B)\n",
     "C.k", "a name of the class body"),
    # two kernels one qualified name: a launch cannot say which ran
    ("def make(flag):\n    if flag:\n        @triton.jit\n        def k(x_ptr):\n            tl.store(x_ptr, 1.0)\n"
     "    else:\n        @triton.jit\n        def k(x_ptr):\n            tl.store(x_ptr, 2.0)\n    return k\n",
     "make.<locals>.k", "share this qualified name"),
    # text that cannot move: a continuation line left of the def
    ("class C:\n    @triton.jit\n    def k(x_ptr):\n        tl.store(x_ptr,\n1.0)\n", "C.k", "indented less"),
])
def test_a_nested_kernel_whose_names_would_change_meaning_is_refused_with_the_reason(snippet, name, why):
    ks = kernelsrc.extract("import triton\nimport triton.language as tl\nSCALE = tl.constexpr(2.0)\n\n" + snippet)
    assert name not in ks.hoisted and why in ks.why_missing(name), ks.skipped
    assert ks.kernels == [] or all(not k.endswith("k") for k in ks.kernels)


@pytest.mark.parametrize("snippet, closes", [
    ("def make(c):\n    @triton.jit\n    def k(x_ptr):\n        tl.store(x_ptr, c)\n    return k\n", ["c"]),
    ("def make():\n    @triton.jit\n    def h(x):\n        return x\n    @triton.jit\n    def k(x_ptr):\n"
     "        tl.store(x_ptr, h(1.0))\n    return k\n", ["h"]),
    # a local that shadows a module constant: the closure's, as Python reads it
    ("def make():\n    SCALE = 3.0\n    @triton.jit\n    def k(x_ptr):\n        tl.store(x_ptr, SCALE * X)\n    return k\n",
     ["SCALE"]),
])
def test_a_factory_kernel_moves_with_the_names_it_closes_over(snippet, closes):
    """What it closes over is recorded per launch (record.closure_value) and bound by the replayer."""
    ks = kernelsrc.extract("import triton\nimport triton.language as tl\nSCALE = tl.constexpr(2.0)\nX = 1\n\n" + snippet)
    assert ks.hoisted["make.<locals>.k"] == "make__k" and ks.closures["make__k"] == closes, ks.skipped


def test_a_class_names_its_kernels_method_body_scope_as_python_does():
    """A class body's names are not visible inside the functions in it: a kernel reading SCALE reads
    the module's, so it moves; the method that holds a class attribute of the same name does not matter."""
    src = ("import triton\nimport triton.language as tl\nSCALE = tl.constexpr(2.0)\n\nclass C:\n    SCALE = 9\n"
           "    @triton.jit\n    def k(x_ptr):\n        tl.store(x_ptr, SCALE)\n")
    ks = kernelsrc.extract(src)
    assert ks.hoisted == {"C.k": "C__k"}


def test_a_kernel_made_by_calling_triton_jit_goes_in_with_its_function():
    """`k = triton.jit(k)` (then wrapped by heuristics under the same name) was a plain function to the
    kernels module: the launch of `k` read as not rebuilt."""
    src = ("import triton\nimport triton.language as tl\n\ndef k(x_ptr, B: tl.constexpr):\n    tl.store(x_ptr, 1.0)\n\n"
           "k = triton.jit(k)\nk = triton.heuristics({'B': lambda a: 4})(k)\n"
           "def g(x_ptr):\n    tl.store(x_ptr, 2.0)\ng2 = triton.jit(do_not_specialize=['x_ptr'])(g)\n"
           "def bad(x_ptr):\n    pass\nb2 = triton.jit(bad, launch_metadata=print)\n"
           "@staticmethod\ndef deco(x_ptr):\n    pass\nd2 = triton.jit(deco)\n")
    ks = kernelsrc.extract(src)
    assert ks.kernels == ["k", "g"], ks.skipped
    lines = ks.text.splitlines()
    assert lines[3] == "def k(x_ptr, B: tl.constexpr):" and lines[6] == "k = triton.jit(k)" and lines[7] == ""
    assert "def bad" not in ks.text and "def deco" not in ks.text and "launch_metadata" not in ks.text
    namespace: dict = {}
    exec(compile(ks.text, "<kernels>", "exec"), namespace)  # noqa: S102 - imports of triton only
    assert namespace["k"].fn.__name__ == "k" and namespace["g2"].fn.__name__ == "g"


def test_a_version_shim_that_binds_a_name_goes_in_whole():
    src = ("import triton\nimport triton.language as tl\ntry:\n    from triton.language.extra.cuda.libdevice import tanh\n"
           "except ImportError:\n    tanh = tl.math.tanh\n\n@triton.jit\ndef k(x_ptr):\n    tl.store(x_ptr, tanh(1.0))\n")
    ks = kernelsrc.extract(src)
    assert ks.kernels == ["k"] and ks.text.splitlines()[2:6] == src.splitlines()[2:6], ks.skipped
    namespace: dict = {}
    exec(compile(ks.text, "<kernels>", "exec"), namespace)  # noqa: S102 - imports of triton only
    assert callable(namespace["tanh"])
