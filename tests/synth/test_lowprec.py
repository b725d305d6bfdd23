"""Problems in bfloat16 and float16: the dtype reaches inputs, weights, outputs, the graph and twins;
every op the catalog draws in a dtype runs there; fp32 stays the default."""
from __future__ import annotations

import pytest
import torch

import synth
from distill.verifier.tolerance import TOLERANCES
from synth.check import HALF_RULES, load_module
from synth.profiles import PROFILE_DIR, ProfileError, SampleConfig, canonical_dtype, parse_profile
from tests.synth.views import VIEWS, beside_relu


def _run(p):
    ns = load_module(p.source)
    torch.manual_seed(0)
    model = ns["Model"](*ns["get_init_inputs"]())
    inputs = ns["get_inputs"]()
    out = model(*inputs)
    return model, inputs, out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("alias, dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_override_makes_inputs_weights_and_outputs_in_the_dtype(alias, dtype):
    ps = synth.sample(3, level=2, seed=4, ops=["linear", "layer_norm", "sum", "softmax"], dtype=alias)
    for p in ps:
        assert p.dtype == str(dtype).removeprefix("torch.")
        model, inputs, outs = _run(p)
        assert {x.dtype for x in inputs} == {dtype}
        assert all(t.dtype == dtype for t in model.parameters())
        assert all(o.dtype == dtype for o in outs) and p.output_dtypes == [p.dtype] * len(outs)
        tags = {d["dtype"] for _, d in p.graph.nodes(data=True) if "dtype" in d}
        assert tags == {"bf16" if alias == "bf16" else "f16"}


def test_fp32_is_the_default_and_dtypes_hash_apart():
    f32 = synth.sample(2, level=2, seed=9)
    assert {p.dtype for p in f32} == {"float32"} and SampleConfig().dtypes == ("float32",)
    assert "dtype=" not in f32[0].source.split("def get_inputs")[1]      # fp32 text as before
    bf = synth.sample(2, level=2, seed=9, dtype="bfloat16")
    assert not {p.dag_hash for p in f32} & {p.dag_hash for p in bf}


def test_a_mixture_draws_each_dtype_and_is_reproducible():
    ps = synth.sample(12, level=1, seed=3, dtype=["fp32", "bf16", "fp16"])
    assert {p.dtype for p in ps} == {"float32", "bfloat16", "float16"}
    again = synth.sample(4, level=1, seed=3, start=8, dtype=["fp32", "bf16", "fp16"])
    assert [p.source for p in again] == [p.source for p in ps[8:]]


def test_twins_keep_the_dtype():
    p = synth.sample(1, level=2, seed=1, ops=["matmul", "relu", "sum"], dtype="bf16")[0]
    t = p.twin("cpu", seed=5)
    assert t.dtype == "bfloat16" and "torch.bfloat16" in t.source


def test_bad_dtypes_are_named(tmp_path):
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        synth.sample(1, level=1, dtype="float8")
    assert canonical_dtype("half") == "float16"
    path = tmp_path / "x.toml"
    path.write_text((PROFILE_DIR / "cpu.toml").read_text().replace('dtypes = ["float32"]', 'dtypes = "bf16"'))
    with pytest.raises(ProfileError, match="dtypes: must be a list"):
        parse_profile(path)


def test_ops_without_a_cpu_half_kernel_are_not_drawn_in_it():
    # avg_pool3d has no bf16/fp16 CPU kernel (torch 2.13), so the catalog keeps it to float32
    spec = synth.load_catalog()["avg_pool3d"]
    assert spec.float_dtypes == ("float32",)
    with pytest.raises(ValueError, match="drawn in bfloat16"):
        synth.sample(1, level=1, ops=["avg_pool3d"], dtype="bf16")
    assert synth.sample(1, level=1, ops=["avg_pool3d"])[0].dtype == "float32"


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_op_drawn_in_a_dtype_runs_in_it(dtype):
    # the sampler's checks run each program on the CPU in its dtype: a draw for every op proves it
    catalog = synth.load_catalog()
    ops = [o for o in synth.operators() if canonical_dtype(dtype) in catalog[o].float_dtypes]
    for op in ops:  # a view op alone is never drawn: beside relu
        p = beside_relu(op, seed=0, dtype=dtype) if op in VIEWS else synth.sample(1, level=1, seed=0, ops=[op], dtype=dtype)[0]
        assert p.dtype == canonical_dtype(dtype)


def test_check_rules_are_five_times_the_verifier_tolerance():
    for dt, (norm, atol, rtol) in HALF_RULES.items():
        tol = TOLERANCES[dt]
        assert (norm, atol, rtol) == pytest.approx((5 * tol.norm_rel, 5 * tol.atol_rel, 5 * tol.rtol))


def test_cli_and_build_config_take_a_dtype(tmp_path, capsys):
    from pipelines.build.config import BuildConfig, ConfigError, load_config
    from pipelines.cli import main
    from synth.shard import read_problems

    out = tmp_path / "p.parquet"
    assert main(["sample", "--n", "2", "--level", "1", "--dtype", "fp16", "--out", str(out)]) == 0
    assert {p.dtype for p in read_problems(out)} == {"float16"}
    assert main(["sample", "--n", "1", "--level", "1", "--dtype", "bf16", "--ops", "avg_pool3d",
                 "--out", str(out)]) == 2
    assert "--dtype bf16" in capsys.readouterr().err
    cfg = tmp_path / "c.toml"
    cfg.write_text('[sample]\ndtype = ["bf16", "fp16"]\n')
    assert load_config(cfg).sample.dtype == ("bfloat16", "float16")
    assert load_config(cfg).digest() != BuildConfig().digest()
    cfg.write_text('[sample]\ndtype = "fp8"\n')
    with pytest.raises(ConfigError, match=r"\[sample\] dtype: unknown dtype 'fp8'"):
        load_config(cfg)
