"""The dataset card's Hub metadata: a default config, dataset_info from the shards, size, language,
license, citation and the verifier's doc beside it; and `publish --dry-run` writes nothing."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from huggingface_hub import DatasetCard

from pipelines.cli import main
from pipelines.publish.card import VERIFIER_DOC, size_category

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_card_metadata_describes_every_config(built_dataset):
    from datasets import Features
    from datasets.info import DatasetInfosDict

    card = DatasetCard((built_dataset / "README.md").read_text())
    meta = card.data.to_dict()
    assert [c["config_name"] for c in meta["configs"] if c.get("default")] == ["rl"]
    assert meta["language"] == ["en"] and meta["license"] == "apache-2.0" and meta["size_categories"] == ["n<1K"]
    infos = DatasetInfosDict.from_dataset_card_data(card.data)  # as `datasets` reads it back
    assert set(infos) == {c["config_name"] for c in meta["configs"]}
    manifest = json.loads((built_dataset / "manifest.json").read_text())
    rl = infos["rl"]
    assert {k: v.num_examples for k, v in rl.splits.items()} == {"train": 4, "test": 2}
    shard = built_dataset / next(rel for rel in manifest["files"] if rel.startswith("rl/"))
    assert rl.features == Features.from_arrow_schema(pq.read_schema(shard))
    assert rl.download_size == sum(r["bytes"] for rel, r in manifest["files"].items()
                                   if rel.startswith(("rl/", "heldout/")))
    assert infos["sft"].splits["train"].num_examples == manifest["counts"]["sft"]
    assert all(i.dataset_size > 0 for i in infos.values())


def test_card_links_the_verifier_doc_and_cites(built_dataset):
    text = (built_dataset / "README.md").read_text()
    assert f"]({VERIFIER_DOC})" in text
    assert (built_dataset / VERIFIER_DOC).read_text() == (DOCS / "verifier.md").read_text()
    assert "## Citation" in text and "@misc{relu_test," in text and "https://huggingface.co/datasets/" in text


def test_card_says_which_timing_baselines_a_gpu_build_used(built_dataset):
    from pipelines.publish.card import render_card

    manifest = json.loads((built_dataset / "manifest.json").read_text())
    assert "Timing baselines" not in render_card(built_dataset, manifest)  # a CPU build times nothing
    for timing, says in (("eager", "against eager PyTorch only: `speedup_compile` is null"),
                         ("off", "nothing timed: every speedup is null"), (None, "eager PyTorch and torch.compile")):
        verify = {k: v for k, v in manifest["config"]["verify"].items() if k != "timing"}
        verify.update({"device": "cuda"} | ({"timing": timing} if timing else {}))  # None: a build before the choice
        text = render_card(built_dataset, {**manifest, "config": {**manifest["config"], "verify": verify}})
        assert f"Timing baselines (`[verify] timing`): `{timing or 'eager+compile'}`" in text and says in text


def test_the_default_config_is_what_load_dataset_gives(built_dataset):
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset(str(built_dataset))  # no config name, as a Hub user would first try
    assert {k: v.num_rows for k, v in ds.items()} == {"train": 4, "test": 2}
    assert ds["train"][0]["ability"] == "triton"


def test_size_categories():
    assert [size_category(n) for n in (0, 999, 1000, 54_321, 2_000_000)] == \
        ["n<1K", "n<1K", "1K<n<10K", "10K<n<100K", "1M<n<10M"]


def _snapshot(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in folder.rglob("*")}


def test_publish_dry_run_writes_nothing(built_dataset, capsys):
    before = _snapshot(built_dataset)
    assert main(["publish", str(built_dataset), "--repo-id", "someorg/relu-test", "--dry-run"]) == 0
    assert "dry run: nothing written, nothing uploaded" in capsys.readouterr().out
    assert _snapshot(built_dataset) == before
    assert not [n for n in os.listdir(built_dataset) if n.endswith(".tmp")]
