"""The provenance replay outside the candidate's process (issue 30, forged reports).

In this process: the traced call's record as data (record.serialise) and what the replayer refuses to
rebuild from it (replay.Program), the kernels module cut out of a candidate's source (kernelsrc.py),
the state check against the reference's parameters (statecheck.py). Through a real pool: a perfect
forger (every reply of the worker rewritten in the parent, as a candidate that owns its worker's
channel could) gains nothing, and what a replay cannot rebuild says why.
"""
from __future__ import annotations

import textwrap

import pytest
import torch
import triton
import triton.language as tl

from distill.verifier import codec, kernelsrc, procs, statecheck
from distill.verifier.sandbox import bound as bound_mod
from distill.verifier.sandbox import replay
from distill.verifier.record import serialise, state_limit
from tests.distill.verifier.conftest import honest, problem


@triton.jit
def add_k(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


def _launch(kernel, args, grid, kwargs):
    kernel[grid](*args, **kwargs)


def _traced_add(a, b, extra_state=None):
    """The record the guard would keep for `out = empty_like(a); add_k[...](a, b, out, ...)`."""
    out = torch.empty_like(a).fill_(float("nan"))
    trace = [("op", torch.ops.aten.empty_like.default, (a,), {}, out)]
    src = extra_state if extra_state is not None else b
    trace.append(("launch", add_k, (a, src, out, a.numel()), (triton.cdiv(a.numel(), 64),), {"BLOCK": 64}, True))
    return trace, out


def _wire(record):
    return codec.decode(codec.encode(record))  # what crosses the pipe: data only


def test_a_record_replays_on_inputs_it_never_saw_and_ablated_leaves_poison():
    a, b = torch.randn(100), torch.randn(100)
    trace, out = _traced_add(a, b)
    record = _wire(serialise(trace, [a, b], [out], torch.device("cpu")))
    assert [s["kind"] for s in record["storages"]] == ["input", "input", "alloc"]
    program = replay.Program(record, frozenset({"add_k"}), 1 << 30)
    x, y = torch.randn(100), torch.randn(100)
    got = program.run([x, y], {"add_k": add_k}, torch.device("cpu"), False, _launch).outputs
    assert torch.equal(got[0], x + y)
    ablated = program.run([x, y], {"add_k": add_k}, torch.device("cpu"), True, _launch).outputs
    assert ablated[0].isnan().all()


def test_state_travels_as_the_workers_claim():
    a, w = torch.randn(100), torch.randn(100)
    trace, out = _traced_add(a, None, extra_state=w)
    record = serialise(trace, [a], [out], torch.device("cpu"))
    state = [s for s in record["storages"] if s["kind"] == "state"]
    assert len(state) == 1 and torch.equal(state[0]["data"].view(torch.float32), w)


def test_the_state_a_record_may_carry_follows_the_problems_parameters():
    """A verifier's own limit: 1 GiB, or four times the parameters (KernelBench level 2's #68 holds a 1 GiB
    weight and its honest kernel was `not_triton` at a fixed 1 GiB, H200, 2026-11-30)."""
    assert state_limit(None) == state_limit({"param_bytes": 1 << 20}) == 1 << 30
    assert state_limit({"param_bytes": 1 << 30}) == 4 << 30
    a, w = torch.randn(100), torch.randn(100)
    trace, out = _traced_add(a, None, extra_state=w)
    assert "made before it" in serialise(trace, [a], [out], torch.device("cpu"), 399).get("error", "")
    assert "error" not in serialise(trace, [a], [out], torch.device("cpu"), 400)


def test_the_worker_refuses_records_it_cannot_write_faithfully():
    a = torch.randn(8)

    def make_kernel():
        @triton.jit
        def inner(x_ptr):
            pass
        return inner

    class Sub(torch.Tensor):
        pass

    cases = {
        "ran inside forward": [("op", torch.ops.aten.add.Tensor, (a, a), {}, a + a)],
        "object of type Sub": [("op", torch.ops.aten.clone.default, (a.as_subclass(Sub),), {}, a.clone())],
        "outside the candidate's module": [("launch", add_k, (a,), (1,), {}, False)],
        "grid is not": [("launch", add_k, (a,), (1.5,), {}, True)],
        "launch argument of type object": [("launch", add_k, (object(),), (1,), {}, True)],
    }
    for why, trace in cases.items():
        assert why in serialise(trace, [a], [a], torch.device("cpu")).get("error", ""), why
    # a kernel made by a factory is recorded by its qualified name (the parent's kernels module hoists it)
    nested = serialise([("launch", make_kernel(), (a,), (1,), {}, True)], [a], [a], torch.device("cpu"))
    assert nested["steps"][-1][1].endswith("make_kernel.<locals>.inner"), nested
    t = torch.empty(0)
    relayout = [("launch", add_k, (t,), (1,), {}, True), ("op", torch.ops.aten.resize_.default, (t, [4]), {}, t)]
    assert "changed the layout" in serialise(relayout, [a], [a], torch.device("cpu"))["error"]


def test_the_replayer_refuses_forged_records():
    a, b = torch.randn(100), torch.randn(100)
    trace, out = _traced_add(a, b)
    good = _wire(serialise(trace, [a, b], [out], torch.device("cpu")))

    def forged(change):
        record = _wire(serialise(trace, [a, b], [out], torch.device("cpu")))
        change(record)
        with pytest.raises(replay.NotReplayable) as info:
            replay.Program(record, frozenset({"add_k"}), 1 << 30)
        return str(info.value)

    def past_end(r):
        r["outputs"][0]["size"] = [10_000]
    assert "past the end" in forged(past_end)

    def half_cast(r):
        r["storages"].append({"kind": "alloc", "nbytes": 200, "device": "job", "dtype": "float16"})
        r["steps"].append(["copy", {"s": 3, "off": 0, "dtype": "float16", "size": [100], "stride": [1]},
                           r["outputs"][0]])
    assert "changes values" in forged(half_cast)

    def bitcast(r):  # float32 memory read as fp16 halves (a same-width float/int view is a layout: policy._keeps)
        r["outputs"][0]["dtype"] = "float16"
    assert "read as" in forged(bitcast)

    def other_kernel(r):
        r["steps"][-1][1] = "secret_helper"
    assert "not a kernel of the module" in forged(other_kernel)

    def no_bytes(r):
        r["storages"][2] = {**r["storages"][2], "kind": "state"}
    assert "state without its bytes" in forged(no_bytes)

    with pytest.raises(replay.NotReplayable, match="limit"):
        replay.Program(good, frozenset({"add_k"}), 100)


SOURCE = textwrap.dedent('''
    import math
    import torch
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    LOG2E = tl.constexpr(1.4426950408889634)
    BLOCK_DEFAULT: int = 2 * 64
    HALF = math.sqrt(0.25); TABLE = torch.arange(4)
    NAMES = {torch.float32: tl.float32}


    def helper(x):
        return x * 2


    @triton.autotune(configs=[triton.Config({"BLOCK": 64}),
                              triton.Config({"BLOCK": 128})], key=["n"])
    @triton.jit
    def scaled(x_ptr, n, BLOCK: tl.constexpr = BLOCK_DEFAULT):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, libdevice.exp2(tl.load(x_ptr + offs) * LOG2E) * HALF, mask=offs < n)


    class ModelNew(torch.nn.Module):
        pass
''')


def test_the_kernels_module_keeps_kernels_and_constants_at_their_lines_and_nothing_else():
    ks = kernelsrc.extract(SOURCE)
    assert ks.kernels == ["scaled"] and not ks.error
    src_lines, out_lines = SOURCE.splitlines(), ks.text.splitlines()
    at = next(i for i, line in enumerate(src_lines) if line.startswith("def scaled"))
    assert out_lines[at] == src_lines[at] and out_lines[at - 1] == "@triton.jit"
    assert "autotune" not in ks.text and "class" not in ks.text and "def helper" not in ks.text
    assert "LOG2E = tl.constexpr" in ks.text and "BLOCK_DEFAULT: int = 2 * 64" in ks.text
    assert "HALF = math.sqrt(0.25)" in ks.text and "TABLE" not in ks.text and "import torch" not in ks.text
    assert "plain Python function" in ks.why_missing("helper")
    assert "not a constant" in ks.skipped["NAMES"] and "TABLE" in ks.skipped
    namespace: dict = {}
    exec(compile(ks.text, "<kernels>", "exec"), namespace)  # noqa: S102 - imports of triton and math only
    assert namespace["HALF"] == 0.5 and "scaled" in namespace


def test_jit_options_are_checked_not_the_call_of_triton_jit():
    """`@triton.jit(do_not_specialize=[...])` was refused as "calls something other than ...": an honest
    kernel then read as not_triton. Its options must still be constants the replay can rebuild."""
    opts = SOURCE.replace("@triton.jit\ndef scaled", "@triton.jit(do_not_specialize=['n'], noinline=False)\ndef scaled")
    assert opts != SOURCE
    ks = kernelsrc.extract(opts)
    assert ks.kernels == ["scaled"]                 # the replay rebuilds it under a plain @triton.jit
    # a profiler's host callback (Triton's persistent-matmul tutorial): kept, the function a stub never run
    meta = kernelsrc.extract(SOURCE.replace("@triton.jit\ndef scaled", "@triton.jit(launch_metadata=helper)\ndef scaled"))
    assert meta.kernels == ["scaled"] and "helper = None" in meta.text and "def helper" not in meta.text
    bad = kernelsrc.extract(SOURCE.replace("@triton.jit\ndef scaled", "@triton.jit(noinline=helper)\ndef scaled"))
    assert bad.kernels == [] and "noinline" in bad.why_missing("scaled")
    assert kernelsrc.extract(SOURCE.replace("@triton.jit\ndef scaled", "@triton.jit(*OPTS)\ndef scaled")).kernels == []


def test_one_import_statement_of_several_modules_keeps_the_ones_the_replay_imports():
    """`import torch, triton, triton.language as tl` (valid, seen in public code) was dropped whole for
    its torch: `triton` then named nothing and every kernel read as a plain function (not_triton)."""
    src = ("import torch, torch.nn as nn, triton, triton.language as tl\nimport os, math; X = 2\n\n"
           "@triton.jit\ndef k(x_ptr, n, B: tl.constexpr):\n    tl.store(x_ptr + tl.arange(0, B), X * math.pi)\n")
    ks = kernelsrc.extract(src)
    assert ks.kernels == ["k"] and not ks.error
    lines = ks.text.splitlines()
    assert lines[0] == "import triton, triton.language as tl" and lines[1] == "import math; X = 2"
    assert lines[4] == "def k(x_ptr, n, B: tl.constexpr):"  # the kernel keeps its line
    assert "which the replay does not import" in ks.skipped["torch"] and "os" in ks.skipped and "nn" in ks.skipped
    namespace: dict = {}
    exec(compile(ks.text, "<kernels>", "exec"), namespace)  # noqa: S102 - imports of triton and math only
    assert "torch" not in namespace and "os" not in namespace and "k" in namespace


def test_constants_bound_by_unpacking_are_kept_when_every_value_is_one():
    """`BM, BN = tl.constexpr(64), tl.constexpr(32)` was refused as "not a constant assignment": a kernel
    using BM was not replayable."""
    src = ("import triton\nimport triton.language as tl\nBM, BN = tl.constexpr(64), tl.constexpr(32)\n(A, B) = (1, tl.float16)\nC = D = 3\n"
           "X, Y = range(2)\nP, Q = [1, open]\n\n@triton.jit\ndef k(x_ptr):\n"
           "    tl.store(x_ptr + tl.arange(0, BM), (BN + A + C + D).to(B))\n")
    ks = kernelsrc.extract(src)
    assert ks.kernels == ["k"]
    assert "BM, BN = tl.constexpr(64), tl.constexpr(32)" in ks.text and "(A, B) = (1, tl.float16)" in ks.text and "C = D = 3" in ks.text
    assert "range(2)" not in ks.text and "open" not in ks.text
    assert "not a constant assignment" in ks.skipped["X"] and "open" in ks.skipped["Q"] and "open" in ks.skipped["P"]
    namespace: dict = {}
    exec(compile(ks.text, "<kernels>", "exec"), namespace)  # noqa: S102 - imports of triton and math only
    assert (namespace["BM"], namespace["BN"], namespace["D"]) == (64, 32, 3)


def test_a_try_that_picks_an_import_path_goes_in_whole_when_the_replay_makes_its_imports():
    src = ("import triton\nimport triton.language as tl\ntry:\n    from triton.language.extra.libdevice import tanh\n"
           "except ModuleNotFoundError:\n    from triton.language.extra.cuda.libdevice import tanh\n"
           "try:\n    import torch\nexcept ImportError:\n    pass\n\n@triton.jit\ndef k(x_ptr):\n"
           "    tl.store(x_ptr, tanh(tl.load(x_ptr)))\n")
    ks = kernelsrc.extract(src)
    assert ks.kernels == ["k"]
    lines = ks.text.splitlines()
    assert lines[2:6] == src.splitlines()[2:6] and "torch" not in ks.text  # the second try stays out
    namespace: dict = {}
    exec(compile(ks.text, "<kernels>", "exec"), namespace)  # noqa: S102 - imports of triton only
    assert callable(namespace["tanh"])


def test_state_is_accepted_only_as_a_layout_of_the_parameters_or_a_constant():
    model = torch.nn.Linear(8, 5)
    ref = statecheck.summary(model)
    w, bias = model.weight.detach(), model.bias.detach()

    def taken(t):
        return statecheck.classify({"data": codec.raw_u8(t.contiguous()).clone(), "dtype": codec.dtype_name(t.dtype)},
                                   ref)

    assert taken(w.t()) == taken(w[1:3]) == taken(torch.cat([w.flatten(), bias])) == "parameters"
    assert taken(torch.zeros(7)) == taken(torch.arange(6)) == taken(torch.arange(5.0, 0.0, -1.0)) == "constant"
    assert taken(w * 2) == taken(w @ w.t()) == taken(torch.cat([bias, bias])) == ""
    src = "W = torch.tensor([0.1, -2.5, 3])"
    written, tables = statecheck.literals(src), statecheck.sequences(src)

    def table(t):
        return statecheck.classify({"data": codec.raw_u8(t).clone(), "dtype": codec.dtype_name(t.dtype)}, ref,
                                   written, tables)

    assert table(torch.tensor([0.1, -2.5, 3.0])) == table(torch.tensor([0.1, -2.5, 3.0] * 4)) == "literals"
    assert table(torch.tensor([3, 3, 3], dtype=torch.int64)) == "constant"
    # the source's numbers in another order, or as the bits of something else, are not its table
    assert table(torch.tensor([0.1, 2.5, -2.5, 3.0, 0.1])) == table(torch.tensor([-2.5, 0.1, 3.0])) == ""
    bits = statecheck.sequences("B = [0, 1]")
    assert statecheck.classify({"data": codec.raw_u8(torch.tensor([0, 1, 1, 0, 1], dtype=torch.int8)).clone(),
                                "dtype": "int8"}, ref, frozenset({0.0, 1.0}), bits) == ""


def test_integer_tables_of_the_inputs_sizes_are_sizes_and_only_a_few_of_them():
    """A grouped GEMM's host tables (Triton's tutorial 08: per-group M, N, K and leading dimensions, int32):
    every value a size or stride of the problem's inputs, read from the traced call's input fingerprints.
    Other integers, floats, or more than SIZE_TABLES such storages in one record stay poisoned."""
    from distill.verifier import problemio, replaycheck

    prints = problemio.fingerprint([torch.zeros(4, 32, 48), torch.zeros(4, 48, 24), 0.5])
    sizes = statecheck.input_sizes(prints)
    assert sizes == {4, 32, 48, 24, 1, 1536, 1152}, sizes  # dims and contiguous strides; the float is no tensor
    assert statecheck.input_sizes(None) == statecheck.input_sizes(["torch.float32[]:x", 7]) == frozenset()

    def entry(t):
        return {"kind": "state", "data": codec.raw_u8(t).clone(), "dtype": codec.dtype_name(t.dtype)}

    g_sizes = torch.tensor([32, 24, 48] * 4, dtype=torch.int32)
    g_lds = torch.tensor([48, 24, 24] * 4, dtype=torch.int32)
    assert statecheck.classify(entry(g_sizes), {}, sizes=sizes) == statecheck.classify(entry(g_lds), {}, sizes=sizes) \
        == "sizes"
    assert statecheck.classify(entry(g_sizes), {}) == ""  # no input sizes known: poisoned as before
    assert statecheck.classify(entry(torch.tensor([32, 24, 47], dtype=torch.int32)), {}, sizes=sizes) == ""
    assert statecheck.classify(entry(torch.tensor([32.0, 24.0, 48.0])), {}, sizes=sizes) == ""
    many = torch.where(torch.arange(statecheck.LITERAL_LIMIT + 1) % 2 == 0, 48, 24)
    assert statecheck.classify(entry(many), {}, sizes=sizes) == ""  # past LITERAL_LIMIT values
    assert statecheck.classify(entry(many[:-1]), {}, sizes=sizes) == "sizes"
    n = statecheck.SIZE_TABLES
    record = {"storages": [entry(g_sizes.roll(i)) for i in range(n + 2)]}
    _, kinds, poisoned = replaycheck._state(record, {}, 1 << 30, frozenset(), frozenset(), sizes)
    assert kinds == ["sizes"] * n + ["poisoned"] * 2, kinds


def test_a_records_fills_together_claim_at_most_a_few_values():
    """One fill is a number only the worker reports; a folded weight kept as one one-element tensor per
    value passed as that many constants (fold_split_constants). Past CONSTANT_CLAIMS distinct values
    (0, +-1 and the source's literals free) the rest reach the replayer poisoned."""
    from distill.verifier import replaycheck

    def state(t):
        return {"kind": "state", "data": codec.raw_u8(t.contiguous()).clone(), "dtype": codec.dtype_name(t.dtype)}

    n = statecheck.CONSTANT_CLAIMS
    cells = [state(torch.full((1,), 0.5 + i)) for i in range(n + 4)]
    free = [state(torch.zeros(3)), state(torch.ones(1)), state(torch.full((2,), -1.0)), state(torch.full((1,), 0.1))]
    repeats = [state(torch.full((4,), 0.5)) for _ in range(3)]  # a value already claimed claims nothing more
    record = {"storages": free + cells[:n] + repeats + cells[n:]}
    _, kinds, poisoned = replaycheck._state(record, {}, 1 << 30, statecheck.literals("EPS = 0.1"))
    assert kinds == ["constant"] * (len(free) + n + len(repeats)) + ["poisoned"] * 4, kinds
    assert poisoned == ["a float32 tensor of 4 bytes"] * 4
    # which of many free fills holds 0 and which 1 is a bit each: past CONSTANT_STORAGES none is free
    m = statecheck.CONSTANT_STORAGES
    record = {"storages": [state(torch.full((1,), float(i % 2))) for i in range(m + 3)]}
    _, kinds, _ = replaycheck._state(record, {}, 1 << 30, frozenset())
    assert kinds == ["constant"] * m + ["poisoned"] * 3


# -- through a pool: whatever the worker says ---------------------------------------------------------------
def _forge_runs(monkeypatch, forge):
    """Every `run` reply of every worker rewritten by `forge` before the parent reads it: its calls' reports
    (each sent as its call ended, callstream.py) held back, gathered into `reply["calls"]` for `forge`,
    then handed to the parent in order."""
    real = procs.Proc.request

    def request(self, msg, *args, on_data=None, **kwargs):
        if msg.get("cmd") != "run":
            return real(self, msg, *args, on_data=on_data, **kwargs)
        held = []
        reply = real(self, msg, *args, on_data=held.append, **kwargs)
        reply["calls"] = [m["call"] for m in held if "call" in m]
        forge(reply)
        for m in held:
            on_data(m)
        return reply

    monkeypatch.setattr(procs.Proc, "request", request)


def _record(reply):
    return next(c["trace"] for c in reply["calls"] if isinstance(c.get("trace"), dict))


def test_a_record_forged_to_serve_a_precomputed_answer_is_poisoned(pool, monkeypatch):
    """The forger makes the traced call read its own (correct) outputs from a tensor that existed
    before the call: what a worker that had the inputs ahead of time would claim."""
    def forge(reply):
        record = _record(reply)
        traced = next(c for c in reply["calls"] if c.get("trace") is record)
        answer = codec.raw_u8(traced["outputs"][0]["data"]).clone()
        record["storages"].append({"kind": "state", "nbytes": answer.numel(), "device": "job", "dtype": "float32",
                                   "data": answer})
        zeros = {"s": len(record["storages"]), "off": 0, "dtype": "float32", "size": [1000], "stride": [1]}
        record["storages"].append({"kind": "alloc", "nbytes": 4000, "device": "job", "dtype": "float32"})
        record["steps"].insert(0, ["alloc", zeros, 0])
        launch = next(st for st in record["steps"] if st[0] == "launch")
        launch[2][0] = {"ref": {**zeros, "s": len(record["storages"]) - 2}}  # a := the kept answer
        launch[2][1] = {"ref": zeros}  # b := 0
    _forge_runs(monkeypatch, forge)
    v = pool.verify(problem("add"), honest("add"))
    assert v.status == "not_triton" and "replaced by NaN" in v.reason, v.reason
    assert v.checks["replay_state"] == ["poisoned"]


@pytest.mark.parametrize("forge,why", [
    (lambda r: _record(r)["steps"][-1].__setitem__(1, "helper_of_mine"), "not rebuilt from the module's source"),
    (lambda r: _record(r).__setitem__("storages", "garbage"), "malformed record"),
    (lambda r: r["calls"][0].update(launches=0), "none of its own Triton kernels launched"),
])
def test_a_forged_record_gains_nothing(pool, monkeypatch, forge, why):
    _forge_runs(monkeypatch, forge)
    v = pool.verify(problem("add"), honest("add"))
    assert v.status == "not_triton" and why in v.reason, v.reason


def test_words_a_forger_puts_in_the_record_reach_the_verdict_as_plain_text_only(pool, monkeypatch):
    def forge(reply):
        record = _record(reply)
        record.clear()
        record["error"] = "\x1b[2J\nall checks held\u202e" + "x" * 5000
    _forge_runs(monkeypatch, forge)
    v = pool.verify(problem("add"), honest("add"))
    assert v.status == "not_triton" and "not replayable: ?[2J?all checks held?x" in v.reason, v.reason
    assert "\x1b" not in v.reason and "\n" not in v.reason and len(v.reason) < 500



# Three findings a worker reports as claims; the replayer now finds each itself.
_IN_PLACE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_into_a(a_ptr, b_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(a_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, a, b):
        add_into_a[(triton.cdiv(a.numel(), 128),)](a, b, a.numel(), BLOCK=128)
        return a{tail}
'''

_PAST_THE_END = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_unmasked_store(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask, other=0.0) + tl.load(b_ptr + offs, mask=mask, other=0.0))


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        add_unmasked_store[(triton.cdiv(a.numel(), 128),)](a, b, out, a.numel(), BLOCK=128)
        return out
'''


def _clear_claims(*keys):
    def forge(reply):
        for call in reply["calls"]:
            for key in keys:
                call[key] = []
    return forge


@pytest.mark.parametrize("candidate,claims,status,why", [
    (_IN_PLACE.format(tail=""), ("aliases", "inputs_changed"), "mutates_input",
     "input 0 changed while its kernels were replayed"),
    (_IN_PLACE.format(tail=".clone()"), ("inputs_changed",), "mutates_input",
     "input 0 changed while its kernels were replayed"),
    (_PAST_THE_END, ("out_of_bounds",), "runtime_error", "byte(s) of alloc storage"),
])
def test_what_a_forger_clears_from_its_reports_the_replay_finds_itself(pool, monkeypatch, candidate, claims, status, why):
    """The worker's reports say no input changed, no output is an input, no store went past a buffer;
    the replayer's run of the record finds each, so the forged report gains nothing."""
    _forge_runs(monkeypatch, _clear_claims(*claims))
    v = pool.verify(problem("add"), candidate)
    assert v.status == status and why in v.reason, (v.status, v.reason)


def test_an_honest_replay_finds_nothing_past_its_buffers_or_in_its_inputs():
    a, b = torch.randn(100), torch.randn(100)
    trace, out = _traced_add(a, b)
    program = replay.Program(_wire(serialise(trace, [a, b], [out], torch.device("cpu"))), frozenset({"add_k"}), 1 << 30)
    inputs = [torch.randn(100), torch.randn(100)]
    done = program.run(inputs, {"add_k": add_k}, torch.device("cpu"), False, _launch)
    program.audit(done, inputs)
    assert (done.out_of_bounds, done.inputs_changed, done.aliases) == ([], [], [])


def test_a_replayed_output_that_is_an_input_and_a_store_into_an_input_are_found():
    a, b = torch.randn(100), torch.randn(100)
    trace = [("launch", add_k, (a, b, a, a.numel()), (triton.cdiv(a.numel(), 64),), {"BLOCK": 64}, True)]
    program = replay.Program(_wire(serialise(trace, [a, b], [a], torch.device("cpu"))), frozenset({"add_k"}), 1 << 30)
    inputs = [torch.randn(100), torch.randn(100)]
    done = program.run(inputs, {"add_k": add_k}, torch.device("cpu"), False, _launch)
    program.audit(done, inputs)
    assert done.aliases == ["output 0 is the memory of input 0"] and done.inputs_changed == [0]
    assert torch.equal(done.outputs[0], inputs[0] + inputs[1]) and done.out_of_bounds == []

GLOBAL_FROM_A_FUNCTION = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


def pick_block():
    return 256


BLOCK = tl.constexpr(pick_block())


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, a, b):
        out = torch.empty_like(a)
        add_kernel[(triton.cdiv(a.numel(), 256),)](a, b, out, a.numel())
        return out
'''


def test_what_the_replay_cannot_rebuild_says_what_to_change(pool):
    """A constexpr computed by a plain function at import compiles in the worker; the kernels module
    leaves it out (it would run candidate code), and the verdict says so."""
    v = pool.verify(problem("add"), GLOBAL_FROM_A_FUNCTION)
    assert v.status == "not_triton", v.reason
    assert "not replayable: BLOCK is not in the kernels module" in v.reason and "calls something" in v.reason


def test_a_replayer_never_loads_a_candidate(pool):
    proc = pool.fleet.acquire_replayer(0)
    try:
        reply = proc.request({"cmd": "load", "source": honest("add"), "problem": problem("add"), "seeds": []}, 30,
                             "load")
        assert "does not serve load" in reply["error"]["message"]
    finally:
        pool.fleet.release_replayer(0, proc, False)


def test_a_bound_record_alternates_input_sets_on_memory_allocated_once():
    """What a replayer times (replayer.time_replay, GPU only): the steps on memory allocated once,
    inputs placed untimed between calls, no poison fill a fresh torch.empty never had."""
    a, b = torch.randn(100), torch.randn(100)
    trace, out = _traced_add(a, b)
    program = replay.Program(_wire(serialise(trace, [a, b], [out], torch.device("cpu"))), frozenset({"add_k"}), 1 << 30)
    bound = bound_mod.bind(program, torch.device("cpu"))
    sets = [[torch.randn(100), torch.randn(100)] for _ in range(2)]
    for i in range(4):
        bound.load(sets[i % 2])
        got = bound.call({"add_k": add_k}, _launch)
        assert torch.equal(got[0], sets[i % 2][0] + sets[i % 2][1])
    assert got[0].untyped_storage().data_ptr() == bound.call({"add_k": add_k}, _launch)[0].untyped_storage().data_ptr()


@triton.jit
def cached_add_k(a_ptr, b_ptr, out_ptr, memo_ptr, n, BLOCK: tl.constexpr):
    """out = a + b, remembered in `memo` (forward's own `torch.empty` scratch): once memo holds a's first
    value in its last slot, it serves memo's copy instead of adding (a cache keyed by the input's content)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    key = tl.load(a_ptr)
    hit = tl.load(memo_ptr + n) == key
    fresh = a + tl.load(b_ptr + offs, mask=mask)
    val = tl.where(hit, tl.load(memo_ptr + offs, mask=mask), fresh)
    tl.store(out_ptr + offs, val, mask=mask)
    tl.store(memo_ptr + offs, val, mask=mask)
    tl.store(memo_ptr + n, key)


def test_a_bound_record_remakes_its_memory_between_timed_calls():
    """A cache a kernel keeps in forward's own scratch (memory allocated once in timing, input sets
    alternating) must not survive to the next timed call: every load remakes the storages as fresh
    memory is made, so the second call on a set with the same first value but other data is right."""
    a, b = torch.randn(100), torch.randn(100)
    out = torch.empty_like(a).fill_(float("nan"))
    memo = torch.empty(101).fill_(float("nan"))
    trace = [("op", torch.ops.aten.empty_like.default, (a,), {}, out),
             ("op", torch.ops.aten.empty.memory_format, ([101],), {}, memo),
             ("launch", cached_add_k, (a, b, out, memo, 100), (1,), {"BLOCK": 128}, True)]  # one program: no race
    record = _wire(serialise(trace, [a, b], [out], torch.device("cpu")))
    program = replay.Program(record, frozenset({"cached_add_k"}), 1 << 30)
    bound = bound_mod.bind(program, torch.device("cpu"))
    first = [torch.randn(100), torch.randn(100)]
    second = [first[0].clone(), torch.randn(100)]  # the same key, other data: a stale cache hits
    bound.load(first)
    bound.call({"cached_add_k": cached_add_k}, _launch)
    bound.load(second)
    got = bound.call({"cached_add_k": cached_add_k}, _launch)
    assert torch.equal(got[0], second[0] + second[1])


def _closure_launches(reply):
    return [st for st in _record(reply)["steps"] if st[0] == "launch" and len(st) == 6]


@pytest.mark.parametrize("forge,why", [
    # the factory's scale claimed as 1.0 where it closed over 0.5: the replay runs what was claimed
    (lambda r: _closure_launches(r)[0][5].__setitem__("SCALE", ["constexpr", 1.0]), "give wrong outputs"),
    (lambda r: _closure_launches(r)[0][5].pop("act"), "closed-over names that are not its own"),
    (lambda r: _closure_launches(r)[0][5].__setitem__("act", ["kernel", "make_kernel"]), "not rebuilt"),
    (lambda r: _closure_launches(r)[0][5].__setitem__("act", ["value", "__import__('os').system('x')"]), "failed"),
    (lambda r: _closure_launches(r)[0][5].__setitem__("SCALE", ["dtype", "fp32; import os"]), "malformed"),
    (lambda r: _closure_launches(r)[0].pop(), "closed-over names that are not its own"),
])
def test_what_a_factory_kernel_closed_over_is_a_claim_that_gains_nothing(pool, monkeypatch, forge, why):
    """A kernel made by a factory is replayed with the values its launches say it closed over: typed data
    the replayer binds, never text; a wrong claim changes only what the replay runs."""
    honest_v = pool.verify(problem("factory_closure_act"), honest("factory_closure_act"))
    assert honest_v.status == "pass", honest_v.reason
    _forge_runs(monkeypatch, forge)
    v = pool.verify(problem("factory_closure_act"), honest("factory_closure_act"))
    assert v.status == "not_triton" and why in v.reason, v.reason



def test_a_bound_record_restores_state_from_its_kept_copy_and_reports_one_that_changed():
    """Timing restores each state storage from a copy kept where it lives (a 4.3 GB weight from the host
    at every load was 57 s of a 320 s job); a store that reached that copy would reach every later load,
    so the copy is compared with the record's bytes after the timed calls."""
    a, w = torch.randn(100), torch.randn(100)
    trace, out = _traced_add(a, None, extra_state=w)
    record = _wire(serialise(trace, [a], [out], torch.device("cpu")))
    program = replay.Program(record, frozenset({"add_k"}), 1 << 30)
    bound = bound_mod.bind(program, torch.device("cpu"))
    x = torch.randn(100)
    bound.load([x])
    assert torch.equal(bound.call({"add_k": add_k}, _launch)[0], x + w)
    assert bound.kept_changed() == []
    kept = [k for k in bound.kept if k is not None]
    state = [s for s in program.storages if s["kind"] == "state"]
    assert len(kept) == len(state) == 1 and kept[0].data_ptr() != state[0]["data"].data_ptr()
    kept[0].view(torch.float32)[7] = 1e6  # what a far store into the kept copy does
    bound.load([x])
    assert not torch.equal(bound.call({"add_k": add_k}, _launch)[0], x + w)
    assert bound.kept_changed() and "changed while they ran" in bound.kept_changed()[0]


@pytest.mark.gpu
def test_gpu_a_bound_record_keeps_its_state_on_the_device_and_finds_a_changed_copy():
    """On a GPU the timing's state restore reads a device copy (bound.py), not the host's bytes; the steps
    are not run here (no kernel launch: the suite imports kernels under TRITON_INTERPRET=1)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    dev = torch.device("cuda")
    a, w = torch.randn(1 << 20, device=dev), torch.randn(1 << 20, device=dev)
    trace, out = _traced_add(a, None, extra_state=w)
    program = replay.Program(_wire(serialise(trace, [a], [out], dev)), frozenset({"add_k"}), 1 << 30)
    bound = bound_mod.bind(program, dev)
    sid = [s["kind"] for s in program.storages].index("state")
    kept = bound.kept[sid]
    assert kept is not None and kept.device.type == "cuda" and program.storages[sid]["data"].device.type == "cpu"

    def state_now() -> torch.Tensor:
        raw = torch.empty(0, dtype=torch.uint8, device=dev).set_(bound.mem[sid])
        return raw[replay.BAND:replay.BAND + program.storages[sid]["nbytes"]].view(torch.float32)

    bound.load([torch.randn(1 << 20, device=dev)])
    assert torch.equal(state_now(), w) and bound.kept_changed() == []
    kept.view(torch.float32)[12345] = 7.0
    bound.load([torch.randn(1 << 20, device=dev)])
    assert state_now()[12345].item() == 7.0 and "changed while they ran" in bound.kept_changed()[0]
