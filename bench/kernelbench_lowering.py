"""How many KernelBench level-1/2 modules the lowering teacher answers: traced, lowered, verified.

    python bench/kernelbench_lowering.py PATH [--levels 1,2] [--device cpu|cuda] [--shrink] [--workers N]
                                         [--limit N] [--out DIR]

PATH is a KernelBench checkout (the folder holding `KernelBench/level1`, or that folder itself);
nothing of KernelBench ships with TritonForge. Each problem's source is traced into synth's operator
graph (distill/lowering/trace.py: torch.fx on the meta device, every call mapped to a catalog op),
lowered to a Triton ModelNew, and the pair verified by the project's verifier (VerifierPool, the
sandboxed worker, the same checks a teacher's answer gets). Stages:

  traced    forward traced and every call mapped to a catalog op (the graph exists)
  lowered   the lowering compiled the graph to a module
  verified  the verifier's verdict is `pass`

--shrink (for the CPU, where Triton runs in its interpreter): KernelBench sizes (inputs up to GBs)
cannot run there, so the module text is rewritten with smaller sizes before anything else. The
shrinkable sizes are the module's top-level integer constants and tuples of them (`batch_size = 16`,
`in_channels = 64`) and integer literals inside `get_inputs`, each at least 8 (kernel sizes, strides,
dims, group counts below 8 keep their values). Rounds halve every shrinkable size at once while the
program (all graph tensors plus parameters) holds more than 2^16 values; a halving after which the
module no longer builds, traces and maps (a group count no longer divides the channels, a conv
output would be empty) is undone and that size frozen. The shrunk problem is a different
(smaller) problem of the same program: it is what gets lowered and verified.

Without --shrink the problems run at their own sizes (the GPU run). `--out DIR` writes one JSON line
per problem (DIR/rows.jsonl) with the stage reached and the reason for the first failure.
"""
from __future__ import annotations

import argparse
import ast
import json
import math
import re
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BUDGET = 1 << 16  # values in all graph tensors plus parameters, after --shrink
FLOOR = 8         # sizes below this are kept (kernel sizes, strides, group counts)


@dataclass
class Row:
    level: int
    problem: str
    stage: str            # "none" (not traced), "traced", "lowered", "verified"
    reason: str = ""      # why the next stage failed
    status: str = ""      # the verdict's status when verified
    values: int = 0       # graph tensor + parameter values (after shrinking)
    seconds: float = 0.0


# -- shrinking -------------------------------------------------------------------------------------
def _sites(tree: ast.Module) -> list[ast.Constant]:
    """The integer constants --shrink may change: top-level `NAME = int` or a tuple of ints, and ints in get_inputs."""
    out: list[ast.Constant] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and not any(isinstance(n, (ast.Name, ast.Call, ast.Attribute))
                                                    for n in ast.walk(stmt.value)):
            try:  # `N = 2048 * 2`: folded to one constant first
                stmt.value = ast.Constant(eval(compile(ast.Expression(stmt.value), "<size>", "eval"), {"__builtins__": {}}))  # noqa: S307 - names-free arithmetic
            except Exception:  # noqa: BLE001 - not arithmetic on numbers: left alone
                continue
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, tuple):
            # `input_shape = (32768,)`: each int of the tuple is a size of its own
            stmt.value = ast.Tuple([ast.Constant(v) for v in stmt.value.value], ast.Load())
            out += stmt.value.elts
        elif isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
            out.append(stmt.value)
        elif isinstance(stmt, ast.FunctionDef) and stmt.name == "get_inputs":
            out += [n for n in ast.walk(stmt) if isinstance(n, ast.Constant)]
    return [c for c in out if type(c.value) is int and c.value >= FLOOR]


def program_values(source: str) -> int:
    """Values in the traced program's tensors plus the model's parameters (raises when untraceable)."""
    import torch

    from distill.lowering.trace import _module, trace_source

    traced = trace_source(source)
    n = sum(math.prod(d["shape"]) for _, d in traced.graph.nodes(data=True))
    mod = _module(source)
    with torch.device("meta"):
        init = mod.get_init_inputs()
        model = mod.Model(*init) if isinstance(init, (list, tuple)) else mod.Model(**init)
    return n + sum(p.numel() for p in model.parameters())


def shrink(source: str) -> tuple[str, int]:
    """The source with its sizes halved until the program fits BUDGET (see the module docstring)."""
    tree = ast.parse(source)
    sites = _sites(tree)
    frozen: set[int] = set()
    size = program_values(source)
    for _ in range(64):
        if size <= BUDGET:
            break
        live = [i for i, c in enumerate(sites) if i not in frozen and c.value >= FLOOR]
        if not live:
            break
        for group in [live] + [[i] for i in sorted(live, key=lambda i: -sites[i].value)]:
            old = {i: sites[i].value for i in group}
            for i in group:
                sites[i].value //= 2
            try:
                new = program_values(ast.unparse(tree))
            except Exception:  # noqa: BLE001 - that halving broke the program: undo it
                new = None
            if new is not None and new < size:
                size = new
                break
            for i, v in old.items():
                sites[i].value = v
            if len(group) == 1:
                frozen.add(group[0])
        else:
            break
    return ast.unparse(tree), size


# -- one problem -----------------------------------------------------------------------------------
def _reason(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return re.sub(r"\s*\[at .*\]$", "", text.splitlines()[0] if text else "")[:240]


def prepare(level: int, path: Path, do_shrink: bool) -> tuple[Row, str | None, str | None]:
    """(row, problem source, candidate source); the candidate is None when tracing or lowering failed."""
    from distill.lowering.trace import lower_traced, trace_source

    start = time.perf_counter()
    source = path.read_text()
    row = Row(level, path.name, "none")
    try:
        if do_shrink:
            source, row.values = shrink(source)
        traced = trace_source(source)
        row.stage = "traced"
        if not do_shrink:
            row.values = sum(math.prod(d["shape"]) for _, d in traced.graph.nodes(data=True))
        candidate = lower_traced(traced, path.stem).source
        row.stage = "lowered"
    except Exception as exc:  # noqa: BLE001 - a problem that fails is a row
        row.reason = _reason(exc)
        candidate = None
    row.seconds = time.perf_counter() - start
    return row, source, candidate


def table(rows: list[Row], levels: list[int], top: int) -> str:
    lines = ["| level | problems | traced | lowered | verified (pass) |", "|---:|---:|---:|---:|---:|"]
    for level in levels:
        rs = [r for r in rows if r.level == level]
        n = max(1, len(rs))
        cells = []
        for stages in (("traced", "lowered", "verified"), ("lowered", "verified"), ("verified",)):
            k = sum(r.stage in stages for r in rs)
            cells.append(f"{k} ({100 * k / n:.0f}%)")
        lines.append(f"| {level} | {len(rs)} | " + " | ".join(cells) + " |")
    for level in levels:
        why = Counter(re.sub(r"\d+", "N", r.reason)[:110] for r in rows if r.level == level and r.stage != "verified")
        if why:
            lines.append(f"\nlevel {level}, top reasons (stage not reached: count):")
            lines += [f"  {k:3d}  {w}" for w, k in why.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", type=Path, help="a KernelBench checkout")
    ap.add_argument("--levels", default="1,2", help="comma-separated (default: 1,2)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="verifier device (default: cpu)")
    ap.add_argument("--shrink", action="store_true", help="shrink sizes first (for the CPU interpreter)")
    ap.add_argument("--workers", type=int, default=2, help="verifier workers (default: 2)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per verification (default: 300)")
    ap.add_argument("--limit", type=int, default=0, help="first N problems per level (default: all)")
    ap.add_argument("--no-verify", action="store_true", help="trace and lower only")
    ap.add_argument("--top", type=int, default=12, help="failure reasons listed per level (default: 12)")
    ap.add_argument("--out", type=Path, default=None, help="write DIR/rows.jsonl")
    args = ap.parse_args(argv)
    try:
        levels = [int(x) for x in args.levels.split(",")]
    except ValueError:
        print(f"error: --levels must be comma-separated integers, got {args.levels!r}", file=sys.stderr)
        return 2
    base = args.path / "KernelBench" if (args.path / "KernelBench").is_dir() else args.path
    folders = [base / f"level{lv}" for lv in levels]
    missing = [f for f in folders if not f.is_dir()]
    if missing:
        print(f"error: {missing[0]} is not a folder (PATH must be a KernelBench checkout)", file=sys.stderr)
        return 2
    import torch

    torch.set_default_dtype(torch.float32)
    rows, pairs = [], []
    for level, folder in zip(levels, folders):
        files = sorted(folder.glob("*.py"), key=lambda p: int(p.name.split("_")[0]) if p.name[0].isdigit() else 0)
        for path in files[: args.limit or None]:
            row, source, candidate = prepare(level, path, args.shrink)
            rows.append(row)
            if candidate is not None:
                pairs.append((row, source, candidate))
            print(f"L{level} {path.name}: {row.stage} {row.reason[:120]}", file=sys.stderr, flush=True)
    if not args.no_verify and pairs:
        from distill.verifier import VerifierPool

        verdicts = []
        with VerifierPool(workers=args.workers, device=args.device, timeout=args.timeout) as pool:
            step = 4 * args.workers  # in chunks, so progress shows
            for i in range(0, len(pairs), step):
                verdicts += pool.verify_many([(src, cand) for _, src, cand in pairs[i:i + step]])
                print(f"verified {len(verdicts)}/{len(pairs)} "
                      f"({sum(getattr(v, 'status', '') == 'pass' for v in verdicts)} pass)", file=sys.stderr, flush=True)
        for (row, _, _), v in zip(pairs, verdicts):
            status = getattr(v, "status", type(v).__name__)
            row.status = status
            if status == "pass":
                row.stage = "verified"
            else:
                row.reason = f"verdict {status}: {getattr(v, 'reason', str(v))}"[:240]
    print(table(rows, levels, args.top))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        with open(args.out / "rows.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(asdict(r)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
