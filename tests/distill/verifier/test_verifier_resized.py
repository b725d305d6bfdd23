"""A passing candidate runs again on a secret resized twin of its problem (same graph, other sizes):
a size-generic kernel holds there, one with the problem's sizes baked in does not. Synth problems
resize through their recipe; module text through its module-level size constants (twins.module_twin)."""
from __future__ import annotations

import dataclasses
import hashlib

import pytest

import synth
from distill.verifier import VerifierPool
from tests.limits import CALL_LIMIT_S

GENERIC = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x0):
        x = x0.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(N_OR_NUMEL, 256),)](x, out, N_OR_NUMEL, BLOCK=256)
        return out
'''


@pytest.fixture(scope="module")
def relu_problem():
    return synth.sample(level=1, n=1, seed=3, ops=["relu"])[0]


@pytest.fixture(scope="module")
def pools():
    with VerifierPool(workers=1, device="cpu", timeout=CALL_LIMIT_S) as required, \
            VerifierPool(workers=1, device="cpu", timeout=CALL_LIMIT_S, resized="recorded") as recorded:
        yield required, recorded


def test_size_generic_kernel_passes_its_resized_twin(pools, relu_problem):
    v = pools[0].verify(relu_problem, GENERIC.replace("N_OR_NUMEL", "x.numel()"))
    assert v.status == "pass", v.reason
    assert v.checks["resized"]["status"] == "pass"
    assert v.checks["resized"]["problem_id"] != relu_problem.problem_id


def test_baked_in_sizes_fail_on_the_twin_when_required(pools, relu_problem):
    baked = GENERIC.replace("N_OR_NUMEL", str(_numel(relu_problem)))
    # A secret twin may happen to keep the element count (61x24 -> 24x61), where a baked count is
    # still right: most of three draws do not.
    runs = [pools[0].verify(relu_problem, baked) for _ in range(3)]
    failed = [v for v in runs if v.status != "pass"]
    assert len(failed) >= 2, [v.reason for v in runs]
    assert all(v.reason.startswith("on a resized twin") for v in failed), [v.reason for v in failed]
    kept = pools[1].verify(relu_problem, baked)  # recorded only: the verdict stands, the record says why
    assert kept.status == "pass" and kept.checks["resized"]["status"] in ("pass", "wrong_output", "runtime_error", "crash",
                                                                   "timeout")  # a heap it corrupted can hang


def test_lowered_linear_passes_a_twin_that_keeps_its_constructor(pools):
    # nn.Linear(K, F) bakes K and F into __init__: the twin keeps them and changes M, so a module
    # that reads M from its input passes and one that bakes M in cannot (the twin's M differs)
    from distill.lowering import lower

    assert pools[0].resized == "required"  # the default
    p = synth.sample(level=1, n=1, seed=3, ops=["linear"])[0]
    source = lower(p).source
    v = pools[0].verify(p, source)
    assert v.status == "pass", v.reason
    assert v.checks["resized"]["status"] == "pass" and v.checks["resized"]["problem_id"] != p.problem_id
    m, k = p.input_shapes[0]
    assert "M, K = x0.shape" in source
    baked = pools[0].verify(p, source.replace("M, K = x0.shape", f"M, K = {m}, {k}"))
    assert baked.status != "pass" and baked.reason.startswith("on a resized twin"), baked.reason


def test_module_text_gets_a_twin_from_its_size_constants(pools, relu_problem):
    v = pools[0].verify(relu_problem.source, GENERIC.replace("N_OR_NUMEL", "x.numel()"))
    assert v.status == "pass", v.reason
    resized = v.checks["resized"]
    assert resized["status"] == "pass" and set(resized["sizes"]) == {"D", "D1"}
    # every size shrinks, so a baked-in element count (grid and mask both) stores past the end of
    # every twin's output. With the grid taken from x.numel() instead, a twin whose element count is
    # a multiple of the block (32x16) makes the baked kernel exactly right: 1 draw in 90.
    baked = GENERIC.replace("N_OR_NUMEL", str(_numel(relu_problem)))
    for _ in range(2):
        got = pools[0].verify(relu_problem.source, baked)
        assert got.status != "pass" and got.reason.startswith("on a resized twin"), got.reason


def test_an_external_problem_is_resized_as_module_text(pools, relu_problem):
    from distill.external import load_external

    text = relu_problem.source.replace("D = 61", "batch_size = 61").replace("(D, D1)", "(batch_size, D1)")
    external = load_external_text(load_external, text)
    v = pools[0].verify(external, GENERIC.replace("N_OR_NUMEL", "x.numel()"))
    assert v.status == "pass" and v.checks["resized"]["status"] == "pass", v.checks["resized"]
    assert set(v.checks["resized"]["sizes"]) == {"batch_size", "D1"}


def load_external_text(load_external, text):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "mine.py").write_text(text)
        return load_external(Path(d) / "mine.py")[0]


def test_module_text_whose_sizes_all_feed_the_constructor_is_not_covered(pools):
    from tests.distill.verifier.conftest import honest, problem

    v = pools[0].verify(problem("linear_relu"), honest("linear_relu"))
    assert v.status == "pass", v.reason
    assert v.checks["resized"]["status"] == "pass" and set(v.checks["resized"]["sizes"]) == {"BATCH"}
    source = problem("linear_relu").replace("return [IN, OUT]", "return [IN, OUT, BATCH]").replace(
        "def __init__(self, in_features, out_features):", "def __init__(self, in_features, out_features, batch):")
    v = pools[0].verify(source, honest("linear_relu").replace(
        "def __init__(self, in_features, out_features):", "def __init__(self, in_features, out_features, batch):"))
    assert v.status == "pass", v.reason
    assert v.checks["resized"] == {"status": "not covered", "reason": "every size get_inputs reads also feeds the "
                                   "constructor or is spelled as a literal elsewhere (BATCH, IN)"}


def test_bad_resized_setting_is_refused():
    with pytest.raises(ValueError, match="resized"):
        VerifierPool(device="cpu", resized="sometimes")


def _numel(problem) -> int:
    ns: dict = {}
    exec(problem.source.split("class Model")[0], ns)  # noqa: S102 - the problem's own size constants
    n = 1
    for k, v in ns.items():
        if k.isupper() and isinstance(v, int):
            n *= v
    return n


def test_cpu_lane_runs_a_gpu_problem_as_its_cpu_twin(pools):
    big = synth.sample(level=1, n=1, seed=5, ops=["relu"], profile="gpu")[0]
    generic = GENERIC.replace("N_OR_NUMEL", "x.numel()")
    first, again = (pools[1].verify(big, generic) for _ in range(2))
    assert first.status == "pass", first.reason
    twin = first.checks["cpu_twin"]
    assert twin["of"] == big.problem_id and twin["profile"] == "gpu"
    assert again.checks["cpu_twin"] == twin  # the same twin every time
    assert _numel(big) > 1 << 20  # the original is not CPU-sized


def test_cpu_lane_twin_is_the_plain_cpu_twin():
    # keeping the constructor is for the resized check only: a gpu problem's cpu twin redraws the
    # constructor's sizes too (nn.Linear(4096, ...) is no interpreter size), as it always did
    from distill.verifier.twins import lane_problem

    big = synth.sample(level=1, n=1, seed=2, ops=["linear"], profile="gpu")[0]
    twin, info = lane_problem(big, "cpu")
    assert twin.profile == "cpu" and info == {"of": big.problem_id, "profile": "gpu", "twin": twin.problem_id}
    assert twin.source.split("def forward")[0] != big.source.split("def forward")[0]
    seed = int(hashlib.sha256(big.problem_id.encode()).hexdigest()[:15], 16)  # fixed by the problem
    assert big.twin("cpu", seed).source == twin.source == lane_problem(big, "cpu")[0].source


MODULE = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.norm = nn.LayerNorm(30)

    def forward(self, x):
        return self.norm(torch.relu(self.conv(x)))

batch_size = 128  # the batch
in_channels = 3
out_channels = 16
height, width = 32, 30
kernel_size = 3
depth = 1 << 5
unused = 4096

def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width + 2) * depth]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
"""


def test_module_twin_rewrites_only_the_sizes_get_inputs_reads_outside_the_constructor():
    import secrets

    from distill.verifier.twins import module_twin

    text, changed = module_twin(MODULE, secrets.SystemRandom())
    # in_channels feeds the constructor, width equals a literal it spells (LayerNorm(30)), unused is never read
    assert set(changed) == {"batch_size", "height", "depth"}
    assert "# the batch" in text and text.count("\n") == MODULE.count("\n")  # only the literals moved
    ns: dict = {}
    exec(compile(text.split("class Model")[0] + text.split("return self.norm(torch.relu(self.conv(x)))")[1],  # noqa: S102
                 "<twin>", "exec"), ns)
    assert ns["batch_size"] in (32, 64) and ns["height"] == ns["depth"] == 16  # powers of two stay so
    assert (ns["in_channels"], ns["width"], ns["kernel_size"], ns["unused"]) == (3, 30, 3, 4096)


@pytest.mark.parametrize("edit,why", [
    (lambda s: s + "\nbatch_size = 64\n", "assigned more than once"),
    (lambda s: s.replace("def get_inputs():\n", "def get_inputs():\n    global height\n"), "assigned more than once"),
    (lambda s: s.replace("batch_size = 128", "batch_size = 2").replace("32, 30", "1, 30").replace("1 << 5", "2"),
     "is 1 or 2"),
    (lambda s: s.replace("(batch_size, in_channels, height, width + 2) * depth", "(4, 3, 5, 5)"),
     "reads no module-level integer constant"),
    (lambda s: s.replace("class Model", "class Mod"), "no class Model"),
    (lambda s: s.replace("def get_inputs():", "def get_inputs(:"), "does not parse"),
])
def test_module_twin_says_why_it_cannot_resize(edit, why):
    import secrets

    from distill.verifier.twins import NotCovered, module_twin

    with pytest.raises(NotCovered, match=why):
        module_twin(edit(MODULE), secrets.SystemRandom())


def test_module_twin_keeps_a_size_that_is_also_spelled_as_a_literal():
    """`C = 10` beside `torch.randint(0, 10, ...)`: resizing C alone would draw class indices past the
    twin's class count, and the twin's own reference would fail (a device-side assert on a GPU)."""
    import secrets

    from distill.verifier.twins import module_twin

    source = MODULE.replace("depth = 1 << 5", "depth = 1 << 5\nclasses = 10").replace(
        "    return [torch.randn(batch_size, in_channels, height, width + 2) * depth]",
        "    return [torch.randn(batch_size, in_channels, height, width + 2) * depth,\n"
        "            torch.randn(batch_size, classes), torch.randint(0, 10, (batch_size,))]")
    for _ in range(20):
        text, changed = module_twin(source, secrets.SystemRandom())
        assert set(changed) == {"batch_size", "height", "depth"}
        assert "classes = 10" in text and "torch.randint(0, 10, (batch_size,))" in text
    # the literal elsewhere is what keeps it: with the class count spelled by name it is resized
    _, changed = module_twin(source.replace("randint(0, 10,", "randint(0, classes,"), secrets.SystemRandom())
    assert set(changed) == {"batch_size", "height", "depth", "classes"}


def test_a_resized_size_keeps_its_alignment_where_a_secret_choice_remains():
    """A TMA descriptor needs 16-byte row strides: a 4096-wide fp32 problem resized to 2050 failed an
    honest Hopper matmul. Large sizes keep their power-of-two divisibility up to 16; small ones keep
    at least 3 choices (and evenness), as before."""
    import secrets

    from distill.verifier.twins import _smaller

    rng = secrets.SystemRandom()
    for v, d, least in ((4032, 16, 100), (1000, 8, 50), (72, 8, 4), (48, 8, 3), (24, 4, 3), (8, 2, 2), (17, 1, 8)):
        got = {_smaller(v, rng) for _ in range(2000)}
        assert all(-(-v // 2) <= s < v and s % d == 0 for s in got), (v, sorted(got))
        assert len(got) >= least, (v, sorted(got))


def test_a_power_of_two_stays_a_power_of_two_of_16_or_more():
    """Honest kernels take such sizes as block shapes and tl.dot operands (flash attention's HEAD_DIM): its
    half or quarter (a large problem's quarter or eighth), 16 at least, and 16 itself stays."""
    import secrets

    from distill.verifier.twins import _smaller

    rng = secrets.SystemRandom()
    for v, quarter, want in ((4096, False, {2048, 1024}), (4096, True, {1024, 512}), (64, False, {32, 16}),
                             (64, True, {16}), (32, False, {16}), (32, True, {16}), (16, False, {16}), (16, True, {16})):
        assert {_smaller(v, rng, quarter) for _ in range(400)} == want, (v, quarter)


@dataclasses.dataclass
class _FirstTwinDegenerate(synth.Problem):
    """A synth problem whose first twin's inputs are all negative (relu then moves no output: the
    verifier's screening fails that reference), its later twins the recipe's own."""
    drawn: int = 0

    def twin(self, profile, seed, keep_constructor=False):
        self.drawn += 1
        twin = super().twin(profile, seed, keep_constructor)
        if self.drawn == 1:
            return dataclasses.replace(twin, source=twin.source.replace("torch.randn(", "-1 - torch.rand("))
        return twin


def test_a_twin_whose_reference_fails_is_drawn_again(pools, relu_problem):
    problem = _FirstTwinDegenerate(**{f.name: getattr(relu_problem, f.name) for f in dataclasses.fields(relu_problem)})
    v = pools[0].verify(problem, GENERIC.replace("N_OR_NUMEL", "x.numel()"))
    assert v.status == "pass", v.reason
    assert problem.drawn == 2 and v.checks["resized"]["status"] == "pass", v.checks["resized"]


@pytest.mark.parametrize("claim", ['raise OSError(28, "No space left on device")',  # a disk ResourceError
                                   "tl.inline_asm_elementwise"])  # the CPU lane's refusal: LaneError
def test_a_failure_the_candidate_can_raise_on_the_twin_never_keeps_the_pass(pools, relu_problem, claim):
    """Baked sizes that raise, on any other shape, what the verifier reads as its own limit or the lane's
    gap: the twin decides nothing then, and the main run's pass stood (a red-team find). Only the twin's
    reference failing (trusted processes: screening, trials, the plan) draws another; anything else is
    no verdict."""
    from distill.verifier import LaneError, ResourceError

    numel = _numel(relu_problem)
    if claim.startswith("raise"):
        guard = f"        if x.numel() != {numel}:\n            {claim}\n"
    else:  # a construct the interpreter refuses, reached only off the original sizes
        guard = f"        if x.numel() != {numel}:\n            _asm_kernel[(1,)](x)\n"
    cand = GENERIC.replace("N_OR_NUMEL", str(numel)).replace("        out = torch.empty_like(x)\n",
                                                              guard + "        out = torch.empty_like(x)\n")
    if not claim.startswith("raise"):
        cand = cand.replace("class ModelNew", '''@triton.jit
def _asm_kernel(x_ptr):
    x = tl.load(x_ptr)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    tl.store(x_ptr, y)


class ModelNew''')
    with pytest.raises((ResourceError, LaneError)):
        pools[0].verify(relu_problem, cand)


@pytest.mark.parametrize("sep", ["\x0c", "\u2028", "\x85"])
def test_module_text_with_a_form_feed_gets_its_sizes_replaced_in_place(sep):
    """The twin's edits land where the syntax tree puts each literal: str.splitlines also breaks at a form
    feed (and \\u2028, \\x85), which put N's new value inside `import torch.nn` (red-team pass 8)."""
    import random

    from distill.verifier import twins

    src = (f"import torch  # page {sep} break\n\x0c\nimport torch.nn as nn\r\nN = 1000\n\n\nclass Model(nn.Module):\n"
           "    def forward(self, a):\n        return a * 2\n\n\ndef get_inputs():\n    return [torch.randn(N)]\n\n\n"
           "def get_init_inputs():\n    return []\n")
    text, changed = twins.module_twin(src, random.Random(0))
    new = changed["N"].split(" -> ")[1]
    assert new != "1000" and text == src.replace("N = 1000", f"N = {new}")


def test_a_large_problems_twin_takes_a_quarter_to_a_half_of_each_size():
    """`quarter` (a problem of twins.TWIN_QUARTER_BYTES or more): sizes in [ceil(v/4), ceil(v/2)] with the
    alignment rule; where that range leaves fewer than 3 choices, the usual [ceil(v/2), v - 1]."""
    import secrets

    from distill.verifier.twins import _smaller

    rng = secrets.SystemRandom()
    for v, d, least in ((4032, 16, 60), (1000, 8, 30), (72, 4, 4), (48, 4, 3), (17, 1, 4)):
        got = {_smaller(v, rng, quarter=True) for _ in range(2000)}
        assert all(-(-v // 4) <= s <= -(-v // 2) and s % d == 0 for s in got), (v, sorted(got))
        assert len(got) >= least, (v, sorted(got))
    got = {_smaller(8, rng, quarter=True) for _ in range(500)}  # [2, 4] even: 2 choices, so the usual range
    assert got <= {4, 6} and len(got) == 2, got


def test_check_resized_draws_the_quarter_twin_for_a_large_problem_only():
    """The twin's sizes follow the passing verdict's memory plan: 1 GiB of problem or more, a quarter to a half."""
    import re

    from distill.verifier import Verdict, twins
    from distill.verifier.jobspec import JobSpec

    seen: list[str] = []

    def attempt(spec):
        seen.append(spec.source)
        return Verdict("pass", "every check held")

    spec = JobSpec.make(MODULE, "candidate", "cpu", 60, trials=2, timing_trials=1, warmup=0, static_checks=False)
    for gib, quarter in ((0.5, False), (2, True)):
        v = Verdict("pass", "every check held", checks={"memory": {"plan": {"problem_bytes": int(gib * (1 << 30))}}})
        out = twins.check_resized(attempt, MODULE, "candidate", spec, v, required=True)
        assert out.status == "pass" and out.checks["resized"].get("quarter", False) is quarter
        batch = int(re.search(r"^batch_size = (\d+)", seen[-1], re.M).group(1))
        assert batch in ((16, 32) if quarter else (32, 64)), batch  # 128, a power of two (_power_of_two)
