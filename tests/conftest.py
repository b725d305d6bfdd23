import os

# Triton kernels run on the CPU through the interpreter in this suite.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
from hypothesis import HealthCheck, settings

# A verdict must not depend on how busy the box is: Hypothesis's wall-clock checks (a per-example
# deadline, "input generation is slow") failed a property test on a loaded 2-core CI box. The
# properties themselves and the number of examples stay as each test sets them.
settings.register_profile("tritonforge", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tritonforge")


@pytest.fixture(scope="session")
def built_dataset(tmp_path_factory):
    """One small real build (LocalCluster, real verifier, replayed honest kernels) with its card, made
    under umask 0o022 (its workers start under it); its config is `out.parent / "build.toml"`. Tests
    read it, or work on a copy."""
    from pipelines.build.config import load_config
    from pipelines.build.run import build
    from pipelines.publish.card import write_card
    from tests.pipelines.buildkit import write_config

    tmp = tmp_path_factory.mktemp("built")
    out = tmp / "out"
    old = os.umask(0o022)
    try:
        manifest = build(load_config(write_config(tmp, size=4, shard_size=2)), out, progress=False)
        write_card(out, manifest)
    finally:
        os.umask(old)
    return out


@pytest.fixture
def umask():
    """`umask(0o022)` sets the process umask for the rest of the test; the old one is restored after."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


# -- lanes: `make test` runs the whole CPU suite (slow tests too) as LANES pytest processes side by side --
# Each lane collects everything and keeps the files that bench/test_times.json's per-file seconds pack
# into it (heaviest first, each into the lightest lane so far), so the lanes end together; a file stays
# whole, so its module fixtures (a pool, a build) start once, and the files that use a costly session
# fixture (SHARED) go to one lane together, so it is made once. Every lane computes the same packing
# from the same collection, so the lanes split the suite exactly: no test runs twice or never.
# vllm_teacher (tests/distill/teacher/conftest.py) is an offline vLLM engine: the offline tests and the
# server test that compares against it started one each when they fell into two lanes; tiny_llama
# (tests/pipelines/grpo/conftest.py, 4 CPU-s a build, its tokenizer too) was built in three lanes.
SHARED = ("built_dataset", "honest_verdict", "vllm_teacher", "tiny_llama")
TIMES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "test_times.json")


def pytest_addoption(parser):
    parser.addoption("--lane", default=None, metavar="I/N",
                     help="run lane I of N (1-based): the files bench/test_times.json packs into it")


def pack_lanes(weights: dict[str, float], n: int) -> list[list[str]]:
    """Files into n lanes: heaviest first, each into the lane with the least weight (ties: lower index)."""
    lanes: list[list[str]] = [[] for _ in range(n)]
    load = [0.0] * n
    for f in sorted(weights, key=lambda f: (-weights[f], f)):
        k = min(range(n), key=lambda i: (load[i], i))
        lanes[k].append(f)
        load[k] += weights[f]
    return lanes


def file_weights(counts: dict[str, int], table: dict) -> dict[str, float]:
    """Seconds per file: the table's, else its number of tests times the table's default per test."""
    per_test = float(table.get("default_per_test", 1.0))
    files = table.get("files", {})
    return {f: float(files[f]) if f in files else per_test * c for f, c in counts.items()}


def lane_units(tests: list[tuple[str, tuple[str, ...]]], table: dict) -> tuple[dict[str, str], dict[str, float]]:
    """(each test's packing unit, each unit's seconds) for (nodeid, fixture names) pairs. A unit is a
    file; every file that uses a SHARED fixture; or, for a file the table lists under "split" (tests
    whose fixtures are all session-wide, each far longer than a pool's start), each test alone, at the
    table's "tests" seconds (else the file's seconds over its tests)."""
    counts: dict[str, int] = {}
    for nodeid, _ in tests:
        f = nodeid.split("::")[0]
        counts[f] = counts.get(f, 0) + 1
    weights = file_weights(counts, table)
    split, per_test = set(table.get("split", ())), table.get("tests", {})
    file_unit = {f: f for f in counts}
    for nodeid, fixtures in tests:
        shared = next((name for name in SHARED if name in fixtures), None)
        if shared:
            file_unit[nodeid.split("::")[0]] = shared
    seconds: dict[str, float] = {}
    for f, u in file_unit.items():
        if f not in split:
            seconds[u] = seconds.get(u, 0.0) + weights[f]
    unit: dict[str, str] = {}
    for nodeid, _ in tests:
        f = nodeid.split("::")[0]
        unit[nodeid] = nodeid if f in split else file_unit[f]
        if f in split:
            seconds[nodeid] = float(per_test.get(nodeid, weights[f] / counts[f]))
    return unit, seconds


@pytest.hookimpl(trylast=True)   # after `-m` has deselected what this run leaves out
def pytest_collection_modifyitems(config, items):
    lane = config.getoption("--lane")
    if not lane:
        return
    try:
        i, n = (int(x) for x in lane.split("/"))
        assert 1 <= i <= n
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"--lane {lane}: expected I/N with 1 <= I <= N") from None
    import json

    table = json.loads(open(TIMES).read()) if os.path.exists(TIMES) else {}
    unit, seconds = lane_units([(it.nodeid, tuple(getattr(it, "fixturenames", ()))) for it in items], table)
    mine = set(pack_lanes(seconds, n)[i - 1])
    keep = [it for it in items if unit[it.nodeid] in mine]
    dropped = [it for it in items if unit[it.nodeid] not in mine]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


# TRITONFORGE_TEST_TIMES=FILE appends each phase's seconds as it ends, in --durations' format
# (`12.34s call tests/x.py::test_y`), so a lane that is stopped still leaves its figures; `make test`
# writes out/test-times/lane-I.log and `python bench/test_times.py out/test-times/*.log` reads them.
def pytest_runtest_logreport(report):
    path = os.environ.get("TRITONFORGE_TEST_TIMES")
    if path and report.duration >= 0.05:
        with open(path, "a") as f:
            f.write(f"{report.duration:.2f}s {report.when} {report.nodeid}\n")


# The log's last line says the session ended; `make test` fails a lane whose log lacks it. A test that
# ends pytest's own process early (an os._exit in code it calls in-process) leaves pytest's exit status
# at 0 and every later test of the lane unrun; on 2026-11-29 one did so to a whole lane and `make test`
# still said 0.
FINISHED = "# session finished"


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("TRITONFORGE_TEST_TIMES")
    if path:
        with open(path, "a") as f:
            f.write(f"{FINISHED}: exit {int(exitstatus)}, {session.testscollected} collected\n")
