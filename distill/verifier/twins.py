"""Twins in the verifier: the CPU lane's cpu twin of a synth problem, and the resized check.

A passing candidate runs once more, untimed, on a secret twin of its problem at other sizes, which
kernels with baked-in sizes or shape-keyed shortcuts fail. A twin keeps every size the reference's
constructor reads (`nn.Linear(6, 11)`, conv channels, norm groups), since the candidate's own
`__init__` builds weights of those sizes, and changes the others.

* A synth problem carries its recipe (synth.problem.Problem.twin(..., keep_constructor=True)); on
  the CPU lane one drawn at a larger profile runs as its `cpu` twin. A problem whose every size
  feeds its constructor has nothing to resize: "unavailable", which decides nothing. The verifier
  never imports synth (it stands alone, on a GPU box with none of the rest): a problem with a
  `recipe` is asked for its own `twin`, which raises ValueError (synth.realize.TwinError) when it
  cannot make one.
* Module text (a user's KernelBench file, an external problem) has no recipe, but its sizes are
  usually module-level constants (`batch_size = 16`, `dim = 1024`, `H, W = 32, 32`). `module_twin`
  rewrites, in the text itself, each integer constant that `get_inputs` reads and the constructor
  does not (`get_init_inputs`, `Model` outside `forward`, whatever they read in turn, and any size
  the constructor spells as a literal: kept as synth's keep_constructor keeps them) to a secret
  smaller size (1 and 2 kept: broadcasting; a power of two of 16 or more stays one, 16 at least, for
  block shapes and `tl.dot`; a size's power-of-two divisibility kept up to 16, for
  aligned rows; the twin's memory stays under the original's; a problem of TWIN_QUARTER_BYTES or more
  gets sizes of a quarter to a half of its own, a cheaper twin that catches the same). Where
  it cannot tell (no such constant, a size reassigned, the text does not parse) the check says
  "not covered" and why, and decides nothing.

The check runs the twin through the pool's `attempt` (one run of a job, handed in as a callable), so
this module does not import the pool.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import secrets
from typing import Any, Callable

from distill.verifier import static
from distill.verifier.jobspec import JobSpec
from distill.verifier.problemio import ProblemError, ReferenceFailed
from distill.verifier.verdict import Verdict

# What a passing candidate's run on a resized twin decides (`VerifierPool(resized=...)`); the first
# is the default. The lowering teacher's modules read their sizes from their tensors and hold on the
# constructor-keeping twins: on the CPU, 40 problems per level, of those that pass, the twin passes
# 40/40 at level 1, 38/38 at level 2 (1 more has nothing to resize), 38/39 at level 5 (a floor after
# tanhshrink flips one element on its twin).
RESIZED = ("required", "recorded", "off")
# Twins drawn before the check gives up on a problem whose twins' references fail (screening found
# one degenerate: an input that moves no output well over the tolerance). On the CPU, 1 of 15 twins of
# an attention problem failed screening so (a CI run's one failure); three draws make it ~1 in 3,000.
TWIN_DRAWS = 3
# A module-text problem at least this large gets a twin with each size a quarter to a half of its own
# (`_smaller(quarter=True)`) instead of a half to all but one: a twin is a second whole verification, and
# KernelBench's 3-4 GB problems spent 9-25 s of the H200's time on theirs (2026-12-01); any other size
# catches a baked-in one as well.
TWIN_QUARTER_BYTES = 1 << 30


def lane_problem(problem: Any, device: str) -> tuple[Any, dict[str, str] | None]:
    """On the CPU lane a synth problem drawn at a larger profile runs as its `cpu` twin (the
    interpreter cannot run 200 MB tensors): the same graph, sizes drawn at `cpu` from a seed
    fixed by the problem, so every verification of it sees the same twin. A problem without a recipe
    (module text, an external problem) runs as given."""
    if device != "cpu" or isinstance(problem, str):
        return problem, None
    if getattr(problem, "profile", "cpu") == "cpu" or not getattr(problem, "recipe", ""):
        return problem, None
    seed = int(hashlib.sha256(problem.problem_id.encode()).hexdigest()[:15], 16)
    try:
        twin = problem.twin("cpu", seed)
    except ValueError as exc:  # synth.realize.TwinError
        raise ProblemError(f"{problem.problem_id} ({problem.profile} sizes) has no cpu twin for the CPU lane: {exc}") \
            from None
    return twin, {"of": problem.problem_id, "profile": problem.profile, "twin": twin.problem_id}


class NoTwin(ValueError):
    """No twin can be made; `status` is what the check records ("unavailable", "not covered")."""

    status = "unavailable"


class NotCovered(NoTwin):
    """Module text whose sizes the verifier cannot change; the message says why."""

    status = "not covered"


def _int_value(node: ast.AST) -> int | None:
    """The value of an integer literal or of arithmetic on integer literals (`1 << 22`, `2 ** 10`)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _int_value(node.operand)
        return None if v is None else -v
    if isinstance(node, ast.BinOp):
        a, b = _int_value(node.left), _int_value(node.right)
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b, ast.FloorDiv: lambda: a // b,
               ast.LShift: lambda: a << b if 0 <= b < 63 else None, ast.Pow: lambda: a ** b if 0 <= b < 63 else None}
        if a is not None and b is not None and type(node.op) in ops and (b != 0 or type(node.op) is not ast.FloorDiv):
            return ops[type(node.op)]()
    return None


def _names(nodes: list[ast.AST]) -> set[str]:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def module_twin(source: str, rng: secrets.SystemRandom, quarter: bool = False) -> tuple[str, dict[str, str]]:
    """`source` with each size constant `get_inputs` reads, and the constructor does not, changed to a
    size drawn from `rng` in [max(2, ceil(v/2)), v - 1] (1 and 2 kept, even sizes kept even; `quarter`: in
    [ceil(v/4), ceil(v/2)], `_smaller`); returns the text and what changed ("name": "16 -> 11"). Raises
    NotCovered saying why when nothing can be changed."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        raise NotCovered(f"the module does not parse ({exc})") from None
    defs: dict[str, list[ast.AST]] = {}        # module-level name -> the statements that define it
    sizes: dict[str, list[ast.AST]] = {}       # name -> its integer literal(s) (one, or a tuple's elements)
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            defs.setdefault(stmt.name, []).append(stmt)
            continue
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
            stmt, (ast.AnnAssign, ast.AugAssign)) else []
        value = getattr(stmt, "value", None)
        for target in targets:
            pairs = list(zip(target.elts, value.elts)) if isinstance(target, ast.Tuple) and isinstance(
                value, ast.Tuple) and len(target.elts) == len(value.elts) else [(target, value)]
            for t, v in pairs:
                for name in (n.id for n in ast.walk(t) if isinstance(n, ast.Name)):
                    defs.setdefault(name, []).append(v if v is not None else stmt)
                    if isinstance(stmt, ast.Assign) and isinstance(t, ast.Name) and v is not None:
                        lits = v.elts if isinstance(v, ast.Tuple) else [v]
                        if all(_int_value(x) is not None for x in lits):
                            sizes.setdefault(name, []).extend(lits)
    model = next((d for d in defs.get("Model", []) if isinstance(d, ast.ClassDef)), None)
    if "get_inputs" not in defs or model is None:
        raise NotCovered("the module defines no get_inputs or no class Model")
    # What the constructor reads, and what that reads in turn: kept at its size.
    seeds = list(defs.get("get_init_inputs", [])) + [b for b in model.body if not (
        isinstance(b, ast.FunctionDef) and b.name == "forward")] + model.bases + model.decorator_list
    kept = _closure(_names(seeds), defs)
    # A size the constructor spells as a literal (`nn.Linear(128, 3)` beside `K = 128`) is kept too.
    literal = {v for node in seeds + [d for n in kept for d in defs[n]] for v in map(_int_value, ast.walk(node))
               if v is not None}
    # A size spelled as a literal anywhere else (`torch.randint(0, 10, ...)` beside `C = 10`, a
    # `view(-1, 16)` in forward) may be the same size under another spelling: resizing the constant alone
    # would make the twin's reference disagree with itself (class indices past the class count).
    own = {id(n) for lits in sizes.values() for x in lits for n in ast.walk(x)}
    elsewhere = {v for node in ast.walk(tree) if id(node) not in own and (v := _int_value(node)) is not None and v > 2}
    read = _closure(_names(defs["get_inputs"]), defs)
    candidates = {n: lits for n, lits in sizes.items()
                  if n in read and n not in kept and not any(_int_value(x) in literal | elsewhere for x in lits)}
    if not candidates:
        why = "get_inputs reads no module-level integer constant" if not any(n in read for n in sizes) else \
            ("every size get_inputs reads also feeds the constructor or is spelled as a literal elsewhere "
             f"({', '.join(sorted(n for n in sizes if n in read))})")
        raise NotCovered(why)
    # A size assigned anywhere else (a second time, in a block, through `global` in a function) may
    # not be the value the literal shows.
    stores: dict[str, int] = {}
    for node in ast.walk(tree):
        for name in (node.names if isinstance(node, ast.Global) else
                     [node.id] if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load) else []):
            stores[name] = stores.get(name, 0) + 1
    reassigned = sorted(n for n in candidates if stores.get(n, 0) > 1)
    if reassigned:
        raise NotCovered(f"{', '.join(reassigned)} assigned more than once")
    edits: list[tuple[ast.AST, int]] = []
    changed: dict[str, str] = {}
    for name in sorted(candidates):
        olds, news = [], []
        for lit in candidates[name]:
            v = _int_value(lit)
            new = v if v is None or v <= 2 else _smaller(v, rng, quarter)
            olds.append(v)
            news.append(new)
            if new != v:
                edits.append((lit, new))
        if olds != news:
            changed[name] = f"{olds[0] if len(olds) == 1 else tuple(olds)} -> {news[0] if len(news) == 1 else tuple(news)}"
    if not edits:
        raise NotCovered(f"every size get_inputs reads outside the constructor is 1 or 2 ({', '.join(sorted(candidates))})")
    return _apply(source, edits), changed


def _smaller(v: int, rng: secrets.SystemRandom, quarter: bool = False) -> int:
    """A size in [max(2, ceil(v/2)), v - 1] that keeps v's power-of-two divisibility up to 16 where the
    range still leaves a secret choice (3 sizes or more), and v's evenness always. Problems often need
    an even size (rotary halves, a stride of 2: at the CPU fixtures' sizes an odd one failed
    unsloth_rope's reference), and honest GPU kernels need aligned rows: a TMA descriptor
    (TensorDescriptor, tl.make_tensor_descriptor) requires 16-byte strides, so a 4096-wide fp32 problem
    resized to 2050 failed an honest Hopper matmul. `quarter` (a large problem's twin, TWIN_QUARTER_BYTES):
    in [ceil(v/4), ceil(v/2)] instead, where that range leaves 3 choices; else the usual one.

    A power of two of 16 or more stays a power of two and at least 16 (`_power_of_two`): honest kernels
    take such sizes as block shapes (`tl.arange(0, HEAD_DIM)`, a block pointer's shape) and as `tl.dot`
    operands, which need powers of two and 16 or more; flash attention at head dimension 16 resized to 12
    was a `compile_error` on the twin (2026-12-01)."""
    if v >= 16 and v & (v - 1) == 0:
        return _power_of_two(v, rng, quarter)
    if quarter:
        got = _within(v, max(2, -(-v // 4)), min(v - 1, -(-v // 2)), rng)
        if got is not None:
            return got
    got = _within(v, max(2, -(-v // 2)), v - 1, rng, least=1)
    assert got is not None  # v >= 3: the range holds v - 1, and v's evenness where v is even
    return got


def _power_of_two(v: int, rng: secrets.SystemRandom, quarter: bool) -> int:
    """A power of two v's half or quarter (quarter: its quarter or eighth), 16 at least; v itself where
    none is (16 stays 16: the twin's other sizes still move)."""
    for shifts in ((2, 3), (1, 2)) if quarter else ((1, 2),):
        choices = [v >> s for s in shifts if v >> s >= 16]
        if choices:
            return rng.choice(choices)
    return v


def _within(v: int, lo: int, hi: int, rng: secrets.SystemRandom, least: int = 3) -> int | None:
    """A size in [lo, hi] keeping v's power-of-two divisibility up to 16 (less where fewer than 3 choices
    remain, never below its evenness), or None where even that leaves fewer than `least`."""
    d = min(16, v & -v)
    while d > 2 and hi // d - -(-lo // d) + 1 < 3:
        d //= 2
    if hi // d - -(-lo // d) + 1 < least:
        return None
    return d * rng.randint(-(-lo // d), hi // d)


def _closure(names: set[str], defs: dict[str, list[ast.AST]]) -> set[str]:
    seen: set[str] = set()
    todo = [n for n in names if n in defs]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [n for n in _names(defs[name]) if n in defs and n not in seen]
    return seen


def _apply(source: str, edits: list[tuple[ast.AST, int]]) -> str:
    """Replace each literal's exact span in the text (the rest of the module, comments included, stays)."""
    lines = static.lines(source, keepends=True)  # as the tree numbers them (not str.splitlines: a form feed)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line.encode()))
    raw = source.encode()
    spans = sorted(((starts[n.lineno - 1] + n.col_offset, starts[n.end_lineno - 1] + n.end_col_offset, v)
                    for n, v in edits), reverse=True)
    for a, b, v in spans:
        raw = raw[:a] + str(v).encode() + raw[b:]
    return raw.decode()


def _twin_of(problem: Any, quarter: bool = False) -> tuple[Any, dict[str, Any]]:
    """The secret resized twin to run and what to record of it: the problem's own `twin` where it has
    a recipe (a synth Problem), else the module text rewritten (`module_twin`; `quarter` for a large
    problem). Raises NoTwin saying why there is none."""
    if not isinstance(problem, str) and getattr(problem, "recipe", ""):
        try:
            twin = problem.twin(problem.profile, secrets.randbelow(1 << 62), keep_constructor=True)
        except ValueError as exc:  # synth.realize.TwinError: nothing to resize
            raise NoTwin(str(exc)) from None
        return twin, {"problem_id": twin.problem_id}
    source = problem if isinstance(problem, str) else problem.source
    text, changed = module_twin(source, secrets.SystemRandom(), quarter)
    return text, {"problem_id": hashlib.sha256(text.encode()).hexdigest()[:16], "sizes": changed,
                  **({"quarter": True} if quarter else {})}


def check_resized(attempt: Callable[[JobSpec], Verdict | None], problem: Any, candidate_source: str, spec: JobSpec,
                  verdict: Verdict, required: bool) -> Verdict:
    """Run a passing candidate once more, untimed, on a secret twin of the problem (the module
    docstring). Kernels with baked-in sizes or shape-keyed shortcuts fail there. Recorded in
    `checks["resized"]`; when `required` (the pool's resized="required") a failure there is the
    verdict. A twin that cannot be made ("unavailable" for a synth recipe with nothing to resize, "not
    covered" for module text) or whose reference fails (on each of TWIN_DRAWS draws: ReferenceFailed, what
    trusted processes said) decides nothing. Any other ProblemError on the twin (a worker's memory or
    disk, the replay's, the CPU lane's refusal of a construct: what a candidate's run can raise) is
    raised: no verdict, never the main run's pass kept unchecked. `attempt` runs a job once, as the
    pool's last try, and returns its verdict."""
    plan = (verdict.checks.get("memory") or {}).get("plan") or {}
    quarter = (plan.get("problem_bytes") or 0) >= TWIN_QUARTER_BYTES
    for draw in range(TWIN_DRAWS):
        try:
            twin, record = _twin_of(problem, quarter)
        except NoTwin as exc:
            verdict.checks["resized"] = {"status": exc.status, "reason": str(exc)[:300]}
            return verdict
        tspec = JobSpec.make(twin, candidate_source, spec.device, spec.timeout, trials=2, timing_trials=1,
                             warmup=0, static_checks=False)
        tspec.timed = False
        try:
            tv = attempt(tspec)
            break
        except ReferenceFailed as exc:  # the twin's reference broke: says nothing of the candidate; draw another
            status = "unavailable" if "sizes" not in record else "not covered"
            failed = {"status": status, "reason": f"twin's reference failed ({draw + 1} of {TWIN_DRAWS} drawn): "
                      f"{exc}"[:300], **record}
    else:
        verdict.checks["resized"] = failed
        return verdict
    assert tv is not None
    verdict.checks["resized"] = {"status": tv.status, "reason": tv.reason[:300], **record,
                                 "phase_s": tv.checks.get("phase_s") or {}, "screening": tv.checks.get("screening")}
    if tv.status == "pass" or not required:
        return verdict
    return dataclasses.replace(verdict, status=tv.status, reason=f"on a resized twin of the problem (same graph, "
                               f"other sizes): {tv.reason}"[:1000], kernel_ms=None, speedup_eager=None,
                               speedup_compile=None)
