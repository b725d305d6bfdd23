"""Size profiles: data under data/profiles, chosen by synth.sample, the CLI and the build config; bad
profiles fail naming the file and the key; `cpu` draws exactly what the sampler drew before profiles."""
import hashlib
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import synth
from pipelines.build.config import ConfigError, load_config, parse_config
from synth.catalog import DATA_DIR, default_catalog
from synth.csp import FLOOR_ROOM, tensor_caps
from synth.profiles import ProfileError, SampleConfig, load_profile, parse_profile, profile_names
from synth.realize import rebuild

# sha256 of the sources of synth.sample(60, levels=[1, 2, 3, 5], seed=2026): computed with the sampler
# as it was before profiles existed (commit e208c6b), and recomputed, deliberately, each time the
# catalog's domains changed what is drawn: binary ops' scalar and parameter operands, then KernelBench's
# conv, pool and GroupNorm attribute ranges, the select, narrow,
# cumsum_exclusive, cumsum_reverse, flip, triu, tril, pad and three einsum ops, then per-dim kernel,
# stride, padding and dilation of 2-D and 3-D convs, Linear without bias and clamp bounds of +-10, then
# train-mode batch norm, reductions over several dims and over one element, LayerNorm over several dims,
# then the bilinear einsum, then max pools' dilation (issue 15)
CPU_BEFORE_PROFILES = "23f2da6fb128b6a824e073e3ae9af5ad46b5be679c6fe1f67343bb37e3d8c7a5"

GOOD = """
description = "a test profile"
dtypes = ["float32"]
[dims]
default = [1, 2, 4]
rank1 = { min = 1, max = 64, per_octave = 2 }
[limits]
max_tensor_elements = 4096
max_problem_bytes = 1048576
max_op_flops = 1e6
program_flops = [0, 1e9]
[ops.default]
min_elements = 16
[solver]
batch = 64
budget = 1024
"""


def test_shipped_profiles_and_the_cpu_default():
    assert profile_names() == ["cpu", "gpu"]
    assert load_profile("cpu").config() == SampleConfig()   # the code's defaults and the data agree
    gpu = load_profile("gpu").config()
    assert gpu.profile == "gpu" and gpu.check_on == "cpu" and gpu.dtype == "float32"
    assert max(gpu.domain("rank1")) >= 10**8 and max(gpu.domain("rank4")) >= 1024   # per-dimension domains
    assert 1 in gpu.domain("rank2") and 3 in gpu.domain("rank2") and 13 in gpu.domain("rank2")  # non-powers of two
    assert gpu.max_bytes <= 8 << 30


def test_cpu_draws_are_byte_identical_to_before_profiles():
    for kw in ({}, {"profile": "cpu"}, {"config": load_profile("cpu").config()}):
        ps = synth.sample(60, levels=[1, 2, 3, 5], seed=2026, **kw)
        assert hashlib.sha256("".join(p.source for p in ps).encode()).hexdigest() == CPU_BEFORE_PROFILES
        assert {p.profile for p in ps} == {"cpu"}


def _tensors(p):
    return [d for _, d in p.graph.nodes(data=True)]


def test_gpu_problems_are_at_workload_scale_within_the_memory_cap():
    prof, cfg = load_profile("gpu"), load_profile("gpu").config()
    ps = synth.sample(12, level=1, seed=1, profile="gpu") + synth.sample(6, levels=[2, 5], seed=1, profile="gpu")
    for p in ps:
        assert p.profile == "gpu" and p.dtype == "float32"
        sizes = [math.prod(d["shape"]) for d in _tensors(p)]
        assert max(sizes) <= prof.max_tensor_elements
        assert sum(n * (8 if d["dtype"] == "i64" else 4) for n, d in zip(sizes, _tensors(p))) <= prof.max_problem_bytes
        if p.level == 1:   # its op reads only program inputs: its targets bind (the element one within the cap)
            target = cfg.target(default_catalog()[p.ops[0]])
            cap = tensor_caps(rebuild(p)[0], cfg)["f32"]
            assert max(sizes) >= min(target.min_elements, cap // FLOOR_ROOM), (p.ops, sizes)
            assert p.flops >= target.min_flops
    assert sorted(math.prod(s) for p in ps[:12] for s in p.input_shapes)[-1] > 10**8


def test_gpu_ops_along_an_outer_dim_keep_many_lines():
    # data/profiles/gpu.toml [ops.scan]/[ops.softmax]: eager CUDA runs an outer-dim scan one thread per
    # line, so 108 lines of 440872 took 167 ms on an H100; the profile keeps >= 16384 lines there
    along = ["cummin", "cumsum", "logcumsumexp", "softmax", "log_softmax", "l2_normalize"]
    seen_outer = 0
    for p in synth.sample(60, level=2, seed=4, profile="gpu", ops=along + ["relu"]):
        g = p.graph
        for v, d in g.nodes(data=True):
            if d.get("kind") == "op" and d["op"] in along:
                shape = g.nodes[next(iter(g.predecessors(v)))]["shape"]
                dim = d["attrs"]["dim"]
                if math.prod(shape[dim + 1:]) > 1:
                    seen_outer += 1
                    assert math.prod(shape) // shape[dim] >= 16384, (p.problem_id, d["op"], shape, dim)
    assert seen_outer >= 10
    cpu = synth.sample(60, level=2, seed=4, ops=along + ["relu"])   # the cpu profile has no such rule
    assert any(d.get("kind") == "op" and d["op"] in along and math.prod(g.nodes[next(iter(g.predecessors(v)))]["shape"])
               // g.nodes[next(iter(g.predecessors(v)))]["shape"][d["attrs"]["dim"]] < 16384
               for p in cpu for g in [p.graph] for v, d in g.nodes(data=True))


def test_gpu_cummax_family_keeps_many_lines_along_the_innermost_dim_too():
    # data/profiles/gpu.toml [ops.cummax]/[ops.cummin]/[ops.logcumsumexp]: no one-line fast path in eager
    # CUDA (a cummax over a 1-D tensor of 2.3e8 took 632 ms on an H100), so >= 4096 lines on any dim
    along = ["cummax", "cummin", "logcumsumexp"]
    lines = []
    for p in synth.sample(40, level=1, seed=11, profile="gpu", ops=along):
        g = p.graph
        for v, d in g.nodes(data=True):
            if d.get("kind") == "op" and d["op"] in along:
                shape = g.nodes[next(iter(g.predecessors(v)))]["shape"]
                lines.append((math.prod(shape) // shape[d["attrs"]["dim"]], shape, d["attrs"]["dim"]))
    assert len(lines) == 40
    assert all(n >= 4096 for n, _, _ in lines), [x for x in lines if x[0] < 4096]
    cpu = synth.sample(40, level=1, seed=11, ops=along)   # the cpu profile has no such rule
    assert any(math.prod(s) // s[p.graph.nodes[v]["attrs"]["dim"]] < 4096 for p in cpu for s in p.input_shapes[:1]
               for v, d in p.graph.nodes(data=True) if d.get("kind") == "op")


def test_profile_and_config_are_exclusive():
    with pytest.raises(ValueError, match="give profile= or config=, not both"):
        synth.sample(1, level=1, profile="gpu", config=SampleConfig())


def test_a_good_profile_file_parses(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(GOOD)
    prof = parse_profile(path)
    assert prof.dims["default"] == (1, 2, 4) and prof.dims["rank1"] == (1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64)
    assert prof.config(max_elements=10).max_elements == 10 and prof.config().profile == "tiny"
    assert prof.twin_sizes == () and load_profile("cpu").twin_sizes == (512,)   # optional; cpu's lets GroupNorm(512) twin


@pytest.mark.parametrize("edit, message", [
    (("dtypes = [\"float32\"]", "dtypes = [\"float8\"]"), "dtypes: unknown dtype 'float8'"),
    (("[solver]", "[solver]\nbatchsize = 3"), "[solver] batchsize: unknown key (known: batch, budget)"),
    (("max_tensor_elements = 4096", "max_tensor_elements = \"lots\""), "[limits] max_tensor_elements: must be an integer >= 1, got 'lots'"),
    (("max_op_flops = 1e6", "max_op_flops = -1"), "[limits] max_op_flops: must be a finite number >= 0, got -1"),
    (("program_flops = [0, 1e9]", "program_flops = [5, 1]"), "[limits] program_flops: must be [lo, hi] with 0 <= lo <= hi"),
    (("default = [1, 2, 4]", "default = [0, 2]"), "[dims] default: must be a non-empty list of integers >= 1"),
    (("rank1 = {", "rank9 = {"), "[dims] rank9: unknown key"),
    (("per_octave = 2", "per_octave = 2, step = 1"), "[dims] rank1 step: unknown key"),
    (("[ops.default]", "[ops.nope]"), "[ops] nope: not an op name, an op family or 'default'"),
    (("min_elements = 16", "min_elements = 1.5"), "[ops.default] min_elements: must be an integer >= 0, got 1.5"),
    (("min_elements = 16", "min_elements = 16\nconstraints = \"R < 9\""), "[ops.default] constraints: must be a list of expressions"),
    (("[limits]\n", "[limits]\ncheck_on = \"cpu\"\n"), "[limits] check_on: unknown key"),
    (("description", "check_on = \"tiny\"\ndescription"), "check_on: must name another profile"),
    (("description", "twin_sizes = [512, 0]\ndescription"), "twin_sizes: must be a list of positive ints, got [512, 0]"),
    (("[solver]\nbatch = 64\nbudget = 1024\n", ""), "[solver]: missing"),
    (("description =", "description = = "), "not valid TOML"),
])
def test_bad_profile_names_the_file_and_key(tmp_path, edit, message):
    path = tmp_path / "tiny.toml"
    old, new = edit
    assert old in GOOD
    path.write_text(GOOD.replace(old, new, 1))
    with pytest.raises(ProfileError) as err:
        parse_profile(path)
    assert str(path) in str(err.value) and message in str(err.value), str(err.value)


def test_unknown_profile_is_named():
    with pytest.raises(ProfileError, match="unknown profile 'huge' \\(known: cpu, gpu"):
        synth.sample(1, level=1, profile="huge")


def _cli(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd)


def test_cli_samples_at_a_profile_and_refuses_unknown_or_broken_ones(tmp_path):
    out = tmp_path / "p.parquet"
    r = _cli("sample", "--n", "3", "--levels", "1,2", "--profile", "gpu", "--seed", "2", "--out", str(out))
    assert r.returncode == 0, r.stderr
    table = pq.read_table(out)
    assert set(table.column("profile").to_pylist()) == {"gpu"} and all(table.column("recipe").to_pylist())
    assert max(math.prod(s) for shapes in table.column("input_shapes").to_pylist() for s in shapes) > 10**7
    r = _cli("sample", "--n", "3", "--level", "1", "--profile", "huge", "--out", str(tmp_path / "q.parquet"))
    assert r.returncode == 2 and "--profile huge: unknown profile 'huge'" in r.stderr and "Traceback" not in r.stderr
    # a data folder whose gpu profile has an ill-typed key: exit 2, the file and the key named, nothing written
    data = tmp_path / "data"
    shutil.copytree(DATA_DIR, data, ignore=shutil.ignore_patterns("__pycache__"))
    bad = data / "profiles" / "gpu.toml"
    bad.write_text(bad.read_text().replace("batch = 512", "batch = \"big\""))
    env = {**os.environ, "TRITONFORGE_DATA": str(data)}
    r = _cli("sample", "--n", "3", "--level", "1", "--profile", "gpu", "--out", str(tmp_path / "q.parquet"), env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"{bad}: [solver] batch: must be an integer >= 1, got 'big'" in r.stderr
    assert not (tmp_path / "q.parquet").exists()


def test_build_config_sample_profile():
    assert parse_config({"sample": {"profile": "gpu"}}, "my.toml").sample.profile == "gpu"
    assert parse_config({}).sample.profile == "cpu"
    # naming the default changes nothing, so builds made before profiles resume
    assert parse_config({"sample": {"profile": "cpu"}}).digest() == parse_config({}).digest() == "617339cc312fd2ae"
    assert parse_config({"sample": {"profile": "gpu"}}).digest() != parse_config({}).digest()
    with pytest.raises(ConfigError, match="my.toml: \\[sample\\] profile: unknown profile 'huge'"):
        parse_config({"sample": {"profile": "huge"}}, "my.toml")
    with pytest.raises(ConfigError, match="my.toml: \\[sample\\] profile: must be a non-empty string, got 3"):
        parse_config({"sample": {"profile": 3}}, "my.toml")


def test_shipped_gpu_build_config_loads():
    cfg = load_config("data/configs/gpu.toml")
    assert cfg.sample.profile == "gpu" and cfg.verify.device == "cuda" and cfg.cluster.gpus_per_worker == 1
    assert load_config("gpu") == cfg   # shipped: found by name from anywhere
    assert Path(DATA_DIR / "configs" / "gpu.toml").is_file()


def test_gpu_draws_and_twins_are_the_same_bytes_in_another_process():
    script = ("import hashlib, synth; ps = synth.sample(8, levels=[1, 2, 5], seed=2026, profile='gpu'); "
              "t = ps[3].twin('cpu', 5); print(hashlib.sha256(''.join(p.source + p.recipe for p in ps + [t]).encode()).hexdigest())")
    ps = synth.sample(8, levels=[1, 2, 5], seed=2026, profile="gpu")
    here = hashlib.sha256("".join(p.source + p.recipe for p in ps + [ps[3].twin("cpu", 5)]).encode()).hexdigest()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert out.stdout.strip() == here
