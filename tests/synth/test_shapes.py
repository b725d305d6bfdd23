"""The anchor_epilogue program shape: exactly uniform over its own space, one output, a chain."""
from collections import Counter

import pytest

import synth
from pipelines.build.config import ConfigError, parse_config
from pipelines.cli import main
from synth.sampler import SampleConfig, problem_stream, resolve_ops
from synth.shapes import ShapeError, draw_chain, shape_space, split_space
from tests.synth.stats import chi2_uniform

# two anchors of ranks 1 and 3; layer_norm follows only the rank-3 one, sum only where a dim of length
# >= 2 is left after it, relu never after log_softmax (all zeros): 8 + 24 lists at level 3
OPS = ["mv", "conv1d", "relu", "sum", "layer_norm", "log_softmax", "add"]
FAST = SampleConfig(dims=(1, 2, 3, 4), max_elements=64, flop_window=(0, 1e12), max_op_flops=1e12, check=False)


def _assert_chain(p):
    assert len(p.output_shapes) == 1, p.source
    for i in range(1, p.level):  # op i reads op i-1's output in its first slot
        assert "0" in p.graph.edges[f"y{i - 1}", f"y{i}"]["slot"].split(","), p.source


def test_the_space_is_what_the_docstring_says():
    space = shape_space(resolve_ops(OPS), 3)
    assert len(space) == 32 and len(set(space)) == 32
    assert ("mv", "log_softmax", "relu") not in space and ("conv1d", "log_softmax", "relu") not in space
    assert ("mv", "sum", "relu") not in space and ("conv1d", "sum", "sum") in space
    assert ("mv", "layer_norm", "add") not in space and ("conv1d", "layer_norm", "add") in space
    anchors, epilogue = split_space(resolve_ops())
    assert {a.family for a in anchors} == {"matmul", "conv", "attention"}
    assert "relu" in {e.name for e in epilogue} and not {"log", "argmax", "cat", "mse_loss"} & {e.name for e in epilogue}


def test_op_lists_exactly_uniform_over_the_shape_space():
    space = shape_space(resolve_ops(OPS), 3)
    problems = synth.sample(12 * len(space), level=3, seed=21, ops=OPS, config=FAST, shape="anchor_epilogue")
    counts = Counter(tuple(p.ops) for p in problems)
    assert set(counts) <= set(space)
    stat, crit = chi2_uniform(counts, space)
    assert stat < crit, (stat, crit)
    ops = resolve_ops(OPS)
    for i, p in enumerate(problems):  # the op list is the first draw of its stream: never redrawn
        assert p.ops == [o.name for o in draw_chain(problem_stream(i, 21), ops, 3)]
        _assert_chain(p)


def test_checked_chain_problems_and_their_twins():
    problems = synth.sample(6, level=4, seed=2, shape="anchor_epilogue")
    for p in problems:
        _assert_chain(p)
        assert p.ops[0] in {a.name for a in split_space(resolve_ops())[0]}
    twin = problems[0].twin("cpu", seed=5)  # rebuilt from the tape by the plain wirer
    assert twin.ops == problems[0].ops
    _assert_chain(twin)
    assert synth.sample(2, level=2, seed=2)[0].source == synth.sample(2, level=2, seed=2, shape="all")[0].source


def test_bad_shapes_are_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="unknown program shape 'chain'"):
        synth.sample(1, level=2, shape="chain")
    with pytest.raises(ShapeError, match="needs an anchor op"):
        synth.sample(1, level=2, ops=["relu", "add"], shape="anchor_epilogue")
    with pytest.raises(ShapeError, match="needs an epilogue op"):
        synth.sample(1, level=2, ops=["matmul", "log"], shape="anchor_epilogue")
    assert synth.sample(1, level=1, ops=["matmul"], shape="anchor_epilogue")[0].ops == ["matmul"]
    out = str(tmp_path / "p.parquet")
    assert main(["sample", "--n", "1", "--level", "2", "--shape", "anchor_epilogue", "--ops", "relu",
                 "--out", out]) == 2
    assert "--shape anchor_epilogue: shape anchor_epilogue needs an anchor op" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["sample", "--n", "1", "--level", "2", "--shape", "chain", "--out", out])
    assert exc.value.code == 2


def test_build_config_shape_key():
    assert parse_config({"sample": {"shape": "anchor_epilogue"}}).sample.shape == "anchor_epilogue"
    assert parse_config({"sample": {"shape": "all"}}).digest() == parse_config({}).digest()
    with pytest.raises(ConfigError, match=r'\[sample\] shape: must be "all" or "anchor_epilogue"'):
        parse_config({"sample": {"shape": "chain"}}, "my.toml")
    with pytest.raises(ConfigError, match=r"\[sample\] shape: shape anchor_epilogue needs an anchor op"):
        parse_config({"sample": {"shape": "anchor_epilogue", "ops": ["relu"]}}, "my.toml")


@pytest.mark.slow
def test_whole_catalog_level2_exactly_uniform():
    space = shape_space(resolve_ops(), 2)
    problems = synth.sample(5 * len(space), level=2, seed=22, shape="anchor_epilogue")  # 207 s at 8x759
    counts = Counter(tuple(p.ops) for p in problems)
    assert set(counts) <= set(space)
    stat, crit = chi2_uniform(counts, space)
    assert stat < crit, (stat, crit, len(space))
    for p in problems:
        _assert_chain(p)
