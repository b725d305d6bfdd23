"""Answers from an OpenAI-compatible server are read as the API documents them; an answer in any other
shape is a `teacher_error` row for that sample, never a crash that loses the run."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chat_server import ChatServer, serve

from distill.teacher.openai_backend import MalformedAnswer, read_answer
from distill.teacher.records import read_samples
from pipelines.cli import main


def body(content="hi", finish="stop", usage=None, **message):
    return {"choices": [{"index": 0, "finish_reason": finish,
                         "message": {"role": "assistant", "content": content, **message}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2} if usage is None else usage}


@pytest.mark.parametrize("data, want", [
    (body("plain"), ("plain", None, "stop", 3, 2)),
    (body(None), ("", None, "stop", 3, 2)),
    (body([{"type": "text", "text": "a "}, {"type": "text", "text": "b"}]), ("a b", None, "stop", 3, 2)),
    (body("x", reasoning_content="think"), ("x", "think", "stop", 3, 2)),
    (body("x", reasoning="think", reasoning_content=None), ("x", "think", "stop", 3, 2)),
    (body("x", finish=None, usage={}), ("x", None, "stop", None, None)),
    ({"choices": [{"message": {"content": "x"}, "finish_reason": "length"}]}, ("x", None, "length", None, None)),
])
def test_documented_formats_are_read(data, want):
    assert read_answer(data) == want


@pytest.mark.parametrize("data, field", [
    (body(7), "message.content is int"),
    (body({"text": "x"}), "message.content is dict"),
    (body([{"type": "image_url", "image_url": {"url": "x"}}]), "content[0] is a 'image_url' part"),
    (body([{"type": "text", "text": 5}]), "content[0].text is int"),
    (body("x", finish=3), "finish_reason is int"),
    (body("x", usage={"prompt_tokens": "12"}), "usage.prompt_tokens is '12'"),
    (body("x", usage={"completion_tokens": True}), "usage.completion_tokens is True"),
    (body("x", usage={"completion_tokens": -1}), "usage.completion_tokens is -1"),
    (body("x", usage={"completion_tokens": 2**70}), "usage.completion_tokens"),
    (body("x", usage=[1, 2]), "usage is list"),
    (body("x", reasoning_content=["a"]), "message.reasoning_content is list"),
    (body("bad \ud800 text"), "lone surrogate"),
    ({"choices": []}, "choices"),
    ({"choices": [{"message": "x"}]}, "choices[0].message"),
    (["not", "an", "object"], "JSON list"),
])
def test_other_shapes_are_refused_naming_the_field(data, field):
    with pytest.raises(MalformedAnswer) as info:
        read_answer(data)
    assert field in str(info.value)


def test_a_run_with_odd_answers_finishes_with_error_rows_for_them(tmp_path, problems, capsys):
    server = ChatServer()
    server.quirks = {
        "kb_relu": lambda b: b["choices"][0]["message"].update(
            content=[{"type": "text", "text": b["choices"][0]["message"]["content"]}]) or b,
        "kb_scale_add": lambda b: b["choices"][0]["message"].update(content=42) or b,
        "kb_row_sum": lambda b: b["usage"].update(prompt_tokens="900", completion_tokens="12") or b,
    }
    probs = tmp_path / "problems.parquet"
    pq.write_table(pa.Table.from_pylist([p.to_row() for p in problems]), probs)
    out = tmp_path / "out"
    with serve(server):
        rc = main(["distill", "--problems", str(probs), "--teacher", f"openai:{server.url}", "--out", str(out),
                   "--samples", "2", "--no-verify"])
    assert rc == 0, capsys.readouterr().err
    by = {(r["problem_id"], r["sample"]): r for r in read_samples(out)}
    assert len(by) == 6
    for s in (0, 1):
        relu, sa, rs = by[("kb_relu", s)], by[("kb_scale_add", s)], by[("kb_row_sum", s)]
        assert relu["status"] == "unverified" and "relu_kernel" in relu["candidate"]  # a list of text parts is fine
        assert sa["status"] == "teacher_error" and "message.content is int" in sa["reason"]
        assert rs["status"] == "teacher_error" and "usage.prompt_tokens is '900'" in rs["reason"]
        assert sa["seed"] is not None and sa["finish_reason"] == "error"  # the row says what was asked
