"""The pool as its users see it: honest controls, batches, threads, Problem objects, recycling."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from distill.verifier import ProblemError, VerifierPool
from tests.distill.verifier.conftest import MANIFEST, honest, hostile, problem
from tests.limits import CALL_LIMIT_S


@pytest.mark.parametrize("name", MANIFEST["honest"])
def test_honest_controls_pass(honest_verdict, name):
    v = honest_verdict(name)
    assert v.status == "pass", v.reason
    assert v.device == "cpu" and v.kernel_ms is None and v.speedup_eager is None
    assert v.checks["ablation"] == "outputs depend on its kernels"
    assert v.checks["determinism"] == "identical within rounding"
    assert v.checks["baselines"] == "off" and v.kernel_ms is None  # the CPU lane times nothing
    assert all(t["launches"] >= 1 for t in v.checks["trials"])
    assert v.versions["torch"] and v.versions["triton"]


def test_timing_must_be_a_known_choice():
    with pytest.raises(ValueError, match="timing must be one of eager\\+compile, eager, off, not 'compile'"):
        VerifierPool(device="cpu", timing="compile")


def test_several_kernels_are_all_recorded(honest_verdict):
    v = honest_verdict("linear_relu")
    assert v.status == "pass" and v.checks["trials"][0]["kernels"] == ["linear_kernel", "relu_kernel"]


def test_problem_objects_are_duck_typed(pool):
    obj = SimpleNamespace(source=problem("add"), problem_id="add-1000", flops=1000, bytes_moved=12000)
    v = pool.verify(obj, honest("add"))
    assert v.status == "pass" and v.checks["problem_id"] == "add-1000"


def test_a_real_synth_problem_record_works(pool):
    problem_mod = pytest.importorskip("synth.problem")
    nx = pytest.importorskip("networkx")
    rec = problem_mod.Problem(problem_id="p-add", source=problem("add"), dag_hash="h", level=1, ops=["add"],
                              graph=nx.DiGraph(), seed=0, flops=1000, bytes_moved=12000, dtype="float32",
                              input_shapes=[[1000], [1000]], output_shapes=[[1000]])
    assert pool.verify(rec, honest("add")).status == "pass"


def test_a_broken_problem_raises_problem_error(pool):
    with pytest.raises(ProblemError, match="get_inputs"):
        pool.verify("import torch\nclass Model(torch.nn.Module):\n    pass\n", honest("add"))


def test_sandbox_facts_are_reported(pool):
    v = pool.verify(problem("add"), honest("add"))
    box = v.checks["sandbox"]
    for key in ("netns", "landlock", "seccomp", "capabilities", "memory"):
        assert isinstance(box[key], str) and box[key]


@pytest.fixture(scope="module")
def pool2():
    """Two workers, for the tests of concurrent calls (one pool start for both)."""
    with VerifierPool(workers=2, device="cpu", timeout=CALL_LIMIT_S) as pool:
        yield pool


def test_an_open_pool_holds_the_gil_switch_interval_short(pool):
    """The parent's comparisons wait for the GIL at every torch call (pool.SWITCH_INTERVAL_S says why)."""
    import sys

    from distill.verifier import pool as pool_module

    assert sys.getswitchinterval() == pytest.approx(pool_module.SWITCH_INTERVAL_S)


def test_the_parents_share_of_each_wait_is_in_the_phases(pool):
    """`run.handled` is what a worker waited on the parent's acknowledgements (docs/verifier.md, Throughput);
    its CPU part can only be smaller; the replay's likewise."""
    phases = pool.verify(problem("add"), honest("add")).checks["phase_s"]
    for name in ("run", "replay"):
        assert phases[f"{name}.handled"] > 0
        assert 0 <= phases[f"{name}.handled_cpu"] <= phases[f"{name}.handled"] + 1e-3
    assert phases["run.handled"] <= phases["run"] and {"replay.wait", "replay.setup", "replay.calls"} <= set(phases)


def test_the_switch_interval_goes_back_when_the_last_pool_closes():
    import sys

    from distill.verifier.pool import SWITCH_INTERVAL_S, _switch_held, _switch_interval

    before, held = sys.getswitchinterval(), dict(_switch_held)
    _switch_held.update(pools=0)
    try:
        sys.setswitchinterval(0.004)
        a, b = SimpleNamespace(_holds_switch=False), SimpleNamespace(_holds_switch=False)
        _switch_interval(a, True)
        _switch_interval(a, True)  # a second start holds nothing more
        _switch_interval(b, True)
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
        _switch_interval(a, False)
        _switch_interval(a, False)  # nor does a second close let go of b's hold
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
        _switch_interval(b, False)
        assert sys.getswitchinterval() == pytest.approx(0.004)
    finally:
        _switch_held.update(held)
        sys.setswitchinterval(before)


def test_verify_many_is_concurrent_and_keeps_order(pool2):
    names = ["add", "relu_pos", "softmax", "transpose_add"]
    pairs = [(problem(n), honest(n)) for n in names]
    pairs += [(problem("add"), hostile("decoy_kernel")), (problem("add"), hostile("os_system_obfuscated")),
              (problem("add"), hostile("unwritten_output"))]
    pool, recycled = pool2, pool2.stats["recycled"]
    verdicts = pool.verify_many(pairs)
    assert [v.status for v in verdicts] == ["pass"] * 4 + ["not_triton", "forbidden", "wrong_output"]
    # The static layer stops os_system_obfuscated before any worker; the two others cost a worker each.
    assert pool.stats["recycled"] - recycled == 2


def test_threads_may_share_one_pool(pool2):
    results: list[str] = []
    lock = threading.Lock()

    def work(name: str) -> None:
        status = pool2.verify(problem(name), honest(name)).status
        with lock:
            results.append(status)

    threads = [threading.Thread(target=work, args=(n,)) for n in ("add", "relu_pos", "add", "relu_pos")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == ["pass"] * 4


def test_module_level_verify():
    import distill
    from distill.verifier import verify

    assert distill.verify is verify
    v = verify(problem("add"), honest("add"), device="cpu")
    assert v.status == "pass"


def test_reply_arenas_are_used_and_unlinked_once_children_are_ready(pool):
    import os

    from distill.verifier import codec

    v = pool.verify(problem("add"), honest("add"))
    assert v.status == "pass", v.reason
    # every child maps its arena (replies' tensors go there), and no arena is left open by name
    assert all(s.proc.arena is not None for s in pool.fleet.slots if s.proc is not None)
    # A process the pool starts in the background after the job (the next worker) keeps its arena's
    # name until it is ready: on a loaded box that can be seconds after verify returned.
    deadline = time.monotonic() + 120
    while (named := [f for f in os.listdir(codec.shm_dir()) if f.startswith(f"tritonforge-arena-{os.getpid()}-")]) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not named
