"""bench/kernelbench_memplan.py: the grant each KernelBench problem gets, from meta tensors only."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import kernelbench_memplan as km  # noqa: E402

PROBLEM = '''
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
N = {n}
def get_inputs():
    return [torch.rand(N, 1024)]
def get_init_inputs():
    return []
'''


def _kb(tmp_path: Path) -> Path:
    level = tmp_path / "KernelBench" / "level1"
    level.mkdir(parents=True)
    (level / "1_small.py").write_text(PROBLEM.format(n=256))            # 1 MiB in, 1 MiB out
    (level / "2_large.py").write_text(PROBLEM.format(n=1024 * 1024))     # 4 GiB in, 4 GiB out: never allocated
    (level / "3_host.py").write_text(PROBLEM.format(n=256).replace("torch.rand(N, 1024)", "torch.rand(N, 1024).numpy()"))
    return tmp_path


def test_grants_follow_the_machine_and_nothing_is_allocated(tmp_path, capsys):
    kb = _kb(tmp_path)
    rows = {r["name"]: r for r in km.census(sorted((kb / "KernelBench" / "level1").glob("*.py")),
                                            host_mb=128 << 10, gpu_mb=80 << 10, workers=4)}
    assert rows["1_small.py"]["grant"] == "share"
    assert rows["2_large.py"]["problem_bytes"] == 8 << 30
    assert rows["2_large.py"]["grant"] == "alone"                     # over a share, within the GPU alone
    assert rows["3_host.py"]["grant"] == "no meta plan"               # planned by the verifier on its first trial
    small_box = km.census([kb / "KernelBench" / "level1" / "2_large.py"], host_mb=16 << 10, gpu_mb=80 << 10, workers=1)
    assert small_box[0]["grant"] == "refused"
    assert km.main([str(kb), "--levels", "1", "--workers", "16", "--list"]) == 0   # the H200 box, 16 shares
    out = capsys.readouterr().out
    assert "| 1 | 3 | 1 | 1 | 1 | 0 |" in out and "L1 2_large.py: alone" in out and "L1 1_small.py" not in out


def test_bad_arguments_exit_2_and_say_what(tmp_path, capsys):
    assert km.main([str(tmp_path), "--levels", "1"]) == 2
    assert "no such folder" in capsys.readouterr().err
    assert km.main([str(tmp_path), "--levels", "one"]) == 2
    assert "--levels" in capsys.readouterr().err
