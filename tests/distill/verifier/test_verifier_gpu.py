"""The GPU lane (`-m gpu`, run through the device tool): timing, CUDA faults and the timing attacks.

Never collected in CI (no GPU there); every test asserts an exact status like the CPU suite.
"""
from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.distill.verifier.conftest import MANIFEST, honest, hostile, problem

pytestmark = pytest.mark.gpu

HONEST = ["add", "softmax", "matmul", "linear_relu", "cross_entropy", "scale_rowmax", "transpose_add"]
GPU_CASES = [c for c in MANIFEST["cases"] if c.get("lane") == "gpu" or c["family"] == "timing"]
# The whole CPU suite, to show the same defences hold with CUDA in the worker (run-time layers
# only: static_checks=False). Not forge_pipe_message: it writes into every descriptor, which on a
# GPU includes the driver's.
ALSO = [c["name"] for c in MANIFEST["cases"] if c.get("lane", "cpu") == "cpu" and c["name"] != "forge_pipe_message"]


@pytest.fixture(scope="module")
def gpu_pool():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from distill.verifier import VerifierPool

    with VerifierPool(workers=8, device="cuda", timeout=120, timing_trials=50) as p:
        yield p


@pytest.mark.parametrize("name", HONEST)
def test_honest_controls_pass_and_are_timed(gpu_pool, name):
    v = gpu_pool.verify(problem(name), honest(name))
    assert v.status == "pass", v.reason
    assert v.device == "cuda" and v.versions["gpu"]
    assert v.kernel_ms > 0 and v.ref_eager_ms > 0 and v.speedup_eager > 0
    t = v.checks["timing"]
    assert t["samples"] == 50 and t["kernel_ms"] >= 0.9 * t["floor_ms"]
    assert t["peaks"]["bandwidth_bytes_per_s"] > 1e11 and t["peaks"]["peak_flops"] > 1e13
    ph = v.checks["phase_s"]  # a replayer times (the default): the gate it held, inside `timed`
    assert t["timed_in"] == "replayer" and 0 < ph["timing.gate"] <= ph["timed"], ph


@pytest.mark.parametrize("timing", ["eager", "off"])
def test_timing_baselines_are_a_choice(timing):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from distill.verifier import VerifierPool

    with VerifierPool(workers=1, device="cuda", timeout=120, timing_trials=20, timing=timing) as pool:
        v = pool.verify(problem("add"), honest("add"))
    assert v.status == "pass" and v.checks["baselines"] == timing, v.reason
    assert v.ref_compile_ms is None and v.speedup_compile is None  # torch.compile never ran
    if timing == "eager":
        assert v.kernel_ms > 0 and v.ref_eager_ms > 0 and v.speedup_eager > 0
    else:
        assert v.kernel_ms is None and v.ref_eager_ms is None and v.speedup_eager is None


@pytest.fixture(scope="module")
def hostile_verdicts(gpu_pool):
    """Every hostile case of this module (run-time layers only), each followed on its thread by an honest
    `add` that must still pass: eight at a time, since one at a time the module took ~15 s a case."""
    def one(name: str):
        case = next(c for c in MANIFEST["cases"] if c["name"] == name)
        v = gpu_pool.verify(problem(case["problem"]), hostile(name), static_checks=False)
        return v, gpu_pool.verify(problem("add"), honest("add"))

    names = sorted({c["name"] for c in GPU_CASES} | set(ALSO))
    with ThreadPoolExecutor(max_workers=8) as ex:
        return dict(zip(names, ex.map(one, names)))


def _expect(hostile_verdicts, name: str) -> None:
    case = next(c for c in MANIFEST["cases"] if c["name"] == name)
    v, after = hostile_verdicts[name]
    # the pool times in a replayer; a GPU refuses some CPU-lane attacks its own way (numpy cannot view device memory)
    expected = case.get("gpu", case.get("replayer", case.get("runtime", case["status"])))
    assert v.status == expected, f"{name}: {v.status}: {v.reason}"
    assert after.status == "pass", after.reason


@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c["name"])
def test_timing_and_fault_cases(hostile_verdicts, case):
    _expect(hostile_verdicts, case["name"])


def test_side_stream_work_is_inside_the_timed_window(gpu_pool):
    plain = gpu_pool.verify(problem("add"), honest("add"))
    side = gpu_pool.verify(problem("add"), hostile("side_stream"))
    assert side.status == "pass"
    # twenty launches on a side stream cannot look cheaper than one on the default stream
    assert side.kernel_ms > plain.kernel_ms


@pytest.mark.parametrize("name", ALSO)
def test_cpu_suite_on_gpu(hostile_verdicts, name):
    _expect(hostile_verdicts, name)


def test_same_kernel_timed_twice_agrees(gpu_pool):
    verdicts = [gpu_pool.verify(problem("softmax"), honest("softmax")) for _ in range(4)]
    times = [v.kernel_ms for v in verdicts]
    med = statistics.median(times)
    assert max(times) - min(times) <= 0.25 * med, [(t, v.checks["timing"]["window"]) for t, v in zip(times, verdicts)]


def test_warmup_replay_by_where_it_is_timed():
    """A model honest for its first 7 calls, then returning its last answer without launching. Timed in
    its worker, the timed calls launch nothing (`timing_invalid`); timed in a replayer, the traced
    call's launches are timed, so the trick buys no time: it passes at the honest kernel's time."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from distill.verifier import VerifierPool

    got = {}
    for where in ("worker", "replayer"):
        with VerifierPool(workers=1, device="cuda", timeout=120, timing_trials=20, timing="eager",
                          timing_in=where) as pool:
            got[where] = (pool.verify(problem("add"), hostile("warmup_replay"), static_checks=False),
                          pool.verify(problem("add"), honest("add")))
    assert got["worker"][0].status == "timing_invalid", got["worker"][0].reason
    cheat, plain = got["replayer"]
    assert cheat.status == "pass" and plain.status == "pass", (cheat.reason, plain.reason)
    assert 0.5 * plain.kernel_ms <= cheat.kernel_ms <= 2 * plain.kernel_ms, (cheat.kernel_ms, plain.kernel_ms)
