"""libdevice's `__nv_*` functions evaluated with numpy, for Triton's CPU interpreter.

`SYMBOLS` maps each libdevice symbol a kernel may reach through `libdevice.<name>` (CUDA's
`triton/language/extra/cuda/libdevice.py` picks the symbol from the argument types) to a function
of numpy arrays. A function computes in its arguments' dtype where numpy does so (float32 stays
float32); functions numpy lacks (erf, lgamma, ...) go through Python's `math` in float64 and are
rounded once. The caller casts the result to the symbol's return type.

Covered: the float math of both widths (`__nv_expf`/`__nv_exp`, ...), the `fast_*` approximations
(evaluated precisely: a GPU's are within a few ulp of these), the explicitly rounded arithmetic and
conversions (`_rn` exactly; `_rz/_rd/_ru` from a wider exact or near-exact value, so the float64
variants may differ from a GPU in the last place), bit casts, and the integer helpers (popc, clz,
brev, ffs, mulhi, hadd, sad, byte_perm, ...). Not covered, so `SYMBOLS` lacks them and a kernel that
calls one fails naming the symbol: the Bessel functions j0/j1/y0/y1/jn/yn and cyl_bessel_i1
(numpy has only i0), `rcp64h`.
"""
from __future__ import annotations

import math
from types import MappingProxyType
from typing import Callable, Mapping

import numpy as np

Fn = Callable[..., np.ndarray]
_TABLE: dict[str, Fn] = {}


def _wide(dtype: np.dtype) -> type:
    """A float type holding a `dtype` result before its one rounding (float64 for float32)."""
    return np.float64 if np.dtype(dtype).itemsize <= 4 else np.longdouble


def _by_math(f: Callable[..., float]) -> Fn:
    """A `math` function over arrays, computed in float64 and rounded to the first argument's dtype."""
    vec = np.vectorize(f, otypes=[np.float64])

    def apply(x: np.ndarray, *rest: np.ndarray) -> np.ndarray:
        return vec(x.astype(np.float64), *[r.astype(np.float64) for r in rest]).astype(x.dtype)

    return apply


def _lgamma(x: float) -> float:
    try:
        return math.lgamma(x)
    except (ValueError, OverflowError):  # poles at 0, -1, -2, ...: C returns +inf
        return math.inf


def _tgamma(x: float) -> float:
    try:
        return math.gamma(x)
    except OverflowError:
        return math.inf
    except ValueError:  # C: +-inf at +-0, NaN at negative integers and -inf
        return math.copysign(math.inf, x) if x == 0.0 else math.nan


def _remainder(x: float, y: float) -> float:
    try:
        return math.remainder(x, y)
    except ValueError:  # y == 0 or x infinite
        return math.nan


def _erfinv(y: float) -> float:
    """Inverse error function: a start from the Giles (2010) single-precision approximation, then
    Newton steps on math.erf, which converge to float64 accuracy in a few iterations."""
    if not -1.0 <= y <= 1.0:
        return math.nan
    if abs(y) == 1.0:
        return math.copysign(math.inf, y)
    w = -math.log((1.0 - y) * (1.0 + y))
    if w < 5.0:
        w -= 2.5
        p = 2.81022636e-08
        for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                  -0.00417768164, 0.246640727, 1.50140941):
            p = c + p * w
    else:
        w = math.sqrt(w) - 3.0
        p = -0.000200214257
        for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                  0.00943887047, 1.00167406, 2.83297682):
            p = c + p * w
    x = p * y
    for _ in range(4):
        err = math.erf(x) - y
        if err == 0.0:
            break
        x -= err / (2.0 / math.sqrt(math.pi) * math.exp(-x * x))
    return x


def _erfcx(x: float) -> float:
    if x < 26.0:  # erfc underflows just past 26.5
        return math.exp(x * x) * math.erfc(x)
    # the asymptotic series exp(x^2) erfc(x) ~ 1/(x sqrt(pi)) sum (-1)^k (2k-1)!! / (2x^2)^k: 1e-13 at x = 26
    inv = 1.0 / (2.0 * x * x)
    total, term = 1.0, 1.0
    for k in range(1, 6):
        term *= -(2 * k - 1) * inv
        total += term
    return total / (x * math.sqrt(math.pi))


def _round_half_away(x: np.ndarray) -> np.ndarray:
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)  # x - trunc(x) is exact


def _logb(x: np.ndarray) -> np.ndarray:
    _, e = np.frexp(x)
    out = np.where(x == 0, -np.inf, np.where(np.isfinite(x), e - 1, np.abs(x)))
    return out.astype(x.dtype)


def _ilogb(x: np.ndarray) -> np.ndarray:
    _, e = np.frexp(x)
    lo, hi = np.int32(-2147483648), np.int32(2147483647)  # CUDA: INT_MIN for 0 and NaN, INT_MAX for inf
    return np.where((x == 0) | np.isnan(x), lo, np.where(np.isinf(x), hi, e - 1)).astype(np.int32)


def _fdim(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(x) | np.isnan(y), x + y, np.where(x > y, x - y, np.zeros_like(x)))


# Float functions with a float32 (`__nv_<name>f`) and a float64 (`__nv_<name>`) symbol.
_FLOAT: dict[str, Fn] = {
    "acos": np.arccos, "asin": np.arcsin, "atan": np.arctan, "acosh": np.arccosh, "asinh": np.arcsinh,
    "atanh": np.arctanh, "cos": np.cos, "sin": np.sin, "tan": np.tan, "cosh": np.cosh, "sinh": np.sinh,
    "tanh": np.tanh, "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(x.dtype.type(10), x),
    "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt,
    "cbrt": np.cbrt, "rsqrt": lambda x: 1 / np.sqrt(x), "rcbrt": lambda x: 1 / np.cbrt(x), "ceil": np.ceil,
    "floor": np.floor, "trunc": np.trunc, "round": _round_half_away, "rint": np.rint, "nearbyint": np.rint,
    "fabs": np.abs, "cospi": lambda x: np.cos(np.pi * x.astype(np.float64)).astype(x.dtype),
    "sinpi": lambda x: np.sin(np.pi * x.astype(np.float64)).astype(x.dtype),
    "erf": _by_math(math.erf), "erfc": _by_math(math.erfc), "erfinv": _by_math(_erfinv),
    "erfcinv": _by_math(lambda y: _erfinv(1.0 - y) if y > 1e-300 else math.inf if y == 0.0 else math.nan),
    "erfcx": _by_math(_erfcx), "normcdf": _by_math(lambda x: 0.5 * math.erfc(-x / math.sqrt(2.0))),
    "normcdfinv": _by_math(lambda p: -math.sqrt(2.0) * _erfinv(1.0 - 2.0 * p) if 0.0 < p < 1.0
                           else -math.inf if p == 0.0 else math.inf if p == 1.0 else math.nan),
    "lgamma": _by_math(_lgamma), "tgamma": _by_math(_tgamma), "logb": _logb,
    "ilogb": _ilogb, "cyl_bessel_i0": lambda x: np.i0(x).astype(x.dtype),
    "llrint": lambda x: np.rint(x).astype(np.int64), "llround": lambda x: _round_half_away(x).astype(np.int64),
    "fmod": np.fmod, "remainder": _by_math(_remainder), "pow": np.power, "atan2": np.arctan2,
    "copysign": np.copysign, "fdim": _fdim, "hypot": np.hypot, "rhypot": lambda x, y: 1 / np.hypot(x, y),
    "nextafter": np.nextafter, "ldexp": lambda x, n: np.ldexp(x, n).astype(x.dtype),
    "scalbn": lambda x, n: np.ldexp(x, n).astype(x.dtype),
    "powi": lambda x, n: np.power(x, n.astype(x.dtype)),
    "fma": lambda x, y, z: (x.astype(_wide(x.dtype)) * y + z).astype(x.dtype),
    "norm3d": lambda a, b, c: np.sqrt(a * a + b * b + c * c), "rnorm3d": lambda a, b, c: 1 / np.sqrt(a * a + b * b + c * c),
    "norm4d": lambda a, b, c, d: np.sqrt(a * a + b * b + c * c + d * d),
    "rnorm4d": lambda a, b, c, d: 1 / np.sqrt(a * a + b * b + c * c + d * d),
}
for _name, _fn in _FLOAT.items():
    _TABLE[f"__nv_{_name}f"] = _fn
    _TABLE[f"__nv_{_name}"] = _fn

_TABLE.update({
    "__nv_isnanf": np.isnan, "__nv_isnand": np.isnan, "__nv_isinff": np.isinf, "__nv_isinfd": np.isinf,
    "__nv_finitef": np.isfinite, "__nv_isfinited": np.isfinite, "__nv_signbitf": np.signbit,
    "__nv_signbitd": np.signbit, "__nv_saturatef": lambda x: np.where(np.isnan(x), 0, np.clip(x, 0, 1)).astype(x.dtype),
    # fast_* are ~2-ulp hardware approximations on a GPU: the precise value is within that.
    "__nv_fast_sinf": np.sin, "__nv_fast_cosf": np.cos, "__nv_fast_tanf": np.tan, "__nv_fast_expf": np.exp,
    "__nv_fast_exp10f": _FLOAT["exp10"], "__nv_fast_logf": np.log, "__nv_fast_log2f": np.log2,
    "__nv_fast_log10f": np.log10, "__nv_fast_powf": np.power, "__nv_fast_fdividef": np.divide,
    "__nv_frsqrt_rn": _FLOAT["rsqrt"],
})


# --- explicitly rounded arithmetic and conversions --------------------------------------------------
def _directed(exact: np.ndarray, dtype: type, mode: str) -> np.ndarray:
    """Round a wider value to `dtype` in IEEE mode rn/rz/rd/ru."""
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.asarray(exact).astype(dtype)
        if mode == "rn":
            return r
        wide = r.astype(np.asarray(exact).dtype)
        if mode == "rz":
            return np.where(np.abs(wide) > np.abs(exact), np.nextafter(r, dtype(0)), r).astype(dtype)
        if mode == "rd":
            return np.where(wide > exact, np.nextafter(r, dtype(-np.inf)), r).astype(dtype)
        return np.where(wide < exact, np.nextafter(r, dtype(np.inf)), r).astype(dtype)


def _arith(op: Callable[..., np.ndarray], dtype: type, mode: str) -> Fn:
    def apply(*xs: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            if mode == "rn" and len(xs) < 3:  # numpy's own IEEE operation in `dtype` is correctly rounded
                return np.asarray(op(*[x.astype(dtype) for x in xs])).astype(dtype)
            return _directed(op(*[x.astype(_wide(dtype)) for x in xs]), dtype, mode)
    return apply


_OPS: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "rcp": lambda x: 1 / x,
    "sqrt": np.sqrt,
}
for _mode in ("rn", "rz", "rd", "ru"):
    for _op, _f in _OPS.items():
        _TABLE[f"__nv_f{_op}_{_mode}"] = _arith(_f, np.float32, _mode)
        _TABLE[f"__nv_d{_op}_{_mode}"] = _arith(_f, np.float64, _mode)
    _TABLE[f"__nv_fmaf_{_mode}"] = _arith(lambda x, y, z: x * y + z, np.float32, _mode)
    _TABLE[f"__nv_fma_{_mode}"] = _arith(lambda x, y, z: x * y + z, np.float64, _mode)

_ROUND_INT = {"rn": np.rint, "rz": np.trunc, "rd": np.floor, "ru": np.ceil}
_INTS = {"int": np.int32, "uint": np.uint32, "ll": np.int64, "ull": np.uint64}
_FLOATS = {"float": np.float32, "double": np.float64}


def _to_int(mode: str, dtype: type) -> Fn:
    """Float to integer as the hardware does it: rounded in `mode`, saturated, NaN to 0."""
    info = np.iinfo(dtype)

    def apply(x: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            r = _ROUND_INT[mode](x.astype(np.longdouble))
            r = np.clip(np.where(np.isnan(r), 0, r), info.min, info.max)
        return r.astype(dtype)
    return apply


def _to_float(mode: str, dtype: type) -> Fn:
    return lambda x: _directed(x.astype(np.longdouble), dtype, mode)


for _mode in ("rn", "rz", "rd", "ru"):
    for _fname, _ftype in _FLOATS.items():
        for _iname, _itype in _INTS.items():
            _TABLE[f"__nv_{_fname}2{_iname}_{_mode}"] = _to_int(_mode, _itype)
            if _mode == "rn" or _fname == "float" or _iname in ("ll", "ull"):  # 32-bit ints to double are exact
                _TABLE[f"__nv_{_iname}2{_fname}_{_mode}"] = _to_float(_mode, _ftype)
    _TABLE[f"__nv_double2float_{_mode}"] = _to_float(_mode, np.float32)

_TABLE.update({
    "__nv_int_as_float": lambda x: x.astype(np.int32).view(np.float32),
    "__nv_float_as_int": lambda x: x.astype(np.float32).view(np.int32),
    "__nv_uint_as_float": lambda x: x.astype(np.uint32).view(np.float32),
    "__nv_float_as_uint": lambda x: x.astype(np.float32).view(np.uint32),
    "__nv_longlong_as_double": lambda x: x.astype(np.int64).view(np.float64),
    "__nv_double_as_longlong": lambda x: x.astype(np.float64).view(np.int64),
    "__nv_double2hiint": lambda x: (x.astype(np.float64).view(np.int64) >> 32).astype(np.int32),
    "__nv_double2loint": lambda x: x.astype(np.float64).view(np.uint64).astype(np.uint32).view(np.int32),
    "__nv_hiloint2double": lambda hi, lo: ((hi.astype(np.int64) << 32) | lo.astype(np.uint32).astype(np.int64)).view(np.float64),
})


# --- integer helpers ----------------------------------------------------------------------------------
def _bits(x: np.ndarray) -> int:
    return x.dtype.itemsize * 8


def _per_element(f: Callable[..., int], out: type) -> Fn:
    vec = np.vectorize(f, otypes=[object])
    return lambda *xs: vec(*[x.astype(object) for x in xs]).astype(out)


def _unsigned(v: int, bits: int) -> int:
    return v & ((1 << bits) - 1)


def _popc(x: np.ndarray) -> np.ndarray:
    b = _bits(x)
    return _per_element(lambda v: bin(_unsigned(v, b)).count("1"), np.int32)(x)


def _clz(x: np.ndarray) -> np.ndarray:
    b = _bits(x)
    return _per_element(lambda v: b - _unsigned(v, b).bit_length(), np.int32)(x)


def _ffs(x: np.ndarray) -> np.ndarray:
    b = _bits(x)
    return _per_element(lambda v: (_unsigned(v, b) & -_unsigned(v, b)).bit_length(), np.int32)(x)


def _brev(x: np.ndarray) -> np.ndarray:
    b = _bits(x)
    rev = _per_element(lambda v: int(format(_unsigned(v, b), f"0{b}b")[::-1], 2), np.uint64 if b == 64 else np.uint32)
    return rev(x).view(np.int64 if b == 64 else np.int32) if x.dtype.kind == "i" else rev(x)


def _mulhi(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    b = _bits(x)
    return _per_element(lambda u, v: (u * v) >> b, x.dtype.type)(x, y)


def _sext24(v: int) -> int:
    return ((v & 0xFFFFFF) ^ 0x800000) - 0x800000


def _wrap32(v: int) -> int:
    return ((v + (1 << 31)) % (1 << 32)) - (1 << 31)


def _byte_perm(x: np.ndarray, y: np.ndarray, s: np.ndarray) -> np.ndarray:
    def perm(a: int, b: int, sel: int) -> int:
        src = _unsigned(a, 32) | (_unsigned(b, 32) << 32)
        out = 0
        for i in range(4):
            out |= ((src >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i)
        return out
    return _per_element(perm, np.uint32)(x, y, s).view(np.int32)


_TABLE.update({
    "__nv_abs": np.abs, "__nv_llabs": np.abs, "__nv_popc": _popc, "__nv_popcll": _popc, "__nv_clz": _clz,
    "__nv_clzll": _clz, "__nv_ffs": _ffs, "__nv_ffsll": _ffs, "__nv_brev": _brev, "__nv_brevll": _brev,
    "__nv_mulhi": _mulhi, "__nv_umulhi": _mulhi, "__nv_mul64hi": _mulhi, "__nv_umul64hi": _mulhi,
    "__nv_mul24": _per_element(lambda a, b: _wrap32(_sext24(a) * _sext24(b)), np.int32),
    "__nv_umul24": _per_element(lambda a, b: ((a & 0xFFFFFF) * (b & 0xFFFFFF)) & 0xFFFFFFFF, np.uint32),
    "__nv_hadd": _per_element(lambda a, b: (a + b) >> 1, np.int32),
    "__nv_uhadd": _per_element(lambda a, b: (a + b) >> 1, np.uint32),
    "__nv_rhadd": _per_element(lambda a, b: (a + b + 1) >> 1, np.int32),
    "__nv_urhadd": _per_element(lambda a, b: (a + b + 1) >> 1, np.uint32),
    "__nv_sad": _per_element(lambda a, b, c: abs(a - b) + c, np.uint32),
    "__nv_usad": _per_element(lambda a, b, c: abs(a - b) + c, np.uint32),
    "__nv_byte_perm": _byte_perm,
})


SYMBOLS: Mapping[str, Fn] = MappingProxyType(_TABLE)  # read-only: the worker's integrity check holds it by identity


def evaluate(symbol: str, args: list[np.ndarray], out_dtype: np.dtype) -> np.ndarray:
    """`symbol` applied to `args`, cast to `out_dtype`; a symbol we lack raises a NotImplementedError naming it."""
    fn = _TABLE.get(symbol)
    if fn is None:
        raise NotImplementedError(f"libdevice function {symbol} has no CPU-interpreter implementation "
                                  "(distill/verifier/sandbox/libdevice_np.py); it runs only on a GPU")
    with np.errstate(all="ignore"):
        out = np.asarray(fn(*args))
    return out if out.dtype == out_dtype else out.astype(out_dtype)
