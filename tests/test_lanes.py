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
