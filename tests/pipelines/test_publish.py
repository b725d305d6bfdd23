"""The dataset card: YAML configs that `datasets` loads as the Hub would, plots, and the publish plan."""
import json

import pytest
import yaml

from pipelines.cli import main
from pipelines.publish.hub import PublishError, make_plan


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
    assert "sft/stage1-00000.parquet" in out and ".done" not in out and "dry run: nothing uploaded" in out
    assert 'load_dataset("someorg/relu-test"' in (built_dataset / "README.md").read_text()
    assert main(["publish", str(built_dataset), "--repo-id", "no-slash", "--dry-run"]) == 2
    assert "ORG/NAME" in capsys.readouterr().err
    with pytest.raises(PublishError, match="no manifest.json"):
        make_plan(built_dataset / "sft", "a/b")
