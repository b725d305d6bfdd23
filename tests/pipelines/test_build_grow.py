"""A build grows: a config with larger stage sizes resumes its folder, keeps every shard whose plan
is unchanged, remakes those that now start elsewhere, and ends with the dataset a fresh build at the
new sizes makes. Any other change is still refused."""
import json
from pathlib import Path

from pipelines.build.config import load_config, parse_config
from pipelines.build.folder import changed_shards, grown_from
from pipelines.build.run import build
from pipelines.cli import main
from tests.pipelines.buildkit import config_doc, rows, write_config


def _cfg(sizes: list[int], shard_size: int = 4, seed: int = 7):
    doc = config_doc(Path("/nonexistent/answers.jsonl"), shard_size=shard_size)
    doc["seed"] = seed
    doc["stage"] = [{"index": i, "levels": [i], "size": n} for i, n in enumerate(sizes, 1)]
    return parse_config(doc)


def _stamp(cfg) -> dict:
    return {"config_digest": cfg.digest(), "config": json.loads(json.dumps(cfg.to_dict(), default=list))}


def test_only_larger_stage_sizes_grow_a_build():
    old = _cfg([8, 8])
    assert grown_from(_cfg([8, 12]), _stamp(old)) == old
    assert grown_from(_cfg([16, 8]), _stamp(old)) == old
    assert grown_from(_cfg([4, 8]), _stamp(old)) is None          # a stage shrank
    assert grown_from(_cfg([8, 12], seed=8), _stamp(old)) is None  # another dataset
    assert grown_from(_cfg([8, 12], shard_size=2), _stamp(old)) is None
    assert grown_from(_cfg([8, 8, 8]), _stamp(old)) is None        # a stage added
    assert grown_from(_cfg([8, 12]), {"config_digest": old.digest()}) is None


def test_the_shards_a_growth_remakes_are_those_whose_range_or_offset_moved():
    old = _cfg([8, 8])
    assert changed_shards(old, _cfg([8, 16])) == []                 # the last stage grows: only new shards
    # the first stage grows: every stage-2 shard starts later in the dataset (its rows' indices change)
    assert changed_shards(old, _cfg([12, 8])) == ["stage2-00000", "stage2-00001"]
    # a partial last shard (6 of shard size 4) takes more problems: it is remade
    assert changed_shards(_cfg([6, 8]), _cfg([8, 8])) == ["stage1-00001", "stage2-00000", "stage2-00001"]


def test_a_grown_build_equals_a_fresh_build_at_the_new_size(built_dataset, tmp_path, capsys):
    cfg4 = write_config(tmp_path, size=4, shard_size=2)   # built_dataset's config, its replay file here
    cfg2 = tmp_path / "small.toml"
    text = cfg4.read_text()
    assert text.count("size = 4") == 1
    cfg2.write_text(text.replace("size = 4", "size = 2"))
    out = tmp_path / "out"
    build(load_config(cfg2), out, progress=False)
    first = {p: p.read_bytes() for p in (out / "sft").rglob("*.parquet")}
    assert first

    assert main(["build", str(cfg4), "--out", str(out), "--no-card"]) == 0
    err = capsys.readouterr().err
    assert "grows (stage 1 2 -> 4); 0 finished shard(s)" in err
    # the same rows, but for the samples' provenance, which names the replay file (here, not there)
    here = json.loads(json.dumps(rows(out)).replace(str(tmp_path), str(built_dataset.parent)))
    assert here == rows(built_dataset)
    assert all(p.read_bytes() == b for p, b in first.items())  # the first shards were kept, not remade
    assert json.loads((out / "build.json").read_text())["config_digest"] == load_config(cfg4).digest()

    # shrinking back is another config: refused, nothing touched
    assert main(["build", str(cfg2), "--out", str(out)]) == 2
    assert "only grow stage" in capsys.readouterr().err
