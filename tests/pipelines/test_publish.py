"""The dataset card: YAML configs that `datasets` loads as the Hub would, plots, and the publish plan."""
import json
import shutil

import pytest
import yaml
from huggingface_hub.utils import filter_repo_objects

from pipelines.cli import main
from pipelines.publish.card import PLOTS, VERIFIER_DOC
from pipelines.publish.hub import PublishError, allow_patterns, make_plan


def _configs(folder):
    text = (folder / "README.md").read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---")[1])


def test_card_has_configs_counts_and_plots(built_dataset):
    meta = _configs(built_dataset)
    names = [c["config_name"] for c in meta["configs"]]
    assert {"sft", "rl", "stage1", "heldout_level1", "problems", "attempts"} <= set(names)
    assert meta["license"] == "apache-2.0"
    text = (built_dataset / "README.md").read_text()
    for plot in ("levels", "operator_coverage", "verdicts"):
        png = built_dataset / "plots" / f"{plot}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000
        assert f"plots/{plot}.png" in text
    assert "Verification" in text and "replay:" in text and "torch" in text


def test_every_config_loads_with_datasets_like_the_hub(built_dataset):
    datasets = pytest.importorskip("datasets")
    manifest = json.loads((built_dataset / "manifest.json").read_text())
    for c in _configs(built_dataset)["configs"]:
        ds = datasets.load_dataset(str(built_dataset), c["config_name"])
        n = {split: d.num_rows for split, d in ds.items()}
        if c["config_name"] == "sft":
            assert n == {"train": manifest["counts"]["sft"]}
            assert ds["train"][0]["messages"][-1]["role"] == "assistant"
        if c["config_name"] == "stage1":
            assert n == {"train": manifest["counts"]["rl"]["stage=1"]}
            row = ds["train"][0]
            assert row["ability"] == "triton" and row["reward_model"]["style"] == "rule"
            assert "class Model" in json.loads(row["reward_model"]["ground_truth"])["reference"]
        assert all(v > 0 for v in n.values())


def test_publish_dry_run_and_errors(built_dataset, capsys):
    assert main(["publish", str(built_dataset), "--repo-id", "someorg/relu-test", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "someorg/relu-test" in out and "README.md" in out and "plots/levels.png" in out
    assert "sft/stage1-00000.parquet" in out and ".done" not in out and "dry run: nothing written, nothing uploaded" in out
    assert "someorg/relu-test" not in (built_dataset / "README.md").read_text()  # a dry run writes nothing
    assert main(["publish", str(built_dataset), "--repo-id", "no-slash", "--dry-run"]) == 2
    assert "ORG/NAME" in capsys.readouterr().err
    with pytest.raises(PublishError, match="is not a build folder \\(no build.json\\)"):
        make_plan(built_dataset / "sft", "a/b")


@pytest.fixture
def copy(built_dataset, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(built_dataset, out)
    return out


def test_publish_lists_and_uploads_only_the_build_files(copy, capsys):
    (copy / "notes.txt").write_text("my notes")
    (copy / "private").mkdir()
    (copy / "private" / "token.txt").write_text("hf_secret")
    shutil.copy(copy / "sft" / "stage1-00000.parquet", copy / "sft" / "mine.parquet")  # a shard the build never made
    assert main(["publish", str(copy), "--repo-id", "someorg/relu-test", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "notes.txt" not in out and "private" not in out and "mine.parquet" not in out
    manifest = json.loads((copy / "manifest.json").read_text())
    plan = make_plan(copy, "someorg/relu-test")
    assert plan.files == sorted([*manifest["files"], "manifest.json", "README.md", *PLOTS, VERIFIER_DOC])
    assert all(f"  {rel}  (" in out for rel in plan.files)
    everything = [p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()]
    assert sorted(filter_repo_objects(everything, allow_patterns=allow_patterns(plan))) == plan.files  # as the upload filters


def test_publish_refuses_what_is_not_a_whole_build(copy, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "README.md").write_text("# mine\n")
    (mine / "manifest.json").write_text("{}")
    assert main(["publish", str(mine), "--repo-id", "a/b", "--dry-run"]) == 2
    assert f"{mine} is not a build folder (no build.json)" in capsys.readouterr().err
    assert (mine / "README.md").read_text() == "# mine\n"

    bad = copy / "rl" / "stage=1" / "stage1-00001.parquet"
    bad.write_bytes(bad.read_bytes()[:-100])
    card = (copy / "README.md").read_bytes()
    assert main(["publish", str(copy), "--repo-id", "a/b", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{bad} has " in err and "its marker recorded" in err and f"--out {copy}" in err
    assert (copy / "README.md").read_bytes() == card  # refused before the card was rewritten

    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["files"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert main(["publish", str(copy), "--repo-id", "a/b", "--dry-run"]) == 2
    assert "lists no files" in capsys.readouterr().err
