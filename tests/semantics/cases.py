"""The differential cases: one :class:`Case` per (op, types), with inputs and a host reference.

Semantics are MLIR's op documentation (``arith``, ``math`` dialects, MLIR 22):

* integer ops wrap (two's complement); inputs MLIR calls undefined behaviour or poison are
  left out: a zero divisor (``divsi``, ``divui``, ``ceildiv*``, ``floordivsi``, ``rem*``),
  ``INT_MIN / -1`` of the signed divisions (the lowering's ``sdiv``/``srem`` overflow is UB
  in LLVM; MLIR's ``divsi`` doc says so), shift amounts >= the bit width (poison), a
  ``fptosi``/``fptoui`` whose truncated value does not fit (LLVM poison: MLIR's doc names no
  result), negative ``ipowi`` exponents (the doc defines none);
* floating-point ops are IEEE 754 with round-to-nearest-even: ``maximumf``/``minimumf`` are
  IEEE 754-2019 maximum/minimum (NaN wins, -0 < +0), ``maxnumf``/``minnumf`` return the
  non-NaN operand and either zero for (+0, -0); ``remf`` is C's fmod; ``math.round`` rounds
  halfway cases away from zero, ``roundeven`` to even;
* ``math`` functions without an exact IEEE result are compared with the correctly rounded
  value within :data:`ULP_F32` / :data:`ULP_F64` ulps (the maximum errors of the CUDA math
  library that NVPTX's lowering calls: CUDA C++ Programming Guide, "Mathematical Functions",
  single and double precision tables, compute capability >= 5.2). f16 and bf16 are computed
  in f32 by the lowering and rounded: 1 ulp.

A NaN result matches any NaN (MLIR and LLVM leave the sign and payload of a NaN result
unspecified, except for bit-moving ops; ``select`` is compared bit for bit).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Callable, Sequence

import numpy as np

from . import floats as fl
from .floats import BF16, F16, F32, F64, FORMATS, Format

INT_WIDTHS = (8, 16, 32, 64)
INT_TYPES = tuple(f"i{w}" for w in INT_WIDTHS)
FLOAT_TYPES = tuple(FORMATS)

#: Maximum ulp error of the CUDA math library (single precision), by math op.
ULP_F32 = {"rsqrt": 2, "exp": 2, "exp2": 2, "expm1": 1, "log": 1, "log2": 1, "log10": 2,
           "log1p": 1, "sin": 2, "cos": 2, "tan": 4, "tanh": 2, "atan": 2, "atan2": 3,
           "powf": 4, "erf": 2, "erfc": 4, "cbrt": 1, "sinh": 3, "cosh": 2, "asin": 2,
           "acos": 2, "asinh": 3, "acosh": 4, "atanh": 3}
#: Maximum ulp error of the CUDA math library (double precision), by math op. erf and erfc
#: add 1 ulp: their host reference is float64 (math.erf), not longdouble.
ULP_F64 = {"rsqrt": 1, "exp": 1, "exp2": 1, "expm1": 1, "log": 1, "log2": 1, "log10": 1,
           "log1p": 1, "sin": 2, "cos": 2, "tan": 2, "tanh": 1, "atan": 2, "atan2": 2,
           "powf": 2, "erf": 2 + 1, "erfc": 5 + 1, "cbrt": 1, "sinh": 2, "cosh": 1,
           "asin": 2, "acos": 2, "asinh": 3, "acosh": 3, "atanh": 2}
#: f16 and bf16: the f32 function's result rounded once more.
ULP_HALF = 1


@dataclasses.dataclass
class Expect:
    """What a case must produce: ``bits`` exactly (NaN: any NaN unless ``exact_nan``), or
    values within ``tol`` ulps of ``approx`` (longdouble); ``alt``: other accepted bits."""

    bits: np.ndarray | None = None
    alt: np.ndarray | None = None
    approx: np.ndarray | None = None
    tol: float | np.ndarray = 0.0     # ulps (an array: per element)
    exact_nan: bool = False


@dataclasses.dataclass
class Case:
    """One kernel: ``result = body(operands)`` elementwise over ``inputs``.

    in_types/out_type are MLIR element types (``i1``, ``i8``..``i64``, ``f16``, ``bf16``,
    ``f32``, ``f64``); floats travel as integer bits of their width. ``body`` is the MLIR of
    the op, with ``{0}``, ``{1}``, ``{2}`` for the operands and ``%r`` for the result.
    ``inputs``: per operand, the values (ints: signed integers, or the float's bits; bools).
    """

    name: str
    group: str
    op: str
    in_types: tuple[str, ...]
    out_type: str
    body: str
    inputs: tuple[np.ndarray, ...]
    expect: Expect

    @property
    def n(self) -> int:
        return len(self.inputs[0])


# ---------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------
def int_range(w: int) -> tuple[int, int]:
    return -(1 << (w - 1)), (1 << (w - 1)) - 1


def wrap(v: int, w: int) -> int:
    """v modulo 2^w, as a signed w-bit value."""
    v &= (1 << w) - 1
    return v - (1 << w) if v >> (w - 1) else v


def unsigned(v: int, w: int) -> int:
    return v & ((1 << w) - 1)


def int_values(w: int) -> list[int]:
    """Edges of i<w>: min, max and neighbours, small values, shift-width edges, patterns."""
    lo, hi = int_range(w)
    pattern = wrap(int("01" * (w // 2), 2), w)
    values = [lo, lo + 1, -100, -7, -2, -1, 0, 1, 2, 3, 7, 100, hi - 1, hi, w - 1, w, w + 1,
              pattern, wrap(~pattern, w), 1 << (w // 2), -(1 << (w // 2))]
    return sorted({wrap(v, w) for v in values})


def float_unary_values(fmt: Format, seed: int = 11) -> list[int]:
    """Special values, ordinary numbers (rounding ties, trig and exp ranges, overflow edges)
    and seeded random numbers over the exponent range, as bits of ``fmt``."""
    rng = np.random.default_rng(seed)
    ordinary = [0.5, -0.5, 1.5, 2.5, -2.5, 3.5, 0.49999997, 0.1, -0.3, 0.7, 2.0, 3.0, -3.0,
                10.0, 100.0, -1e3, 1e4, 1e-3, -1e-6, math.pi, -math.pi / 2, math.e, 8.0,
                11.0, 88.5, 90.0, 709.5, 711.0, 1e30, -1e30, 1e300, 1e-300, 2.0 ** 52 + 0.5,
                2.0 ** 23 + 0.5, 2.0 ** 10 + 0.5, 2.0 ** 7 + 0.5, 0.999, -0.999, 1.001]
    exponents = rng.uniform(-1.0, 1.0, 12) * min(fmt.emax, 300)
    randoms = list(np.sign(rng.uniform(-1, 1, 12)) * 2.0 ** exponents) + \
        list(rng.uniform(-4.0, 4.0, 12))
    return _unique(fl.special_values(fmt) + fl.numbers(ordinary + randoms, fmt))


def float_binary_values(fmt: Format) -> list[int]:
    """A smaller set for pairs: special values and a few ordinary numbers."""
    return _unique(fl.special_values(fmt) + fl.numbers(
        [0.5, 1.5, 2.5, -3.0, -7.25, 0.1, 1e4, 1e-30], fmt))


def _unique(bits: list[int]) -> list[int]:
    return list(dict.fromkeys(int(b) for b in bits))


def pairs(a: Sequence, b: Sequence | None = None) -> tuple[list, list]:
    b = a if b is None else b
    return [x for x in a for _ in b], [y for _ in a for y in b]


# ---------------------------------------------------------------------------------------
# Integer ops
# ---------------------------------------------------------------------------------------
def _div_trunc(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


_SIGNED_DIV_UB = ("divsi", "remsi", "ceildivsi", "floordivsi")

#: name -> (reference on (a, b, width), defined-input predicate or None). Values signed.
INT_BINARY: dict[str, tuple[Callable, Callable | None]] = {
    "addi": (lambda a, b, w: a + b, None),
    "subi": (lambda a, b, w: a - b, None),
    "muli": (lambda a, b, w: a * b, None),
    "divsi": (lambda a, b, w: _div_trunc(a, b), None),
    "divui": (lambda a, b, w: unsigned(a, w) // unsigned(b, w), None),
    "ceildivsi": (lambda a, b, w: _ceil_div(a, b), None),
    "ceildivui": (lambda a, b, w: _ceil_div(unsigned(a, w), unsigned(b, w)), None),
    "floordivsi": (lambda a, b, w: a // b, None),
    "remsi": (lambda a, b, w: a - b * _div_trunc(a, b), None),
    "remui": (lambda a, b, w: unsigned(a, w) % unsigned(b, w), None),
    "andi": (lambda a, b, w: a & b, None),
    "ori": (lambda a, b, w: a | b, None),
    "xori": (lambda a, b, w: a ^ b, None),
    "shli": (lambda a, b, w: a << unsigned(b, w), lambda a, b, w: unsigned(b, w) < w),
    "shrsi": (lambda a, b, w: a >> unsigned(b, w), lambda a, b, w: unsigned(b, w) < w),
    "shrui": (lambda a, b, w: unsigned(a, w) >> unsigned(b, w),
              lambda a, b, w: unsigned(b, w) < w),
    "maxsi": (lambda a, b, w: max(a, b), None),
    "maxui": (lambda a, b, w: max(unsigned(a, w), unsigned(b, w)), None),
    "minsi": (lambda a, b, w: min(a, b), None),
    "minui": (lambda a, b, w: min(unsigned(a, w), unsigned(b, w)), None),
}

CMPI = {"eq": lambda a, b, w: a == b, "ne": lambda a, b, w: a != b,
        "slt": lambda a, b, w: a < b, "sle": lambda a, b, w: a <= b,
        "sgt": lambda a, b, w: a > b, "sge": lambda a, b, w: a >= b,
        "ult": lambda a, b, w: unsigned(a, w) < unsigned(b, w),
        "ule": lambda a, b, w: unsigned(a, w) <= unsigned(b, w),
        "ugt": lambda a, b, w: unsigned(a, w) > unsigned(b, w),
        "uge": lambda a, b, w: unsigned(a, w) >= unsigned(b, w)}


def _int_defined(op: str, a: int, b: int, w: int) -> bool:
    if op in ("divsi", "divui", "remsi", "remui", "ceildivsi", "ceildivui", "floordivsi") \
            and b == 0:
        return False
    if op in _SIGNED_DIV_UB and a == int_range(w)[0] and b == -1:
        return False
    check = INT_BINARY[op][1]
    return check is None or check(a, b, w)


def int_cases() -> list[Case]:
    out = []
    for w in INT_WIDTHS:
        t = f"i{w}"
        a_all, b_all = pairs(int_values(w))
        for op, (ref, _) in INT_BINARY.items():
            a, b = zip(*[(x, y) for x, y in zip(a_all, b_all) if _int_defined(op, x, y, w)])
            out.append(_int_case(f"{op}_{t}", "arith-int", f"arith.{op}", (t, t), t,
                                 f"%r = arith.{op} {{0}}, {{1}} : {t}", (a, b),
                                 [wrap(ref(x, y, w), w) for x, y in zip(a, b)]))
        for pred, ref in CMPI.items():
            out.append(_int_case(f"cmpi_{pred}_{t}", "arith-int", f"arith.cmpi {pred}",
                                 (t, t), "i1", f"%r = arith.cmpi {pred}, {{0}}, {{1}} : {t}",
                                 (a_all, b_all), [ref(x, y, w) for x, y in zip(a_all, b_all)]))
        vals = int_values(w)
        lo = int_range(w)[0]
        unary = {"absi": lambda v: wrap(abs(v), w),
                 "ctlz": lambda v: w - unsigned(v, w).bit_length(),
                 "cttz": lambda v: w if v == 0 else (unsigned(v, w) & -unsigned(v, w))
                 .bit_length() - 1,
                 "ctpop": lambda v: bin(unsigned(v, w)).count("1")}
        for op, ref in unary.items():
            out.append(_int_case(f"{op}_{t}", "math-int", f"math.{op}", (t,), t,
                                 f"%r = math.{op} {{0}} : {t}", (vals,),
                                 [ref(v) for v in vals]))
        bases, exps = pairs([v for v in vals if abs(v) <= 100 or v == lo], list(range(6)))
        out.append(_int_case(f"ipowi_{t}", "math-int", "math.ipowi", (t, t), t,
                             f"%r = math.ipowi {{0}}, {{1}} : {t}", (bases, exps),
                             [wrap(x ** n, w) for x, n in zip(bases, exps)]))
    return out + int_cast_cases()


def int_cast_cases() -> list[Case]:
    out = []
    for wa in INT_WIDTHS:
        vals = int_values(wa)
        for wb in INT_WIDTHS:
            ta, tb = f"i{wa}", f"i{wb}"
            if wb > wa:
                out.append(_int_case(f"extsi_{ta}_{tb}", "arith-cast", "arith.extsi", (ta,),
                                     tb, f"%r = arith.extsi {{0}} : {ta} to {tb}", (vals,),
                                     vals))
                out.append(_int_case(f"extui_{ta}_{tb}", "arith-cast", "arith.extui", (ta,),
                                     tb, f"%r = arith.extui {{0}} : {ta} to {tb}", (vals,),
                                     [wrap(unsigned(v, wa), wb) for v in vals]))
            elif wb < wa:
                out.append(_int_case(f"trunci_{ta}_{tb}", "arith-cast", "arith.trunci",
                                     (ta,), tb, f"%r = arith.trunci {{0}} : {ta} to {tb}",
                                     (vals,), [wrap(v, wb) for v in vals]))
        body = (f"%x = arith.index_cast {{0}} : i{wa} to index\n"
                "%r = arith.index_cast %x : index to i64")
        out.append(_int_case(f"index_cast_i{wa}", "arith-cast", "arith.index_cast",
                             (f"i{wa}",), "i64", body, (vals,), vals))
        body_u = (f"%x = arith.index_castui {{0}} : i{wa} to index\n"
                  "%r = arith.index_castui %x : index to i64")
        out.append(_int_case(f"index_castui_i{wa}", "arith-cast", "arith.index_castui",
                             (f"i{wa}",), "i64", body_u, (vals,),
                             [wrap(unsigned(v, wa), 64) for v in vals]))
    return out


def _int_case(name: str, group: str, op: str, in_types: tuple[str, ...], out_type: str,
              body: str, inputs: tuple, results: list) -> Case:
    arrays = tuple(storage_array(list(x), t) for x, t in zip(inputs, in_types))
    return Case(name, group, op, in_types, out_type, body, arrays,
                Expect(bits=storage_array(list(results), out_type)))


# ---------------------------------------------------------------------------------------
# Storage: how values of each type travel (integers; floats as bits; i1 as bool)
# ---------------------------------------------------------------------------------------
def storage_dtype(t: str) -> type:
    if t == "i1":
        return np.bool_
    if t in FORMATS:
        return {16: np.int16, 32: np.int32, 64: np.int64}[FORMATS[t].bits]
    return {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64}[t]


def storage_type(t: str) -> str:
    """The memref element type a value of type ``t`` travels in."""
    return f"i{FORMATS[t].bits}" if t in FORMATS else t


def storage_array(values: list, t: str) -> np.ndarray:
    """Values (signed ints, float bits as unsigned ints, bools) -> the storage array."""
    if t in FORMATS:
        return np.array(values, dtype=FORMATS[t].uint).view(storage_dtype(t))
    return np.array(values, dtype=storage_dtype(t))


def float_bits(arr: np.ndarray, t: str) -> np.ndarray:
    return np.asarray(arr).view(FORMATS[t].uint)


# ---------------------------------------------------------------------------------------
# Floating-point ops
# ---------------------------------------------------------------------------------------
def _maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    both_zero = (a == 0) & (b == 0)
    out = np.where(a > b, a, b)
    out = np.where(both_zero, np.where(np.signbit(a) & np.signbit(b), -0.0, 0.0), out)
    return np.where(np.isnan(a) | np.isnan(b), np.nan, out)


def _minimum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    both_zero = (a == 0) & (b == 0)
    out = np.where(a < b, a, b)
    out = np.where(both_zero, np.where(np.signbit(a) | np.signbit(b), -0.0, 0.0), out)
    return np.where(np.isnan(a) | np.isnan(b), np.nan, out)


def _maxnum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(a), b, np.where(np.isnan(b), a, _maximum(a, b)))


def _minnum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(a), b, np.where(np.isnan(b), a, _minimum(a, b)))


def _round_away(x: np.ndarray) -> np.ndarray:
    t = np.trunc(x)
    up = np.abs(x - t) >= 0.5
    return np.copysign(np.where(up, t + np.sign(x), t), x)


#: Correctly rounded binary ops, computed in float64 (exact, or one rounding wide enough:
#: 53 >= 2p + 2 for f32, f16, bf16) then rounded once to the format.
FLOAT_BINARY = {
    "arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply,
    "arith.divf": np.divide, "arith.remf": np.fmod,
    "arith.maximumf": _maximum, "arith.minimumf": _minimum,
    "math.copysign": np.copysign,
}
#: maxnumf/minnumf: the second result is the other zero, accepted for (+0, -0).
FLOAT_NUM_MINMAX = {"arith.maxnumf": _maxnum, "arith.minnumf": _minnum}

#: Exact unary ops.
FLOAT_UNARY_EXACT = {
    "arith.negf": np.negative, "math.absf": np.abs, "math.ceil": np.ceil,
    "math.floor": np.floor, "math.trunc": np.trunc, "math.roundeven": np.rint,
    "math.round": _round_away, "math.sqrt": np.sqrt,
}


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(x)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(float(v)) for v in x], dtype=np.longdouble)


def _erfc(x: np.ndarray) -> np.ndarray:
    return np.array([math.erfc(float(v)) for v in x], dtype=np.longdouble)


#: Approximate unary math ops: longdouble reference (C99 Annex F special values).
FLOAT_UNARY_APPROX = {
    "rsqrt": _rsqrt, "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1, "log": np.log,
    "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "sin": np.sin, "cos": np.cos,
    "tan": np.tan, "tanh": np.tanh, "atan": np.arctan, "erf": _erf, "erfc": _erfc,
    "cbrt": np.cbrt, "sinh": np.sinh, "cosh": np.cosh, "asin": np.arcsin,
    "acos": np.arccos, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
}
FLOAT_BINARY_APPROX = {"atan2": np.arctan2, "powf": np.power}

CMPF = {
    "false": lambda a, b, o: np.zeros_like(o), "oeq": lambda a, b, o: o & (a == b),
    "ogt": lambda a, b, o: o & (a > b), "oge": lambda a, b, o: o & (a >= b),
    "olt": lambda a, b, o: o & (a < b), "ole": lambda a, b, o: o & (a <= b),
    "one": lambda a, b, o: o & (a != b), "ord": lambda a, b, o: o,
    "ueq": lambda a, b, o: ~o | (a == b), "ugt": lambda a, b, o: ~o | (a > b),
    "uge": lambda a, b, o: ~o | (a >= b), "ult": lambda a, b, o: ~o | (a < b),
    "ule": lambda a, b, o: ~o | (a <= b), "une": lambda a, b, o: ~o | (a != b),
    "uno": lambda a, b, o: ~o, "true": lambda a, b, o: np.ones_like(o),
}


def tolerance(fn: str, fmt: Format) -> int:
    if fmt in (F16, BF16):
        return ULP_HALF
    return (ULP_F32 if fmt is F32 else ULP_F64)[fn]


def float_cases() -> list[Case]:
    out = []
    for t, fmt in FORMATS.items():
        ubits = float_unary_values(fmt)
        a_bits, b_bits = pairs(float_binary_values(fmt))
        ua = fl.decode(np.array(ubits, dtype=fmt.uint), fmt).astype(np.float64)
        ba = fl.decode(np.array(a_bits, dtype=fmt.uint), fmt).astype(np.float64)
        bb = fl.decode(np.array(b_bits, dtype=fmt.uint), fmt).astype(np.float64)
        with np.errstate(all="ignore"):
            for op, ref in FLOAT_BINARY.items():
                out.append(_float_case(op, t, (a_bits, b_bits),
                                       Expect(bits=fl.round_array(ref(ba, bb), fmt))))
            for op, ref in FLOAT_NUM_MINMAX.items():
                res = ref(ba, bb)
                other = np.where((ba == 0) & (bb == 0), -res, res)
                out.append(_float_case(op, t, (a_bits, b_bits), Expect(
                    bits=fl.round_array(res, fmt), alt=fl.round_array(other, fmt))))
            for op, ref in FLOAT_UNARY_EXACT.items():
                out.append(_float_case(op, t, (ubits,),
                                       Expect(bits=fl.round_array(ref(ua), fmt))))
            ordered = ~np.isnan(ba) & ~np.isnan(bb)
            for pred, ref in CMPF.items():
                out.append(Case(f"cmpf_{pred}_{t}", "arith-float", f"arith.cmpf {pred}",
                                (t, t), "i1", f"%r = arith.cmpf {pred}, {{0}}, {{1}} : {t}",
                                _store((a_bits, b_bits), (t, t)),
                                Expect(bits=np.asarray(ref(ba, bb, ordered), dtype=bool))))
            for op, ref in {"isnan": np.isnan, "isinf": np.isinf,
                            "isfinite": np.isfinite}.items():
                out.append(Case(f"{op}_{t}", "math-float", f"math.{op}", (t,), "i1",
                                f"%r = math.{op} {{0}} : {t}", _store((ubits,), (t,)),
                                Expect(bits=ref(ua))))
            uld = fl.decode_long(np.array(ubits, dtype=fmt.uint), fmt)
            for fn, ref in FLOAT_UNARY_APPROX.items():
                out.append(_float_case(f"math.{fn}", t, (ubits,), Expect(
                    approx=ref(uld), tol=tolerance(fn, fmt))))
            bla = fl.decode_long(np.array(a_bits, dtype=fmt.uint), fmt)
            blb = fl.decode_long(np.array(b_bits, dtype=fmt.uint), fmt)
            for fn, ref in FLOAT_BINARY_APPROX.items():
                out.append(_float_case(f"math.{fn}", t, (a_bits, b_bits), Expect(
                    approx=ref(bla, blb), tol=tolerance(fn, fmt))))
        out.append(fma_case(t, fmt))
        out.append(fpowi_case(t, fmt, ubits))
        out.append(select_case(t, fmt, ubits))
    return out


def _store(inputs: tuple, types: tuple[str, ...]) -> tuple[np.ndarray, ...]:
    return tuple(storage_array(list(x), t) for x, t in zip(inputs, types))


def _float_case(op: str, t: str, inputs: tuple, expect: Expect) -> Case:
    short = op.split(".")[1]
    group = "math-float" if op.startswith("math.") else "arith-float"
    operands = ", ".join(f"{{{i}}}" for i in range(len(inputs)))
    return Case(f"{short}_{t}", group, op, (t,) * len(inputs), t,
                f"%r = {op} {operands} : {t}", _store(inputs, (t,) * len(inputs)), expect)


def _fma_exact(a: int, b: int, c: int, fmt: Format) -> int:
    x, y, z = (fl.decode(np.array([v], dtype=fmt.uint), fmt).astype(np.float64)[0]
               for v in (a, b, c))
    if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
        with np.errstate(all="ignore"):
            return int(fl.round_array(np.array([x * y + z]), fmt)[0])
    product = fl.to_fraction(a, fmt) * fl.to_fraction(b, fmt)
    total = product + fl.to_fraction(c, fmt)
    if total == 0:
        negative = (product == 0 and (np.signbit(x) != np.signbit(y)) and np.signbit(z))
        return fmt.sign_bit if negative else 0
    return fl.round_exact(total, fmt)


def fma_case(t: str, fmt: Format) -> Case:
    """math.fma: a*b+c with one rounding (exact rational reference)."""
    base = fl.special_values(fmt)[:6] + fl.numbers([1.5, -3.0, 0.1, 1e4], fmt) + [fmt.qnan]
    one = fmt.bias << (fmt.p - 1)
    tie = [one + 1, one - 1]                  # (1+u)(1-u) - 1: exact only when fused
    a = [x for x in base for _ in base for _ in base] + tie
    b = [y for _ in base for y in base for _ in base] + tie[::-1]
    c = [z for _ in base for _ in base for z in base] + [one | fmt.sign_bit] * 2
    expected = [_fma_exact(x, y, z, fmt) for x, y, z in zip(a, b, c)]
    return Case(f"fma_{t}", "math-float", "math.fma", (t, t, t), t,
                f"%r = math.fma {{0}}, {{1}}, {{2}} : {t}", _store((a, b, c), (t, t, t)),
                Expect(bits=np.array(expected, dtype=fmt.uint)))


def fpowi_case(t: str, fmt: Format, ubits: list[int]) -> Case:
    """math.fpowi with i32 exponents -3..8: x^n within the powf tolerance or |n| ulp,
    whichever is larger. No exact result is promised: MLIR's doc states no accuracy, and it
    lowers to LLVM's ``llvm.powi``, whose LangRef leaves the order of the multiplications
    undefined; NVPTX multiplies by repeated squaring (x^7 = x * x^2 * x^4, measured 2.7 ulp
    off in f64 on an H200), each of the up to |n| roundings (or the reciprocal) adding at
    most 1 ulp."""
    exps = list(range(-3, 9))
    base, n = pairs(ubits, exps)
    x = fl.decode_long(np.array(base, dtype=fmt.uint), fmt)
    with np.errstate(all="ignore"):
        ref = np.power(x, np.array(n, dtype=np.longdouble))
        ref = np.where(np.array(n) == 0, 1, ref)
    return Case(f"fpowi_{t}", "math-float", "math.fpowi", (t, "i32"), t,
                f"%r = math.fpowi {{0}}, {{1}} : {t}, i32",
                (storage_array(base, t), storage_array(n, "i32")),
                Expect(approx=ref, tol=np.maximum(tolerance("powf", fmt), np.abs(n))))


def select_case(t: str, fmt: Format, ubits: list[int]) -> Case:
    """arith.select moves bits: NaN payloads and signs come through unchanged."""
    a = ubits
    b = ubits[::-1]
    cond = [i % 3 == 0 for i in range(len(a))]
    expected = [x if c else y for c, x, y in zip(cond, a, b)]
    return Case(f"select_{t}", "arith-float", "arith.select", ("i1", t, t), t,
                f"%r = arith.select {{0}}, {{1}}, {{2}} : {t}",
                (np.array(cond), storage_array(a, t), storage_array(b, t)),
                Expect(bits=np.array(expected, dtype=fmt.uint), exact_nan=True))


# ---------------------------------------------------------------------------------------
# Conversions between floats and integers, and between float widths
# ---------------------------------------------------------------------------------------
def int_for_float_values(w: int) -> list[int]:
    """Integers whose conversion rounds: ties at every float width, double-rounding traps
    (right for one rounding, wrong through f32), the range edges."""
    special = [2049, 2051, 4097, 65519, 65520, 16777217, 16777219,
               (1 << 40) + (1 << 32) + 1, (1 << 62) + (1 << 38) + 1, (1 << 53) + 1,
               -((1 << 40) + (1 << 32) + 1), 257, 259, -257]
    return sorted({wrap(v, w) for v in int_values(w) + [v for v in special
                                                         if -(1 << (w - 1)) <= v < (1 << (w - 1))]})


def conversion_cases() -> list[Case]:
    out = []
    for w in INT_WIDTHS:
        ti = f"i{w}"
        ivals = int_for_float_values(w)
        for t, fmt in FORMATS.items():
            out.append(Case(f"sitofp_{ti}_{t}", "arith-cast", "arith.sitofp", (ti,), t,
                            f"%r = arith.sitofp {{0}} : {ti} to {t}",
                            (storage_array(ivals, ti),),
                            Expect(bits=np.array([fl.round_exact(v, fmt) for v in ivals],
                                                 dtype=fmt.uint))))
            out.append(Case(f"uitofp_{ti}_{t}", "arith-cast", "arith.uitofp", (ti,), t,
                            f"%r = arith.uitofp {{0}} : {ti} to {t}",
                            (storage_array(ivals, ti),),
                            Expect(bits=np.array([fl.round_exact(unsigned(v, w), fmt)
                                                  for v in ivals], dtype=fmt.uint))))
            out += _fptoint_cases(t, fmt, w)
    for ta, fa in FORMATS.items():
        vals = float_unary_values(fa) + _narrowing_traps(fa)
        x = fl.decode(np.array(vals, dtype=fa.uint), fa).astype(np.float64)
        for tb, fb in FORMATS.items():
            if fb.bits > fa.bits:
                out.append(Case(f"extf_{ta}_{tb}", "arith-cast", "arith.extf", (ta,), tb,
                                f"%r = arith.extf {{0}} : {ta} to {tb}", _store((vals,), (ta,)),
                                Expect(bits=fl.round_array(x, fb))))
            elif fb.bits < fa.bits:
                with np.errstate(all="ignore"):
                    out.append(Case(f"truncf_{ta}_{tb}", "arith-cast", "arith.truncf",
                                    (ta,), tb, f"%r = arith.truncf {{0}} : {ta} to {tb}",
                                    _store((vals,), (ta,)), Expect(bits=fl.round_array(x, fb))))
    return out


def _narrowing_traps(fmt: Format) -> list[int]:
    """f64/f32 values a truncation through f32 would round wrongly (1 + 2^-8 + tiny to
    bf16, 1 + 2^-11 + tiny to f16): one rounding must go up, two roundings go to even."""
    if fmt is F64:
        return fl.numbers([1 + 2.0 ** -8 + 2.0 ** -40, 1 + 2.0 ** -11 + 2.0 ** -40,
                           -(1 + 2.0 ** -8 + 2.0 ** -40), 65520.0 - 2.0 ** -30], fmt)
    return []


def _fptoint_cases(t: str, fmt: Format, w: int) -> list[Case]:
    ti = f"i{w}"
    bits = float_unary_values(fmt) + fl.numbers([127.9, 128.0, -128.9, -129.0, 255.9, 256.0,
                                                 32767.5, 2.0 ** 31, -2.0 ** 31, 2.0 ** 63,
                                                 -2.0 ** 63, 2.0 ** 64], fmt)
    bits = _unique(bits)
    out = []
    for op, lo, hi in (("fptosi", -(1 << (w - 1)), (1 << (w - 1)) - 1),
                       ("fptoui", 0, (1 << w) - 1)):
        keep, results = [], []
        for b in bits:
            if fl.is_nan_bits(np.array([b]), fmt)[0] or (b & ~fmt.sign_bit) == fmt.inf:
                continue
            value = fl.to_fraction(b, fmt)
            truncated = math.trunc(value)
            if lo <= truncated <= hi:         # out of range: poison (left out)
                keep.append(b)
                results.append(wrap(truncated, w))
        out.append(Case(f"{op}_{t}_{ti}", "arith-cast", f"arith.{op}", (t,), ti,
                        f"%r = arith.{op} {{0}} : {t} to {ti}", (storage_array(keep, t),),
                        Expect(bits=storage_array(results, ti))))
    return out


# ---------------------------------------------------------------------------------------
def all_cases() -> list[Case]:
    """Every case, in a stable order, each name unique."""
    cases = int_cases() + float_cases() + conversion_cases()
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    return cases


def mismatches(case: Case, got: np.ndarray) -> list[int]:
    """Indices where ``got`` (the storage array the kernel wrote) breaks ``case.expect``."""
    e = case.expect
    t = case.out_type
    if t not in FORMATS:
        want = e.bits
        return [int(i) for i in np.nonzero(np.asarray(got) != want)[0]]
    fmt = FORMATS[t]
    gbits = float_bits(got, t)
    gnan = fl.is_nan_bits(gbits, fmt)
    if e.approx is None:
        ok = gbits == e.bits
        if e.alt is not None:
            ok |= gbits == e.alt
        if not e.exact_nan:
            ok |= gnan & fl.is_nan_bits(e.bits, fmt)
        return [int(i) for i in np.nonzero(~ok)[0]]
    return [int(i) for i in np.nonzero(~_within(gbits, e.approx, e.tol, fmt))[0]]


def _within(gbits: np.ndarray, ref: np.ndarray, tol: "float | np.ndarray", fmt: Format) -> np.ndarray:
    got = fl.decode_long(gbits, fmt)
    ref = np.asarray(ref, dtype=np.longdouble)
    with np.errstate(all="ignore"):
        rnan = np.isnan(ref)
        ok = np.where(rnan, np.isnan(got), False)
        exact_special = ~rnan & (np.isinf(ref) | (ref == 0))
        same = (got == ref) & (np.signbit(got) == np.signbit(ref))
        ok = np.where(exact_special, same, ok)
        finite = ~rnan & ~exact_special
        overflow = np.abs(ref) > np.longdouble(float(fmt.max_finite))
        inf_ok = np.isinf(got) & (np.sign(got) == np.sign(ref)) & overflow
        err = fl.ulp_error(np.where(np.isfinite(got), got, 0), ref, fmt)
        close = np.isfinite(got) & (err <= tol + 0.5 + 1e-6)
        return np.where(finite, inf_ok | close, ok)


def describe(case: Case, got: np.ndarray, index: int) -> str:
    """One mismatch, readable: inputs, result and expectation as bits and values."""
    def show(arr: np.ndarray, t: str) -> str:
        v = np.asarray(arr)[index]
        if t in FORMATS:
            fmt = FORMATS[t]
            b = int(np.asarray(arr).view(fmt.uint)[index])
            return f"{fl.decode_long(np.array([b], dtype=fmt.uint), fmt)[0]!r} (0x{b:0{fmt.bits // 4}x})"
        return repr(v.item())
    args = ", ".join(show(a, t) for a, t in zip(case.inputs, case.in_types))
    e = case.expect
    if e.approx is not None:
        tol = np.asarray(e.tol)
        want = f"{e.approx[index]!r} within {tol[index] if tol.ndim else tol} ulp"
    elif case.out_type in FORMATS:
        want = show(e.bits.view(storage_dtype(case.out_type)), case.out_type)
    else:
        want = repr(np.asarray(e.bits)[index].item())
    return f"{case.op}({args}) -> {show(got, case.out_type)}, expected {want}"
