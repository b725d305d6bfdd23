"""Per-file test seconds for `make test`'s lanes (tests/conftest.py packs files into lanes by them).

    pytest -m "not gpu" --durations=0 --durations-min=0.5 ... > run.log   # one or more such logs
    python bench/test_times.py run.log [more.log ...] [--lanes 2]         # writes bench/test_times.json

Each `--durations` line (`12.34s call tests/x.py::test_y`) adds its seconds (setup, call and teardown)
to its file. A file none of whose tests took 0.5 s is left out of the table; tests/conftest.py weighs
it at `default_per_test` seconds a test. A file a later log names replaces an earlier log's figure.
With --lanes N it collects each lane as `make test` would, prints its files, tests and listed seconds,
and checks that the lanes split the suite exactly.
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
LINE = re.compile(r"^\s*([\d.]+)s (?:call|setup|teardown)\s+(tests/\S+?\.py)::")


def parse(text: str) -> dict[str, float]:
    per: dict[str, float] = collections.defaultdict(float)
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            per[m.group(2)] += float(m.group(1))
    return dict(per)


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
        table["files"].update({f: round(s, 1) for f, s in parse(log.read_text()).items()})
    if args.default_per_test is not None:
        table["default_per_test"] = args.default_per_test
    table["files"] = dict(sorted(table["files"].items()))
    if args.logs or args.default_per_test is not None:
        OUT.write_text(json.dumps(table, indent=1) + "\n")
    if args.lanes:   # each lane's own collection, as `make test` runs it: disjoint, and together the whole suite
        every = _collect([])
        seen: list[str] = []
        for i in range(1, args.lanes + 1):
            ids = _collect(["--lane", f"{i}/{args.lanes}"])
            seen += ids
            files = sorted({t.split("::")[0] for t in ids})
            secs = sum(table["files"].get(f, 0.0) for f in files)
            print(f"lane {i}/{args.lanes}: {len(files)} files, {len(ids)} tests, {secs:.0f} s of listed files")
        assert sorted(seen) == sorted(every), "the lanes do not split the suite exactly"
    return 0


if __name__ == "__main__":
    sys.exit(main())
