"""Pointer arrays (grouped GEMM's int64 tensors of `data_ptr()` values, cases.d/ptrarray.json).

In this process: which storages a launch reaches through its int64 tensors (ptrspace.reached and
interp_grid's memory check), how the record writes such a tensor (one [storage, offset] per word,
record._Writer._pointers) and how a replayer rebuilds it with its own addresses (replay.Program). Through
a real pool: honest grouped-GEMM kernels pass on the CPU lane with the resized twin required, and the
hostile controls keep red-team pass 9 closed (their statuses: test_verifier_adversarial.py). GPU tests
(`-m gpu`) run the same fixtures and the rebuild on device memory.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from distill.verifier import codec
from distill.verifier import record
from distill.verifier.record import NotReplayable, serialise
from distill.verifier.sandbox import bound as bound_mod
from distill.verifier.sandbox import interp_grid, ptrspace, replay
from tests.distill.verifier.conftest import MANIFEST, honest, hostile, problem

BAND = replay.BAND
HONEST = ["grouped_gemm_ptrs", "grouped_gemm_autotune", "ptrarray_linear_relu", "grouped_gemm_tutorial08"]


@triton.jit
def add_via(ptrs, n, BLOCK: tl.constexpr):
    a = tl.load(ptrs).to(tl.pointer_type(tl.float32))
    b = tl.load(ptrs + 1).to(tl.pointer_type(tl.float32))
    out = tl.load(ptrs + 2).to(tl.pointer_type(tl.float32))
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(a + offs, mask=mask) + tl.load(b + offs, mask=mask), mask=mask)


def _launch(kernel, args, grid, kwargs):
    kernel[grid](*args, **kwargs)


def _wire(record):
    return codec.decode(codec.encode(record))  # what crosses the pipe: data only


def _addresses(*tensors, extra=()):
    return torch.tensor([t.data_ptr() for t in tensors] + list(extra), dtype=torch.int64)


# -- which storages a launch reaches ---------------------------------------------------------------------
class _Ptrs:
    """A pointer block as the interpreter's builder hands it over."""

    def __init__(self, addrs: list[int]) -> None:
        self.data = np.array(addrs, np.uint64)

    def get_element_ty(self):
        return tl.float32


def test_an_array_reaches_only_held_tensors_it_points_into():
    a, b, other = torch.randn(16), torch.randn(16), torch.randn(16)
    probe = [1, 2, 3]
    arr = _addresses(a, extra=[id(probe), b.data_ptr() + (1 << 40)])
    ptrspace.HELD.tensors = [a, b, other]
    try:
        assert [t is a for t in ptrspace.reached([arr])] == [True]  # not `other`: no entry points there
        assert ptrspace.reached([torch.zeros(3, dtype=torch.int64)]) == []
        assert ptrspace.reached([_addresses(a).to(torch.int32)]) == []  # only 64-bit words are addresses
    finally:
        ptrspace.HELD.tensors = None


def test_the_memory_check_widens_once_by_the_arrays_targets():
    a, b = torch.randn(16), torch.randn(16)
    arr = _addresses(a, b)
    probe = [1, 2, 3]
    ptrspace.HELD.tensors = [a, b]
    interp_grid._SPAN.args = (arr,)
    interp_grid._SPAN.lo, interp_grid._SPAN.hi = interp_grid._spans([arr])
    interp_grid._SPAN.widened = False
    try:
        interp_grid._check(_Ptrs([a.data_ptr(), b.data_ptr() + 60]), None, "load")
        assert interp_grid._SPAN.widened
        with pytest.raises(interp_grid.OutsideMemory, match="pointer arrays point into"):
            interp_grid._check(_Ptrs([id(probe)]), None, "load")
        with pytest.raises(interp_grid.OutsideMemory):
            interp_grid._check(_Ptrs([a.data_ptr() + (1 << 40)]), None, "store")
    finally:
        ptrspace.HELD.tensors = None
        interp_grid._SPAN.lo = interp_grid._SPAN.hi = None
        interp_grid._SPAN.args, interp_grid._SPAN.widened = (), True


def test_a_worker_finds_the_tensors_its_frames_hold():
    """Without a replayer's storages: the tensors in the locals of the frames up to the harness's call."""
    mine = torch.randn(8)
    kept = {"w": [torch.randn(4)]}
    found = ptrspace._held()
    assert any(t is mine for t in found) and any(t is kept["w"][0] for t in found)


def test_a_module_is_read_without_running_its_code():
    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(3))
            self.cache = [torch.randn(2)]

    class Sly(Plain):
        @property
        def __dict__(self):
            raise AssertionError("ran the candidate's code")

    found: dict = {}
    record.walk_tensors(Plain(), found, set())
    assert len(found) == 2 and len(record.module_tensors(Plain())) == 2
    sly = Sly.__new__(Sly)
    record.walk_tensors(sly, found, set())  # a `__dict__` of its own making: not read at all
    assert len(found) == 2 and record.module_tensors(sly) == []


def test_harness_frames_and_what_lies_above_the_call_are_never_read(monkeypatch):
    """A frame of the verifier's own files is the harness's (its copies are not the job's), and the
    harness's call (calls.run_call) gives its inputs only: not `pristine`, nothing above it."""
    code = compile("def inner():\n    hidden = torch.randn(4)\n    return hidden, ptrspace._held()\n",
                   ptrspace._HARNESS + "harness_frame.py", "exec")
    ns = {"torch": torch, "ptrspace": ptrspace}
    exec(code, ns)  # noqa: S102 - a function whose frame reads as the harness's
    mine = torch.randn(4)
    hidden, found = ns["inner"]()
    assert any(t is mine for t in found) and not any(t is hidden for t in found)

    def run_call(inputs, pristine):
        return ptrspace._held()

    monkeypatch.setattr(ptrspace, "_RUN_CALL", run_call.__code__)
    x, copy = torch.randn(3), torch.randn(3)
    found = run_call([x], [copy])
    assert any(t is x for t in found) and not any(t is copy or t is mine for t in found)


# -- the record and the replay ---------------------------------------------------------------------------
def _traced(a, b, ptr_extra=(), seen=()):
    out = torch.empty_like(a).fill_(float("nan"))
    trace = [("op", torch.ops.aten.empty_like.default, (a,), {}, out)]
    for t in seen:  # an op of forward that took the tensor (a view of a parameter)
        trace.append(("op", torch.ops.aten.detach.default, (t,), {}, t.detach()))
    arr = _addresses(a, b, out, extra=ptr_extra)
    trace.append(("launch", add_via, (arr, a.numel()), (triton.cdiv(a.numel(), 64),), {"BLOCK": 64}, True))
    return trace, out


def test_a_pointer_array_is_recorded_as_storages_and_offsets_and_rebuilt():
    a, b = torch.randn(100), torch.randn(100)
    trace, out = _traced(a, b, ptr_extra=[0, a.data_ptr() + 8])
    record = _wire(serialise(trace, [a, b], [out], torch.device("cpu")))
    kinds = [s["kind"] for s in record["storages"]]
    assert kinds == ["input", "input", "alloc", "ptrs"], kinds
    assert record["storages"][3]["ptrs"] == [[0, 0], [1, 0], [2, 0], None, [0, 8]]
    assert "data" not in record["storages"][3]  # no worker address crosses the pipe
    program = replay.Program(record, frozenset({"add_via"}), 1 << 30)
    x, y = torch.randn(100), torch.randn(100)
    done = program.run([x, y], {"add_via": add_via}, torch.device("cpu"), False, _launch)
    assert torch.equal(done.outputs[0], x + y)
    words = torch.empty(0, dtype=torch.int64).set_(done.mem[3], BAND // 8, (5,), (1,)).tolist()
    assert words == [done.mem[0].data_ptr() + BAND, done.mem[1].data_ptr() + BAND, done.mem[2].data_ptr() + BAND,
                     0, done.mem[0].data_ptr() + BAND + 8]
    program.audit(done, [x, y])
    assert done.out_of_bounds == [] and done.inputs_changed == []
    bound = bound_mod.bind(program, torch.device("cpu"))  # memory allocated once (timing): load writes them again
    bound.load([x, y])
    assert torch.equal(bound.call({"add_via": add_via}, _launch)[0], x + y)


def test_an_array_into_a_parameter_forward_took_adds_it_as_state():
    a, w = torch.randn(100), torch.randn(100)
    trace, out = _traced(a, w, seen=[w])
    record = serialise(trace, [a], [out], torch.device("cpu"))
    kinds = [s["kind"] for s in record["storages"]]
    assert kinds == ["input", "alloc", "ptrs", "state"], kinds
    assert torch.equal(record["storages"][3]["data"].view(torch.float32), w)  # judged as state by the parent
    assert record["storages"][2]["ptrs"][1] == [3, 0]


def test_what_the_record_cannot_name_is_refused_or_left_as_state():
    a, w = torch.randn(100), torch.randn(100)
    trace, out = _traced(a, w)  # `w` reached only through its data_ptr(): no op of forward took it
    assert "data_ptr()" in serialise(trace, [a], [out], torch.device("cpu")).get("error", "")
    plain = torch.tensor([7, 1 << 40, -3], dtype=torch.int64)  # an int64 table: no address of the record
    trace = [("launch", add_via, (plain, 3), (1,), {"BLOCK": 64}, True)]
    record = serialise(trace, [a], [a], torch.device("cpu"))
    assert [s["kind"] for s in record["storages"]] == ["input", "state"]


def test_a_replayer_refuses_pointers_outside_the_records_storages():
    a, b = torch.randn(100), torch.randn(100)
    trace, out = _traced(a, b)
    record = _wire(serialise(trace, [a, b], [out], torch.device("cpu")))
    for bad in ([9, 0], [0, 400], [0, -4], ["0", 0], [0]):
        forged = {**record, "storages": [dict(s) for s in record["storages"]]}
        forged["storages"][3]["ptrs"] = [bad, [1, 0], [2, 0]]
        with pytest.raises(NotReplayable, match="malformed record"):
            replay.Program(forged, frozenset({"add_via"}), 1 << 30)
    forged = {**record, "storages": [dict(s) for s in record["storages"]]}
    forged["storages"][3]["ptrs"] = [[0, 0]]  # fewer words than the storage holds
    with pytest.raises(NotReplayable, match="pointer array"):
        replay.Program(forged, frozenset({"add_via"}), 1 << 30)


# -- through a pool --------------------------------------------------------------------------------------
def test_the_fixtures_are_in_the_manifest():
    assert set(HONEST) <= set(MANIFEST["honest"])
    names = {c["name"]: c["status"] for c in MANIFEST["cases"]}
    assert names["ptrarray_host_peek"] == names["ptrarray_far_entry"] == names["ptrarray_moved_pointer"] == "crash"
    assert names["raw_host_peek"] == names["raw_host_offset"] == "crash"  # red-team pass 9 stays closed


@pytest.mark.parametrize("name", HONEST)
def test_honest_pointer_arrays_pass_with_the_replay(honest_verdict, name):
    v = honest_verdict(name)
    assert v.status == "pass", v.reason
    assert not v.checks.get("replay_poisoned")  # the arrays were rebuilt, not judged (and poisoned) as state


def test_the_tutorials_tables_of_sizes_are_taken_as_sizes(honest_verdict):
    """Tutorial 08 as written builds int32 tables of per-group sizes and leading dimensions on the host each
    call: state the parent takes as sizes (every value a size or stride of the problem's inputs), not poison."""
    v = honest_verdict("grouped_gemm_tutorial08")
    assert v.status == "pass", v.reason
    assert v.checks["replay_state"].count("sizes") == 2, v.checks["replay_state"]


def test_a_parameter_read_only_through_data_ptr_is_the_modules_and_replays(pool):
    """A parameter no op of forward took, only its `data_ptr()` in the array: the record finds it among the
    module's tensors (record.module_tensors) and adds it as state, taken as parameters. A tensor neither
    forward's ops nor the module hold (a module global's) is still not placeable, and says why."""
    source = honest("ptrarray_linear_relu").replace(".detach()", "")
    assert source != honest("ptrarray_linear_relu")
    v = pool.verify(problem("ptrarray_linear_relu"), source)
    assert v.status == "pass", v.reason
    assert "parameters" in v.checks["replay_state"], v.checks["replay_state"]
    hidden = source.replace("class ModelNew", "_ONES = []\n\n\nclass ModelNew").replace(
        "        group = [x, self.linear.weight, self.linear.bias, out]",
        "        if not _ONES:  # a copy made on the first call, kept in a global: no op of a later call takes it\n"
        "            _ONES.append(self.linear.bias.detach().clone())\n"
        "        group = [x, self.linear.weight, _ONES[0], out]")
    assert "_ONES[0]" in hidden
    v = pool.verify(problem("ptrarray_linear_relu"), hidden)
    assert v.status != "pass" and "data_ptr()" in v.reason, v.reason


# -- the GPU lane ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpu_pool():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from distill.verifier import VerifierPool

    with VerifierPool(workers=2, device="cuda", timeout=120) as p:
        yield p


@pytest.mark.gpu
@pytest.mark.parametrize("name", HONEST)
def test_gpu_honest_pointer_arrays_pass(gpu_pool, name):
    v = gpu_pool.verify(problem(name), honest(name))
    assert v.status == "pass", v.reason
    assert v.kernel_ms > 0


@pytest.mark.gpu
@pytest.mark.parametrize("case", [c for c in MANIFEST["cases"] if c["name"].startswith("ptrarray_")],
                         ids=lambda c: c["name"])
def test_gpu_hostile_pointer_arrays(gpu_pool, case):
    v = gpu_pool.verify(problem(case["problem"]), hostile(case["name"]), static_checks=False)
    assert v.status == case["runtime"], v.reason


@pytest.mark.gpu
def test_gpu_a_pointer_array_is_rebuilt_on_device_memory():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    # the suite imports kernels under TRITON_INTERPRET=1, and the interpreter reads a device address on the host
    compiled = triton.runtime.jit.JITFunction(add_via.fn)
    dev = torch.device("cuda")
    a, b = torch.randn(100, device=dev), torch.randn(100, device=dev)
    out = torch.empty_like(a)
    arr = _addresses(a, b, out).to(dev)
    trace = [("op", torch.ops.aten.empty_like.default, (a,), {}, out),
             ("launch", compiled, (arr, 100), (2,), {"BLOCK": 64}, True)]
    record = _wire(serialise(trace, [a, b], [out], dev))
    assert record["storages"][3]["kind"] == "ptrs" and record["storages"][3]["device"] == "job"
    program = replay.Program(record, frozenset({"add_via"}), 1 << 30)
    x, y = torch.randn(100, device=dev), torch.randn(100, device=dev)
    done = program.run([x, y], {"add_via": compiled}, dev, False, _launch)
    torch.cuda.synchronize()
    assert torch.equal(done.outputs[0], x + y)
    program.audit(done, [x, y])
    assert done.out_of_bounds == []

