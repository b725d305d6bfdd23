"""`make test`'s lanes (tests/conftest.py --lane): every file in exactly one lane, the same packing in
every lane's process, and the lanes' seconds close together."""
from tests.conftest import file_weights, pack_lanes


def test_lanes_split_the_files_exactly_and_the_same_way_each_time():
    weights = {f"tests/t{i}.py": float((i * 37) % 11 + 1) for i in range(40)} | {"tests/big.py": 30.0}
    for n in (1, 2, 3, 5):
        lanes = pack_lanes(weights, n)
        files = [f for lane in lanes for f in lane]
        assert sorted(files) == sorted(weights) and len(lanes) == n
        assert pack_lanes(dict(reversed(list(weights.items()))), n) == lanes   # order-free: every lane agrees
        loads = [sum(weights[f] for f in lane) for lane in lanes]
        assert max(loads) - min(loads) <= max(weights.values())


def test_a_file_missing_from_the_table_weighs_its_tests_at_the_default():
    table = {"default_per_test": 0.5, "files": {"tests/a.py": 12.0}}
    assert file_weights({"tests/a.py": 3, "tests/new.py": 4}, table) == {"tests/a.py": 12.0, "tests/new.py": 2.0}


def test_a_split_file_packs_test_by_test_and_a_shared_fixture_keeps_its_files_together():
    from tests.conftest import lane_units

    tests = [("tests/rate.py::t[1]", ("vpool",)), ("tests/rate.py::t[5]", ("vpool",)),
             ("tests/a.py::x", ("built_dataset",)), ("tests/b.py::y", ("tmp_path", "built_dataset")),
             ("tests/b.py::z", ()), ("tests/c.py::w", ())]
    table = {"default_per_test": 1.0, "split": ["tests/rate.py"], "tests": {"tests/rate.py::t[5]": 400.0},
             "files": {"tests/rate.py": 500.0, "tests/a.py": 10.0, "tests/c.py": 3.0}}
    unit, seconds = lane_units(tests, table)
    assert unit == {"tests/rate.py::t[1]": "tests/rate.py::t[1]", "tests/rate.py::t[5]": "tests/rate.py::t[5]",
                    "tests/a.py::x": "built_dataset", "tests/b.py::y": "built_dataset", "tests/b.py::z": "built_dataset",
                    "tests/c.py::w": "tests/c.py"}
    assert seconds == {"tests/rate.py::t[1]": 250.0, "tests/rate.py::t[5]": 400.0, "built_dataset": 12.0,
                       "tests/c.py": 3.0}


def _lane(tmp_path, body: str):
    """`make test-lane-1` (LANES=1) on a one-file suite in tmp_path: (exit status, output, the lane's log)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_one.py").write_text(body)
    pytest_cmd = f"{sys.executable} -m pytest -p tests.conftest -c {tmp_path / 'pytest.ini'} --rootdir {tmp_path} {tmp_path}"
    r = subprocess.run([shutil.which("make") or "make", "-C", str(repo), "--no-print-directory", "-o", ".venv/.installed",
                        "test-lane-1", "LANES=1", f"TEST_TIMES_DIR={tmp_path / 'times'}", f"PYTEST={pytest_cmd}"],
                       capture_output=True, text=True, timeout=300)
    log = tmp_path / "times" / "lane-1.log"
    return r.returncode, r.stdout + r.stderr, log.read_text() if log.exists() else ""


def test_a_lane_whose_process_a_test_ends_fails_though_pytest_said_0(tmp_path):
    code, out, log = _lane(tmp_path, "import os, time\n\ndef test_first():\n    time.sleep(0.06)\n\n"
                                     "def test_ends_the_process():\n    os._exit(0)\n\ndef test_never_run():\n    pass\n")
    assert code != 0 and "a test ended it; failing the lane" in out, out
    assert "test_one.py::test_first" in log and "# session finished" not in log
    code, out, log = _lane(tmp_path, "def test_fine():\n    pass\n")
    assert code == 0, out
    assert log.splitlines()[-1] == "# session finished: exit 0, 1 collected"


def test_the_packing_is_read_from_the_files_text_and_conftest_fixtures_made_from_a_shared_one_count():
    """A lane imports only its own files, so the units come from the sources: a test per `def test_`,
    a SHARED fixture named in the file or through a conftest fixture made from it (grpo's `tokenizer`
    from `tiny_llama`), and a split file's tests from the table."""
    from tests.conftest import lane_units, text_tests

    conftests = {"tests/conftest.py": "def tiny_llama(tmp_path_factory):\n    pass\n\n"
                                      "def tokenizer(tiny_llama):\n    pass\n\ndef vocab(tokenizer):\n    pass\n"}
    texts = {"tests/a.py": "def test_x(vocab):\n    pass\n\n\nasync def test_y():\n    pass\n",
             "tests/b.py": "def test_z(tiny_llama):\n    pass\n", "tests/c.py": "def test_w():\n    pass\n",
             "tests/rate.py": "@parametrize\ndef test_t(n):\n    pass\n", "tests/empty.py": "x = 1\n"}
    table = {"default_per_test": 1.0, "split": ["tests/rate.py"], "tests": {"tests/rate.py::t[5]": 400.0},
             "files": {"tests/rate.py": 500.0, "tests/b.py": 10.0}}
    pairs = text_tests(texts, conftests, table)
    assert pairs == [("tests/a.py::0", ("tiny_llama",)), ("tests/a.py::1", ("tiny_llama",)),
                     ("tests/b.py::0", ("tiny_llama",)), ("tests/c.py::0", ()), ("tests/empty.py::0", ()),
                     ("tests/rate.py::t[5]", ())]
    unit, seconds = lane_units(pairs, table)
    assert seconds == {"tiny_llama": 12.0, "tests/c.py": 1.0, "tests/empty.py": 1.0, "tests/rate.py::t[5]": 400.0}


def test_the_lightest_whole_files_float_heaviest_first():
    from tests.conftest import floating_files

    unit = {"tests/a.py::0": "tests/a.py", "tests/b.py::0": "tests/b.py", "tests/c.py::0": "tests/c.py",
            "tests/d.py::0": "built_dataset", "tests/r.py::t[1]": "tests/r.py::t[1]"}
    seconds = {"tests/a.py": 50.0, "tests/b.py": 3.0, "tests/c.py": 6.0, "built_dataset": 1.0, "tests/r.py::t[1]": 40.0}
    assert floating_files(unit, seconds, 0.1) == ["tests/c.py", "tests/b.py"]     # 9 of 100 s; no shared or split unit
    assert floating_files(unit, seconds, 0.05) == ["tests/b.py"]
