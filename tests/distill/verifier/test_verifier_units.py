"""Trusted-side building blocks: the wire codec, tolerances, the Verdict record, op classification."""
from __future__ import annotations

import json
import math
import os
import time

import pytest
import torch

from distill.verifier import STATUSES, Verdict, codec, policy, tolerance


def test_codec_roundtrips_every_supported_dtype_and_structure():
    msg = {"a": [1, 2.5, float("nan"), None, True, "s"], "t": (b"raw",),
           "x": [torch.randn(3, 4), torch.arange(5), torch.tensor(3.0), torch.zeros(0, 2),
                 torch.randn(2).to(torch.bfloat16), torch.tensor([True, False]), torch.randn(2, dtype=torch.complex64)]}
    out = codec.decode(codec.encode(msg))
    assert out["t"] == (b"raw",) and math.isnan(out["a"][2]) and out["a"][3:] == [None, True, "s"]
    for a, b in zip(msg["x"], out["x"]):
        assert a.dtype == b.dtype and a.shape == b.shape and tolerance.bitwise_equal(a, b)


_DEEP = b"[" * 100_000 + b"]" * 100_000  # past json's own recursion limit
_RANKED = json.dumps({"__tensor__": 0, "dtype": "float32", "shape": [1] * 65}).encode()


@pytest.mark.parametrize("blob", [b"", b"\x00" * 3, b"\xff\xff\xff\x7f\x00\x00\x00\x00",
                                  codec.encode({"k": 1})[:-1] + b"}x",
                                  len(_DEEP).to_bytes(4, "little") + bytes(4) + _DEEP,
                                  len(_RANKED).to_bytes(4, "little") + (1).to_bytes(4, "little") + _RANKED
                                  + (4).to_bytes(8, "little") + bytes(4)],
                         ids=["empty", "short", "huge_header", "trailing", "nested_past_recursion", "rank_65"])
def test_codec_rejects_malformed_bytes(blob):
    with pytest.raises(codec.CodecError):
        codec.decode(blob)


def test_codec_rejects_lying_tensor_headers():
    good = codec.encode({"t": torch.ones(4)})
    hlen = int.from_bytes(good[:4], "little")
    header = json.loads(good[8:8 + hlen])
    header["__dict__"]["t"]["shape"] = [5]
    bad_header = json.dumps(header).encode()
    forged = len(bad_header).to_bytes(4, "little") + good[4:8] + bad_header + good[8 + hlen:]
    with pytest.raises(codec.CodecError, match="size mismatch"):
        codec.decode(forged)
    header["__dict__"]["t"].update(shape=[4], dtype="object")
    bad_header = json.dumps(header).encode()
    with pytest.raises(codec.CodecError, match="bad tensor header"):
        codec.decode(len(bad_header).to_bytes(4, "little") + good[4:8] + bad_header + good[8 + hlen:])


def test_codec_arena_carries_tensor_bytes_beside_the_message(tmp_path):
    path = str(tmp_path / "arena")
    child = codec.Arena(path, 1 << 20, create=True)
    parent = codec.Arena(path, 1 << 20)
    msg = {"x": [torch.randn(3, 4), torch.arange(5), torch.tensor(3.0), torch.zeros(0, 2),
                 torch.randn(2).to(torch.bfloat16), torch.tensor([True, False]), torch.randn(2, dtype=torch.complex64)]}
    data = codec.encode(msg, child)
    assert len(data) < 1000 and b"__arena__" in data  # bytes went to the arena, not into the message
    out = codec.decode(data, parent)
    for a, b in zip(msg["x"], out["x"]):
        assert a.dtype == b.dtype and a.shape == b.shape and tolerance.bitwise_equal(a, b)
    child.buf.fill_(7)  # the child writing after the parent took its copy changes nothing
    assert all(tolerance.bitwise_equal(a, b) for a, b in zip(msg["x"], out["x"]))
    # Without the parent's arena an arena reference is malformed, and so is an offset out of bounds.
    with pytest.raises(codec.CodecError):
        codec.decode(data)
    header = json.loads(data[8:8 + int.from_bytes(data[:4], "little")])
    header["__dict__"]["x"][0]["__arena__"] = 1 << 20  # 48 bytes past the end
    forged = json.dumps(header).encode()
    with pytest.raises(codec.CodecError, match="arena offset"):
        codec.decode(len(forged).to_bytes(4, "little") + data[4:8] + forged + data[8 + int.from_bytes(data[:4], "little"):], parent)
    # A tensor bigger than what is left travels inline, and still decodes.
    child.reset()
    big = torch.randn(300_000)
    out = codec.decode(codec.encode({"big": big, "small": torch.ones(2)}, child), parent)
    assert tolerance.bitwise_equal(out["big"], big) and out["small"].tolist() == [1.0, 1.0]


def test_codec_arena_overflow_carries_what_the_arena_cannot_and_frees_its_pages(tmp_path):
    """A tensor past the arena goes to its overflow file (not inline: no copies of it in the message),
    decodes bit for bit as a private copy; its pages stay for the command's next message, written over
    them from the start, and leave the file when the command's reply is read (`settle`)."""
    over, path = str(tmp_path / "overflow"), str(tmp_path / "arena")
    child = codec.Arena(path, 1 << 12, create=True, overflow=codec.Arena(over, 1 << 30, create=True, align=codec.Arena.PAGE))
    parent = codec.Arena(path, 1 << 12, overflow=codec.Arena(over, 1 << 30, align=codec.Arena.PAGE))
    big, second, small = torch.randn(1 << 20), torch.arange(3000, dtype=torch.int64), torch.ones(2)
    data = codec.encode({"big": big, "second": second, "small": small}, child)
    assert len(data) < 1000 and data.count(b"__arena__") == 3
    assert os.stat(over).st_blocks * 512 >= big.numel() * 4  # written to the file
    out = codec.decode(data, parent)
    assert tolerance.bitwise_equal(out["big"], big) and tolerance.bitwise_equal(out["second"], second)
    assert out["small"].tolist() == [1.0, 1.0]
    kept = os.stat(over).st_blocks * 512
    assert kept >= big.numel() * 4 and parent.overflow.resident >= big.numel() * 4  # kept for the next message
    child.overflow.buf[: big.numel() * 4].fill_(7)  # the child writing after the parent took its copy changes nothing
    assert tolerance.bitwise_equal(out["big"], big)
    child.reset()  # the next message of the command (after its ack) lands on the same pages
    again = codec.decode(codec.encode({"big": -big}, child), parent)
    assert tolerance.bitwise_equal(again["big"], -big) and os.stat(over).st_blocks * 512 <= kept
    parent.settle()  # the command's reply was read
    assert os.stat(over).st_blocks * 512 < 64 << 10 and parent.overflow.resident == 0
    # A reply the parent never read (its child died mid-message) is freed by `release`.
    child.reset()
    codec.encode({"big": big}, child)
    assert os.stat(over).st_blocks * 512 >= big.numel() * 4
    parent.release()
    assert os.stat(over).st_blocks * 512 < 64 << 10
    # An overflow offset that is not on a page, or past the file, is malformed.
    header = json.loads(data[8:8 + int.from_bytes(data[:4], "little")])
    for bad in ((1 << 12) + 8, (1 << 12) + (1 << 30)):
        header["__dict__"]["big"]["__arena__"] = bad
        forged = json.dumps(header).encode()
        with pytest.raises(codec.CodecError, match="arena offset"):
            codec.decode(len(forged).to_bytes(4, "little") + data[4:8] + forged + data[8 + int.from_bytes(data[:4], "little"):],
                         parent)


def test_codec_never_encodes_tensor_subclasses():
    class Sub(torch.Tensor):
        pass

    with pytest.raises(codec.CodecError):
        codec.encode({"x": torch.ones(2).as_subclass(Sub)})


def test_tf32_level_error_passes_float32_and_bf16_level_fails():
    torch.manual_seed(0)
    a, b = torch.randn(128, 512), torch.randn(512, 96)
    ref = a.double() @ b.double()

    def round_mantissa(x, bits):
        drop = 23 - bits
        i = x.view(torch.int32)
        return ((i + (1 << (drop - 1))) & ~((1 << drop) - 1)).view(torch.float32)

    tf32 = (round_mantissa(a, 10).double() @ round_mantissa(b, 10).double()).float()
    bf16 = (round_mantissa(a, 7).double() @ round_mantissa(b, 7).double()).float()
    assert tolerance.compare(tf32, ref.float())[0]
    ok, info = tolerance.compare(bf16, ref.float())
    assert not ok and info["norm_rel_err"] > tolerance.TOLERANCES[torch.float32].norm_rel


def test_nonfinite_values_must_match_the_reference_exactly():
    ref = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    assert tolerance.compare(ref.clone(), ref)[0]
    assert not tolerance.compare(torch.tensor([1.0, 0.0, float("inf"), 2.0]), ref)[0]
    assert not tolerance.compare(torch.tensor([1.0, float("nan"), float("inf"), float("nan")]), ref)[0]
    assert not tolerance.compare(torch.tensor([1.0, float("nan"), -float("inf"), 2.0]), ref)[0]


def test_one_bad_element_fails_even_when_the_norm_is_fine():
    ref = torch.randn(10000)
    out = ref.clone()
    out[17] += 0.1
    ok, info = tolerance.compare(out, ref)
    assert not ok and info["elements_out_of_tol"] == 1 and info["norm_rel_err"] < 2e-3


def test_integers_compare_exactly_and_bitwise_sees_nan_payloads():
    assert not tolerance.compare(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]))[0]
    a = torch.tensor([float("nan")])
    b = a.view(torch.int32).add(1).view(torch.float32)
    assert tolerance.bitwise_equal(a, a.clone()) and not tolerance.bitwise_equal(a, b)


def test_determinism_tolerance_is_tighter_than_correctness():
    ref = torch.randn(1000)
    noisy = ref * (1 + 5e-4 * (torch.rand(1000) - 0.5))
    assert tolerance.compare(noisy, ref)[0]
    assert not tolerance.compare(noisy, ref, det=True)[0]


def test_verdict_has_the_design_fields_and_rejects_unknown_statuses():
    v = Verdict("pass", "ok")
    d = v.to_dict()
    for key in ("status", "reason", "checks", "device", "ref_eager_ms", "ref_compile_ms", "kernel_ms",
                "speedup_eager", "speedup_compile", "versions"):
        assert key in d
    assert Verdict.from_dict(json.loads(json.dumps(d))) == v
    assert len(STATUSES) == 14
    with pytest.raises(ValueError):
        Verdict("passed")


@pytest.mark.parametrize("op,compute", [("aten::empty_like", False), ("aten::view", False), ("aten::clone", False),
                                        ("aten::add", True), ("aten::mm", True), ("aten::_to_copy", False),
                                        ("aten::_to_copy(float32->float16)", True), ("aten::_local_scalar_dense", True),
                                        ("profiler::_record_function_enter_new", False),
                                        ("profiler::_record_function_exit", False), ("profiler::_bad", True)])
def test_op_classification(op, compute):
    assert policy.is_compute(op) is compute


def _timing_rep(times, launches, outputs):
    return {"error": None, "times_ms": times, "launches": launches, "aten": {}, "blocked": {}, "denials": [],
            "checked": {"4": {"set": 0, "problem": "", "outputs": outputs}}}


def test_timing_judge_floor_replay_instability_and_timed_outputs():
    from distill.verifier import judge

    ref = torch.randn(64)
    sets = [{"outputs": [ref], "sequence": False}, {"outputs": [ref], "sequence": False}]
    ok, info = judge.judge_timing(_timing_rep([1.0] * 20, 20, [ref.clone()]), sets, "cuda", 1, 20, 0.5)
    assert ok.status is None and info["kernel_ms"] == 1.0
    assert judge.judge_timing(_timing_rep([0.1] * 20, 20, [ref]), sets, "cuda", 1, 20, 0.5)[0].status == "timing_invalid"
    assert judge.judge_timing(_timing_rep([1.0] * 20, 3, [ref]), sets, "cuda", 1, 20, 0.5)[0].status == "timing_invalid"
    unstable = [1.0] * 10 + [3.0] * 10
    assert judge.judge_timing(_timing_rep(unstable, 20, [ref]), sets, "cuda", 1, 20, 0.5)[0].status == "timing_invalid"
    assert judge.judge_timing(_timing_rep([1.0] * 20, 20, [ref + 1]), sets, "cuda", 1, 20, 0.5)[0].status \
        == "wrong_output"
    unbuilt = {**_timing_rep([], 0, []), "error": "not replayable: loading the kernels module failed: ..."}
    found = judge.judge_timing(unbuilt, sets, "cuda", 1, 20, 0.5)[0]   # a replayer's text, not a failure dict
    assert found.status == "timing_invalid" and "did not start" in found.reason


def test_reference_timing_fills_speedups_and_flags_big_ones():
    from distill.verifier.refwork import apply_ref_timing

    v = apply_ref_timing(Verdict("pass", kernel_ms=0.5, device="cuda"), {"eager_ms": 1.0, "compile_ms": 0.75})
    assert v.speedup_eager == 2.0 and v.speedup_compile == 1.5 and "flag" not in v.checks["timing"]
    v = apply_ref_timing(Verdict("pass", kernel_ms=0.05, device="cuda"), {"eager_ms": 1.0, "compile_ms": None})
    assert v.speedup_eager == 20.0 and v.speedup_compile is None and "10x" in v.checks["timing"]["flag"]


def test_timing_gate_pauses_every_other_process_group_and_resumes_them():
    import subprocess
    import sys

    from distill.verifier.gate import TimingGate

    def state(pid):
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]

    kids = [subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"],
                             start_new_session=True) for _ in range(2)]
    def stopped_within(pid, seconds):  # a stop lands at the target's next scheduling: late on a loaded box
        deadline = time.monotonic() + seconds
        while state(pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        return state(pid) == "T"

    try:
        gate = TimingGate(lambda: [k.pid for k in kids])
        with gate.quiet(keep=kids[0].pid):
            assert stopped_within(kids[1].pid, 20) and state(kids[0].pid) != "T"
        assert state(kids[1].pid) != "T" and gate.paused_s > 0
        assert gate.stats["timings"] == 1 and 0 < gate.stats["stop_s"] <= gate.stats["held_s"]
    finally:
        for k in kids:
            k.kill()
            k.wait()


def test_timing_gate_keeps_the_parents_threads_off_the_timing_core():
    import os
    import threading

    from distill.verifier.gate import TimingGate

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    core = cores[-1]
    seen: dict[str, set] = {}
    inside, done = threading.Event(), threading.Event()

    def bystander():  # a thread of the parent that is not the one timing
        inside.wait()
        seen["during"] = os.sched_getaffinity(0)
        done.set()

    t = threading.Thread(target=bystander)
    t.start()
    gate = TimingGate(lambda: [], core=core)
    with gate.quiet(keep=0):
        seen["main"] = os.sched_getaffinity(0)
        inside.set()
        done.wait(5)
    t.join()
    assert core not in seen["during"] and core not in seen["main"]
    assert core in os.sched_getaffinity(0)  # restored


def test_inputs_reported_unlike_the_references_are_the_candidates_doing():
    """Screening makes a problem's inputs twice from one seed (screen.py), so a worker whose inputs'
    fingerprints differ from the reference's was changed by its candidate: `forbidden`, never a
    ProblemError that would drop the sample instead of judging it."""
    from distill.verifier import judge

    trials = [{"fingerprint": ["torch.float32[4]:1:2"], "outputs": [torch.zeros(4)], "sequence": False}]
    same = judge.judge_calls({"fingerprints": [["torch.float32[4]:1:2"]], "calls": []}, trials, "cpu")
    assert same.status is None
    other = judge.judge_calls({"fingerprints": [["torch.float32[4]:9:9"]], "calls": []}, trials, "cpu")
    assert other.status == "forbidden" and "inputs differ" in other.reason


def test_a_slow_call_is_timed_fewer_times_within_bounds():
    """timing.trials_for: as many trials as fit TIMED_S, never under MIN_TRIALS nor over the pool's count;
    an unknown or nonsensical call time keeps the pool's count."""
    from distill.verifier import timing

    assert timing.trials_for(0.150, 100) == timing.MIN_TRIALS  # a 150 ms kernel at KernelBench's sizes
    assert timing.trials_for(0.020, 100) == int(timing.TIMED_S / 0.020) + 1
    assert timing.trials_for(1e-5, 100) == 100
    assert timing.trials_for(5.0, 4) == 4  # a pool asking fewer than the floor keeps its count
    for unknown in (None, 0.0, -1.0, float("nan"), float("inf")):
        assert timing.trials_for(unknown, 100) == 100


def test_a_state_digest_is_the_sha256_of_its_bytes_whether_hashed_whole_or_in_slices(monkeypatch):
    """statecheck._digest hashes a device tensor through one reused host buffer, slice by slice (a whole
    host copy per digest was most of a 4.3 GB weight's reference profile); the digest must not change,
    since the parent compares the worker's bytes hashed whole with the reference's hashed in slices."""
    import hashlib

    from distill.verifier import statecheck

    monkeypatch.setattr(statecheck, "DIGEST_SLICE", 1000)  # 250 int32 a slice: 50 slices and a short one
    b = torch.randint(-2 ** 31, 2 ** 31 - 1, (12345,), dtype=torch.int32)
    assert statecheck._digest("int32", b) == "int32:" + hashlib.sha256(b.numpy().tobytes()).hexdigest()
    strided = b[::3]  # not contiguous: the sliced path
    assert statecheck._digest("int32", strided) == "int32:" + hashlib.sha256(strided.contiguous().numpy().tobytes()).hexdigest()
    changed = strided.clone()
    changed[-1] += 1  # in the last, short slice
    assert statecheck._digest("int32", changed) != statecheck._digest("int32", strided)


def test_codec_parent_copies_land_in_reused_memory_never_over_a_held_tensor(tmp_path, monkeypatch):
    """The parent's copies out of the arena (over LANDING_MIN) land in a buffer an earlier take used once
    every tensor over it was dropped: the pages are kept, not faulted in again per call. A buffer some
    tensor (or a view of one) still holds is never written over; past LANDING_KEEP buffers a take clones;
    `settle` lets them all go, and what a judge kept keeps its values through all of it."""
    monkeypatch.setattr(codec, "LANDING_MIN", 1 << 12)
    over, path = str(tmp_path / "overflow"), str(tmp_path / "arena")
    child = codec.Arena(path, 1 << 12, create=True, overflow=codec.Arena(over, 1 << 30, create=True, align=codec.Arena.PAGE))
    parent = codec.Arena(path, 1 << 12, overflow=codec.Arena(over, 1 << 30, align=codec.Arena.PAGE))

    def trip(x: torch.Tensor) -> torch.Tensor:
        child.reset()
        return codec.decode(codec.encode({"x": x}, child), parent)["x"]

    draws = [torch.randn(1 << 16) for _ in range(5)]
    first = trip(draws[0])
    where = first.data_ptr()
    del first
    again = trip(draws[1])  # the first was dropped: the same pages, the new values
    assert again.data_ptr() == where and tolerance.bitwise_equal(again, draws[1])
    held = again[5:9]  # a view holds the buffer as the whole tensor would
    del again
    third = trip(draws[2])
    assert third.data_ptr() != where and tolerance.bitwise_equal(third, draws[2])
    fourth = trip(draws[3])  # both kept buffers held: a clone, the landing stays at its cap
    assert len(parent.overflow.landing) == codec.LANDING_KEEP and tolerance.bitwise_equal(fourth, draws[3])
    assert tolerance.bitwise_equal(held, draws[1][5:9])
    child.overflow.buf[: 1 << 18].fill_(7)  # the child writing after the parent's copies changes none of them
    assert tolerance.bitwise_equal(third, draws[2]) and tolerance.bitwise_equal(fourth, draws[3])
    parent.settle()
    assert parent.overflow.landing == [] and tolerance.bitwise_equal(held, draws[1][5:9])
    small = torch.randn(100)  # under LANDING_MIN: a clone, nothing kept
    assert tolerance.bitwise_equal(trip(small), small) and parent.landing == [] == parent.overflow.landing
