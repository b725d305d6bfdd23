"""Bad build configs fail with the file and the key named, before anything runs; `tritonforge build` exits 2."""
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipelines.build.config import ConfigError, check_teacher, load_config, parse_config
from pipelines.cli import main

STAGE = {"index": 1, "levels": [1], "size": 3}


def test_demo_config_loads():
    cfg = load_config("data/configs/demo.toml")
    assert [s.levels for s in cfg.curriculum.stages] == [(1,), (2,), (5,)]
    assert cfg.curriculum.heldout_levels == (1, 2, 5, 20)
    assert cfg.teacher.spec == "lowering" and cfg.verify.device == "cpu"
    assert len(cfg.digest()) == 16


def test_digest_of_a_checked_config_is_unchanged():
    """Builds made before the checks resume: the digest (recorded as the code was before them) still matches."""
    doc = {"name": "relu-test", "seed": 7, "sample": {"shard_size": 2, "ops": ["relu"]},
           "stage": [{"index": 1, "levels": [1], "size": 6}], "heldout": {"levels": [1], "size": 2},
           "teacher": {"spec": "replay:answers.jsonl"}, "verify": {"device": "cpu", "workers": 1, "timeout": 120},
           "cluster": {"n_workers": 2, "threads_per_worker": 1}}
    assert parse_config(doc).digest() == "ec7e3100b1e650ee"
    assert parse_config({}).digest() == "617339cc312fd2ae"


@pytest.mark.parametrize("doc, message", [
    ({"seeed": 1}, "seeed: unknown key (known: cluster, heldout, license, name, problems, sample, seed, stage, teacher, verify)"),
    ({"seed": -1}, "seed: must be an integer >= 0, got -1"),
    ({"name": ""}, "name: must be a non-empty string"),
    ({"sample": {"shard_sise": 4}}, "[sample] shard_sise: unknown key"),
    ({"sample": {"shard_size": "four"}}, "[sample] shard_size: must be an integer from 1 to 100000, got 'four'"),
    ({"sample": {"shard_size": 0}}, "[sample] shard_size: must be an integer"),
    ({"sample": {"max_elements": 0}}, "[sample] max_elements: must be an integer >= 1, got 0"),
    ({"sample": {"ops": ["relu", "nope"]}}, "[sample] ops: unknown operator(s): nope"),
    ({"sample": {"ops": []}}, "[sample] ops: must be a non-empty list"),
    ({"stage": []}, "stage: at least one [[stage]] is needed"),
    ({"stage": {"index": 1}}, "stage: must be [[stage]] tables"),
    ({"stage": [{"index": 1, "levels": [1]}]}, "[[stage]] #1 size: missing"),
    ({"stage": [{"index": 1, "levels": [], "size": 3}]}, "[[stage]] #1 levels: must be a non-empty list of integers"),
    ({"stage": [{"index": 1, "levels": [10000], "size": 3}]}, "[[stage]] #1 levels: must be a non-empty list of integers "
                                                               "from 1 to 64, got [10000]"),
    ({"stage": [{"index": 1, "levels": [1], "size": 10**11}]}, "100000000200 problems in all; at most 1000000"),
    ({"stage": [{"index": 1, "levels": [1], "size": 0}]}, "[[stage]] #1 size: must be an integer >= 1, got 0"),
    ({"stage": [{"index": 1, "levels": [1, True], "size": 2}]}, "[[stage]] #1 levels: must be a non-empty list"),
    ({"stage": [{"index": 1, "levels": [1], "size": 1e3}]}, "[[stage]] #1 size: must be an integer"),
    ({"stage": [STAGE, STAGE]}, "[[stage]] #2 index: 1 is used by an earlier stage"),
    ({"stage": [{**STAGE, "lvl": 2}]}, "[[stage]] #1 lvl: unknown key (known: index, levels, size)"),
    ({"stage": [{**STAGE, "size": 900_000}], "heldout": {"size": 30_000}}, "1020000 problems in all; at most 1000000"),
    ({"heldout": {"sizes": 3}}, "[heldout] sizes: unknown key"),
    ({"heldout": {"levels": [1, 1]}}, "[heldout] levels: names a level twice"),
    ({"heldout": {"levels": [65]}}, "[heldout] levels: must be a list of integers from 1 to 64"),
    ({"heldout": {"size": -1}}, "[heldout] size: must be an integer from 0 to 1000000, got -1"),
    ({"teacher": {"spec": "gpt:foo"}}, "[teacher] spec: unknown teacher 'gpt:foo'"),
    ({"teacher": {"spec": "lowering:x"}}, "[teacher] spec: 'lowering' takes no argument"),
    ({"teacher": {"samples": 0}}, "[teacher] samples: must be an integer from 1 to 1024, got 0"),
    ({"teacher": {"samples": 1025}}, "[teacher] samples: must be an integer from 1 to 1024"),
    ({"teacher": {"rounds": -1}}, "[teacher] rounds: must be an integer from 0 to 16, got -1"),
    ({"teacher": {"rounds": 17}}, "[teacher] rounds: must be an integer from 0 to 16"),
    ({"teacher": {"temperature": -1}}, "[teacher] temperature: must be a finite number >= 0, got -1"),
    ({"teacher": {"temperature": float("nan")}}, "[teacher] temperature: must be a finite number >= 0, got nan"),
    ({"teacher": {"max_tokens": 0}}, "[teacher] max_tokens: must be an integer >= 1, got 0"),
    ({"teacher": {"prompt": "nope"}}, "[teacher] prompt: no prompt set 'nope' (known: kernelbench"),
    ({"verify": {"device": "tpu"}}, "[verify] device: must be \"cpu\" or \"cuda\", got 'tpu'"),
    ({"verify": {"timeout": -5}}, "[verify] timeout: must be a finite number > 0, got -5"),
    ({"verify": {"timeout": 0}}, "[verify] timeout: must be a finite number > 0, got 0"),
    ({"verify": {"timeout": float("inf")}}, "[verify] timeout: must be a finite number > 0, got inf"),
    ({"verify": {"workers": 0}}, "[verify] workers: must be an integer from 1 to 64, got 0"),
    ({"verify": {"resized": "sometimes"}}, "[verify] resized: must be \"required\" or \"recorded\" or \"off\", got 'sometimes'"),
    ({"cluster": {"n_workers": 0}}, "[cluster] n_workers: must be an integer from 1 to 256, got 0"),
    ({"cluster": {"threads_per_worker": 0}}, "[cluster] threads_per_worker: must be an integer from 1 to 256, got 0"),
    ({"cluster": {"gpus_per_worker": -1}}, "[cluster] gpus_per_worker: must be an integer >= 0, got -1"),
    ({"cluster": {"gpus_per_worker": True}}, "[cluster] gpus_per_worker: must be an integer >= 0, got True"),
])
def test_bad_key_is_named(doc, message):
    with pytest.raises(ConfigError) as err:
        parse_config(doc, "my.toml")
    assert str(err.value).startswith("my.toml: ") and message in str(err.value)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Models(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the http.server hook's name
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_teacher_is_found_before_anything_runs(tmp_path):
    """replay:FILE must be a readable answers file, vllm:PATH a model folder, openai:URL must list a model."""
    (tmp_path / "model").mkdir()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    for spec, message in [
        (f"replay:{tmp_path / 'missing.jsonl'}", "replay file not found"),
        (f"replay:{bad}", str(bad)),
        (f"vllm:{tmp_path / 'nowhere'}", "no such folder"),
        (f"vllm:{tmp_path / 'model'}", "no config.json in this folder"),
        (f"openai:http://127.0.0.1:{_free_port()}", "cannot reach"),
    ]:
        with pytest.raises(ConfigError) as err:
            check_teacher(spec, "my.toml")
        assert f"my.toml: [teacher] spec: {spec}: " in str(err.value) and message in str(err.value), spec
    (tmp_path / "model" / "config.json").write_text("{}")
    check_teacher(f"vllm:{tmp_path / 'model'}", "my.toml")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        check_teacher(f"openai:http://127.0.0.1:{server.server_address[1]}", "my.toml")
    finally:
        server.shutdown()


def test_cli_exit_2_on_bad_config(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[sample]\nshard_sise = 3\n")
    assert main(["build", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert f"{bad}: [sample] shard_sise: unknown key" in capsys.readouterr().err
    assert main(["build", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "out")]) == 2
    assert "config file not found" in capsys.readouterr().err
    bad.write_text("[sample\n")
    assert main(["build", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert "not valid TOML" in capsys.readouterr().err
    bad.write_bytes(b"\xef\xbb\xbf[verify]\ntimeout = nan\n")  # a byte-order mark is read past; TOML's nan is not
    assert main(["build", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert f"{bad}: [verify] timeout: must be a finite number > 0, got nan" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing stamped


def test_verify_device_memory_budget_is_checked_and_kept_out_of_old_digests():
    from pipelines.build.config import ConfigError, parse_config

    assert parse_config({"verify": {"device_memory_mb": 4096}}).verify.device_memory_mb == 4096
    assert parse_config({}).verify.device_memory_mb is None
    assert "device_memory_mb" not in str(parse_config({}).digest())
    assert parse_config({"verify": {"device_memory_mb": 4096}}).digest() != parse_config({}).digest()
    with pytest.raises(ConfigError, match=r"\[verify\] device_memory_mb: must be an integer >= 1, got 0"):
        parse_config({"verify": {"device_memory_mb": 0}})


def test_timing_baselines_are_a_choice_the_cli_overrides_and_the_default_keeps_old_digests(tmp_path, capsys):
    from pipelines.build.config import ConfigError

    assert parse_config({}).verify.timing == "eager+compile"
    assert parse_config({"verify": {"timing": "eager+compile"}}).digest() == parse_config({}).digest()
    assert parse_config({"verify": {"timing": "eager"}}).digest() != parse_config({}).digest()
    assert parse_config({"verify": {"timing": "off"}}).verify.timing == "off"
    with pytest.raises(ConfigError, match=r'\[verify\] timing: must be "eager\+compile" or "eager" or "off", got \'compile\''):
        parse_config({"verify": {"timing": "compile"}})
    from pipelines.cli import main

    with pytest.raises(SystemExit) as exc:  # argparse's own usage error: exit 2, the choices named
        main(["build", "demo", "--out", str(tmp_path / "out"), "--timing", "fast"])
    assert exc.value.code == 2 and "--timing: invalid choice: 'fast'" in capsys.readouterr().err


def test_resized_is_required_by_default_and_the_default_keeps_old_digests():
    assert parse_config({}).verify.resized == "required"
    assert parse_config({"verify": {"resized": "required"}}).digest() == parse_config({}).digest()
    assert parse_config({"verify": {"resized": "recorded"}}).digest() != parse_config({}).digest()
