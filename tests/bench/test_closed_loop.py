"""bench/closed_loop.py: the held-out split, the configs it hands the project's commands, the report, and
(slow lane) the whole loop on the CPU with the smoke profile."""
import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "closed_loop.py"
sys.path.insert(0, str(REPO / "bench"))

from closed_loop_parts import profiles  # noqa: E402 - after the path is set
from closed_loop_parts.common import Layout  # noqa: E402


def _row(pid: str, dag: str, ops: list[str]) -> dict:
    return {"problem_id": pid, "extra_info": {"dag_hash": dag, "ops": ops}}


def test_split_heldout_keeps_the_sets_apart_and_away_from_training():
    from closed_loop_parts.data import split_heldout

    held = [_row("a", "h1", ["relu", "add"]), _row("b", "t1", ["relu"]),        # b: a training dag_hash
            _row("c", "h1", ["add", "relu"]),                                   # c: a repeat of a's hash
            _row("d", "h2", ["add", "relu"]), _row("e", "h3", ["exp", "tanh"]),
            _row("f", "h4", ["tanh", "exp"]), _row("g", "h5", ["sigmoid", "sum"]), _row("h", "h6", ["relu"]),
            _row("i", "h7", ["exp"]), _row("j", "h7", ["exp"]), _row("k", "h8", ["sum"])]   # j: a repeat of i's
    parts = split_heldout(held, train_hashes={"t1"}, train_multisets={("add", "relu"), ("relu",)},
                          test_size=2, val_size=2)
    ids = {k: [r["problem_id"] for r in v] for k, v in parts.items()}
    assert ids["dag"] == ["a", "d"]                           # the first two new hashes, in the build's order
    assert ids["ops"] == ["e", "f"]                           # multisets no training problem has
    assert ids["val"] == ["g", "h"]                           # the rest, neither b nor c
    assert ids["rl"] == ["i", "k"]                            # GRPO's prompts: what is left, once each
    assert not set(ids["dag"]) & set(ids["ops"]) and not set(ids["val"]) & (set(ids["dag"]) | set(ids["ops"]))


def test_grpo_prompts_are_unseen_problems_of_their_stage(tmp_path):
    from closed_loop_parts.data import as_prompt

    row = {"problem_id": "x", "stage": 0, "extra_info": {"dag_hash": "h", "ops": [], "stage": 0, "split": "test"}}
    got = as_prompt(row, 2)
    assert got["stage"] == 2 and got["extra_info"] == {"dag_hash": "h", "ops": [], "stage": 2, "split": "train"}
    assert row["stage"] == 0 and row["extra_info"]["stage"] == 0          # the held-out row itself is unchanged


@pytest.mark.parametrize("name", ["smoke", "gpu"])
def test_the_build_config_is_one_the_build_accepts(name):
    from closed_loop_parts.data import build_toml

    from pipelines.build.config import parse_config

    p = profiles.PROFILES[name].with_levels((1, 2, 5))
    cfg = parse_config(tomllib.loads(build_toml(p)))
    assert [(s.index, s.levels, s.size) for s in cfg.curriculum.stages] == \
        [(1, (1,), p.stage_size[1]), (2, (2,), p.stage_size[2]), (3, (5,), p.stage_size[2])]
    assert cfg.curriculum.heldout_levels == (1, 2, 5) and cfg.curriculum.heldout_size == p.heldout_size
    assert cfg.teacher.spec == "lowering" and cfg.verify.device == p.device
    assert p.heldout_size > 2 * p.test_size + p.val_size                   # room for dag, ops, val and GRPO's prompts


@pytest.mark.parametrize("name", ["smoke", "gpu"])
def test_the_grpo_config_is_one_train_grpo_accepts(name, tmp_path):
    from closed_loop_parts.grpo import grpo_toml

    from pipelines.grpo.config import grpo_args, parse_config

    p = profiles.PROFILES[name]
    cfg = parse_config(tomllib.loads(grpo_toml(Layout(tmp_path), p, 512, 700)))
    args = grpo_args(cfg)
    assert cfg.model.path == str(tmp_path / "student" / "sft") and cfg.data.dir == str(tmp_path / "grpo-data")
    assert cfg.model.lora is None and cfg.reward.scheme == "drtriton" and cfg.data.max_prompt_tokens == 700
    assert args.num_generations == p.grpo_generations and args.max_completion_length == 512
    assert cfg.curriculum.max_stage_steps == p.grpo_max_stage_steps
    assert args.temperature == p.grpo_temperature and args.learning_rate == p.grpo_lr


def test_the_gpu_student_fits_the_issue_limit():
    from closed_loop_parts.student import MAX_PARAMETERS

    from pipelines.grpo.tiny_model import llama_parameters

    p = profiles.GPU
    assert 30e6 < llama_parameters(p.vocab_size, p.hidden_size, p.num_layers, p.intermediate_size) <= MAX_PARAMETERS


def _summary(n: int, passed: int, faster: int | None) -> dict:
    from closed_loop_parts.evaluate import summarize

    recs = [{"status": "pass" if i < passed else "wrong_output", "speedup_eager": None if faster is None else
             (2.0 if i < faster else 0.5), "ended": True, "new_tokens": 10} for i in range(n)]
    return summarize(recs)


def test_a_budget_cut_takes_every_set_and_level_alike():
    from closed_loop_parts.evaluate import interleaved

    items = [("dag", 1)] * 3 + [("dag", 2)] * 2 + [("ops", 2)] * 3
    order = interleaved(items, lambda x: x)
    assert order == [0, 3, 5, 1, 4, 6, 2, 7]
    assert [items[i] for i in order[:3]] == [("dag", 1), ("dag", 2), ("ops", 2)]


def test_report_states_the_figures_and_the_targets(tmp_path):
    from closed_loop_parts import report

    lay = Layout(tmp_path)
    lay.evals.mkdir(parents=True)
    lay.stages.mkdir(parents=True)
    figures = {"base": (0, 0, None), "sft": (12, 3, 1), "grpo": (12, 5, 1)}   # level 2: 3/10 -> 5/10
    for tag, (p1, p2, f) in figures.items():
        sets = {"dag": {"1": _summary(20, p1, f), "2": _summary(10, p2, f)}, "ops": {"1": _summary(0, 0, f),
                                                                                   "2": _summary(10, 0, f)}}
        step = {"base": None, "sft": 0, "grpo": 8}[tag]
        (lay.evals / f"{tag}.json").write_text(json.dumps({"tag": tag, "grpo_step": step, "sets": sets}))
        (lay.stages / f"eval-{tag}.json").write_text(json.dumps({"stage": f"eval-{tag}", "seconds": 12.0, "device": "cpu",
                                                                 "commit": "abc1234", "command": "x", "commands": []}))
    text = report.run(lay, profiles.SMOKE).read_text()
    assert "| dag | 1 | 0/20 (0.0%) | 12/20 (60.0%) | 12/20 (60.0%) |" in text
    assert "| ops | 1 | — | — | — |" in text                          # an empty set is shown as not measured
    assert "| SFT level-1 pass@1 >= 50% | 60.0% | met |" in text
    assert "| SFT level-2 pass@1 >= 20% | 30.0% | met |" in text
    assert "pass@1 +20.0 pts" in text and "faster +0.0 pts" in text
    assert (tmp_path / "pass_at_1.png").stat().st_size > 1000
    assert json.loads(lay.results.read_text())["targets"][2][2] == "met"


def test_a_stage_without_its_inputs_says_which_to_run(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "student", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "run the `data` stage first" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_the_smoke_loop_runs_end_to_end(tmp_path):
    """The whole loop on the CPU: every stage's files, sets disjoint from training, a report with every
    stage; then the verification path passes the lowering teacher's own answers to two test problems
    (the smoke student is too small to write code, so its evaluations never reach the verifier)."""
    out = tmp_path / "cl"
    r = subprocess.run([sys.executable, str(SCRIPT), "--profile", "smoke", "all", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    lay = Layout(out)
    data = json.loads(lay.data_json.read_text())
    assert data["sft"]["rows"] >= 4 and data["splits"]["sets"]["dag"] == {"1": 2, "2": 2}
    assert data["splits"]["sets"]["ops"]["2"] >= 1                      # level-2 multisets training lacks

    from curriculum.schemas import RL_SCHEMA
    from curriculum.shards import read_folder

    train = read_folder(lay.build / "rl", RL_SCHEMA).to_pylist()
    tests = read_folder(lay.eval_sets, RL_SCHEMA).to_pylist()
    val = read_folder(lay.grpo_data / "heldout", RL_SCHEMA).to_pylist()
    prompts = read_folder(lay.grpo_data / "rl", RL_SCHEMA).to_pylist()      # GRPO's: problems SFT never saw
    assert prompts and {t["stage"] for t in prompts} == {1, 2}
    assert not {t["extra_info"]["dag_hash"] for t in train} & {t["extra_info"]["dag_hash"] for t in tests + val + prompts}
    assert len({t["problem_id"] for t in tests + val + prompts}) == len(tests + val + prompts)
    seen = [read_folder(f, RL_SCHEMA).num_rows for f in (lay.grpo_data / "seen").glob("stage=*")]
    assert sum(seen) == len(train)                                     # the export, kept for the record

    student = json.loads((out / "student.json").read_text())
    assert student["steps"] == 4 and student["model"]["parameters"] < 1_000_000
    for tag in ("base", "sft", "grpo"):
        ev = json.loads((lay.evals / f"{tag}.json").read_text())
        assert ev["sets"]["dag"]["1"]["n"] == 2 and ev["sets"]["dag"]["2"]["n"] == 2
    steps = [json.loads(x)["step"] for x in (lay.grpo / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    text = lay.report.read_text()
    for stage in ("data", "student", "eval-base", "eval-sft", "grpo", "eval-grpo"):
        assert f"| {stage} |" in text
    assert "tritonforge build" in text and "tritonforge train-grpo" in text and "## Targets" in text

    from closed_loop_parts.evaluate import heldout_problems, verify, test_sets

    from distill.lowering import lower

    problems = heldout_problems(lay)
    rows = [rows[0] for name, lv, rows in test_sets(lay, profiles.SMOKE) if name == "dag"]
    pairs = [(problems[r["problem_id"]], lower(problems[r["problem_id"]]).completion(), True) for r in rows]
    pairs.append((pairs[0][0], "no code here", True))
    got = verify(pairs, "cpu", 1, 120.0)
    assert [g["status"] for g in got] == ["pass", "pass", "no_code"]
    # past the stage's deadline nothing starts: the answers with code are not reached (None), not failed
    late = verify(pairs, "cpu", 1, 120.0, deadline=time.monotonic() - 1)
    assert late[:2] == [None, None] and late[2]["status"] == "no_code"
