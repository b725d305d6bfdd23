"""synth.atomic_write: the written file takes the umask's mode (not mkstemp's 0o600) and appears whole or not at all."""
import os
import stat

import pytest

import synth
from synth.atomic_write import apply_umask, atomic_path, atomic_write_text
from synth.shard import read_problems, write_problems


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask, want", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_follow_the_umask(tmp_path, umask, mask, want):
    umask(mask)
    text = atomic_write_text(tmp_path / "new" / "marker.json", "{}")
    with atomic_path(tmp_path / "blob.bin") as tmp:
        tmp.write_bytes(b"x")
    problems = write_problems(synth.sample(2, level=1, seed=0), tmp_path / "problems" / "p.parquet")
    assert {p.name: _mode(p) for p in (text, tmp_path / "blob.bin", problems)} == {
        "marker.json": want, "blob.bin": want, "p.parquet": want}
    assert _mode(tmp_path / "new") == 0o777 & ~mask  # folders are plain mkdir
    assert len(read_problems(problems)) == 2
    assert not list(tmp_path.rglob(".*"))  # no temporary left behind


def test_a_replaced_file_takes_the_umask_mode_not_the_old_one(tmp_path, umask):
    umask(0o022)
    path = tmp_path / "manifest.json"
    path.write_text("old")
    path.chmod(0o600)  # as the mkstemp-based writer used to leave it
    atomic_write_text(path, "new")
    assert path.read_text() == "new" and _mode(path) == 0o644


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "samples.parquet"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer died")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["samples.parquet"]


@pytest.mark.parametrize("mask, want", [(0o022, 0o644), (0o077, 0o600)])
def test_apply_umask_opens_up_what_a_library_wrote_private(tmp_path, umask, mask, want):
    umask(mask)
    (tmp_path / "model").mkdir()
    weights = tmp_path / "model" / "model.safetensors"
    weights.write_bytes(b"w")
    weights.chmod(0o600)  # as safetensors >= 0.8 leaves it
    (tmp_path / "config.json").write_text("{}")
    apply_umask(tmp_path)
    assert _mode(weights) == want and _mode(tmp_path / "config.json") == want
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["config.json", "model", "model.safetensors"]


_WRITER = """
import json, sys
from synth.atomic_write import atomic_write_text
path, who = sys.argv[1], sys.argv[2]
for i in range(150):
    atomic_write_text(path, json.dumps({"writer": who, "i": i, "pad": "x" * 4000}))
"""


def test_concurrent_writers_never_collide_and_readers_never_see_half_a_file(tmp_path):
    # Fixed temporary names made two writers collide on 18% of writes and readers see truncated
    # markers on 3% of reads: here 3 processes rewrite one marker 150 times each while this one reads.
    import json
    import subprocess
    import sys

    target = tmp_path / "marker.json"
    atomic_write_text(target, json.dumps({"writer": "seed", "i": -1, "pad": ""}))
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(target), str(k)]) for k in range(3)]
    reads = 0
    while any(p.poll() is None for p in procs):
        json.loads(target.read_text())     # raises on a partial file
        reads += 1
    assert [p.wait() for p in procs] == [0, 0, 0]
    assert reads > 10 and json.loads(target.read_text())["i"] == 149
    assert [p.name for p in tmp_path.iterdir()] == ["marker.json"]     # no temporary left behind
