/* test_runner.c — the runner utilities' exact output (libwavert_runner): printMemref* for every
 * element type and ranks 0-3 (unranked, C-interface and ranked forms), the shape printers, the
 * vector.print helpers, verifyMemRef* (stderr) and memrefCopy. Expected strings are written
 * from MLIR's formats (runner_formats.md); "base@ = 0x..." is masked as "base@ = BASE". */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wavert_runner.h"
#include "memref_types.h"

static int failures;

typedef struct {
  int fd, saved;
  FILE *file;
} capture;

static void capture_begin(capture *c, int fd) {
  fflush(stdout);
  fflush(stderr);
  c->fd = fd;
  c->file = tmpfile();
  c->saved = dup(fd);
  if (c->file == NULL || c->saved < 0 || dup2(fileno(c->file), fd) < 0) {
    perror("capture");
    exit(1);
  }
}

/* The captured text with every "base@ = 0x<hex>" written as "base@ = BASE" (malloc'd). */
static char *capture_end(capture *c) {
  fflush(stdout);
  fflush(stderr);
  dup2(c->saved, c->fd);
  close(c->saved);
  long size = ftell(c->file);
  char *text = calloc(1, (size_t)size + 1);
  rewind(c->file);
  if (fread(text, 1, (size_t)size, c->file) != (size_t)size) exit(1);
  fclose(c->file);
  char *at = text;
  while ((at = strstr(at, "base@ = 0x")) != NULL) {
    char *end = at + strlen("base@ = 0x");
    while ((*end >= '0' && *end <= '9') || (*end >= 'a' && *end <= 'f')) ++end;
    memcpy(at, "base@ = BASE", 12);
    memmove(at + 12, end, strlen(end) + 1);
    at += 12;
  }
  return text;
}

static void expect(const char *what, int line, char *actual, const char *expected) {
  if (strcmp(actual, expected) != 0) {
    fprintf(stderr, "test_runner.c:%d: %s\n--- expected ---\n%s--- actual ---\n%s---\n", line,
            what, expected, actual);
    failures += 1;
  }
  free(actual);
}

/* Run `statement` with stdout captured and compare. */
#define EXPECT_STDOUT(statement, expected)      \
  do {                                          \
    capture c_;                                 \
    capture_begin(&c_, STDOUT_FILENO);          \
    statement;                                  \
    expect(#statement, __LINE__, capture_end(&c_), expected); \
  } while (0)

#define EXPECT_STDERR(statement, expected)      \
  do {                                          \
    capture c_;                                 \
    capture_begin(&c_, STDERR_FILENO);          \
    statement;                                  \
    expect(#statement, __LINE__, capture_end(&c_), expected); \
  } while (0)

#define CHECK(condition)                                                     \
  do {                                                                       \
    if (!(condition)) {                                                      \
      fprintf(stderr, "test_runner.c:%d: check failed: %s\n", __LINE__, #condition); \
      failures += 1;                                                         \
    }                                                                        \
  } while (0)

/* The rank-0 descriptor (ranks 1-3: memref_types.h). */
typedef struct {
  void *allocated, *aligned;
  int64_t offset;
} memref0;

#define HEADER(rank, offset, sizes, strides)                                           \
  "Unranked Memref base@ = BASE rank = " #rank " offset = " #offset " sizes = [" sizes \
  "] strides = [" strides "] data = \n"

static void test_ranks(void) {
  float f32[8] = {1.5f, 2, 3, 4, 5, 6, 7, 8};
  memref0 m0 = {f32, f32, 0};
  EXPECT_STDOUT(printMemrefF32(0, &m0), HEADER(0, 0, "", "") "[1.5]\n");

  int32_t i32[3] = {1, 2, 3};
  memref1 m1 = {i32, i32, 0, {3}, {1}};
  EXPECT_STDOUT(printMemrefI32(1, &m1), HEADER(1, 0, "3", "1") "[1,  2,  3]\n");
  memref1 single = {i32, i32, 2, {1}, {1}};
  EXPECT_STDOUT(printMemrefI32(1, &single), HEADER(1, 2, "1", "1") "[3]\n");

  int64_t i64[6] = {1, 2, 3, 4, 5, 6};
  memref2 m2 = {i64, i64, 0, {2, 3}, {3, 1}};
  EXPECT_STDOUT(printMemrefI64(2, &m2),
                HEADER(2, 0, "2, 3", "3, 1") "[[1,   2,   3], \n [4,   5,   6]]\n");

  double f64[8] = {0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5};
  memref3 m3 = {f64, f64, 0, {2, 2, 2}, {4, 2, 1}};
  EXPECT_STDOUT(printMemrefF64(3, &m3),
                HEADER(3, 0, "2, 2, 2", "4, 2, 1")
                "[[[0,    0.5], \n  [1,    1.5]], \n [[2,    2.5], \n  [3,    3.5]]]\n");

  /* Offset and strides are honoured (a transposed, shifted view). */
  memref2 view = {f32, f32, 1, {2, 3}, {1, 2}};
  EXPECT_STDOUT(printMemrefF32(2, &view),
                HEADER(2, 1, "2, 3", "1, 2") "[[2,   4,   6], \n [3,   5,   7]]\n");
  /* Size-1 dimensions and an empty one. */
  memref3 ones = {f32, f32, 0, {1, 1, 2}, {2, 2, 1}};
  EXPECT_STDOUT(printMemrefF32(3, &ones), HEADER(3, 0, "1, 1, 2", "2, 2, 1") "[[[1.5,    2]]]\n");
  memref1 empty = {NULL, NULL, 0, {0}, {1}};
  EXPECT_STDOUT(printMemrefF32(1, &empty),
                "Unranked Memref base@ = 0 rank = 1 offset = 0 sizes = [0] strides = [1] "
                "data = \n[]\n");
}

static void test_element_types(void) {
  int8_t i8[2] = {'a', 'b'};
  memref1 m8 = {i8, i8, 0, {2}, {1}};
  EXPECT_STDOUT(printMemrefI8(1, &m8), HEADER(1, 0, "2", "1") "[a,  b]\n");

  int16_t i16[2] = {-5, 32767};
  memref1 m16 = {i16, i16, 0, {2}, {1}};
  EXPECT_STDOUT(printMemrefI16(1, &m16), HEADER(1, 0, "2", "1") "[-5,  32767]\n");

  int32_t i32[2] = {INT32_MIN, -1};
  memref1 m32 = {i32, i32, 0, {2}, {1}};
  EXPECT_STDOUT(printMemrefI32(1, &m32), HEADER(1, 0, "2", "1") "[-2147483648,  -1]\n");

  int64_t i64[2] = {INT64_MIN, 42};
  memref1 m64 = {i64, i64, 0, {2}, {1}};
  EXPECT_STDOUT(printMemrefI64(1, &m64), HEADER(1, 0, "2", "1") "[-9223372036854775808,  42]\n");

  uint64_t ind[2] = {UINT64_MAX, 7};
  memref1 mind = {ind, ind, 0, {2}, {1}};
  EXPECT_STDOUT(printMemrefInd(1, &mind), HEADER(1, 0, "2", "1") "[18446744073709551615,  7]\n");

  uint16_t f16[5] = {0x3c00, 0x3e00, 0xfc00, 0x7e00, 0x0001}; /* 1, 1.5, -inf, nan, 2^-24 */
  memref1 mf16 = {f16, f16, 0, {5}, {1}};
  EXPECT_STDOUT(printMemrefF16(1, &mf16),
                HEADER(1, 0, "5", "1") "[1,  1.5,  -inf,  nan,  5.96046e-08]\n");

  uint16_t bf16[3] = {0x3f80, 0x4049, 0x8000}; /* 1, 3.140625, -0 */
  memref1 mbf16 = {bf16, bf16, 0, {3}, {1}};
  EXPECT_STDOUT(printMemrefBF16(1, &mbf16), HEADER(1, 0, "3", "1") "[1,  3.14062,  -0]\n");

  float f32[6] = {1e6f, 7.14f, -0.0f, 1.015625f, 0.1f, 123456789.0f};
  memref1 mf32 = {f32, f32, 0, {6}, {1}};
  EXPECT_STDOUT(printMemrefF32(1, &mf32),
                HEADER(1, 0, "6", "1") "[1e+06,  7.14,  -0,  1.01562,  0.1,  1.23457e+08]\n");

  double f64[3] = {1.0 / 3, 1e-300, 2.5};
  memref1 mf64 = {f64, f64, 0, {3}, {1}};
  EXPECT_STDOUT(printMemrefF64(1, &mf64), HEADER(1, 0, "3", "1") "[0.333333,  1e-300,  2.5]\n");

  float c32[4] = {1, -2, 0.5f, 3};
  memref1 mc32 = {c32, c32, 0, {2}, {1}};
  EXPECT_STDOUT(printMemrefC32(1, &mc32), HEADER(1, 0, "2", "1") "[(1,-2),  (0.5,3)]\n");

  double c64[2] = {0.5, 1e10};
  memref0 mc64 = {c64, c64, 0};
  EXPECT_STDOUT(printMemrefC64(0, &mc64), HEADER(0, 0, "", "") "[(0.5,1e+10)]\n");
}

static void test_interfaces(void) {
  float f32[4] = {1, 2, 3, 4};
  memref2 m2 = {f32, f32, 0, {2, 2}, {2, 1}};
  wavert_unranked_memref u = {2, &m2};
  EXPECT_STDOUT(_mlir_ciface_printMemrefF32(&u),
                HEADER(2, 0, "2, 2", "2, 1") "[[1,   2], \n [3,   4]]\n");
  EXPECT_STDOUT(_mlir_ciface_printMemref2dF32(&m2),
                "Memref base@ = BASE rank = 2 offset = 0 sizes = [2, 2] strides = [2, 1] data = \n"
                "[[1,   2], \n [3,   4]]\n");
  memref0 m0 = {f32, f32, 3};
  EXPECT_STDOUT(_mlir_ciface_printMemref0dF32(&m0),
                "Memref base@ = BASE rank = 0 offset = 3 sizes = [] strides = [] data = \n[4]\n");
  int32_t i32[2] = {9, 8};
  memref1 m1 = {i32, i32, 0, {2}, {1}};
  EXPECT_STDOUT(_mlir_ciface_printMemref1dI32(&m1),
                "Memref base@ = BASE rank = 1 offset = 0 sizes = [2] strides = [1] data = \n"
                "[9,  8]\n");
  wavert_unranked_memref u1 = {1, &m1};
  EXPECT_STDOUT(_mlir_ciface_printMemrefShapeI32(&u1),
                "Unranked Memref base@ = BASE rank = 1 offset = 0 sizes = [2] strides = [1]\n");
  EXPECT_STDOUT(_mlir_ciface_printMemrefI32(&u1), HEADER(1, 0, "2", "1") "[9,  8]\n");
}

static void test_vector_print(void) {
  EXPECT_STDOUT((printOpen(), printI64(1), printComma(), printI64(-2), printComma(),
                 printI64(3), printClose(), printNewline()),
                "( 1, -2, 3 )\n");
  EXPECT_STDOUT((printOpen(), printOpen(), printF32(1.5f), printComma(), printF32(2),
                 printClose(), printComma(), printOpen(), printF32(-0.0f), printComma(),
                 printF32(1e-7f), printClose(), printClose(), printNewline()),
                "( ( 1.5, 2 ), ( -0, 1e-07 ) )\n");
  EXPECT_STDOUT((printU64(UINT64_MAX), printNewline(), printI64(INT64_MIN), printNewline()),
                "18446744073709551615\n-9223372036854775808\n");
  EXPECT_STDOUT((printF32(1.0f / 3), printNewline(), printF64(1e100), printNewline(),
                 printF64(7.14), printNewline()),
                "0.333333\n1e+100\n7.14\n");
  EXPECT_STDOUT((printF16(0x3c00), printComma(), printF16(0xc500), printComma(),
                 printF16(0x7c00), printComma(), printBF16(0x3f80), printComma(),
                 printBF16(0xc2f7), printNewline()),
                "1, -5, inf, 1, -123.5\n");
  EXPECT_STDOUT((printString("Correct Results :"), printI64(8192), printNewline()),
                "Correct Results :8192\n");
  EXPECT_STDOUT(printCString("text\n"), "text\n");
  EXPECT_STDERR(printFlops(2.5e9), "2.500000 GFLOPS\n");
  double t0 = rtclock();
  int64_t n0 = _mlir_ciface_nanoTime();
  CHECK(t0 > 1.5e9 && n0 > 1500000000LL * 1000000000LL / 1000000000LL);
  CHECK(_mlir_ciface_nanoTime() >= n0);
}

static void test_verify(void) {
  float a[4] = {1, 1.5f, 3, 4}, e[4] = {1, 2, 3, 4.000001f};
  memref1 ma = {a, a, 0, {4}, {1}}, me = {e, e, 0, {4}, {1}};
  int64_t errors = -2;
  EXPECT_STDERR(errors = verifyMemRefF32(1, &ma, &me), "1.5 != 2 offset = 1\n");
  CHECK(errors == 1);
  EXPECT_STDERR(errors = verifyMemRefF32(1, &ma, &ma), "");
  CHECK(errors == 0);
  memref1 shorter = {e, e, 0, {3}, {1}};
  EXPECT_STDERR(errors = verifyMemRefF32(1, &ma, &shorter),
                "base@ = BASE rank = 1 offset = 0 sizes = [4] strides = [1]"
                "base@ = BASE rank = 1 offset = 0 sizes = [3] strides = [1]");
  CHECK(errors == -1);
  int32_t ia[12] = {0}, ie[12] = {0};
  for (int i = 0; i < 12; ++i) ie[i] = i + 1;
  memref1 mia = {ia, ia, 0, {12}, {1}}, mie = {ie, ie, 0, {12}, {1}};
  wavert_unranked_memref ua = {1, &mia}, ue = {1, &mie};
  EXPECT_STDERR(errors = _mlir_ciface_verifyMemRefI32(&ua, &ue),
                "0 != 1 offset = 0\n0 != 2 offset = 1\n0 != 3 offset = 2\n0 != 4 offset = 3\n"
                "0 != 5 offset = 4\n0 != 6 offset = 5\n0 != 7 offset = 6\n0 != 8 offset = 7\n"
                "0 != 9 offset = 8\n0 != 10 offset = 9\n"); /* at most 10 printed */
  CHECK(errors == 12);
  double nan_value[1] = {NAN};
  memref1 mn = {nan_value, nan_value, 0, {1}, {1}};
  EXPECT_STDERR(errors = verifyMemRefF64(1, &mn, &mn), "nan != nan offset = 0\n");
  CHECK(errors == 1);
}

static void test_memref_copy(void) {
  int32_t source[6] = {1, 2, 3, 4, 5, 6}, target[6] = {0};
  memref2 src = {source, source, 0, {3, 2}, {1, 3}}; /* the transpose of a 2x3 */
  memref2 dst = {target, target, 0, {3, 2}, {2, 1}};
  wavert_unranked_memref us = {2, &src}, ud = {2, &dst};
  memrefCopy(4, &us, &ud);
  const int32_t expected[6] = {1, 4, 2, 5, 3, 6};
  CHECK(memcmp(target, expected, sizeof(target)) == 0);
  memref0 s0 = {source, source, 5}, d0 = {target, target, 0};
  wavert_unranked_memref u0s = {0, &s0}, u0d = {0, &d0};
  memrefCopy(4, &u0s, &u0d);
  CHECK(target[0] == 6);
  memref2 none = {source, source, 0, {0, 2}, {2, 1}};
  wavert_unranked_memref un = {2, &none};
  memrefCopy(4, &un, &ud); /* empty: nothing written */
  CHECK(target[0] == 6);
}

int main(void) {
  test_ranks();
  test_element_types();
  test_interfaces();
  test_vector_print();
  test_verify();
  test_memref_copy();
  if (failures != 0) {
    fprintf(stderr, "test_runner: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_runner: ok\n");
  return 0;
}
