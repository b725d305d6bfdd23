"""Every argument of `tritonforge distill` is checked before a teacher starts: a bad one exits 2 with a
message naming the flag or file, no traceback, no chat request sent and no --out folder made."""
from __future__ import annotations

import socket
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chat_server import ChatServer, serve

from distill.teacher.base import ROUNDS_CAP, SAMPLES_CAP
from pipelines.cli import main


@pytest.fixture(scope="module")
def server():
    with serve(ChatServer()) as s:
        yield s


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _files(tmp: Path, problems) -> dict[str, str]:
    """The files the cases name, by placeholder."""
    good = tmp / "problems.parquet"
    pq.write_table(pa.Table.from_pylist([p.to_row() for p in problems]), good)
    empty = tmp / "empty.parquet"
    pq.write_table(pa.Table.from_pylist([], schema=pq.read_schema(good)), empty)
    answers = {
        "empty.jsonl": b"",
        "latin1.jsonl": b'{"problem_id": "kb_relu", "completion": "x"}\n{"problem_id": "kb_relu", "completion": "caf\xe9"}\n',
        "huge_sample.jsonl": b'{"problem_id": "kb_relu", "completion": "x", "sample": 1000000000}\n',
        "huge_round.jsonl": b'{"problem_id": "kb_relu", "completion": "x"}\n{"problem_id": "kb_relu", "completion": "x", "round": 17}\n',
        "huge_tokens.jsonl": b'{"problem_id": "kb_relu", "completion": "x", "prompt_tokens": 99999999999999999999}\n',
        "other.jsonl": b'{"problem_id": "not_in_the_file", "completion": "x"}\n',
    }
    for name, data in answers.items():
        (tmp / name).write_bytes(data)
    (tmp / "a_file").write_text("not a folder")
    (tmp / "model").mkdir()
    return {"{problems}": str(good), "{empty}": str(empty), "{tmp}": str(tmp), "{dead}": f"http://127.0.0.1:{_free_port()}"}


CASES = [
    # (case id, arguments replacing the defaults, the server's /models answer or None, words the message holds)
    ("samples-0", ["--samples", "0"], None, ["--samples must be from 1 to 1024, got 0"]),
    ("samples-past-cap", ["--samples", str(SAMPLES_CAP + 1)], None, ["--samples must be from 1 to 1024"]),
    ("rounds-negative", ["--rounds", "-1"], None, ["--rounds must be from 0 to 16, got -1"]),
    ("rounds-past-cap", ["--rounds", str(ROUNDS_CAP + 1)], None, ["--rounds must be from 0 to 16"]),
    ("temperature-negative", ["--temperature", "-1"], None, ["--temperature must be a finite number >= 0"]),
    ("temperature-nan", ["--temperature", "nan"], None, ["--temperature must be"]),
    ("top-p-0", ["--top-p", "0"], None, ["--top-p must be in (0, 1]"]),
    ("top-p-above-1", ["--top-p", "1.5"], None, ["--top-p must be in (0, 1]"]),
    ("top-k-negative", ["--top-k", "-1"], None, ["--top-k must be >= 0"]),
    ("max-tokens-0", ["--max-tokens", "0"], None, ["--max-tokens must be >= 1, got 0"]),
    ("concurrency-0", ["--concurrency", "0"], None, ["--concurrency must be >= 1"]),
    ("timeout-0", ["--timeout", "0"], None, ["--timeout must be a finite number of seconds > 0"]),
    ("timeout-inf", ["--timeout", "inf"], None, ["--timeout must be"]),
    ("verify-workers-0", ["--verify-workers", "0"], None, ["--verify-workers must be >= 1"]),
    ("retries-negative", ["--retries", "-1"], None, ["--retries must be >= 0"]),
    ("limit-0", ["--limit", "0"], None, ["--limit must be >= 1"]),
    ("prompt-unknown", ["--prompt", "nope"], None, ["--prompt", "unknown prompt set 'nope'", "kernelbench"]),
    ("teacher-unknown", ["--teacher", "gpt4"], None, ["--teacher", "unknown teacher 'gpt4'"]),
    ("teacher-no-arg", ["--teacher", "vllm:"], None, ["needs an argument: vllm:PATH"]),
    ("lowering-with-arg", ["--teacher", "lowering:x"], None, ["takes no argument"]),
    ("vllm-missing-folder", ["--teacher", "vllm:{tmp}/no-such-model"], None, ["no-such-model", "no such folder"]),
    ("vllm-folder-without-config", ["--teacher", "vllm:{tmp}/model"], None, ["no config.json"]),
    ("vllm-unknown-hub-id", ["--teacher", "vllm:no-org/no-such-model"], None, ["not a model in the local Hugging Face cache"]),
    ("replay-missing", ["--teacher", "replay:{tmp}/nope.jsonl"], None, ["replay file not found", "nope.jsonl"]),
    ("replay-empty", ["--teacher", "replay:{tmp}/empty.jsonl"], None, ["empty.jsonl: no recorded answers"]),
    ("replay-not-utf8", ["--teacher", "replay:{tmp}/latin1.jsonl"], None, ["latin1.jsonl:2: not UTF-8"]),
    ("replay-huge-sample", ["--teacher", "replay:{tmp}/huge_sample.jsonl"], None,
     ["huge_sample.jsonl:1: 'sample' must be an integer from 0 to 1023, got 1000000000"]),
    ("replay-huge-round", ["--teacher", "replay:{tmp}/huge_round.jsonl"], None, ["huge_round.jsonl:2: 'round'"]),
    ("replay-huge-tokens", ["--teacher", "replay:{tmp}/huge_tokens.jsonl"], None, ["huge_tokens.jsonl:1: 'prompt_tokens'"]),
    ("replay-no-matching-problem", ["--teacher", "replay:{tmp}/other.jsonl"], None, ["no first-round answer"]),
    ("openai-unreachable", ["--teacher", "openai:{dead}"], None, ["--teacher openai:http://127.0.0.1:", "cannot reach"]),
    ("openai-models-list", [], [], ["/models did not answer a model list"]),
    ("openai-no-models", [], {"data": []}, ["lists no models"]),
    ("openai-models-slow", ["--timeout", "1"], "slow", ["/v1/models did not answer within 1s"]),
    ("openai-other-model", ["--model", "other"], None, ["--model other: the server at", "recorded-teacher"]),
    ("problems-missing", ["--problems", "{tmp}/nope.parquet"], None, ["--problems", "nope.parquet: no such file"]),
    ("problems-0-rows", ["--problems", "{empty}"], None, ["--problems", "no problems in", "empty.parquet"]),
    ("out-is-a-file", ["--out", "{tmp}/a_file"], None, ["--out", "a_file: exists and is not a folder"]),
]


@pytest.mark.parametrize("argv, models, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_exits_2_naming_it_before_any_teacher_starts(server, problems, tmp_path, capsys, argv, models, words):
    files = _files(tmp_path, problems)
    server.models = {"data": [{"id": "recorded-teacher"}]} if models in (None, "slow") else models
    server.models_delay_s = 3.0 if models == "slow" else 0.0
    args = {"--problems": "{problems}", "--teacher": f"openai:{server.url}", "--out": "{tmp}/out"}
    args.update(zip(argv[::2], argv[1::2]))
    line = ["distill"] + [x for kv in args.items() for x in kv]
    for key, value in files.items():
        line = [x.replace(key, value) for x in line]
    asked = len(server.asked)
    assert main(line) == 2
    err = capsys.readouterr().err
    assert err.startswith("tritonforge distill: error: ") and "Traceback" not in err
    for w in words:
        assert w in err
    assert len(server.asked) == asked, "no chat request may be sent"
    assert not (tmp_path / "out").exists(), "nothing may be written"
