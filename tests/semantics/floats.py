"""IEEE 754 binary formats as integer bit patterns: f16 (binary16), bf16, f32, f64.

Values travel as unsigned integers of the format's width (NumPy has no bf16), are decoded
exactly into float64 (f16, bf16, f32) or longdouble (all four), and results are rounded to a
format with round-to-nearest-even, directly from the exact or wider value (no double rounding:
:func:`round_exact` from a rational, :func:`round_array` from float64 for the 16- and 32-bit
formats).
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np


@dataclasses.dataclass(frozen=True)
class Format:
    """A binary floating-point format: ``p`` significand bits (with the hidden one),
    ``ebits`` exponent bits; bits are carried in ``uint`` (a NumPy unsigned dtype)."""

    name: str           # the MLIR type
    bits: int
    p: int
    ebits: int
    uint: type

    @property
    def bias(self) -> int:
        return (1 << (self.ebits - 1)) - 1

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def emax(self) -> int:
        return self.bias

    @property
    def sign_bit(self) -> int:
        return 1 << (self.bits - 1)

    @property
    def exp_mask(self) -> int:
        return ((1 << self.ebits) - 1) << (self.p - 1)

    @property
    def inf(self) -> int:
        return self.exp_mask

    @property
    def qnan(self) -> int:
        return self.exp_mask | (1 << (self.p - 2))

    @property
    def max_finite(self) -> Fraction:
        return Fraction(2 ** self.p - 1) * Fraction(2) ** (self.emax - self.p + 1)

    def ulp_exponent(self, e: int) -> int:
        """log2 of the ulp of values in the binade [2^e, 2^(e+1)) (subnormals: emin's)."""
        return max(e, self.emin) - self.p + 1


F16 = Format("f16", 16, 11, 5, np.uint16)
BF16 = Format("bf16", 16, 8, 8, np.uint16)
F32 = Format("f32", 32, 24, 8, np.uint32)
F64 = Format("f64", 64, 53, 11, np.uint64)
FORMATS = {f.name: f for f in (F16, BF16, F32, F64)}


def decode(bits: np.ndarray, fmt: Format) -> np.ndarray:
    """Bit patterns -> exact float64 values (longdouble for f64, also exact)."""
    bits = np.asarray(bits, dtype=fmt.uint)
    if fmt is F16:
        return bits.view(np.float16).astype(np.float64)
    if fmt is BF16:
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    if fmt is F32:
        return bits.view(np.float32).astype(np.float64)
    return bits.view(np.float64).astype(np.longdouble)


def decode_long(bits: np.ndarray, fmt: Format) -> np.ndarray:
    """Bit patterns -> exact longdouble values."""
    return decode(bits, fmt).astype(np.longdouble)


def bits_of(value: float, fmt: Format) -> int:
    """The bits of a Python float rounded to ``fmt`` (special values kept)."""
    return int(round_array(np.array([value], dtype=np.float64), fmt)[0]) \
        if fmt is not F64 else int(np.array([value]).view(np.uint64)[0])


def round_array(x: np.ndarray, fmt: Format) -> np.ndarray:
    """float64 values -> bits of ``fmt`` rounded to nearest even, in one rounding (f16, bf16,
    f32; f64 values are taken as they are)."""
    x = np.asarray(x, dtype=np.float64)
    if fmt is F64:
        return x.view(np.uint64).copy()
    with np.errstate(all="ignore"):
        finite = np.isfinite(x) & (x != 0)
        _, e = np.frexp(np.where(finite, x, 1.0))
        quantum_exp = np.maximum(e - 1, fmt.emin) - fmt.p + 1
        scaled = np.ldexp(np.where(finite, x, 0.0), -quantum_exp)
        rounded = np.ldexp(np.rint(scaled), quantum_exp)
        rounded = np.where(np.abs(rounded) > float(fmt.max_finite),
                           np.copysign(np.inf, x), rounded)
        out = np.where(finite, rounded, x)
    as32 = out.astype(np.float32)            # exact: the value already fits the format
    if fmt is F32:
        return as32.view(np.uint32).copy()
    if fmt is F16:
        return out.astype(np.float16).view(np.uint16).copy()
    return (as32.view(np.uint32) >> np.uint32(16)).astype(np.uint16)


def round_exact(q: "Fraction | int", fmt: Format) -> int:
    """An exact rational -> bits of ``fmt``, rounded to nearest even (overflow: inf; a zero
    result is +0: callers with a signed zero handle it)."""
    q = Fraction(q)
    sign = fmt.sign_bit if q < 0 else 0
    q = abs(q)
    if q == 0:
        return sign
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    quantum = Fraction(2) ** fmt.ulp_exponent(e)
    m = q / quantum
    whole = m.numerator // m.denominator
    rest = m - whole
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2):
        whole += 1
    value = whole * quantum
    if value > fmt.max_finite:
        return sign | fmt.inf
    if whole < (1 << (fmt.p - 1)):           # subnormal
        return sign | whole
    if whole == (1 << fmt.p):
        whole >>= 1
        e += 1
    biased = max(e, fmt.emin) + fmt.bias
    return sign | (biased << (fmt.p - 1)) | (whole - (1 << (fmt.p - 1)))


def to_fraction(bits: int, fmt: Format) -> Fraction:
    """Exact value of finite bits."""
    sign = -1 if bits & fmt.sign_bit else 1
    biased = (bits & fmt.exp_mask) >> (fmt.p - 1)
    mant = bits & ((1 << (fmt.p - 1)) - 1)
    if biased == 0:
        return sign * mant * Fraction(2) ** (fmt.emin - fmt.p + 1)
    return sign * (mant | (1 << (fmt.p - 1))) * Fraction(2) ** (biased - fmt.bias - fmt.p + 1)


def is_nan_bits(bits: np.ndarray, fmt: Format) -> np.ndarray:
    bits = np.asarray(bits, dtype=fmt.uint).astype(np.uint64)
    exp = np.uint64(fmt.exp_mask)
    mant = np.uint64((1 << (fmt.p - 1)) - 1)
    return ((bits & exp) == exp) & ((bits & mant) != 0)


def ulp_error(got: np.ndarray, ref: np.ndarray, fmt: Format) -> np.ndarray:
    """|got - ref| in ulps of ``fmt`` at ``ref`` (both longdouble; ref finite and non-zero).
    A ref beyond the largest finite value is measured in the largest finite value's ulps."""
    ref = np.asarray(ref, dtype=np.longdouble)
    got = np.asarray(got, dtype=np.longdouble)
    with np.errstate(all="ignore"):
        _, e = np.frexp(np.abs(ref))
        e = np.minimum(e.astype(np.int64) - 1, fmt.emax)
        ulp_exp = np.maximum(e, fmt.emin) - fmt.p + 1
        return np.abs(got - ref) / np.ldexp(np.longdouble(1), ulp_exp)


def special_values(fmt: Format) -> list[int]:
    """Bits of the special values of ``fmt``: signed zeros, infinities, a quiet NaN, the
    smallest and largest subnormal, the smallest normal, the largest finite value, and the
    neighbours of one (all of them with both signs)."""
    one = fmt.bias << (fmt.p - 1)
    positive = [0, fmt.inf, 1, (1 << (fmt.p - 1)) - 1, 1 << (fmt.p - 1),
                fmt.inf - 1, one, one + 1, one - 1]
    values = []
    for v in positive:
        values += [v, v | fmt.sign_bit]
    return values + [fmt.qnan]


def numbers(values: "list[float]", fmt: Format) -> list[int]:
    """Bits of ordinary numbers rounded to ``fmt`` (those that overflow to inf included)."""
    return [int(b) for b in round_array(np.array(values, dtype=np.float64), fmt)]
