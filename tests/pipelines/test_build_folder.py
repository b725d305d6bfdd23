"""The build's --out folder: refused when it is not this build's, locked against a second build, and
repaired when a finished shard was deleted or damaged. One build (the session's `built_dataset`) is
shared; each test works on a copy of it."""
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from curriculum.export import export
from curriculum.shards import ShardError
from pipelines.build.config import load_config
from pipelines.build.folder import FolderError, claim
from pipelines.build.markers import finish, finished
from pipelines.build.run import build
from pipelines.cli import main
from tests.pipelines.buildkit import rows, write_config

HOLD = """
import sys, time
from pathlib import Path
from pipelines.build.config import load_config
from pipelines.build.folder import claim
with claim(load_config(sys.argv[1]), Path(sys.argv[2])):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def copy(built_dataset, tmp_path) -> tuple[Path, Path]:
    """(config, a copy of the finished build made with it)."""
    out = tmp_path / "out"
    shutil.copytree(built_dataset, out)
    return built_dataset.parent / "build.toml", out


def _listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"/" for p in sorted(folder.rglob("*"))}


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _hold(cfg: Path, out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(cfg), str(out)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_unrelated_folder_is_refused_untouched(tmp_path, capsys):
    cfg = write_config(tmp_path)
    mine = tmp_path / "mine"
    (mine / "notes").mkdir(parents=True)
    (mine / "README.md").write_bytes(b"# my project\n\nnot a dataset \xe2\x9c\x93\n")
    (mine / "notes" / "todo.txt").write_text("keep me")
    before = _listing(mine)
    assert main(["build", str(cfg), "--out", str(mine)]) == 2
    err = capsys.readouterr().err
    assert str(mine) in err and "not a build" in err and "README.md" in err and "notes/" in err
    assert _listing(mine) == before  # byte for byte, and no lock or stamp left behind

    other = tmp_path / "other"
    other.mkdir()
    (other / "build.json").write_text('{"config_digest": "0123456789abcdef"}')
    assert main(["build", str(cfg), "--out", str(other)]) == 2
    err = capsys.readouterr().err
    assert str(other) in err and "another config (digest 0123456789abcdef" in err
    assert sorted(p.name for p in other.iterdir()) == ["build.json"]

    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["build", str(cfg), "--out", str(afile)]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_second_build_is_refused_while_the_lock_is_held(copy, capsys):
    cfg, out = copy
    holder = _hold(cfg, out)
    try:
        assert main(["build", str(cfg), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"--out {out}: another build holds the folder (pid {holder.pid})" in err
    finally:
        holder.kill()  # SIGKILL: the kernel drops the lock with the process
        holder.wait()
    with claim(load_config(cfg), out) as resuming:
        assert resuming
        with pytest.raises(FolderError, match=f"another build holds the folder \\(pid {os.getpid()}\\)"):
            with claim(load_config(cfg), out):
                pass


def test_marker_is_trusted_only_while_its_files_match(tmp_path):
    shard = tmp_path / "sft" / "a.parquet"
    shard.parent.mkdir()
    shard.write_bytes(b"0123456789")
    made = finish(tmp_path, "teach-a", {"shard": "a"}, [shard, tmp_path / "sft" / "empty.parquet"])
    assert made["files"] == {"sft/a.parquet": {"bytes": 10, "sha256": made["files"]["sft/a.parquet"]["sha256"]}}
    done, why = finished(tmp_path, "teach-a")
    assert done["shard"] == "a" and done["resumed"] and why is None
    shard.write_bytes(b"0123456780")  # same size, other bytes
    assert finished(tmp_path, "teach-a") == (None, f"{shard} does not match the checksum its marker recorded")
    shard.write_bytes(b"01234")
    assert finished(tmp_path, "teach-a") == (None, f"{shard} has 5 bytes, its marker recorded 10")
    shard.unlink()
    assert finished(tmp_path, "teach-a") == (None, f"{shard} is missing")
    assert finished(tmp_path, "teach-b") == (None, None)
    (tmp_path / ".done" / "teach-old.json").write_text('{"shard": "old"}')  # a marker from before checksums
    assert finished(tmp_path, "teach-old")[1].endswith("records no file checksums")


def test_export_names_a_truncated_shard(copy, tmp_path):
    _, out = copy
    bad = out / "sft" / "stage1-00001.parquet"
    _truncate(bad)
    with pytest.raises(ShardError) as err:
        export(out, "sft", tmp_path / "export")
    assert str(err.value).startswith(f"{bad}: not a readable Parquet shard: ") and "magic bytes" in str(err.value)


def test_deleted_and_truncated_shards_are_rebuilt_after_a_killed_holder(copy, built_dataset, capsys):
    cfg, out = copy
    want = rows(built_dataset)
    deleted = out / "sft" / "stage1-00000.parquet"
    truncated = out / "heldout" / "level=1" / "heldout-L1-00000.parquet"
    deleted.unlink()  # its done marker stays
    _truncate(truncated)
    holder = _hold(cfg, out)
    os.kill(holder.pid, signal.SIGKILL)  # a build killed while it held the folder
    holder.wait()
    m = build(load_config(cfg), out, progress=False)
    assert rows(out) == want  # the deleted shard's rows are back, the truncated one is whole again
    assert m["counts"]["sft"] == 4 and m["counts"]["heldout"] == {"level=1": 2}
    assert m["shards"]["resumed"] == 3  # all but teach-stage1-00000 and sample-heldout-L1-00000
    err = capsys.readouterr().err
    assert f"{deleted} is missing" in err and f"{truncated} has " in err
