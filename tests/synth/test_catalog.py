"""The operator catalog: coverage of KernelBench level-1 families, and clear errors for bad entries."""
import textwrap
from pathlib import Path

import pytest

from synth.catalog import CatalogError, default_catalog, load_catalog, operators

REQUIRED = {
    # one representative per KernelBench level-1 family named in the catalog's brief
    "unary": ["exp", "log", "sqrt", "sin", "tanh", "abs"],
    "binary": ["add", "sub", "mul", "div", "maximum"],
    "activation": ["relu", "leaky_relu", "gelu", "gelu_tanh", "silu", "mish", "softplus", "elu", "selu",
                   "hardtanh", "hardswish"],
    "reduction": ["sum", "mean", "amax", "amin", "prod", "argmax", "argmin", "var", "std", "logsumexp",
                  "l1_norm", "l2_norm"],
    "softmax": ["softmax", "log_softmax"],
    "scan": ["cumsum", "cumprod"],
    "matmul": ["matmul", "bmm", "linear", "addmm"],
    "conv": ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"],
    "pool": ["max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
             "adaptive_avg_pool2d", "adaptive_max_pool2d"],
    "norm": ["layer_norm", "rms_norm", "batch_norm", "group_norm", "instance_norm"],
    "loss": ["mse_loss", "cross_entropy", "huber_loss", "kl_div", "hinge_embedding_loss"],
    "attention": ["sdpa"],
    "shape": ["transpose", "permute", "reshape", "flatten", "cat", "clamp"],
}


def test_catalog_size_and_families():
    cat = default_catalog()
    assert len(cat) >= 80
    for family, names in REQUIRED.items():
        for name in names:
            assert name in cat, name
            assert cat[name].family == family or family in ("shape",), (name, cat[name].family)
    assert operators() == sorted(cat)


def test_every_op_declares_rules():
    for spec in default_catalog().values():
        assert spec.arity == len(spec.in_range) == len(spec.in_dtype) >= 1
        assert spec.flops and spec.bytes and spec.expr
        if spec.kind == "pattern":
            assert len(spec.inputs) == spec.arity


def _write(tmp_path: Path, body: str) -> Path:
    d = tmp_path / "ops"
    d.mkdir(exist_ok=True)
    (d / "bad.toml").write_text(textwrap.dedent(body))
    return d


GOOD = """
[[op]]
name = "relu"
family = "activation"
kind = "map"
expr = "torch.relu({{ x[0] }})"
"""


def test_good_minimal_catalog_loads(tmp_path):
    cat = load_catalog(_write(tmp_path, GOOD))
    assert list(cat) == ["relu"]


@pytest.mark.parametrize("body, field", [
    (GOOD.replace('kind = "map"', 'kind = "mapp"'), "kind"),
    (GOOD.replace('family = "activation"\n', ""), "family"),
    (GOOD.replace('expr = "torch.relu({{ x[0] }})"', 'expr = "torch.relu({{ x[0] }"'), "expr"),
    (GOOD + 'flops = "numel_out *"\n', "flops"),
    (GOOD + 'constraints = ["R >= "]\n', "constraints[0]"),
    (GOOD + 'attrs = { alpha = [] }\n', "attrs.alpha"),
    (GOOD + 'in_range = ["positive"]\n', "in_range"),
    (GOOD + 'ranks = [9]\n', "ranks"),
    (GOOD + 'colour = "red"\n', "colour"),
    (GOOD + GOOD, "name"),
    (GOOD.replace('kind = "map"', 'kind = "pattern"'), "inputs"),
])
def test_malformed_entry_names_op_and_field(tmp_path, body, field):
    with pytest.raises(CatalogError) as err:
        load_catalog(_write(tmp_path, body))
    msg = str(err.value)
    assert "bad.toml" in msg and "'relu'" in msg and f"'{field}'" in msg, msg


def test_not_toml_and_empty_dir(tmp_path):
    with pytest.raises(CatalogError, match="bad.toml: not valid TOML"):
        load_catalog(_write(tmp_path, "[[op]\nname="))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CatalogError, match="no operator catalog files"):
        load_catalog(empty)
