"""Is a tensor the candidate kept from before `forward` a layout of the problem's parameters?

A replayed forward (replay.py) reads the inputs the replayer made, buffers it allocated itself, and
*state*: tensors that existed before the call (parameters, buffers, caches), whose bytes only the
worker can report. Those bytes are a claim. A cached answer, or a weight folded with others ahead of
time, is work no timing sees, so the parent accepts a state tensor only when it is
* a layout of the reference model's parameters and buffers: its values, as bit patterns, are a
  sub-multiset of theirs (the same values up to permutation and subset: a transposed or sliced
  copy, a tensor holding several parameters), or
* a constant fill, or an arithmetic progression of step 1 or -1 in memory order (`arange`), or
* up to 4,096 values that are a list of numbers written in the candidate's source, in its order, or
  that list repeated (`torch.tensor([0.25, 0.5])` in forward: a table of literals, which carry no
  weight and no input). Numbers of the source in any arrangement carried a fold as bits of 0 and 1.
* up to 4,096 integers that are all sizes or strides of the problem's inputs, in at most SIZE_TABLES
  storages (`input_sizes`: from the traced call's input fingerprints, which matched the reference's):
  a grouped GEMM's per-group sizes and leading dimensions (Triton's tutorial 08 builds them on the
  host each call). Their arrangement can carry bits too; what those bits could say of the weights or
  the inputs is wrong on the replay trial (second weights, secret inputs), where the table stays.
Anything else reaches the replayer poisoned (NaN, or the integer minimum), and if the outputs then
come out wrong the verdict names that tensor (judge.py).

The reference computes `summary` of its model (bit-pattern digests per tensor, and the sorted
multiset of all values per dtype up to 16M elements); the parent runs `classify` on each state
tensor. A permutation or selection of parameter values that is itself the work (a sort of a
weight, its maximum) passes as layout, and is no longer the work on the second weights (below); a
constant fill passes whatever its value, so a single number folded from the weights beforehand
passes here, and is wrong on the second weights. A record's fills together claim at most
CONSTANT_CLAIMS values besides 0, +-1 and the source's literals (`claim`), in at most CONSTANT_STORAGES
storages: a folded weight kept as one one-element tensor per value (1,280 "constants") is a table, not
a fill. Not covered: a permutation of parameter values carries information by its order too.

**The second weights.** Whatever the candidate's host code knew of the weights could ride per-call
fills and scalar launch arguments, which the replay takes from the record as they were. So the
replay trial runs on a second set of weights (`second_map`, `apply_second`): the reference draws the
model again under a secret seed (the same constructor arguments) and maps each floating value of its
parameters and buffers to the second draw's value at the value's first place where that draw changed
it, scaled per tensor by a secret factor (a norm or a mean of a large tensor barely moves between
two draws). A value the second draw left as it was at every place (a fill, a range, a fixed table)
stays. Integer tensors map the same way, unscaled (a `randperm` or `randint` buffer's values become
the second draw's, still in range, so indices stay indices; an `arange` stays): a cache derived from
one on the first call (its argsort kept in state, a sub-multiset of its values) passed while integers
stayed. Bool tensors stay. The reference applies it to its own
model in place once the other trials ran, so whatever else the constructor drew (a Python float)
stays as the candidate holds it, and one more model is held only while the map is made. The map is a
function of the value, so a state tensor that is a layout of the parameters maps through it element by
element (`remap`): the parent hands the replayer both, the first for the run on the worker's own
trial, the second for the replay trial, whose expected outputs the reference computes with the second
weights. A fill or a scalar folded from the first weights is then the wrong number there. A floating
dtype past UNION_LIMIT values keeps its first weights, and `checks.replay_weights` says so.
"""
from __future__ import annotations

import ast
import hashlib
import re
from typing import Any

import torch

from distill.verifier import codec, static

UNION_LIMIT = 1 << 24  # elements per dtype: above it only whole-tensor permutations are recognised
LITERAL_LIMIT = 4096  # elements of a tensor accepted as the source's own numbers
# distinct values a record's constant fills (and ranges' starts) may claim besides 0, +-1 and literals:
# an eps, a scale from the constructor's arguments, a counter a kernel left behind
CONSTANT_CLAIMS = 8
SIZE_TABLES = 8  # storages a record may hold as tables of the inputs' sizes (`_sizes_table`)
# constant fills (and ranges) a record may keep in all: which of many one-element fills holds 0 and
# which 1 carries a bit each
CONSTANT_STORAGES = 256
_INTS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


# Bytes of a device tensor per step of `_digest` (64 MiB): the host buffer it reuses.
DIGEST_SLICE = 1 << 26


def _bits(raw: torch.Tensor, width: int) -> torch.Tensor | None:
    """Raw bytes (uint8) as one signed integer per element of `width` bytes, or None."""
    if width not in _INTS or raw.numel() % width:
        return None
    return raw.reshape(-1).view(_INTS[width])


def _digest(dtype: str, bits: torch.Tensor) -> str:
    """A cryptographic hash: the worker chooses the bytes it claims, so a checksum it could match
    with other values would let precomputed data through. The bytes of a device tensor reach the hash
    in DIGEST_SLICE pieces through one host buffer: a whole host copy (and `.tobytes()` of it, one more)
    per digest was where the reference of KernelBench L2 #59 (a 4.3 GB weight) spent 731 of its 1,782
    profile samples (H200, 2026-12-01), fresh host memory at every one."""
    h = hashlib.sha256()
    flat = bits.reshape(-1)
    if flat.device.type == "cpu" and flat.is_contiguous():  # hashlib reads the tensor's own memory
        h.update(memoryview(flat.numpy()).cast("B"))
        return dtype + ":" + h.hexdigest()
    step = max(1, DIGEST_SLICE // flat.element_size())
    buf = torch.empty(min(step, flat.numel()), dtype=flat.dtype)
    for a in range(0, flat.numel(), step):
        part = buf[:min(step, flat.numel() - a)]
        part.copy_(flat[a:a + step])
        h.update(memoryview(part.numpy()).cast("B"))
    return dtype + ":" + h.hexdigest()


def held_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    """The tensors the reference's model holds, each once: its parameters and buffers, then those held
    outside them, as plain attributes (`self.scale = torch.randn(n)`) or in plain lists, tuples and
    dicts of tensors or modules (`self.layers = [nn.Linear(...)]`, as some KernelBench files do). An
    honest copy of those was the candidate's own state, replaced by NaN. Those on another device than
    the first are left out (not covered: a plain attribute the model's `.to(device)` left on the CPU)."""
    out, seen = [], set()

    def add(t: torch.Tensor) -> None:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t.detach())

    def walk(value: Any, depth: int) -> None:
        if isinstance(value, torch.Tensor):
            add(value)
        elif isinstance(value, torch.nn.Module):
            for t in [*value.parameters(), *value.buffers()]:
                add(t)
            if depth < 4:
                for v in list(vars(value).values()):
                    walk(v, depth + 1)
        elif type(value) in (list, tuple) and depth < 4:
            for v in value:
                walk(v, depth + 1)
        elif isinstance(value, dict) and depth < 4:
            for v in list(value.values()):
                walk(v, depth + 1)

    walk(model, 0)
    # one device: `.to(device)` leaves plain attributes where the constructor made them (the CPU)
    return [t for t in out if t.device == out[0].device] if out else out


def summary(model: torch.nn.Module, second: dict[str, dict[str, torch.Tensor]] | None = None) -> dict[str, Any]:
    """What `classify` needs of the reference's held tensors (`held_tensors`, computed where they live);
    with `second` (`second_map`'s map of the same model), each dtype's second values beside its values."""
    raw, digests, groups = [], [], {}
    for t in held_tensors(model):
        try:
            name = codec.dtype_name(t.dtype)
        except codec.CodecError:
            continue
        bits = _bits(codec.raw_u8(t), t.element_size())
        if bits is None or not bits.numel():
            continue
        raw.append(_digest(name, bits))  # the parameter as it is: most kept tensors are one
        digests.append(_digest(name, torch.sort(bits).values))
        groups.setdefault(name, []).append(bits)
    union = {}
    for name, parts in groups.items():
        if sum(p.numel() for p in parts) <= UNION_LIMIT:
            values, counts = torch.unique(torch.cat(parts), sorted=True, return_counts=True)
            union[name] = {"values": values.cpu(), "counts": counts.cpu()}
            if second and name in second and torch.equal(second[name]["values"].cpu(), union[name]["values"]):
                union[name]["second"] = second[name]["second"].cpu()
    return {"raw": raw, "digests": digests, "union": union, "second": bool(second)}


def _factor(gen: torch.Generator) -> float:
    """A secret scale in [0.67, 0.9] or [1.1, 1.33]: a statistic of a large tensor (its norm, its mean)
    barely moves between two draws of it, and must move between the two sets of weights."""
    u, side = torch.rand(2, generator=gen).tolist()
    return 1.0 + (0.1 + 0.23 * u) * (1.0 if side < 0.5 else -1.0)


def mapped(dtype: torch.dtype) -> bool:
    """Whether a dtype's values get second weights: floating and integer ones. Not bool: with two values a
    map can only keep, swap or merge them, and a merged mask is degenerate."""
    return dtype.is_floating_point or (not dtype.is_complex and dtype != torch.bool)


def _groups(tensors: list[torch.Tensor]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(tensors):
        if mapped(t.dtype) and t.numel():
            groups.setdefault(codec.dtype_name(t.dtype), []).append(i)
    return groups


def second_map(first_model: torch.nn.Module, drawn_model: torch.nn.Module, seed: int) -> tuple[
        dict[str, dict[str, torch.Tensor]], list[str], str]:
    """The second weights as a map of values (the module docstring): for each floating dtype, the
    sorted distinct values (bit patterns) of `first_model`'s parameters and buffers and the second value
    of each ({dtype: {"values", "second"}}). A value takes `drawn_model`'s value at its first place
    where the second draw changed it, scaled by that tensor's secret factor (drawn from `seed`); a
    value the second draw left as it was at every place (a fill, a range, a table) stays, and so does
    the value of a whole tensor that is one fixed value (a norm's ones, which a bf16 embedding may also
    draw). Any other value that is left at one place and drawn at another maps everywhere, so a table
    of fixed values cannot shield a weight whose values it shares. Also returns the dtypes left on
    their first weights and why, and why there is no map."""
    first, drawn = held_tensors(first_model), held_tensors(drawn_model)
    if [(t.shape, t.dtype) for t in first] != [(t.shape, t.dtype) for t in drawn]:
        return {}, [], "the second draw's parameters are not laid out as the first's"
    gen = torch.Generator().manual_seed(seed & ((1 << 63) - 1))
    second, kept = {}, []
    for name, members in _groups(first).items():
        total = sum(first[i].numel() for i in members)
        if total > UNION_LIMIT:
            kept.append(f"{total:,} {name} values (past {UNION_LIMIT:,})")
            continue
        width = first[members[0]].element_size()
        a = torch.cat([_bits(codec.raw_u8(first[i]), width) for i in members])
        b = torch.cat([_bits(codec.raw_u8(drawn[i]), width) for i in members])
        # integers unscaled: an index buffer's values map to the second draw's, in its range still
        scaled = torch.cat([_bits(codec.raw_u8(drawn[i] * _factor(gen) if drawn[i].dtype.is_floating_point
                                               else drawn[i]), width) for i in members])
        values, inverse = torch.unique(a, sorted=True, return_inverse=True)
        drawn_at = torch.where(b != a, torch.arange(a.numel(), device=a.device), a.numel())
        place = torch.full((values.numel(),), a.numel(), dtype=torch.long, device=a.device)
        place.scatter_reduce_(0, inverse, drawn_at, "amin")
        changed = place < a.numel()
        # a value some whole tensor holds at every place, as the second draw does too (a norm's ones and
        # zeros), stays wherever else it occurs: the candidate may keep it in any layout (two norms'
        # weights stacked, an fp32 copy), where `remap` cannot tell it from its own fill
        fills, at = [], 0
        for i in members:
            n = first[i].numel()
            seg = a[at:at + n]
            if n > 1 and bool((seg == seg[0]).all()) and torch.equal(seg, b[at:at + n]):
                fills.append(seg[:1])
            at += n
        if fills:
            changed &= ~torch.isin(values, torch.cat(fills))
        second[name] = {"values": values, "second": torch.where(changed, scaled[place.clamp(max=a.numel() - 1)], values)}
    return second, kept, ""


def apply_second(model: torch.nn.Module, second: dict[str, dict[str, torch.Tensor]]) -> None:
    """Rewrite `model`'s floating parameters and buffers, in place, through `second_map`'s map. A value
    not among the map's stays: the model is the first one after its trials, and a forward in training
    mode moved its buffers (a batch norm's running statistics) to values no draw made; its outputs do
    not read them. Looked up as the nearest value, one past the largest failed every BatchNorm problem
    in training mode (an IndexError, so no verdict), and a moved value took a neighbour's."""
    tensors = held_tensors(model)
    with torch.no_grad():
        for name, members in _groups(tensors).items():
            if name not in second:
                continue
            values, to = second[name]["values"], second[name]["second"]
            for i in members:
                t = tensors[i]
                bits = _bits(codec.raw_u8(t), t.element_size())
                at = torch.searchsorted(values, bits).clamp(max=values.numel() - 1)
                out = torch.where(values[at] == bits, to[at], bits)
                t.copy_(out.view(torch.uint8).view(t.dtype).reshape(t.shape))


def remap(entry: dict[str, Any], ref: dict[str, Any], tables: frozenset[tuple[float, ...]] = frozenset()) -> \
        torch.Tensor | None:
    """A state storage `classify` took as 'parameters', as it holds the second weights (raw bytes), or
    None where it stays: no second weights for its dtype (bool tensors keep theirs), a
    value not among them, or a tensor that is the candidate's own rather than a copy of a parameter.
    A copy of one parameter (its bytes, or their permutation: the summary's digests) always maps: a
    norm's ones map wherever the second weights moved 1.0. Otherwise a constant fill or a range of more
    than one value, a table written in its source (`tables`), or one value that recurs among the
    parameters is the candidate's own: in fp16 or bf16 weights most small numbers occur, so its own
    `torch.full((8,), 0.5)` is a sub-multiset of them, and mapped it would be a random number."""
    group = (ref.get("union") or {}).get(entry.get("dtype"))
    if not isinstance(group, dict) or not isinstance(group.get("second"), torch.Tensor):
        return None
    dtype, width = codec.DTYPES[entry["dtype"]]
    bits = _bits(entry["data"], width)
    values = group["values"]
    if bits is None or values.dtype != bits.dtype or not values.numel():
        return None
    # integers: a permutation of a buffer's values is no copy (a `randperm(n)` buffer and the candidate's
    # own `arange(n)` offsets are the same multiset); only the bytes as they are
    copied = _digest(entry["dtype"], bits) in set(ref.get("raw") or ()) or (dtype.is_floating_point and
        _digest(entry["dtype"], torch.sort(bits).values) in set(ref.get("digests") or ()))
    if not copied and bits.numel() > 1 and (_is_constant_or_range(bits, dtype) or _written_table(bits, dtype, tables)
                                            or (not dtype.is_floating_point and _is_progression(bits, dtype))):
        return None
    at = torch.searchsorted(values, bits).clamp(max=values.numel() - 1)
    if not torch.equal(values[at], bits) or (not copied and bits.numel() == 1 and int(group["counts"][at[0]]) > 1):
        return None
    return group["second"][at].view(torch.uint8).clone()


def _is_param_layout(bits: torch.Tensor, dtype: str, ref: dict[str, Any]) -> bool:
    if _digest(dtype, bits) in set(ref.get("raw") or ()) or _digest(dtype, torch.sort(bits).values) in set(
            ref.get("digests") or ()):
        return True
    group = (ref.get("union") or {}).get(dtype)
    if not isinstance(group, dict) or not isinstance(group.get("values"), torch.Tensor):
        return False
    values, counts = group["values"], group["counts"]
    if values.dtype != bits.dtype or not values.numel():
        return False
    want, need = torch.unique(bits, sorted=True, return_counts=True)
    at = torch.searchsorted(values, want).clamp(max=values.numel() - 1)
    return bool(torch.equal(values[at], want) and (counts[at] >= need).all())


def _is_constant_or_range(bits: torch.Tensor, dtype: torch.dtype) -> bool:
    if bool((bits == bits[0]).all()):
        return True
    if dtype.is_complex or dtype == torch.bool or bits.numel() > 1 << 31:
        return False
    vals = bits.view(dtype).double()
    step = vals[1] - vals[0]
    if float(step) not in (1.0, -1.0):
        return False
    return bool(torch.equal(vals, vals[0] + step * torch.arange(vals.numel(), dtype=torch.float64)))


def _is_progression(bits: torch.Tensor, dtype: torch.dtype) -> bool:
    """Integers in one step (`torch.arange(0, d, 32)`: a kernel's tile starts beside a `randperm(d)` buffer,
    whose values they are among): the candidate's own, two numbers' worth, never a derived table."""
    vals = bits.view(dtype).long()
    return bool(torch.equal(vals, vals[0] + (vals[1] - vals[0]) * torch.arange(vals.numel())))


def _written_table(bits: torch.Tensor, dtype: torch.dtype, tables: frozenset[tuple[float, ...]]) -> bool:
    """The values are one list of the source, in order, or that list repeated (each number as the
    tensor's dtype rounds it)."""
    n = bits.numel()
    if not tables or n > LITERAL_LIMIT or dtype.is_complex or dtype == torch.bool:
        return False
    vals = bits.view(dtype).double()
    for table in tables:
        if not table or n % len(table):
            continue
        want = torch.tensor(table, dtype=torch.float64)
        if not dtype.is_floating_point and not bool((want == want.round()).all()):
            continue
        want = want.to(dtype).double().repeat(n // len(table))
        if torch.equal(vals, want) or bool(((vals == want) | (vals.isnan() & want.isnan())).all()):
            return True
    return False


def _sizes_table(bits: torch.Tensor, dtype: torch.dtype, sizes: frozenset[int]) -> bool:
    """Integers that are all sizes or strides of the problem's inputs (`sizes`: `input_sizes`): the per-group
    sizes and leading dimensions a grouped GEMM's host code gathers into a table (Triton's tutorial 08)."""
    if not sizes or bits.numel() > LITERAL_LIMIT or dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        return False
    allowed = torch.tensor(sorted(sizes), dtype=torch.int64)
    return bool(torch.isin(bits.view(dtype).long(), allowed).all())


def input_sizes(fingerprints: Any) -> frozenset[int]:
    """The sizes and (contiguous) strides of the problem's tensor inputs, read from a call's input
    fingerprints (problemio.fingerprint: "torch.float32[4, 32, 48]:..."), which the caller has found
    equal to the reference's: numbers the problem fixes, never the worker's."""
    out: set[int] = set()
    for p in fingerprints if type(fingerprints) is list else ():
        m = _SHAPE.match(p) if type(p) is str else None
        if m is None:
            continue
        dims = [int(d) for d in m.group(1).split(",") if d.strip()]
        stride = 1
        for d in reversed(dims):
            out.update((d, stride))
            stride *= d
    return frozenset(n for n in out if 0 < n < 1 << 62)


_SHAPE = re.compile(r"^torch\.\w+\[([0-9, ]*)\]:")


def _all_literals(bits: torch.Tensor, dtype: torch.dtype, literals: frozenset[float]) -> bool:
    if not literals or bits.numel() > LITERAL_LIMIT or dtype.is_complex or dtype == torch.bool:
        return False
    vals = bits.view(dtype).double()
    allowed = torch.tensor(sorted(literals), dtype=torch.float64)
    if not dtype.is_floating_point:
        allowed = allowed[allowed == allowed.round()]
    allowed = allowed.to(dtype).double()  # each number as the tensor's dtype rounds it
    return bool(torch.isin(vals, allowed).all())


def classify(entry: dict[str, Any], ref: dict[str, Any], literals: frozenset[float] = frozenset(),
             tables: frozenset[tuple[float, ...]] = frozenset(), sizes: frozenset[int] = frozenset()) -> str:
    """'parameters', 'constant', 'literals', 'sizes' or '' (not accepted) for one state storage of a replay
    record: `entry["data"]` its bytes (uint8), `entry["dtype"]` the dtype it is read as; `literals`
    the numbers written in the candidate's source (literals), `tables` its lists of numbers
    (sequences), `sizes` the problem's input sizes and strides (input_sizes)."""
    data, name = entry.get("data"), entry.get("dtype")
    if type(data) is not torch.Tensor or data.dtype != torch.uint8 or name not in codec.DTYPES:
        return ""
    dtype, width = codec.DTYPES[name]
    bits = _bits(data, width)
    if bits is None:
        return ""
    if not bits.numel():
        return "constant"
    if _is_param_layout(bits, name, ref):
        return "parameters"
    if _is_constant_or_range(bits, dtype):
        return "constant"
    if _written_table(bits, dtype, tables):
        return "literals"
    return "sizes" if _sizes_table(bits, dtype, sizes) else ""


def claim(entry: dict[str, Any], literals: frozenset[float] = frozenset()) -> tuple[str, int] | None:
    """The value a storage `classify` took as 'constant' claims (its first element's dtype and bit
    pattern), or None when it claims nothing: empty, 0, +-1, or a number of the candidate's source."""
    dtype, width = codec.DTYPES[entry["dtype"]]
    bits = _bits(entry["data"], width)
    if bits is None or not bits.numel():
        return None
    first = bits[:1]
    if not (dtype.is_complex or dtype == torch.bool):
        value = float(first.view(dtype).double()[0])
        if value in (0.0, 1.0, -1.0) or _all_literals(first, dtype, literals):
            return None
    return entry["dtype"], int(first[0])


def sequences(source: str) -> frozenset[tuple[float, ...]]:
    """Every list or tuple of two or more numbers written in `source`, in order (`[0.25, -0.5]`): the
    tables a tensor the candidate builds from Python numbers may hold (statecheck.py). Numbers alone
    would let any arrangement of them pass: 0s and 1s as the bits of a folded weight."""
    try:
        tree = static.parse(source)
    except (SyntaxError, ValueError):
        return frozenset()

    def number(n: ast.AST) -> float | None:
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = number(n.operand)
            return None if v is None else (-v if isinstance(n.op, ast.USub) else v)
        if isinstance(n, ast.Constant) and type(n.value) in (int, float) and abs(n.value) < 1e300:
            return float(n.value)
        return None

    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) >= 2:
            vals = [number(e) for e in node.elts]
            if all(v is not None for v in vals):
                out.add(tuple(vals))
    return frozenset(out)


def literals(source: str) -> frozenset[float]:
    """Every number written in `source` (each with its negation): what a tensor the candidate builds
    from Python numbers (`torch.tensor([0.25, 0.5])`) may hold (statecheck.py)."""
    try:
        tree = static.parse(source)
    except (SyntaxError, ValueError):
        return frozenset()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float) and abs(node.value) < 1e300:
            out.update((float(node.value), -float(node.value)))
    return frozenset(out)
