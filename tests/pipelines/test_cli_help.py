"""`tritonforge COMMAND --help`: every option's default is shown, and the answer is quick."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipelines.cli import COMMANDS, _Help, build_parser, main

# What makes `--help` slow is importing torch (2-3 s on this box) or vLLM/dask: no subcommand's help may.
HEAVY = ("torch", "vllm", "dask", "transformers", "trl")


def _actions(name: str) -> list:
    parser, _ = build_parser([name])
    sub = next(a for a in parser._actions if isinstance(a, type(parser._subparsers._group_actions[0])))
    return sub.choices[name]._actions


def _blocks(help_text: str) -> dict[str, str]:
    """Each option's help block (its lines up to the next option), whitespace collapsed."""
    blocks, current = {}, None
    for line in help_text.splitlines():
        stripped = line.strip()
        if line.startswith("  -"):
            current = stripped.split()[0].rstrip(",")
            blocks[current] = stripped
        elif current and line.startswith("    ") and stripped:
            blocks[current] += " " + stripped
        else:
            current = None
    return {k: " ".join(v.split()) for k, v in blocks.items()}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_help_shows_the_defaults(name, capsys):
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0
    blocks = _blocks(capsys.readouterr().out)
    shown = [a for a in _actions(name) if _Help._has_default(a)]
    for action in shown:
        block = blocks[action.option_strings[0]]
        assert "default" in block and str(action.default) in block, (action.option_strings, block)
    for action in _actions(name):  # nothing claims a default it has not got
        if action.option_strings and (action.required or action.default in (None, False)):
            assert "(default: None)" not in blocks.get(action.option_strings[0], "")
            assert "(default: False)" not in blocks.get(action.option_strings[0], "")


@pytest.mark.parametrize("name", ["", *COMMANDS])
def test_help_imports_nothing_heavy(name):
    """`--help` answers in well under a second (0.05-0.15 s here) because it imports none of the heavy
    packages; checked by what was imported rather than by a clock, which a loaded CI box would fail."""
    probe = ("import sys\nfrom pipelines.cli import main\n"
             f"try:\n    main({[name] if name else []!r} + ['--help'])\nexcept SystemExit as e:\n    code = e.code\n"
             f"print(code, sorted(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout[-500:]


def test_distill_verifies_on_cuda_when_a_gpu_is_present(tmp_path):
    import torch

    assert main(["sample", "--n", "1", "--level", "1", "--ops", "relu", "--out", str(tmp_path / "p.parquet")]) == 0
    assert main(["distill", "--problems", str(tmp_path / "p.parquet"), "--teacher", "lowering",
                 "--out", str(tmp_path / "run"), "--quiet"]) == 0
    recorded = json.loads((tmp_path / "run" / "distill.json").read_text())["arguments"]["verify"]
    assert recorded == ("cuda" if torch.cuda.is_available() else "cpu")
