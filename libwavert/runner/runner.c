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
} element_kind;

static const int64_t element_bytes[] = {1, 2, 4, 8, 8, 2, 2, 4, 8, 8, 16};

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

#define DEFINE_PRINT_SHAPE(NAME)                                                  \
  void _mlir_ciface_printMemrefShape##NAME(wavert_unranked_memref *memref) {      \
    print_shape(memref->rank, memref->descriptor);                                \
  }
DEFINE_PRINT_SHAPE(I8)
DEFINE_PRINT_SHAPE(I32)
DEFINE_PRINT_SHAPE(I64)
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
  int same = expected->rank == rank && a->offset == e->offset;
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
DEFINE_VERIFY(I32, KIND_I32)
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
