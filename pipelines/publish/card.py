"""The dataset card: README.md with the Hub's YAML metadata, three PNG plots, and the verifier's doc.

The YAML holds `configs` (one per loadable table; `rl` is the default), `dataset_info` (features
and sizes of every config and split, as `datasets` writes it), `size_categories`, `language` and
the license. The card links `docs/verifier.md`, copied beside it, so how every row was judged
travels with the data. The card reads only the shards the manifest lists: anything else in the
folder is not the dataset.
"""
from __future__ import annotations

import json
from collections import Counter
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import jinja2

from curriculum.shards import read_metadata, read_table
from synth.atomic_write import atomic_path, atomic_write_text
from synth.catalog import DATA_DIR, default_catalog

PLOTS = ("plots/levels.png", "plots/operator_coverage.png", "plots/verdicts.png")
VERIFIER_DOC = "docs/verifier.md"
DEFAULT_CONFIG = "rl"  # what `load_dataset(repo_id)` loads: the curriculum RL rows, training and held-out
# The Hub's size buckets: (upper bound of rows, tag)
SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
         (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"))


def _listed(manifest: dict[str, Any], pattern: str) -> list[str]:
    """The manifest's files that a card config's pattern covers."""
    return [rel for rel in manifest["files"] if fnmatchcase(rel, pattern)]


def _configs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Each config lists only folders that hold shards, so every one of them loads."""
    configs = []

    def add(name: str, files: list[tuple[str, str]]) -> None:
        files = [(split, pattern) for split, pattern in files if _listed(manifest, pattern)]
        if files:
            configs.append({"name": name, "files": files})

    add("sft", [("train", "sft/*.parquet")])
    add("rl", [("train", "rl/*/*.parquet"), ("test", "heldout/*/*.parquet")])
    for key in manifest["counts"]["rl"]:
        add(f"stage{key.split('=')[1]}", [("train", f"rl/{key}/*.parquet")])
    for key in manifest["counts"]["heldout"]:
        add(f"heldout_level{key.split('=')[1]}", [("test", f"heldout/{key}/*.parquet")])
    add("problems", [("train", "problems/*.parquet")])
    add("attempts", [("train", "samples/*.parquet")])
    return configs


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")  # the temporary's name ends in .tmp: say the format
    plt.close(fig)
    return path


def plot_all(out: Path, manifest: dict[str, Any]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    levels: Counter = Counter()
    op_level: Counter = Counter()
    for rel in _listed(manifest, "problems/*.parquet"):
        t = read_table(out / rel, columns=["level", "ops"]).to_pylist()
        for row in t:
            levels[row["level"]] += 1
            for op in row["ops"]:
                op_level[(op, row["level"])] += 1
    made = []

    fig, ax = plt.subplots(figsize=(6, 3.2))
    ks = sorted(levels)
    ax.bar([str(k) for k in ks], [levels[k] for k in ks], color="#4c72b0")
    ax.set_xlabel("level (compute ops)")
    ax.set_ylabel("problems")
    ax.set_title("Problems per level")
    made.append(_save(plt, fig, out / PLOTS[0]))

    ops = sorted(default_catalog(), key=lambda n: (default_catalog()[n].family, n))
    grid = np.array([[op_level[(op, k)] for k in ks] for op in ops], dtype=float) if ks else np.zeros((len(ops), 1))
    fig, ax = plt.subplots(figsize=(2.5 + 0.6 * max(1, len(ks)), 0.12 * len(ops) + 1.5))
    im = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_yticks(range(len(ops)), [f"{default_catalog()[o].family}: {o}" for o in ops], fontsize=5)
    ax.set_xticks(range(len(ks)), [str(k) for k in ks])
    ax.set_xlabel("level")
    ax.set_title(f"Operator coverage ({sum(1 for o in ops if any(op_level[(o, k)] for k in ks))}/{len(ops)} ops seen)",
                 fontsize=9)
    fig.colorbar(im, ax=ax, label="occurrences")
    made.append(_save(plt, fig, out / PLOTS[1]))

    verdicts = manifest.get("verdicts", {})
    fig, ax = plt.subplots(figsize=(6, 3.2))
    names = sorted(verdicts, key=lambda k: -verdicts[k])
    ax.barh(names or ["(no attempts)"], [verdicts[k] for k in names] or [0],
            color=["#55a868" if k == "pass" else "#c44e52" for k in names] or None)
    ax.invert_yaxis()
    ax.set_xlabel("attempts")
    ax.set_title("Verdicts")
    made.append(_save(plt, fig, out / PLOTS[2]))
    return made


def size_category(rows: int) -> str:
    return next((tag for bound, tag in SIZES if rows < bound), "n>1B")


def card_data(out: Path, manifest: dict[str, Any], configs: list[dict[str, Any]]):
    """The card's YAML metadata, with `dataset_info` made by `datasets` from the shards' own schemas
    and Parquet footers (num_bytes: uncompressed; download_size: the files)."""
    import pyarrow.parquet as pq
    from datasets import DatasetInfo, Features, SplitDict, SplitInfo
    from datasets.info import DatasetInfosDict
    from huggingface_hub import DatasetCardData

    cfg = manifest["config"]
    infos, largest = DatasetInfosDict(), 0
    for c in configs:
        splits, files, schema = SplitDict(), set(), None
        for split, pattern in c["files"]:
            listed = _listed(manifest, pattern)
            metas = [read_metadata(out / rel) for rel in listed]
            schema = schema or pq.read_schema(out / listed[0])
            splits.add(SplitInfo(split, num_bytes=sum(rg.total_byte_size for m in metas for rg in
                                                     (m.row_group(i) for i in range(m.num_row_groups))),
                                 num_examples=sum(m.num_rows for m in metas)))
            files.update(listed)
        largest = max(largest, sum(s.num_examples for s in splits.values()))
        infos[c["name"]] = DatasetInfo(features=Features.from_arrow_schema(schema), splits=splits,
                                       download_size=sum(manifest["files"][rel]["bytes"] for rel in files),
                                       dataset_size=sum(s.num_bytes for s in splits.values()))
    names = [c["name"] for c in configs]
    default = DEFAULT_CONFIG if DEFAULT_CONFIG in names else names[0] if names else None
    data = DatasetCardData(
        license=cfg.get("license", "apache-2.0"), language=["en"], pretty_name=cfg.get("name", "tritonforge"),
        size_categories=[size_category(largest)], task_categories=["text-generation"],
        tags=["triton", "gpu-kernels", "code", "synthetic", "kernelbench"],
        configs=[{"config_name": c["name"], **({"default": True} if c["name"] == default else {}),
                  "data_files": [{"split": split, "path": pattern} for split, pattern in c["files"]]}
                 for c in configs])
    infos.to_dataset_card_data(data)
    return data


def render_card(out: Path, manifest: dict[str, Any], repo_id: str | None = None) -> str:
    cfg = manifest["config"]
    configs = _configs(manifest)
    what = {"sft": "verified (prompt, plan + code) conversations", "rl": "RL prompts with reference and verify spec",
            "problems": "the sampled programs", "attempts": "every teacher attempt with its verdict"}
    table = []
    for c in configs:
        for split, pattern in c["files"]:
            rows = sum(read_metadata(out / rel).num_rows for rel in _listed(manifest, pattern))
            desc = what.get(c["name"]) or ("curriculum stage (RL)" if c["name"].startswith("stage") else "held-out evaluation prompts")
            table.append({"config": c["name"], "split": split, "rows": rows, "what": desc})
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(DATA_DIR / "templates")), trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    verdicts = manifest.get("verdicts", {})
    return env.get_template("card.md.j2").render(
        front_matter=card_data(out, manifest, configs).to_yaml(), name=cfg.get("name", "tritonforge"),
        table=table, repo_id=repo_id or f"ORG/{cfg.get('name', 'tritonforge')}", n_ops=len(default_catalog()),
        teacher=cfg["teacher"]["spec"], samples=cfg["teacher"]["samples"], rounds=cfg["teacher"]["rounds"],
        trials=5, device=cfg["verify"]["device"], attempts=sum(verdicts.values()),
        baselines=cfg["verify"].get("timing", "eager+compile"),  # builds before the choice timed both
        verdicts=", ".join(f"{k} {v}" for k, v in verdicts.items()) or "none",
        digest=manifest["config_digest"], config_json=json.dumps(cfg, indent=1, sort_keys=True, default=list),
        versions=", ".join(f"{k} {v}" for k, v in manifest["versions"].items()), verifier_doc=VERIFIER_DOC,
        version=manifest["versions"].get("tritonforge", "dev"),
    )


def write_card(out: str | Path, manifest: dict[str, Any] | None = None, repo_id: str | None = None) -> Path:
    """Write the card, its plots and the verifier's doc into `out`."""
    import importlib.resources

    out = Path(out)
    manifest = manifest or json.loads((out / "manifest.json").read_text())
    plot_all(out, manifest)
    doc = importlib.resources.files("tritonforge_docs").joinpath(Path(VERIFIER_DOC).name).read_text(encoding="utf-8")
    atomic_write_text(out / VERIFIER_DOC, doc)
    text = render_card(out, manifest, repo_id)
    atomic_write_text(out / "README.md", text)
    return out / "README.md"
