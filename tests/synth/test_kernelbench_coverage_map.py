"""bench/kernelbench_coverage.py counts issue 15's additions as exact: train-mode BatchNorm, reductions
over several dims (dim=None included) and over one element, LayerNorm over several dims, the bilinear
einsum, dilated max pools, GroupNorm with 512 groups; and still names what the catalog does not draw.
Run on a tiny KernelBench-shaped folder."""
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "kernelbench_coverage.py"

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}

    def forward(self, {args}):
        return {body}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''

CASES = {  # file name -> (constructor lines, forward args, return expression, inputs, expected class)
    "1_train_bn.py": ("        self.bn = nn.BatchNorm2d(8)", "x", "self.bn(x) - torch.mean(self.bn(x), dim=(2, 3), keepdim=True)",
                      "torch.randn(4, 8, 5, 5)", "exact"),
    "2_size_one.py": ("        pass", "x", "torch.logsumexp(torch.sum(x, dim=1, keepdim=True), dim=1, keepdim=True)",
                      "torch.randn(4, 8)", "exact"),
    "3_layer_norm.py": ("        self.ln = nn.LayerNorm((8, 5, 5))", "x", "self.ln(x)", "torch.randn(4, 8, 5, 5)", "exact"),
    "4_all_dims.py": ("        pass", "x", "torch.mean(x * x)", "torch.randn(4, 8)", "exact"),
    "5_bilinear.py": ("        pass", "a, w, b", 'torch.einsum("bi,oij,bj->bo", a, w, b)',
                      "torch.randn(4, 3), torch.randn(6, 3, 5), torch.randn(4, 5)", "exact"),
    "6_var_of_one.py": ("        pass", "x", "torch.var(x, dim=1)", "torch.randn(4, 1)", "attrs"),
    "7_bilinear_bias.py": ("        self.bl = nn.Bilinear(3, 5, 6)", "a, b", "self.bl(a, b)",
                           "torch.randn(4, 3), torch.randn(4, 5)", "attrs"),
    "8_dilated_pool.py": ("        self.pool = nn.MaxPool3d(3, stride=2, padding=1, dilation=3)", "x", "self.pool(x)",
                          "torch.randn(2, 3, 12, 12, 12)", "exact"),
    "9_dilation_4.py": ("        self.pool = nn.MaxPool1d(8, padding=4, dilation=4)", "x", "self.pool(x)",
                        "torch.randn(2, 3, 64)", "attrs"),
    "10_group_norm_512.py": ("        self.gn = nn.GroupNorm(512, 1024)", "x", "self.gn(x)", "torch.randn(4, 1024)", "exact"),
}


def test_issue15_additions_count_as_exact(tmp_path):
    level = tmp_path / "KernelBench" / "level1"
    level.mkdir(parents=True)
    (tmp_path / "KernelBench" / "level2").mkdir()
    for name, (init, args, body, inputs, _) in CASES.items():
        (level / name).write_text(PROBLEM.format(init=init, args=args, body=body, inputs=inputs))
    r = subprocess.run([sys.executable, str(BENCH), str(tmp_path), "--levels", "1", "--list", "all"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = {line.split()[1]: line.split()[2].strip("[]:") for line in r.stdout.splitlines() if line.startswith("L1 ")}
    assert got == {name: case[-1] for name, case in CASES.items()}, r.stdout
    assert "var: size_one=True (R >= 2)" in r.stdout and "bilinear_bias=True" in r.stdout
    assert "max_pool1d: dilation=4 not in [1, 2, 3]" in r.stdout
