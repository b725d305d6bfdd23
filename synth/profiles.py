"""Size profiles: the scale a problem is drawn at, as data (`data/profiles/NAME.toml`).

`cpu` is the scale of the Triton interpreter, CI and `make demo`, and the default everywhere: the
sizes every earlier release drew, with the same settings, so its draws are byte-identical to theirs.
`gpu` is the scale of real workloads, where a problem's eager run time is the work, not the launches.

A profile file holds (every key is checked; an unknown or ill-typed one is a `ProfileError` naming
the file and the key):

- `dtypes`: the floating dtype(s) problems are rendered in: `float32`, `bfloat16`, `float16` (or
  `fp32`, `bf16`, `fp16`). With more than one, each problem's dtype is drawn uniformly among them
  (one more number from its stream); with one, nothing is drawn, so single-dtype draws are what they
  were before the field existed. `synth.sample(..., dtype=...)`, `tritonforge sample --dtype` and a
  build config's `[sample] dtype` override it. Inputs and weights are made in that dtype; the ops
  compute in it as eager PyTorch does (fp32 accumulation inside reductions and matmuls).
- `check_on` (optional): run the degeneracy checks (finite, not constant, every input matters) on a
  twin at that profile, plus a full-size shape/dtype check on meta tensors (synth.check says why).
- `twin_sizes` (optional): sizes a twin at this profile may also take, tried only when the
  profile's own sizes cannot meet a problem's pinned attributes (GroupNorm(512, C) needs C % 512 == 0,
  and no `cpu` size is a multiple of 512). Never drawn, so they change no draw at this profile.
- `[dims]`: per-dimension domains. `default`, and optionally `rank1` ... `rank6`: the sizes a dim of
  a tensor of that rank is drawn from (a rank-1 tensor's dim is a length; a rank-5 conv input's dims
  are short). A domain is a list of ints, or `{ min, max, per_octave }`: the integers nearest
  2^(i/per_octave) in [min, max], which includes non-powers of two (3, 5, 11, 13, 19, 23, ...).
- `[limits]`: `max_tensor_elements` (any one tensor), `max_problem_bytes` (every tensor of the
  program together: inputs, each op's output, weights), `max_op_flops` (any one op) and
  `program_flops = [lo, hi]` (the whole program's window).
- `[ops.KEY]` with KEY an op name, an op family or `default` (most specific wins): per-op targets.
  `min_elements`: the op's largest tensor holds at least this many elements; `min_flops`: the op's
  catalog FLOPs are at least this; `max_flops`: overrides `max_op_flops` for these ops;
  `constraints`: catalog-style expressions the op must also meet at this profile (over the names its
  catalog expressions see, e.g. `R`, `numel_in`, and `inner` for ops along a dim). Targets are
  per op, not per program, so an op list whose ops are all elementwise stays as sampleable as one
  with a matmul in it.
- `[solver]`: `batch` (uniform size proposals tested at once) and `budget` (proposals per constraint
  component before the wiring is redrawn). They decide how many random numbers a draw consumes, so
  they are part of what makes a seed's problems what they are.
"""
from __future__ import annotations

import functools
import math
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from synth.catalog import DATA_DIR, OpSpec, default_catalog

PROFILE_DIR = DATA_DIR / "profiles"
# The sizes every release before profiles drew from (the `cpu` profile spells them out again):
# non-powers of two and primes, and 1, which lets broadcasting and degenerate dims appear.
DEFAULT_DIMS = (1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 16, 17, 24, 31, 32, 48, 61, 64, 96, 127, 128, 192, 256)
ROLES = ("default",) + tuple(f"rank{r}" for r in range(1, 7))
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}   # the dtypes problems are rendered in
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
INDEX_BYTES = 8                   # int64 class-index inputs


class ProfileError(ValueError):
    """An unknown profile, or a profile file with a bad key; the message names the file and the key."""


def canonical_dtype(name: Any) -> str:
    """`bf16` -> `bfloat16` (and so on); ValueError naming the known ones for anything else."""
    name = DTYPE_ALIASES.get(name, name) if isinstance(name, str) else name
    if name not in DTYPE_BYTES:
        known = ", ".join(list(DTYPE_BYTES) + list(DTYPE_ALIASES))
        raise ValueError(f"unknown dtype {name!r} (known: {known})")
    return name


def canonical_dtypes(names: Any) -> tuple[str, ...]:
    """One dtype name or a non-empty sequence of them, canonical and without repeats."""
    names = [names] if isinstance(names, str) else names
    if not isinstance(names, (list, tuple)) or not names:
        raise ValueError(f"dtypes must be a dtype name or a non-empty list of them, got {names!r}")
    return tuple(dict.fromkeys(canonical_dtype(n) for n in names))


@dataclass(frozen=True)
class OpTarget:
    min_elements: int = 0              # the op's largest tensor (inputs and output) holds at least this
    min_flops: float = 0               # the op's catalog FLOPs are at least this
    max_flops: float | None = None     # None: the config's max_op_flops
    constraints: tuple[str, ...] = ()  # catalog-style expressions this op must also meet at this profile


@dataclass(frozen=True)
class SampleConfig:
    """Resolved sampling settings. `SampleConfig()` is the `cpu` profile (a test keeps the two equal);
    `load_profile(name).config(**overrides)` gives any profile's, overrides applied."""

    dims: tuple[int, ...] | Mapping[str, tuple[int, ...]] = DEFAULT_DIMS  # one domain, or per role
    max_elements: int = 1 << 15            # per tensor (inputs, intermediates, outputs, weights)
    flop_window: tuple[float, float] = (500, 5e8)   # whole program
    max_op_flops: float = 2e7                        # per op, unless an op target says otherwise
    max_attempts: int = 64                  # wiring repairs before giving up on an op list
    check: bool = True                      # run the program: shapes, finiteness, sensitivity
    profile: str = "cpu"                    # the profile these settings come from (recorded in problems)
    max_bytes: int = 256 << 20              # all tensors of a program together
    op_targets: Mapping[str, OpTarget] = field(default_factory=dict)  # by op name, family or "default"
    check_on: str | None = None             # degeneracy checks on a twin at this profile
    dtypes: tuple[str, ...] = ("float32",)  # drawn uniformly per problem when more than one
    batch: int = 64                         # size proposals tested at once
    budget: int = 4096                      # proposals per constraint component
    twin_sizes: tuple[int, ...] = (512,)    # a twin's extra sizes, where its own cannot fit (never drawn)

    def __post_init__(self) -> None:
        dims = self.dims if isinstance(self.dims, Mapping) else {"default": self.dims}
        if "default" not in dims or set(dims) - set(ROLES):
            raise ValueError(f"dims must be a tuple of sizes or a mapping with 'default' and roles from {ROLES}")
        for role, dom in dims.items():
            if not dom or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dom):
                raise ValueError(f"dims must be positive ints, got {dom!r} for {role}")
        object.__setattr__(self, "dims", {role: tuple(dom) for role, dom in dims.items()})
        if self.max_elements < 1:
            raise ValueError(f"max_elements must be >= 1, got {self.max_elements}")
        lo, hi = self.flop_window
        if not 0 <= lo <= hi:
            raise ValueError(f"flop_window must be (lo, hi) with 0 <= lo <= hi, got {self.flop_window!r}")
        if self.max_bytes < 1 or self.batch < 1 or self.budget < 1:
            raise ValueError("max_bytes, batch and budget must be >= 1")
        object.__setattr__(self, "dtypes", canonical_dtypes(self.dtypes))
        if any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in self.twin_sizes):
            raise ValueError(f"twin_sizes must be positive ints, got {self.twin_sizes!r}")
        object.__setattr__(self, "twin_sizes", tuple(self.twin_sizes))

    @property
    def dtype(self) -> str:
        """The dtype of a draw made with these settings (the sampler narrows a mixture to one per problem)."""
        return self.dtypes[0]

    def domain(self, role: str | None) -> tuple[int, ...]:
        """The sizes a dim of this role is drawn from."""
        return self.dims.get(role or "default", self.dims["default"])

    def target(self, spec: OpSpec) -> OpTarget:
        """The op's targets: its own entry, else its family's, else `default`'s."""
        for key in (spec.name, spec.family, "default"):
            if key in self.op_targets:
                return self.op_targets[key]
        return OpTarget()

    def tensor_bytes(self, dtype: str) -> int:
        """Bytes per element of a tensor of catalog dtype `f32` (the profile's dtype) or `i64`."""
        return INDEX_BYTES if dtype == "i64" else DTYPE_BYTES[self.dtype]


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    description: str
    dtypes: tuple[str, ...]
    dims: dict[str, tuple[int, ...]]
    max_tensor_elements: int
    max_problem_bytes: int
    max_op_flops: float
    program_flops: tuple[float, float]
    ops: dict[str, OpTarget]
    batch: int
    budget: int
    check_on: str | None = None
    twin_sizes: tuple[int, ...] = ()

    def config(self, **overrides: Any) -> SampleConfig:
        """The sampling settings of this profile, with `overrides` (SampleConfig fields) applied."""
        base = SampleConfig(dims=self.dims, max_elements=self.max_tensor_elements, flop_window=self.program_flops,
                            max_op_flops=self.max_op_flops, profile=self.name, max_bytes=self.max_problem_bytes,
                            op_targets=self.ops, check_on=self.check_on, dtypes=self.dtypes, batch=self.batch,
                            budget=self.budget, twin_sizes=self.twin_sizes)
        unknown = set(overrides) - {f.name for f in fields(SampleConfig)}
        if unknown:
            raise TypeError(f"unknown SampleConfig field(s): {', '.join(sorted(unknown))}")
        return replace(base, **overrides) if overrides else base


class _Table:
    """One table of a profile file: getters check a key's type; `done` refuses keys nobody read."""

    def __init__(self, raw: Any, where: str, path: Path) -> None:
        self.path, self.where, self.read = path, where, set()
        if not isinstance(raw, dict):
            raise self.error("", f"must be a table, got {raw!r}")
        self.raw = raw

    def error(self, key: str, msg: str) -> ProfileError:
        name = " ".join(x for x in (self.where, key) if x)
        return ProfileError(f"{self.path}: {name or 'the file'}: {msg}")

    def get(self, key: str, default: Any = None, required: bool = False) -> Any:
        if required and key not in self.raw:
            raise self.error(key, "missing")
        self.read.add(key)
        return self.raw.get(key, default)

    def integer(self, key: str, default: int | None = None, low: int = 1) -> int:
        v = self.get(key, default, required=default is None)
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise self.error(key, f"must be an integer >= {low}, got {v!r}")
        return v

    def number(self, key: str, default: float | None = None, low: float = 0) -> float:
        v = self.get(key, default, required=default is None)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < low:
            raise self.error(key, f"must be a finite number >= {low:g}, got {v!r}")
        return v

    def done(self) -> None:
        for key in self.raw:
            if key not in self.read:
                raise self.error(key, f"unknown key (known: {', '.join(sorted(self.read))})")


def log_domain(lo: int, hi: int, per_octave: int) -> tuple[int, ...]:
    """The integers nearest 2^(i/per_octave) within [lo, hi], with lo and hi themselves."""
    top = math.ceil(math.log2(hi) * per_octave)
    return tuple(sorted({v for v in (round(2 ** (i / per_octave)) for i in range(top + 1)) if lo <= v <= hi} | {lo, hi}))


def _domain(t: _Table, role: str) -> tuple[int, ...]:
    v = t.get(role)
    if isinstance(v, list):
        if not v or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in v):
            raise t.error(role, f"must be a non-empty list of integers >= 1, got {v!r}")
        return tuple(sorted(set(v)))
    spec = _Table(v, f"[dims] {role}", t.path) if isinstance(v, dict) else None
    if spec is None:
        raise t.error(role, f"must be a list of sizes or {{ min, max, per_octave }}, got {v!r}")
    lo, hi, k = spec.integer("min"), spec.integer("max"), spec.integer("per_octave")
    spec.done()
    if lo > hi:
        raise spec.error("max", f"must be >= min ({lo}), got {hi}")
    return log_domain(lo, hi, k)


def _ops(raw: Any, path: Path) -> dict[str, OpTarget]:
    t = _Table(raw, "[ops]", path)
    catalog = default_catalog()
    known = {"default"} | set(catalog) | {o.family for o in catalog.values()}
    targets = {}
    for key in list(t.raw):
        if key not in known:
            raise t.error(key, "not an op name, an op family or 'default'")
        e = _Table(t.get(key), f"[ops.{key}]", path)
        max_flops = e.get("max_flops")
        extra = e.get("constraints", [])
        if not isinstance(extra, list) or not all(isinstance(c, str) and c.strip() for c in extra):
            raise e.error("constraints", f"must be a list of expressions (strings), got {extra!r}")
        targets[key] = OpTarget(min_elements=e.integer("min_elements", 0, low=0),
                                min_flops=e.number("min_flops", 0),
                                max_flops=None if max_flops is None else e.number("max_flops"),
                                constraints=tuple(extra))
        e.done()
    return targets


def _section(top: _Table, key: str) -> _Table:
    if key not in top.raw:
        raise ProfileError(f"{top.path}: [{key}]: missing")
    return _Table(top.get(key), f"[{key}]", top.path)


def parse_profile(path: Path, name: str | None = None) -> Profile:
    """Read and check one profile file (ProfileError naming the file and key otherwise)."""
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read it: {exc}") from None
    name = name or path.stem
    top = _Table(doc, "", path)
    description = top.get("description", "")
    if not isinstance(description, str):
        raise top.error("description", f"must be a string, got {description!r}")
    dtypes = top.get("dtypes", ["float32"])
    try:
        if not isinstance(dtypes, list):
            raise ValueError(f"must be a list, got {dtypes!r}")
        dtypes = canonical_dtypes(dtypes)
    except ValueError as exc:
        raise top.error("dtypes", str(exc)) from None
    check_on = top.get("check_on")
    if check_on is not None:
        if not isinstance(check_on, str) or check_on == name or check_on not in profile_names():
            raise top.error("check_on", f"must name another profile ({', '.join(profile_names())}), got {check_on!r}")
    twin_sizes = top.get("twin_sizes", [])
    if not isinstance(twin_sizes, list) or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in twin_sizes):
        raise top.error("twin_sizes", f"must be a list of positive ints, got {twin_sizes!r}")
    d = _section(top, "dims")
    if "default" not in d.raw:
        raise d.error("default", "missing")
    for key in d.raw:
        if key not in ROLES:
            raise d.error(key, f"unknown key (known: {', '.join(ROLES)})")
    dims = {role: _domain(d, role) for role in list(d.raw)}
    d.done()
    lim = _section(top, "limits")
    window = lim.get("program_flops", None, required=True)
    if not (isinstance(window, list) and len(window) == 2 and all(
            not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) for x in window)
            and 0 <= window[0] <= window[1]):
        raise lim.error("program_flops", f"must be [lo, hi] with 0 <= lo <= hi, got {window!r}")
    limits = dict(max_tensor_elements=lim.integer("max_tensor_elements"), max_problem_bytes=lim.integer("max_problem_bytes"),
                  max_op_flops=lim.number("max_op_flops"), program_flops=(window[0], window[1]))
    lim.done()
    ops = _ops(top.get("ops", {}), path)
    s = _section(top, "solver")
    batch, budget = s.integer("batch"), s.integer("budget")
    s.done()
    top.done()
    return Profile(name=name, path=path, description=description, dtypes=tuple(dtypes), dims=dims, ops=ops,
                   batch=batch, budget=budget, check_on=check_on, twin_sizes=tuple(twin_sizes), **limits)


def profile_names() -> list[str]:
    """The shipped profiles (data/profiles/*.toml), by name."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


@functools.lru_cache(maxsize=None)
def load_profile(name: str) -> Profile:
    """The profile called `name`; ProfileError if there is none or its file is malformed."""
    known = profile_names()
    if not isinstance(name, str) or name not in known:
        raise ProfileError(f"unknown profile {name!r} (known: {', '.join(known)}; each is a file in {PROFILE_DIR})")
    return parse_profile(PROFILE_DIR / f"{name}.toml")
