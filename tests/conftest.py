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
# Each lane keeps the files that bench/test_times.json's per-file seconds pack into it (heaviest first,
# each into the lightest lane so far), so the lanes end together; a file stays whole, so its module
# fixtures (a pool, a build) start once, and the files that use a costly session fixture (SHARED) go to
# one lane together, so it is made once. Every lane computes the same packing from the same files and
# table, so the lanes split the suite exactly: no test runs twice or never.
# vllm_teacher (tests/distill/teacher/conftest.py) is an offline vLLM engine: the offline and server
# tests started one each when they fell into two lanes; tiny_llama (tests/pipelines/grpo/conftest.py,
# 4 CPU-s a build, its tokenizer too) was built in three lanes.
# The packing is read from the files' text, not from their collection: a lane imports only its own
# test files. Collecting the whole suite in every lane cost 9.6 CPU-s a lane (pytest rewrites every
# module's asserts again where PYTHONDONTWRITEBYTECODE is set, and imports what every file imports);
# lane 1's own files alone cost 4.0 (2026-11-30, cgroup cpuacct, `--collect-only`).
SHARED = ("built_dataset", "honest_verdict", "vllm_teacher", "tiny_llama")
# The lightest files, up to this share of the suite's seconds, float in a `make test` run: see
# pytest_runtestloop below.
FLOATING_SHARE = 0.1
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMES = os.path.join(REPO, "bench", "test_times.json")


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


def shared_names(conftests: dict[str, str]) -> dict[str, str]:
    """{fixture name: the SHARED fixture it stands for}: each SHARED fixture, and every fixture the
    conftest sources define on top of one (grpo's `tokenizer` is made from `tiny_llama`)."""
    import ast

    deps: dict[str, set[str]] = {}
    for text in conftests.values():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef):
                deps[node.name] = {a.arg for a in node.args.args}
    names = {s: s for s in SHARED}
    while True:
        more = {f: names[next(iter(sorted(d & set(names))))] for f, d in deps.items()
                if f not in names and d & set(names)}
        if not more:
            return names
        names.update(more)


def text_tests(texts: dict[str, str], conftests: dict[str, str], table: dict) -> list[tuple[str, tuple[str, ...]]]:
    """lane_units' (nodeid, fixture names) pairs read from test files' text (path -> source), without
    importing them: a pair per `def test_`, with the SHARED fixtures whose names (or the names of the
    conftest fixtures made from them) the file's text holds; a split file's tests are the table's."""
    import re

    names = shared_names(conftests)
    split = set(table.get("split", ()))
    pairs: list[tuple[str, tuple[str, ...]]] = []
    for path, text in sorted(texts.items()):
        used = tuple(sorted({s for name, s in names.items() if re.search(rf"\b{name}\b", text)}))
        if path in split:
            ids = sorted(t for t in table.get("tests", {}) if t.split("::")[0] == path)
        else:
            ids = [f"{path}::{k}" for k in range(len(re.findall(r"^\s*(?:async\s+)?def test_", text, re.M)))]
        pairs += [(nodeid, used) for nodeid in ids or [f"{path}::0"]]
    return pairs


def _lane_arg(config) -> tuple[int, int] | None:
    lane = config.getoption("--lane")
    if not lane:
        return None
    try:
        i, n = (int(x) for x in lane.split("/"))
        assert 1 <= i <= n
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"--lane {lane}: expected I/N with 1 <= I <= N") from None
    return i, n


def floating_files(unit: dict[str, str], seconds: dict[str, float], share: float) -> list[str]:
    """The lightest whole files (no SHARED fixture, not split) up to `share` of all the seconds, heaviest
    first: the queue the lanes of one `make test` take from as they finish their own files."""
    files = sorted((u for u in set(unit.values()) if u.endswith(".py")), key=lambda u: (seconds[u], u))
    total, picked, acc = sum(seconds.values()), [], 0.0
    for u in files:
        if acc + seconds[u] > share * total:
            break
        acc += seconds[u]
        picked.append(u)
    return sorted(picked, key=lambda u: (-seconds[u], u))


def lane_plan(config) -> tuple[int, int, dict[str, int], set[str], list[str]] | None:
    """(this lane, lanes, {file or split test: its lane}, split files, floating files) for --lane I/N,
    computed once a process. Files float only in a `make test` run (TRITONFORGE_LANE_CLAIMS names its
    claims folder) of more than one lane."""
    if not hasattr(config, "_tritonforge_lanes"):
        config._tritonforge_lanes = None
        arg = _lane_arg(config)
        if arg:
            import json
            from pathlib import Path

            table = json.loads(open(TIMES).read()) if os.path.exists(TIMES) else {}
            root = Path(config.rootpath)
            texts, conftests = {}, {}
            for p in sorted(Path(REPO, "tests").rglob("*.py")):
                if not p.is_relative_to(root) or any(part.startswith(".") for part in p.relative_to(root).parts):
                    continue
                if p.name.startswith("test_"):
                    texts[p.relative_to(root).as_posix()] = p.read_text()
                elif p.name == "conftest.py":
                    conftests[p.relative_to(root).as_posix()] = p.read_text()
            unit, seconds = lane_units(text_tests(texts, conftests, table), table)
            lane_of = {u: k + 1 for k, us in enumerate(pack_lanes(seconds, arg[1])) for u in us}
            where = {t.split("::")[0]: lane_of[u] for t, u in unit.items() if t.split("::")[0] not in table.get("split", ())}
            where.update({t: lane_of[u] for t, u in unit.items() if t.split("::")[0] in table.get("split", ())})
            floating = floating_files(unit, seconds, FLOATING_SHARE) \
                if arg[1] > 1 and os.environ.get("TRITONFORGE_LANE_CLAIMS") else []
            config._tritonforge_lanes = (*arg, where, set(table.get("split", ())), floating)
    return config._tritonforge_lanes


def lane_for(key: str, where: dict[str, int], n: int) -> int:
    """The planned lane of a file (or a split file's test); one the plan does not know (a file outside
    tests/, a test the table has not seen) by a hash of its name: still exactly one lane."""
    import zlib

    return where.get(key) or zlib.crc32(key.encode()) % n + 1


def pytest_ignore_collect(collection_path, config):
    """Another lane's test file is not imported here."""
    plan = lane_plan(config)
    if plan is None or plan[1] == 1 or not collection_path.is_file() or not collection_path.name.startswith("test_"):
        return None
    try:
        rel = collection_path.relative_to(config.rootpath).as_posix()
    except ValueError:
        return None
    if rel in plan[3] or rel in plan[4]:
        return None
    return True if lane_for(rel, plan[2], plan[1]) != plan[0] else None


@pytest.hookimpl(trylast=True)   # after `-m` has deselected what this run leaves out
def pytest_collection_modifyitems(config, items):
    plan = lane_plan(config)
    if plan is None:
        return
    i, n, where, split, floating = plan
    order = {f: k for k, f in enumerate(floating)}

    def lane(nodeid: str) -> int:
        f = nodeid.split("::")[0]
        return i if f in order else lane_for(nodeid if f in split else f, where, n)

    keep = [it for it in items if lane(it.nodeid) == i]
    dropped = [it for it in items if lane(it.nodeid) != i]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    # the lane's own files first, then the floating queue in the same order in every lane (a stable sort)
    items[:] = sorted(keep, key=lambda it: order.get(it.nodeid.split("::")[0], -1))


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """pytest's own loop, less the floating files another lane claimed first. A lane claims a floating
    file as it reaches it (a file created with O_EXCL in the run's claims folder), so each runs in
    exactly one lane, and the lanes that end their own files early take more of the queue: the packing's
    misses (a file's seconds move 7% between runs with which tests share the cores) no longer leave
    a lane running alone at the end."""
    plan = lane_plan(session.config)
    if not plan or not plan[4] or session.config.option.collectonly or session.testsfailed:
        return None   # pytest's own loop (which also stops on collection errors)
    claims, floating, mine = os.environ["TRITONFORGE_LANE_CLAIMS"], set(plan[4]), {}
    os.makedirs(claims, exist_ok=True)

    def runs(item) -> bool:
        f = item.nodeid.split("::")[0]
        if f not in floating:
            return True
        if f not in mine:
            try:
                os.close(os.open(os.path.join(claims, f.replace("/", "__")), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                mine[f] = True
            except FileExistsError:   # another lane's: deselected here, so the lane's counts are what it ran
                mine[f] = False
                theirs = [it for it in session.items if it.nodeid.split("::")[0] == f]
                session.config.hook.pytest_deselected(items=theirs)
                session.testscollected -= len(theirs)
        return mine[f]

    queue = (it for it in session.items if runs(it))
    item = next(queue, None)
    while item is not None:
        nextitem = next(queue, None)   # claimed before this item's teardown, which needs to know it
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)
        item = nextitem
    return True


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
