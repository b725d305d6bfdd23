"""The CPU lane's interpreter as a GPU runs kernels (interp_grid, interp_rewrite, gpu_deps, inflight,
the CPU-seconds limit in procs).

The hostile and honest fixtures of cases.d/cpu_lane.json run through the pool in
test_verifier_adversarial.py and test_verifier_pool.py; here, the mechanisms one at a time: the
program order, the write-conflict record, the rewrite's branch markers and assignments (in a fresh
process, as a worker installs them), what a constexpr may be, the GPU launcher's global check, a
worker dying inside the GPU compile, and a phase limit counted in CPU seconds.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import triton.language as tl

from distill.verifier import codec, inflight, procs
from distill.verifier.sandbox import gpu_deps, interp_grid
from tests.distill.verifier.conftest import honest, problem

REPO = Path(__file__).resolve().parents[3]


# -- programs in a secret order ----------------------------------------------------------------------------
def test_program_order_is_a_permutation_never_the_identity():
    for n in (1, 2, 3, 7, 100):
        orders = [interp_grid.order(n) for _ in range(20)]
        assert all(sorted(o.tolist()) == list(range(n)) for o in orders)
        if n > 1:
            assert not any((o == np.arange(n)).all() for o in orders)
    assert len({tuple(interp_grid.order(100).tolist()) for _ in range(5)}) == 5  # fresh each launch


# -- write conflicts -----------------------------------------------------------------------------------------
def _stores(prog: int, addrs: list[int], values: list[int], seqs: list[int] | None = None,
            atomics: tuple[int, int] = (2**62, -1)) -> tuple:
    """One program's record as interp_grid keeps it: addresses, bits, item sizes, sequence numbers,
    and its first and last atomic's sequence numbers (none by default)."""
    a = np.array(addrs, np.uint64)
    seq = np.array(seqs if seqs is not None else [0] * a.size, np.int64)
    return prog, a, np.array(values, np.uint64), np.full(a.size, 4, np.uint8), seq, *atomics


def test_disjoint_programs_and_equal_values_are_no_conflict():
    assert interp_grid._conflicts([_stores(0, [0, 4], [1, 2]), _stores(1, [8, 12], [1, 2])])[0].size == 0
    # a row statistic written by every column block: the same bits from each program
    assert interp_grid._conflicts([_stores(0, [0, 100], [1, 7]), _stores(1, [4, 100], [2, 7])])[0].size == 0
    # a program overwriting its own value, then agreeing with another program's last value
    assert interp_grid._conflicts([_stores(0, [100, 100], [5, 7]), _stores(1, [100], [7])])[0].size == 0


def test_programs_leaving_different_values_at_one_address_conflict():
    addrs, sizes, pair = interp_grid._conflicts([_stores(2, [0, 100], [1, 7]), _stores(5, [4, 100], [2, 8])])
    assert addrs.tolist() == [100] and sizes.tolist() == [4] and pair == (2, 5)


def test_stores_ordered_by_atomics_are_the_lock_pattern():
    """Program 0: acquire (seq 1), store (2), release (3); program 1: acquire (4), store (5), release (6)."""
    locked = [_stores(0, [100], [7], [2], (1, 3)), _stores(1, [100], [9], [5], (4, 6))]
    assert interp_grid._conflicts(locked)[0].size == 0
    # no release after the first program's store, or no acquire before the second's: a race
    assert interp_grid._conflicts([_stores(0, [100], [7], [2], (1, 1)), _stores(1, [100], [9], [5], (4, 6))])[0].size
    assert interp_grid._conflicts([_stores(0, [100], [7], [2], (1, 3)), _stores(1, [100], [9], [5], (6, 6))])[0].size


# -- memory a kernel may touch ---------------------------------------------------------------------------------
class _Ptrs:
    """A pointer block as the interpreter's builder hands it over: addresses and an element type."""

    def __init__(self, addrs: list[int], bits: int = 32) -> None:
        self.data = np.array(addrs, np.uint64)
        self.bits = bits

    def get_element_ty(self):
        return tl.int64 if self.bits == 64 else tl.float32


def test_a_launch_touches_only_the_storages_it_was_handed_and_their_bands():
    """Red-team pass 9 (cases.d/redteam9.json): a pointer made from `id(obj)` read the worker's own objects.
    A storage its tensor fills (a parameter) gets a band's width of slack each side; one that holds bands
    around its tensor gets none."""
    a, b = torch.zeros(16), torch.zeros(8, dtype=torch.int64)
    view = b[2:]  # a view reaches its whole storage
    band = interp_grid.BAND_BYTES
    interp_grid._SPAN.lo, interp_grid._SPAN.hi = interp_grid._spans([(a,), 3, view])
    try:
        start = a.data_ptr()
        interp_grid._check(_Ptrs([start, start + 60]), None, "load")
        interp_grid._check(_Ptrs([b.data_ptr()], 64), None, "store")
        interp_grid._check(_Ptrs([start + 64 + band - 4]), None, "store")  # in the tail band: bands.py sees it
        with pytest.raises(interp_grid.OutsideMemory, match="outside every tensor"):
            interp_grid._check(_Ptrs([start, id(a)]), None, "load")
        with pytest.raises(interp_grid.OutsideMemory):
            interp_grid._check(_Ptrs([start + 64 + band - 2]), None, "store")  # an element across the band's end
        with pytest.raises(interp_grid.OutsideMemory):
            interp_grid._check(_Ptrs([start, 2**64 - 4]), None, "load")  # its end wraps past 2**64
        # masked-off lanes may hold any address, as on a GPU
        interp_grid._check(_Ptrs([start, id(a)]), types.SimpleNamespace(data=np.array([True, False])), "load")
    finally:
        interp_grid._SPAN.lo = interp_grid._SPAN.hi = None
    with pytest.raises(interp_grid.OutsideMemory, match="outside any launch"):
        interp_grid._check(_Ptrs([a.data_ptr()]), None, "load")
    # a tensor between bands inside its storage (what forward allocates, a replay's storages): no more
    flat = torch.zeros(band // 4 * 2 + 16)
    inner = flat[band // 4:band // 4 + 16]
    interp_grid._SPAN.lo, interp_grid._SPAN.hi = interp_grid._spans([inner])
    try:
        end = flat.data_ptr() + flat.numel() * 4
        interp_grid._check(_Ptrs([flat.data_ptr(), end - 4]), None, "store")  # its bands: bands.py's to see
        with pytest.raises(interp_grid.OutsideMemory):
            interp_grid._check(_Ptrs([end]), None, "load")
        with pytest.raises(interp_grid.OutsideMemory):
            interp_grid._check(_Ptrs([flat.data_ptr() - 4]), None, "load")
    finally:
        interp_grid._SPAN.lo = interp_grid._SPAN.hi = None


# -- what a constexpr may be -----------------------------------------------------------------------------------
def test_constexprs_are_plain_values():
    for ok in (None, True, 3, 2.5, "relu", tl.float16, tl.pointer_type(tl.float32), torch.float16,
               tl.constexpr(8), (1, tl.float32, "x")):
        assert gpu_deps.refused_constexpr(ok) is None, ok

    class Mine:
        def __eq__(self, other):
            return True

    def helper(x):
        return x

    assert "callable" in gpu_deps.refused_constexpr(helper)
    assert "callable" in gpu_deps.refused_constexpr(lambda x: x)
    assert "callable" in gpu_deps.refused_constexpr(tl.constexpr(helper))
    assert "Mine" in gpu_deps.refused_constexpr(Mine())
    assert gpu_deps.refused_constexpr((1, Mine())) is not None


def test_a_rebound_plain_global_is_named_as_the_gpu_launcher_names_it():
    view, real = {"SHIFT": tl.constexpr(0.0)}, {"SHIFT": tl.constexpr(0.0), "K": 4}
    used = {("SHIFT", id(view)): (tl.constexpr(0.0), view), ("K", id(view)): (4, view)}
    assert gpu_deps.changed_global(used, {id(view): real}) is None
    real["K"] = 5
    assert "Global variable K has changed" in gpu_deps.changed_global(used, {id(view): real})


# -- the rewrite, in a fresh process as a worker installs it -----------------------------------------------------
_REWRITE = '''
import pytest, torch
import triton, triton.language as tl
from distill.verifier.sandbox import gpu_compile, interp_shims
interp_shims.install()
gpu_compile.install()

ACC = tl.constexpr(tl.float32)


@triton.jit
def dtypes(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    out_dtype = tl.constexpr(out_ptr.dtype.element_ty)
    nothing = tl.constexpr(None)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if tl.constexpr(x.dtype).is_fp16() and nothing is None:
        x = x.to(ACC) * 2
    tl.store(out_ptr + offs, x.to(out_dtype), mask=offs < n)


@triton.jit
def diverges(x_ptr, out_ptr, n, one, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    y = x * 2 if isinstance(one, int) else x * 3  # an int equal to 1 is a constant in a compile only
    tl.store(out_ptr + offs, y, mask=offs < n)


@triton.jit
def representation(x_ptr, n, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    d: tl.constexpr = getattr(x.handle, "data", 0)
    tl.store(x_ptr + tl.arange(0, BLOCK), x + d)


@triton.jit
def identity(x_ptr, n, BLOCK: tl.constexpr):
    k = int(tl.static_print is print)  # the interpreter's static_print is Python's print
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.load(x_ptr + tl.arange(0, BLOCK)) * k)


@triton.jit
def relu(x):
    return tl.maximum(x, 0)


@triton.jit
def constexprs(x_ptr, out_ptr, n, ACT: tl.constexpr, SHAPE: tl.constexpr, BLOCK: tl.constexpr = 64 if True else 32):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, ACT(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


@triton.jit
def reserved(x_ptr, n, BLOCK: tl.constexpr):
    __tf_branch__ = 1
    tl.store(x_ptr + tl.arange(0, BLOCK), __tf_branch__)


x, out = torch.randn(64).half(), torch.empty(64).half()
dtypes[(1,)](x, out, 64, BLOCK=64)
assert torch.equal(out, x * 2)
assert "np" not in globals() and "TensorHandle" not in globals()  # nothing of the interpreter leaked here
y = torch.empty(64, device="cuda")  # the lane's stand-in GPU: a host tensor fails a launch (hostmem.py)
constexprs[(1,)](x.float(), y, 64, ACT=relu, SHAPE=y.shape)  # a jit function, a torch.Size, a default
assert torch.equal(y, x.float().clamp(min=0))
with pytest.raises(gpu_compile.GpuCompileError, match="generated no code"):
    diverges[(1,)](x.float(), out.float(), 64, 1, BLOCK=64)
with pytest.raises(gpu_compile.GpuCompileError, match="attribute .handle"):
    representation[(1,)](x.float(), 64, BLOCK=64)
with pytest.raises(gpu_compile.GpuCompileError, match="compares an object"):
    identity[(1,)](x.float(), 64, BLOCK=64)
with pytest.raises(gpu_compile.GpuCompileError, match="reserved"):
    reserved[(1,)](x, 64, BLOCK=64)
'''


@pytest.mark.skipif(sys.platform != "linux", reason="the CPU lane runs on Linux")
def test_the_rewrite_assigns_as_a_gpu_and_runs_only_compiled_branches(tmp_path):
    script = tmp_path / "rewrite_check.py"  # jit functions need a source file
    script.write_text(_REWRITE)
    r = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr[-3000:]


# -- a worker that dies inside the GPU compile ---------------------------------------------------------------
def test_died_compiling_reads_a_scrubbed_kernel_name(tmp_path):
    assert inflight.died_compiling(str(tmp_path)) is None
    inflight.mark(str(tmp_path), "my_kernel\n$(x)")
    assert inflight.died_compiling(str(tmp_path)) == "my_kernelx"
    inflight.clear(str(tmp_path))
    assert inflight.died_compiling(str(tmp_path)) is None


DIES_COMPILING = honest("add").replace("        out = torch.empty_like(a)\n", (
    "        with open('gpu_compile.inflight', 'w') as fh:  # what gpu_compile writes while it compiles\n"
    "            fh.write('add_kernel')\n"
    "        torch.os.abort()\n"))


def test_a_worker_dying_while_the_gpu_compile_runs_is_a_compile_error(pool):
    """A segfault in Triton's compiler is a compile error on a GPU. The marker is what the worker keeps
    while compiling; a candidate that writes it itself only turns its own crash into another failure."""
    assert "abort" in DIES_COMPILING
    v = pool.verify(problem("add"), DIES_COMPILING, static_checks=False)
    assert v.status == "compile_error" and "add_kernel" in v.reason, v.reason


# -- a limit in CPU seconds --------------------------------------------------------------------------------------
def _sleep_then_reply(conn, cfg) -> None:
    time.sleep(cfg["sleep"])
    conn.send_bytes(codec.encode({"done": True}))


def _spin_then_reply(conn, cfg) -> None:
    while time.process_time() < cfg["cpu"]:
        pass
    conn.send_bytes(codec.encode({"done": True}))


def test_a_cpu_lane_limit_counts_cpu_seconds():
    """A process that did not get its CPU seconds because the box kept it off a CPU (here: stopped for
    2.5 s, as a starved one is runnable and waits) is waited for up to STARVED_WALL times the limit;
    one that used them, or that sleeps instead, is stopped at the limit."""
    made = []

    def proc(target, **cfg) -> procs.Proc:
        made.append(procs.Proc(target, {"device": "cpu", **cfg}, "tritonforge-test-limit"))
        return made[-1]

    try:
        starved = proc(_spin_then_reply, cpu=0.3)
        os.kill(starved.pid, signal.SIGSTOP)
        threading.Timer(2.5, os.kill, (starved.pid, signal.SIGCONT)).start()
        assert starved.receive(1.0, "call")["done"]
        asleep = proc(_sleep_then_reply, sleep=30.0)
        t0 = time.monotonic()
        with pytest.raises(procs.ProcTimeout):
            asleep.receive(1.0, "call")
        assert time.monotonic() - t0 < 1.0 + procs.STATE_LOOKS * procs.STATE_EVERY_S + 1.0
        wall = proc(_sleep_then_reply, sleep=2.5)
        wall.cpu_clock = False  # the GPU lane's wall-clock limit
        with pytest.raises(procs.ProcTimeout):
            wall.receive(1.0, "call")
        busy = proc(_spin_then_reply, cpu=30.0)
        t0 = time.monotonic()
        with pytest.raises(procs.ProcTimeout):
            busy.receive(1.0, "call")
        assert time.monotonic() - t0 < procs.STARVED_WALL * 1.0 + 0.6
    finally:
        for p in made:
            p.kill()


def _child_spins_then_reply(conn, cfg) -> None:
    subprocess.run([sys.executable, "-c", f"import time\nwhile time.process_time() < {cfg['cpu']}: pass"], check=True)
    conn.send_bytes(codec.encode({"done": True}))


def test_a_cpu_lane_process_that_stops_running_ends_long_before_its_limit(monkeypatch):
    """A deadlocked worker (every thread asleep, no CPU used: a corrupted heap's futex) ends after STALL_S,
    not at its limit; one stopped by the box, or waiting on a child that runs, is not deadlocked."""
    monkeypatch.setattr(procs, "STALL_S", 1.0)
    made = []

    def proc(target, **cfg) -> procs.Proc:
        made.append(procs.Proc(target, {"device": "cpu", **cfg}, "tritonforge-test-stall"))
        return made[-1]

    try:
        asleep = proc(_sleep_then_reply, sleep=60.0)
        t0 = time.monotonic()
        with pytest.raises(procs.ProcTimeout, match="deadlocked"):
            asleep.receive(60.0, "call")
        assert time.monotonic() - t0 < 1.0 + procs.STATE_LOOKS * procs.STATE_EVERY_S + 2.0
        stopped = proc(_spin_then_reply, cpu=0.3)
        os.kill(stopped.pid, signal.SIGSTOP)
        threading.Timer(3.0, os.kill, (stopped.pid, signal.SIGCONT)).start()
        assert stopped.receive(60.0, "call")["done"]
        waits = proc(_child_spins_then_reply, cpu=3.0)
        assert waits.receive(60.0, "call")["done"]
    finally:
        for p in made:
            p.kill()


# -- device output as on a GPU ------------------------------------------------------------------------------
_DEVICE_IO = '''
import builtins, sys
import torch, triton, triton.language as tl
import dataclasses
from triton.runtime import interpreter
from distill.verifier.sandbox import interp_shims
interp_shims.install()
# a worker's interpreter never checks device asserts (its options say debug off); on here, to see one fail
interpreter.interpreter_builder.options = dataclasses.replace(interpreter.interpreter_builder.options, debug=True)


@triton.jit
def show(x_ptr):
    tl.device_print("x", tl.load(x_ptr + tl.arange(0, 4)))


@triton.jit(debug=True)
def check(x_ptr):
    tl.device_assert(tl.load(x_ptr) > 0, "x must be positive")


class Sink:
    text = ""

    def write(self, s):
        Sink.text += s

    def flush(self):
        pass


real_stdout, real_print = sys.stdout, builtins.print
sys.stdout, builtins.print = Sink(), lambda *a, **k: Sink.write(None, " ".join(map(str, a)))
show[(1,)](torch.arange(4.0) + 7)
sys.stdout, builtins.print = real_stdout, real_print
assert Sink.text == "", Sink.text  # nothing the candidate can swap saw the values
check[(1,)](torch.ones(1, device="cuda"))  # holds: nothing happens (on the stand-in GPU: hostmem.py)
print("asserted", flush=True)
check[(1,)](-torch.ones(1, device="cuda"))  # fails: the process ends, no exception to catch
print("survived", flush=True)
'''


@pytest.mark.skipif(sys.platform != "linux", reason="the CPU lane runs on Linux")
def test_device_print_writes_to_the_descriptor_and_a_failed_assert_ends_the_process(tmp_path):
    """A kernel printed both weights of two_linear through Python's print, swapped around the launch and
    read back (hostile print_weights_fold); a device assert raised an exception a `with` block could
    swallow (one bit a launch). Now as on a GPU: printf to the stdout descriptor, and a failed assert
    ends the process."""
    script = tmp_path / "device_io.py"
    script.write_text(_DEVICE_IO)
    r = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)})
    assert r.returncode == -signal.SIGABRT, (r.returncode, r.stderr[-3000:])
    assert "x" in r.stdout and "7" in r.stdout and "asserted" in r.stdout and "survived" not in r.stdout, r.stdout
    assert "device-side assert failed: x must be positive" in r.stderr
