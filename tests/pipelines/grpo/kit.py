"""Shared helpers of the GRPO tests: short-prompt RL shards and configs as plain dicts."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "data" / "fixtures" / "verifier"


def short_prompt(problem) -> list[dict[str, str]]:
    # Short on purpose: the full prompt sets are ~500 tokens, which only slows these tests down.
    return [{"role": "user", "content": f"Write a Triton ModelNew for this module:\n{problem.source[:160]}"}]


def write_shards(root: Path, stages: dict[int, int], heldout: int = 3, seed: int = 0) -> Path:
    """RL shards of level-k problems for stage k (size `stages[k]`), plus held-out rows per level."""
    import synth
    from curriculum.rows import rl_row
    from curriculum.schemas import RL_SCHEMA
    from curriculum.shards import write_rows

    for k, size in stages.items():
        ps = synth.sample(n=size, level=k, seed=seed + k)
        write_rows([rl_row(p, short_prompt(p), k, "train", i) for i, p in enumerate(ps)], RL_SCHEMA,
                   root / "rl" / f"stage={k}" / "part-00000.parquet")
        if heldout:
            hs = synth.sample(n=heldout, level=k, seed=seed + 100 + k)
            write_rows([rl_row(p, short_prompt(p), 0, "test", i) for i, p in enumerate(hs)], RL_SCHEMA,
                       root / "heldout" / f"level={k}" / "part-00000.parquet")
    return root


BASE: dict[str, Any] = {
    "name": "t", "plot": False,
    "model": {"path": ""},
    "data": {"dir": ""},
    "reward": {"scheme": "toy", "toy_pass": 0.5},
    "curriculum": {"eval_every": 2, "eval_size": 2},
    "grpo": {"seed": 0, "max_steps": 3, "save_steps": 1, "num_generations": 4, "per_device_train_batch_size": 8,
             "max_completion_length": 8, "learning_rate": 3e-3, "lr_scheduler_type": "constant"},
}


def config(model_path: Path, data_dir: Path, out_dir: Path, **sections: Any):
    """A checked RunConfig: BASE, the given paths, then each keyword as a section update or a top-level value."""
    from pipelines.grpo.config import parse_config

    raw = copy.deepcopy(BASE)
    raw["model"]["path"] = str(model_path)
    raw["data"]["dir"] = str(data_dir)
    for name, values in sections.items():
        if isinstance(values, dict):
            raw.setdefault(name, {}).update(values)
        else:
            raw[name] = values
    return parse_config(raw, str(out_dir))


def fixture_shards(root: Path, names: list[str], prompt: str = "Write a Triton ModelNew for: {name}") -> Path:
    """Stage-1 RL rows whose references are the verifier fixtures' problems (data/fixtures/verifier)."""
    import json

    from curriculum.rows import DATA_SOURCE, VERIFY_SPEC
    from curriculum.schemas import RL_SCHEMA
    from curriculum.shards import write_rows

    rows = []
    for i, name in enumerate(names):
        ref = (FIXTURES / "problems" / f"{name}.py").read_text()
        truth = {"reference": ref, "problem_id": f"fixture-{name}", "level": 1, "verify": VERIFY_SPEC}
        rows.append({
            "data_source": DATA_SOURCE, "prompt": [{"role": "user", "content": prompt.format(name=name)}],
            "ability": "triton", "reward_model": {"style": "rule", "ground_truth": json.dumps(truth)},
            "extra_info": {"index": i, "split": "train", "stage": 1, "level": 1, "dag_hash": name, "ops": [name],
                           "seed": 0, "problem_id": f"fixture-{name}"},
            "reference": ref, "problem_id": f"fixture-{name}", "level": 1, "stage": 1,
        })
    write_rows(rows, RL_SCHEMA, root / "rl" / "stage=1" / "part-00000.parquet")
    return root
