/*
 * runner.c — MLIR's runner utilities (wavert_runner.h): memref printing and verification,
 * the vector.print helpers, memrefCopy and the clocks. Plain C stdio; no dependency on
 * libwavert. Formats reproduce libmlir_runner_utils' std::ostream output: integers in
 * decimal, floating point as "%g" (an ostream's default 6 significant digits), pointers as
 * "0x..." hex ("0" for NULL, as libstdc++ prints a null void*).
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "wavert_runner.h"

typedef enum {
  KIND_I8,
  KIND_I16,
  KIND_I32,
  KIND_I64,
  KIND_INDEX,
  KIND_F16,
  KIND_BF16,
  KIND_F32,
  KIND_F64,
  KIND_C32,
  KIND_C64,
  KIND_V4X4F32, /* a vector<4x4xf32> element (printMemrefVector4x4xf32) */
} element_kind;

static const int64_t element_bytes[] = {1, 2, 4, 8, 8, 2, 2, 4, 8, 8, 16, 64};

/* MLIR's ranked descriptor. */
typedef struct {
  char *allocated;
  char *aligned;
  int64_t offset;
  int64_t shape[]; /* sizes[rank], then strides[rank] */
} ranked_memref;

static float f16_to_float(uint16_t bits) {
  uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0x1f) {
    out = sign | 0x7f800000u | (mantissa << 13); /* infinity, NaN (payload kept) */
  } else if (exponent == 0) {
    float value = ldexpf((float)mantissa, -24); /* zero, subnormal */
    return sign ? -value : value;
  } else {
    out = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float value;
  memcpy(&value, &out, sizeof(value));
  return value;
}

static float bf16_to_float(uint16_t bits) {
  uint32_t out = (uint32_t)bits << 16;
  float value;
  memcpy(&value, &out, sizeof(value));
  return value;
}

static void print_element(FILE *out, element_kind kind, const char *p) {
  switch (kind) {
    case KIND_I8:
      fputc(*p, out); /* an ostream writes an int8_t as a character */
      break;
    case KIND_I16: {
      int16_t v;
      memcpy(&v, p, sizeof(v));
      fprintf(out, "%" PRId16, v);
      break;
    }
    case KIND_I32: {
      int32_t v;
      memcpy(&v, p, sizeof(v));
      fprintf(out, "%" PRId32, v);
      break;
    }
    case KIND_I64: {
      int64_t v;
      memcpy(&v, p, sizeof(v));
      fprintf(out, "%" PRId64, v);
      break;
    }
    case KIND_INDEX: {
      uint64_t v;
      memcpy(&v, p, sizeof(v));
      fprintf(out, "%" PRIu64, v);
      break;
    }
    case KIND_F16:
    case KIND_BF16: {
      uint16_t v;
      memcpy(&v, p, sizeof(v));
      fprintf(out, "%g", (double)(kind == KIND_F16 ? f16_to_float(v) : bf16_to_float(v)));
      break;
    }
    case KIND_F32: {
      float v;
      memcpy(&v, p, sizeof(v));
      fprintf(out, "%g", (double)v);
      break;
    }
    case KIND_F64: {
      double v;
      memcpy(&v, p, sizeof(v));
      fprintf(out, "%g", v);
      break;
    }
    case KIND_C32: {
      float v[2];
      memcpy(v, p, sizeof(v));
      fprintf(out, "(%g,%g)", (double)v[0], (double)v[1]);
      break;
    }
    case KIND_C64: {
      double v[2];
      memcpy(v, p, sizeof(v));
      fprintf(out, "(%g,%g)", v[0], v[1]);
      break;
    }
    case KIND_V4X4F32: {
      /* MLIR's Vector printer: rows "(a, b, c, d)", joined by ", " and indented by two
       * spaces, the last by one: "((1, 2, 3, 4),   (5, ...),   (...),  (...))". */
      float v[16];
      memcpy(v, p, sizeof(v));
      fputc('(', out);
      for (int row = 0; row < 4; ++row) {
        if (row > 0) fputs(row == 3 ? ", " " " : ", " "  ", out);
        fprintf(out, "(%g, %g, %g, %g)", (double)v[4 * row], (double)v[4 * row + 1],
                (double)v[4 * row + 2], (double)v[4 * row + 3]);
      }
      fputc(')', out);
      break;
    }
  }
}

static void print_list(FILE *out, const int64_t *values, int64_t count) {
  for (int64_t i = 0; i < count; ++i) fprintf(out, "%s%" PRId64, i ? ", " : "", values[i]);
}

/* "base@ = P rank = R offset = O sizes = [..] strides = [..]" (no prefix, no newline). */
static void print_metadata(FILE *out, int64_t rank, const ranked_memref *memref) {
  if (memref->aligned == NULL)
    fputs("base@ = 0", out);
  else
    fprintf(out, "base@ = 0x%" PRIxPTR, (uintptr_t)memref->aligned);
  fprintf(out, " rank = %" PRId64 " offset = %" PRId64 " sizes = [", rank, memref->offset);
  print_list(out, memref->shape, rank);
  fputs("] strides = [", out);
  print_list(out, memref->shape + rank, rank);
  fputc(']', out);
}

static void print_spaces(int64_t count) {
  for (int64_t i = 0; i < count; ++i) fputc(' ', stdout);
}

/* The elements of the `dim` innermost dimensions starting at element `offset`, nested in
 * brackets; items of the dimension `dim` are separated by ", " (and a newline when dim > 1)
 * and indented by rank - dim + 1 spaces after the first. */
static void print_data(element_kind kind, const char *base, int64_t dim, int64_t rank,
                       int64_t offset, const int64_t *sizes, const int64_t *strides) {
  if (dim == 0) {
    print_element(stdout, kind, base + offset * element_bytes[kind]);
    return;
  }
  fputc('[', stdout);
  for (int64_t i = 0; i < sizes[0]; ++i) {
    if (i > 0) {
      fputs(", ", stdout);
      if (dim > 1) fputc('\n', stdout);
      print_spaces(rank - dim + 1);
    }
    print_data(kind, base, dim - 1, rank, offset + i * strides[0], sizes + 1, strides + 1);
  }
  fputc(']', stdout);
}

static void print_memref(element_kind kind, const char *prefix, int64_t rank,
                         const ranked_memref *memref) {
  fputs(prefix, stdout);
  print_metadata(stdout, rank, memref);
  fputs(" data = \n", stdout);
  fflush(stdout);
  if (rank == 0) fputc('[', stdout);
  print_data(kind, memref->aligned, rank, rank, memref->offset, memref->shape,
             memref->shape + rank);
  if (rank == 0) fputc(']', stdout);
  fputc('\n', stdout);
  fflush(stdout);
}

static void print_shape(int64_t rank, const ranked_memref *memref) {
  fputs("Unranked Memref ", stdout);
  print_metadata(stdout, rank, memref);
  fputc('\n', stdout);
}

#define UNRANKED "Unranked Memref "

#define DEFINE_PRINT(NAME, KIND)                                                  \
  void printMemref##NAME(int64_t rank, void *descriptor) {                        \
    print_memref(KIND, UNRANKED, rank, descriptor);                               \
  }                                                                               \
  void _mlir_ciface_printMemref##NAME(wavert_unranked_memref *memref) {           \
    print_memref(KIND, UNRANKED, memref->rank, memref->descriptor);               \
  }
DEFINE_PRINT(I8, KIND_I8)
DEFINE_PRINT(I16, KIND_I16)
DEFINE_PRINT(I32, KIND_I32)
DEFINE_PRINT(I64, KIND_I64)
DEFINE_PRINT(Ind, KIND_INDEX)
DEFINE_PRINT(F16, KIND_F16)
DEFINE_PRINT(BF16, KIND_BF16)
DEFINE_PRINT(F32, KIND_F32)
DEFINE_PRINT(F64, KIND_F64)
DEFINE_PRINT(C32, KIND_C32)
DEFINE_PRINT(C64, KIND_C64)

#define DEFINE_PRINT_RANKED(NAME, RANK, KIND)                                     \
  void _mlir_ciface_printMemref##NAME(void *descriptor) {                         \
    print_memref(KIND, "Memref ", RANK, descriptor);                              \
  }
DEFINE_PRINT_RANKED(0dF32, 0, KIND_F32)
DEFINE_PRINT_RANKED(1dF32, 1, KIND_F32)
DEFINE_PRINT_RANKED(2dF32, 2, KIND_F32)
DEFINE_PRINT_RANKED(3dF32, 3, KIND_F32)
DEFINE_PRINT_RANKED(4dF32, 4, KIND_F32)
DEFINE_PRINT_RANKED(1dI8, 1, KIND_I8)
DEFINE_PRINT_RANKED(1dI32, 1, KIND_I32)
DEFINE_PRINT_RANKED(1dI64, 1, KIND_I64)
DEFINE_PRINT_RANKED(1dF64, 1, KIND_F64)
DEFINE_PRINT_RANKED(1dInd, 1, KIND_INDEX)
DEFINE_PRINT_RANKED(1dC32, 1, KIND_C32)
DEFINE_PRINT_RANKED(1dC64, 1, KIND_C64)
DEFINE_PRINT_RANKED(Vector4x4xf32, 2, KIND_V4X4F32)

#define DEFINE_PRINT_SHAPE(NAME)                                                  \
  void _mlir_ciface_printMemrefShape##NAME(wavert_unranked_memref *memref) {      \
    print_shape(memref->rank, memref->descriptor);                                \
  }
DEFINE_PRINT_SHAPE(I8)
DEFINE_PRINT_SHAPE(I16)
DEFINE_PRINT_SHAPE(I32)
DEFINE_PRINT_SHAPE(I64)
DEFINE_PRINT_SHAPE(F16)
DEFINE_PRINT_SHAPE(BF16)
DEFINE_PRINT_SHAPE(F32)
DEFINE_PRINT_SHAPE(F64)
DEFINE_PRINT_SHAPE(Ind)
DEFINE_PRINT_SHAPE(C32)
DEFINE_PRINT_SHAPE(C64)

/* ---- verification ------------------------------------------------------------------------ */

static int elements_match(element_kind kind, const char *a, const char *e) {
  if (kind == KIND_F32) {
    float x, y;
    memcpy(&x, a, sizeof(x));
    memcpy(&y, e, sizeof(y));
    return isfinite(x) && isfinite(y) && fabsf(x - y) <= 1e-6f * fabsf(y);
  }
  if (kind == KIND_F64) {
    double x, y;
    memcpy(&x, a, sizeof(x));
    memcpy(&y, e, sizeof(y));
    return isfinite(x) && isfinite(y) && fabs(x - y) <= 1e-12 * fabs(y);
  }
  if (kind == KIND_F16 || kind == KIND_BF16) { /* == on the widened values (-0 == 0) */
    uint16_t x, y;
    memcpy(&x, a, sizeof(x));
    memcpy(&y, e, sizeof(y));
    return kind == KIND_F16 ? f16_to_float(x) == f16_to_float(y)
                            : bf16_to_float(x) == bf16_to_float(y);
  }
  if (kind == KIND_C32 || kind == KIND_C64) { /* == on the parts (so -0 == 0) */
    if (kind == KIND_C32) {
      float x[2], y[2];
      memcpy(x, a, sizeof(x));
      memcpy(y, e, sizeof(y));
      return x[0] == y[0] && x[1] == y[1];
    }
    double x[2], y[2];
    memcpy(x, a, sizeof(x));
    memcpy(y, e, sizeof(y));
    return x[0] == y[0] && x[1] == y[1];
  }
  return memcmp(a, e, (size_t)element_bytes[kind]) == 0;
}

static int64_t verify_data(element_kind kind, const char *actual, const char *expected,
                           int64_t dim, int64_t offset, const int64_t *sizes,
                           const int64_t *strides, int64_t *printed) {
  if (dim == 0) {
    const char *a = actual + offset * element_bytes[kind];
    const char *e = expected + offset * element_bytes[kind];
    if (elements_match(kind, a, e)) return 0;
    if (*printed < 10) {
      print_element(stderr, kind, a);
      fputs(" != ", stderr);
      print_element(stderr, kind, e);
      fprintf(stderr, " offset = %" PRId64 "\n", offset);
      *printed += 1;
    }
    return 1;
  }
  int64_t errors = 0;
  for (int64_t i = 0; i < sizes[0]; ++i)
    errors += verify_data(kind, actual, expected, dim - 1, offset + i * strides[0], sizes + 1,
                          strides + 1, printed);
  return errors;
}

static int64_t verify_memref(element_kind kind, const wavert_unranked_memref *actual,
                             const wavert_unranked_memref *expected) {
  const ranked_memref *a = actual->descriptor;
  const ranked_memref *e = expected->descriptor;
  int64_t rank = actual->rank;
  /* As upstream, rank, offset, sizes and strides are compared only for rank > 0: rank-0
   * memrefs compare their elements at the actual offset whatever the expected header. */
  int same = rank == 0 || (expected->rank == rank && a->offset == e->offset);
  for (int64_t i = 0; same && i < 2 * rank; ++i) same = a->shape[i] == e->shape[i];
  if (!same) {
    print_metadata(stderr, rank, a);
    print_metadata(stderr, expected->rank, e);
    return -1;
  }
  int64_t printed = 0;
  return verify_data(kind, a->aligned, e->aligned, rank, a->offset, a->shape, a->shape + rank,
                     &printed);
}

#define DEFINE_VERIFY(NAME, KIND)                                                          \
  int64_t _mlir_ciface_verifyMemRef##NAME(wavert_unranked_memref *actual,                  \
                                          wavert_unranked_memref *expected) {              \
    return verify_memref(KIND, actual, expected);                                          \
  }                                                                                        \
  int64_t verifyMemRef##NAME(int64_t rank, void *actual, void *expected) {                 \
    wavert_unranked_memref a = {rank, actual}, e = {rank, expected};                       \
    return verify_memref(KIND, &a, &e);                                                    \
  }
DEFINE_VERIFY(I8, KIND_I8)
DEFINE_VERIFY(I16, KIND_I16)
DEFINE_VERIFY(I32, KIND_I32)
DEFINE_VERIFY(I64, KIND_I64)
DEFINE_VERIFY(F16, KIND_F16)
DEFINE_VERIFY(BF16, KIND_BF16)
DEFINE_VERIFY(F32, KIND_F32)
DEFINE_VERIFY(F64, KIND_F64)
DEFINE_VERIFY(Ind, KIND_INDEX)
DEFINE_VERIFY(C32, KIND_C32)
DEFINE_VERIFY(C64, KIND_C64)

/* ---- vector.print helpers ----------------------------------------------------------------- */

void printI64(int64_t value) { fprintf(stdout, "%" PRId64, value); }
void printU64(uint64_t value) { fprintf(stdout, "%" PRIu64, value); }
void printF32(float value) { fprintf(stdout, "%g", (double)value); }
void printF64(double value) { fprintf(stdout, "%g", value); }
void printF16(uint16_t bits) { fprintf(stdout, "%g", (double)f16_to_float(bits)); }
void printBF16(uint16_t bits) { fprintf(stdout, "%g", (double)bf16_to_float(bits)); }
void printString(const char *text) { fputs(text, stdout); }
void printCString(const char *text) { fputs(text, stdout); }
void printOpen(void) { fputs("( ", stdout); }
void printClose(void) { fputs(" )", stdout); }
void printComma(void) { fputs(", ", stdout); }
void printNewline(void) { fputc('\n', stdout); }
void printFlops(double flops) { fprintf(stderr, "%lf GFLOPS\n", flops / 1.0e9); }

double rtclock(void) {
  struct timeval now;
  if (gettimeofday(&now, NULL) != 0) return 0.0;
  return (double)now.tv_sec + (double)now.tv_usec * 1.0e-6;
}

int64_t _mlir_ciface_nanoTime(void) {
  struct timespec now;
  if (clock_gettime(CLOCK_REALTIME, &now) != 0) return 0;
  return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* ---- memref.copy ---------------------------------------------------------------------------- */

void memrefCopy(int64_t element_size, wavert_unranked_memref *source,
                wavert_unranked_memref *target) {
  const ranked_memref *src = source->descriptor;
  const ranked_memref *dst = target->descriptor;
  int64_t rank = source->rank;
  const int64_t *sizes = src->shape;
  for (int64_t i = 0; i < rank; ++i)
    if (sizes[i] <= 0) return;
  const char *from = src->aligned + src->offset * element_size;
  char *to = dst->aligned + dst->offset * element_size;
  if (rank == 0) {
    memcpy(to, from, (size_t)element_size);
    return;
  }
  /* An odometer over the indices; byte positions move by each dimension's stride. */
  int64_t index[rank];
  memset(index, 0, sizeof(index));
  int64_t read = 0, write = 0;
  for (;;) {
    memcpy(to + write, from + read, (size_t)element_size);
    int64_t axis = rank - 1;
    for (; axis >= 0; --axis) {
      read += src->shape[rank + axis] * element_size;
      write += dst->shape[rank + axis] * element_size;
      if (++index[axis] < sizes[axis]) break;
      read -= sizes[axis] * src->shape[rank + axis] * element_size;
      write -= sizes[axis] * dst->shape[rank + axis] * element_size;
      index[axis] = 0;
    }
    if (axis < 0) return;
  }
}

/* ---- printApFloat: the floating-point types without a print* of their own --------------- */

/* The layout of one of LLVM's APFloat semantics (llvm::APFloatBase::Semantics, the number
 * vector.print passes): `ieee` types have infinities and NaNs at the top exponent; `fn` types
 * only a NaN with all bits set; `uz` types a NaN at the negative-zero pattern and no -0;
 * `unsigned_e8m0`: no sign, no mantissa, no zero, a NaN at 0xff. */
typedef struct {
  int known, bits, exponent_bits, mantissa_bits, bias;
  enum { NONFINITE_IEEE, NONFINITE_FN, NONFINITE_UZ, NONFINITE_NONE, E8M0 } nonfinite;
} float_layout;

static float_layout apfloat_layout(int32_t semantics) {
  switch (semantics) {
    case 0: return (float_layout){1, 16, 5, 10, 15, NONFINITE_IEEE};    /* IEEEhalf */
    case 1: return (float_layout){1, 16, 8, 7, 127, NONFINITE_IEEE};    /* BFloat */
    case 2: return (float_layout){1, 32, 8, 23, 127, NONFINITE_IEEE};   /* IEEEsingle */
    case 3: return (float_layout){1, 64, 11, 52, 1023, NONFINITE_IEEE}; /* IEEEdouble */
    case 7: return (float_layout){1, 8, 5, 2, 15, NONFINITE_IEEE};      /* Float8E5M2 */
    case 8: return (float_layout){1, 8, 5, 2, 16, NONFINITE_UZ};        /* Float8E5M2FNUZ */
    case 9: return (float_layout){1, 8, 4, 3, 7, NONFINITE_IEEE};       /* Float8E4M3 */
    case 10: return (float_layout){1, 8, 4, 3, 7, NONFINITE_FN};        /* Float8E4M3FN */
    case 11: return (float_layout){1, 8, 4, 3, 8, NONFINITE_UZ};        /* Float8E4M3FNUZ */
    case 12: return (float_layout){1, 8, 4, 3, 11, NONFINITE_UZ};       /* Float8E4M3B11FNUZ */
    case 13: return (float_layout){1, 8, 3, 4, 3, NONFINITE_IEEE};      /* Float8E3M4 */
    case 14: return (float_layout){1, 19, 8, 10, 127, NONFINITE_IEEE};  /* FloatTF32 */
    case 15: return (float_layout){1, 8, 8, 0, 127, E8M0};              /* Float8E8M0FNU */
    case 16: return (float_layout){1, 6, 3, 2, 3, NONFINITE_NONE};      /* Float6E3M2FN */
    case 17: return (float_layout){1, 6, 2, 3, 1, NONFINITE_NONE};      /* Float6E2M3FN */
    case 18: return (float_layout){1, 4, 2, 1, 1, NONFINITE_NONE};      /* Float4E2M1FN */
    default: return (float_layout){0, 0, 0, 0, 0, NONFINITE_NONE};
  }
}

/* The value of `bits` (the low bits of the word) in `layout`, exactly (every such value is a
 * double), as LLVM's APFloat converts it to a double: NaNs keep their sign for IEEE and FN
 * types and are positive for the negative-zero encodings. */
static double apfloat_value(const float_layout *layout, uint64_t bits) {
  /* E8M0's NaN (0xff) comes out of LLVM's conversion to double as +inf, which is what
   * upstream prints for it. */
  if (layout->nonfinite == E8M0) return bits == 0xff ? INFINITY : ldexp(1.0, (int)bits - 127);
  uint64_t mantissa = bits & ((UINT64_C(1) << layout->mantissa_bits) - 1);
  uint64_t exponent = (bits >> layout->mantissa_bits) &
                      ((UINT64_C(1) << layout->exponent_bits) - 1);
  int negative = (int)((bits >> (layout->bits - 1)) & 1);
  uint64_t top = (UINT64_C(1) << layout->exponent_bits) - 1;
  if (layout->nonfinite == NONFINITE_IEEE && exponent == top)
    return mantissa ? (negative ? -NAN : NAN) : (negative ? -INFINITY : INFINITY);
  if (layout->nonfinite == NONFINITE_FN && exponent == top &&
      mantissa == (UINT64_C(1) << layout->mantissa_bits) - 1)
    return negative ? -NAN : NAN;
  if (layout->nonfinite == NONFINITE_UZ && negative && exponent == 0 && mantissa == 0)
    return NAN;
  double magnitude = exponent == 0
      ? ldexp((double)mantissa, 1 - layout->bias - layout->mantissa_bits)
      : ldexp((double)(mantissa | (UINT64_C(1) << layout->mantissa_bits)),
              (int)exponent - layout->bias - layout->mantissa_bits);
  return negative ? -magnitude : magnitude;
}

void printApFloat(int32_t semantics, uint64_t bits) {
  float_layout layout = apfloat_layout(semantics);
  if (!layout.known) {
    fprintf(stderr, "printApFloat: floating-point semantics %" PRId32 " is not supported\n",
            semantics);
    return;
  }
  if (layout.bits < 64) bits &= (UINT64_C(1) << layout.bits) - 1;
  double value;
  if (layout.bits == 64) {
    memcpy(&value, &bits, sizeof(value));
  } else {
    value = apfloat_value(&layout, bits);
  }
  fprintf(stdout, "%lg", value);
}

/* ---- allocation ---------------------------------------------------------------------------- */

void *mlirAlloc(uint64_t size) { return malloc((size_t)size); }
void *mlirAlignedAlloc(uint64_t alignment, uint64_t size) {
  return aligned_alloc((size_t)alignment, (size_t)size);
}
void mlirFree(void *pointer) { free(pointer); }
void mlirAlignedFree(void *pointer) { free(pointer); }

/* ---- random numbers: std::mt19937 and libstdc++'s uniform_int_distribution<uint64_t> ------ */

enum { MT_N = 624, MT_M = 397 };

struct wavert_mt19937 {
  uint32_t state[MT_N];
  int next;
};

static uint32_t mt_next(struct wavert_mt19937 *g) {
  if (g->next >= MT_N) {
    for (int i = 0; i < MT_N; ++i) {
      uint32_t y = (g->state[i] & 0x80000000u) | (g->state[(i + 1) % MT_N] & 0x7fffffffu);
      g->state[i] = g->state[(i + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    g->next = 0;
  }
  uint32_t y = g->state[g->next++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

/* A uniform integer in [0, bound] drawn as libstdc++ (GCC 11 and later) draws it from a
 * 32-bit engine: Lemire's multiply-and-reject for a bound below 2^32 - 1, one draw for
 * exactly 2^32 - 1, and for larger bounds a high part drawn recursively plus one draw. */
static uint64_t uniform_upto(struct wavert_mt19937 *g, uint64_t bound) {
  const uint64_t engine_range = UINT32_MAX;
  if (bound < engine_range) {
    uint32_t range = (uint32_t)(bound + 1);
    uint64_t product = (uint64_t)mt_next(g) * range;
    uint32_t low = (uint32_t)product;
    if (low < range) {
      uint32_t threshold = (uint32_t)(0u - range) % range;
      while (low < threshold) {
        product = (uint64_t)mt_next(g) * range;
        low = (uint32_t)product;
      }
    }
    return product >> 32;
  }
  if (bound == engine_range) return mt_next(g);
  uint64_t result, high;
  do {
    high = (engine_range + 1) * uniform_upto(g, bound / (engine_range + 1));
    result = high + mt_next(g);
  } while (result > bound || result < high);
  return result;
}

void *rtsrand(uint64_t seed) {
  struct wavert_mt19937 *g = malloc(sizeof(*g));
  if (g == NULL) return NULL;
  g->state[0] = (uint32_t)seed;
  for (uint32_t i = 1; i < MT_N; ++i)
    g->state[i] = 1812433253u * (g->state[i - 1] ^ (g->state[i - 1] >> 30)) + i;
  g->next = MT_N;
  return g;
}

uint64_t rtrand(void *generator, uint64_t bound) { return uniform_upto(generator, bound); }

void rtdrand(void *generator) { free(generator); }

static void swap_u64(uint64_t *a, uint64_t *b) {
  uint64_t t = *a;
  *a = *b;
  *b = t;
}

/* std::shuffle of libstdc++ over 0..n-1: swap positions drawn two at a time while n * n fits
 * the engine's range, one at a time otherwise. */
void _mlir_ciface_shuffle(wavert_memref_1d *memref, void *generator) {
  struct wavert_mt19937 *g = generator;
  uint64_t n = (uint64_t)memref->sizes[0];
  uint64_t *out = memref->aligned; /* as upstream: at the aligned pointer, offset unused */
  if (n == 0) return;
  uint64_t *values = malloc(n * sizeof(*values)); /* n elements exist: no overflow */
  if (values == NULL) return;
  for (uint64_t i = 0; i < n; ++i) values[i] = i;
  if ((uint64_t)UINT32_MAX / n >= n) {
    uint64_t i = 1;
    if (n % 2 == 0) {
      swap_u64(&values[i], &values[uniform_upto(g, 1)]);
      ++i;
    }
    while (i != n) {
      uint64_t range = i + 1; /* positions for i in [0, i], for i + 1 in [0, i + 1] */
      uint64_t x = uniform_upto(g, range * (range + 1) - 1);
      swap_u64(&values[i], &values[x / (range + 1)]);
      ++i;
      swap_u64(&values[i], &values[x % (range + 1)]);
      ++i;
    }
  } else {
    for (uint64_t i = 1; i < n; ++i) swap_u64(&values[i], &values[uniform_upto(g, i)]);
  }
  memcpy(out, values, n * sizeof(*values));
  free(values);
}

/* ---- sorting --------------------------------------------------------------------------------- */

#define DEFINE_SORT(NAME, TYPE)                                                        \
  static int compare_##NAME(const void *a, const void *b) {                            \
    TYPE x, y;                                                                         \
    memcpy(&x, a, sizeof(x));                                                          \
    memcpy(&y, b, sizeof(y));                                                          \
    return (x > y) - (x < y);                                                          \
  }                                                                                    \
  void _mlir_ciface_stdSort##NAME(uint64_t n, wavert_memref_1d *memref) {              \
    qsort((TYPE *)memref->aligned + memref->offset, (size_t)n, sizeof(TYPE), compare_##NAME); \
  }
DEFINE_SORT(I64, int64_t)
DEFINE_SORT(F64, double)
DEFINE_SORT(F32, float)
