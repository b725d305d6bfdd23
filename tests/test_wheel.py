"""The wheel works outside the checkout: every module and data file is inside it, and the installed
`tritonforge` runs from an unrelated folder (DESIGN §1: data/ ships as the package `tritonforge_data`).

The wheel is built once from the tracked files (what a clone holds) and installed with --no-deps into
a fresh venv that borrows this environment's dependencies through a `.pth` line, so the check costs
seconds, not a second install of torch.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CODE = ("synth", "distill", "curriculum", "pipelines")


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if (REPO / f).is_file()]


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRITONFORGE_", "PYTHON"))}
    env["TRITON_INTERPRET"] = "1"
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for f in _tracked():
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, src / f)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    str(src), "-w", str(out)], check=True, capture_output=True, cwd=out)
    (whl,) = out.glob("tritonforge-*.whl")
    return whl


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv holding only the wheel; this environment's site-packages supplies the dependencies."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # A plain path line: appended after the venv's own site-packages, and its .pth files (the
    # checkout's editable-install hook among them) are not run.
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "borrowed-deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)],
                   check=True, capture_output=True)
    return venv


def test_wheel_holds_every_module_and_data_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = _tracked()
    data = [f for f in tracked if f.startswith("data/")]
    code = [f for f in tracked if f.startswith(tuple(p + "/" for p in CODE)) and f.endswith(".py")]
    assert len(data) > 100 and len(code) > 100
    missing = [f for f in data if "tritonforge_data/" + f.removeprefix("data/") not in names]
    missing += [f for f in code if f not in names]
    assert not missing, f"not in the wheel: {missing[:10]}"
    assert "tritonforge_data/ops/unary.toml" in names and "tritonforge_data/configs/demo.toml" in names
    assert not any(n.startswith("tests/") or "__pycache__" in n for n in names)


def test_installed_cli_runs_from_an_unrelated_folder(installed, tmp_path):
    py, cli, env = installed / "bin" / "python", installed / "bin" / "tritonforge", _clean_env()
    where = subprocess.run([py, "-c", "import synth, synth.catalog as c; print(synth.__file__); print(c.DATA_DIR)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert all(Path(w).is_relative_to(installed) for w in where), where    # not the checkout's copy
    r = subprocess.run([cli, "sample", "--n", "4", "--level", "2", "--out", "x.parquet"], cwd=tmp_path, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([cli, "show", "x.parquet", "--index", "3"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "class Model(nn.Module)" in r.stdout and "def get_inputs" in r.stdout


@pytest.mark.slow
def test_installed_cli_verifies_and_builds_the_shipped_demo_config(installed, tmp_path):
    cli, env = installed / "bin" / "tritonforge", _clean_env()
    fixtures = Path(subprocess.run([installed / "bin" / "python", "-c",
                                    "from synth.catalog import DATA_DIR; print(DATA_DIR / 'fixtures' / 'verifier')"],
                                   env=env, capture_output=True, text=True, check=True).stdout.strip())
    r = subprocess.run([cli, "verify", "--problem", fixtures / "problems" / "add.py",
                        "--candidate", fixtures / "candidates" / "honest" / "add.py", "--json"],
                       cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0 and '"status": "pass"' in r.stdout, r.stdout + r.stderr
    # the shipped demo config read from the installed package, at a quarter of its sizes: what this
    # checks is that the build's templates, prompts and profiles are inside the wheel (the full demo
    # build is tests/pipelines/test_demo.py's)
    demo = (fixtures.parents[1] / "configs" / "demo.toml").read_text()
    small = demo.replace("\nsize = 8\n", "\nsize = 2\n").replace("\nsize = 4\n", "\nsize = 1\n")
    assert small.count("\nsize = 2") == 2 and small.count("\nsize = 1") == 2, "demo.toml's sizes changed: update this test"
    (tmp_path / "small.toml").write_text(small)
    r = subprocess.run([cli, "build", "small.toml", "--out", "demo"], cwd=tmp_path, env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "demo" / "manifest.json").is_file() and list((tmp_path / "demo" / "sft").glob("*.parquet"))
    assert (tmp_path / "demo" / "README.md").is_file()
