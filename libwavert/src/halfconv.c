/*
 * halfconv.c — bit-exact conversions between f32/f64 and the 16-bit floating-point formats
 * (IEEE 754 binary16 and bfloat16), rounding to nearest even. JIT'd host code reaches them
 * through the compiler-rt names (__truncsfhf2, ...) that pywave defines over these, and the
 * Python call path uses them for f16/bf16 scalars.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "wavert.h"

/* Round |x| (finite, non-zero or zero) to a binary format with `mant` stored mantissa bits and
 * `exp` exponent bits, returning the 16-bit pattern. One rounding step: exact for f32 inputs
 * widened to double, since every float is a double. */
static uint16_t round_to_16(double x, int mant, int exp) {
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  uint16_t sign = (uint16_t)((bits >> 63) << 15);
  int bias = (1 << (exp - 1)) - 1;
  uint16_t exp_all = (uint16_t)(((1u << exp) - 1u) << mant);
  if (isnan(x))
    return (uint16_t)(sign | exp_all | (1u << (mant - 1)));
  double a = fabs(x);
  if (isinf(a))
    return (uint16_t)(sign | exp_all);
  if (a == 0.0)
    return sign;
  int e2;
  frexp(a, &e2);
  int e = e2 - 1; /* a = 1.f * 2^e */
  if (e < 1 - bias) {
    /* Subnormal: a multiple of 2^(1 - bias - mant); a carry into 2^mant is the smallest
     * normal number, whose encoding follows naturally. */
    double k = nearbyint(ldexp(a, mant - (1 - bias)));
    return (uint16_t)(sign | (uint16_t)k);
  }
  double m = nearbyint(ldexp(a, mant - e)); /* in [2^mant, 2^(mant+1)] */
  if (m >= ldexp(1.0, mant + 1)) {
    m = ldexp(m, -1);
    e += 1;
  }
  if (e + bias >= (1 << exp) - 1)
    return (uint16_t)(sign | exp_all); /* overflow rounds to infinity */
  return (uint16_t)(sign | (uint16_t)((e + bias) << mant) | ((uint16_t)m - (1u << mant)));
}

WAVERT_EXPORT uint16_t wavert_f16_from_f64(double x) { return round_to_16(x, 10, 5); }
WAVERT_EXPORT uint16_t wavert_f16_from_f32(float x) { return round_to_16((double)x, 10, 5); }
WAVERT_EXPORT uint16_t wavert_bf16_from_f64(double x) { return round_to_16(x, 7, 8); }
WAVERT_EXPORT uint16_t wavert_bf16_from_f32(float x) { return round_to_16((double)x, 7, 8); }

WAVERT_EXPORT float wavert_f32_from_f16(uint16_t h) {
  int exp = (h >> 10) & 0x1f;
  int man = h & 0x3ff;
  float v;
  if (exp == 0)
    v = ldexpf((float)man, -24);
  else if (exp == 31)
    v = man ? NAN : INFINITY;
  else
    v = ldexpf((float)(man + 1024), exp - 25);
  return (h & 0x8000) ? -v : v;
}
