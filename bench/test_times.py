"""Per-file test seconds for `make test`'s lanes (tests/conftest.py packs files into lanes by them).

    make test                                                   # each lane writes out/test-times/lane-I.log
    python bench/test_times.py out/test-times/*.log [--lanes 3] # writes bench/test_times.json

The logs are in `--durations` format (`12.34s call tests/x.py::test_y`; a `--durations=0` report works
too). Each line adds its seconds (setup, call and teardown) to its file, and for a file the table lists
under "split" (packed test by test) to its test too. A file no log names keeps its figure; one that is
in no table weighs `default_per_test` seconds a test. A file a later log names replaces an earlier
log's figure. With --lanes N it collects each lane as `make test` would, prints its files, tests and
listed seconds, and checks that the lanes split the suite exactly; in `make test` the lightest files
(the last line's) float: the lanes claim them as they end their own.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "test_times.json"
LINE = re.compile(r"^\s*([\d.]+)s (?:call|setup|teardown)\s+((tests/\S+?\.py)::\S+)")


def parse(text: str) -> tuple[dict[str, float], dict[str, float]]:
    """(seconds per file, seconds per test)."""
    per: dict[str, float] = collections.defaultdict(float)
    tests: dict[str, float] = collections.defaultdict(float)
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            per[m.group(3)] += float(m.group(1))
            tests[m.group(2)] += float(m.group(1))
    return dict(per), dict(tests)


def _collect(extra: list[str]) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not gpu", *extra], cwd=REPO,
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "::" in line]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="*", type=Path)
    ap.add_argument("--default-per-test", type=float, default=None, help="seconds for a test of an unlisted file")
    ap.add_argument("--lanes", type=int, default=0, help="print the packing into this many lanes")
    args = ap.parse_args()
    table = json.loads(OUT.read_text()) if OUT.exists() else {"default_per_test": 0.3, "files": {}}
    for log in args.logs:
        files, tests = parse(log.read_text())
        table["files"].update({f: round(s, 1) for f, s in files.items()})
        table.setdefault("tests", {}).update({t: round(s, 1) for t, s in tests.items()
                                              if t.split("::")[0] in table.get("split", ())})
    if args.default_per_test is not None:
        table["default_per_test"] = args.default_per_test
    table["files"] = dict(sorted((f, s) for f, s in table["files"].items() if (REPO / f).exists()))  # none gone
    if args.logs or args.default_per_test is not None:
        OUT.write_text(json.dumps(table, indent=1) + "\n")
    if args.lanes:   # each lane's own collection, as `make test` runs it: disjoint, and together the whole suite
        every = _collect([])
        seen: list[str] = []
        for i in range(1, args.lanes + 1):
            ids = _collect(["--lane", f"{i}/{args.lanes}"])
            seen += ids
            files = sorted({t.split("::")[0] for t in ids})
            split = set(table.get("split", ()))
            secs = sum(table["files"].get(f, 0.0) for f in files if f not in split)
            secs += sum(table.get("tests", {}).get(t, 0.0) for t in ids if t.split("::")[0] in split)
            print(f"lane {i}/{args.lanes}: {len(files)} files, {len(ids)} tests, {secs:.0f} s of listed files")
        assert sorted(seen) == sorted(every), "the lanes do not split the suite exactly"
        # in `make test` the lightest files float: whichever lane is free first runs each (tests/conftest.py)
        sys.path.insert(0, str(REPO))
        from tests.conftest import FLOATING_SHARE, floating_files, lane_units, text_tests

        texts = {p.relative_to(REPO).as_posix(): p.read_text() for p in sorted((REPO / "tests").rglob("test_*.py"))}
        conftests = {p.relative_to(REPO).as_posix(): p.read_text() for p in sorted((REPO / "tests").rglob("conftest.py"))}
        unit, seconds = lane_units(text_tests(texts, conftests, table), table)
        floating = floating_files(unit, seconds, FLOATING_SHARE)
        print(f"floating in make test: {len(floating)} files, {sum(seconds[f] for f in floating):.0f} s of listed files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
