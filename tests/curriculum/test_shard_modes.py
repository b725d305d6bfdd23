"""Shards are readable by whoever the umask allows: 0o644 under umask 022, 0o600 under 077."""
import os
import stat

import pyarrow as pa
import pytest

from curriculum.shards import shard_files, write_rows

SCHEMA = pa.schema([pa.field("problem_id", pa.string(), nullable=False), pa.field("level", pa.int32())])


@pytest.mark.parametrize("mask, want", [(0o022, 0o644), (0o077, 0o600)])
def test_shard_mode_follows_the_umask(tmp_path, umask, mask, want):
    umask(mask)
    path = write_rows([{"problem_id": "a", "level": 1}], SCHEMA, tmp_path / "rl" / "stage=1" / "part-00000.parquet")
    assert stat.S_IMODE(os.stat(path).st_mode) == want
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o777 & ~mask
    assert shard_files(tmp_path) == [path]  # and no temporary is left next to it
    assert [p.name for p in path.parent.iterdir()] == [path.name]
