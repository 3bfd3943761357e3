/* test_runner.c — the runner utilities' exact output (libwavert_runner): printMemref* for every
 * element type and ranks 0-3 (unranked, C-interface and ranked forms), the shape printers, the
 * vector.print helpers (printApFloat too), verifyMemRef* (stderr) for every element type,
 * memrefCopy, the allocation functions, the random numbers (the sequences libstdc++'s
 * std::mt19937 / uniform_int_distribution / shuffle give, noted from g++ 12) and stdSort*. Expected strings are written
 * from MLIR's formats (runner_formats.md); "base@ = 0x..." is masked as "base@ = BASE". */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
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

static void test_more_printers(void) {
  float v[32];
  for (int i = 0; i < 32; ++i) v[i] = (float)(i + 1);
  memref2 mv = {v, v, 0, {1, 2}, {2, 1}};
  EXPECT_STDOUT(_mlir_ciface_printMemrefVector4x4xf32(&mv),
                "Memref base@ = BASE rank = 2 offset = 0 sizes = [1, 2] strides = [2, 1] data = \n"
                "[[((1, 2, 3, 4),   (5, 6, 7, 8),   (9, 10, 11, 12),  (13, 14, 15, 16)),   "
                "((17, 18, 19, 20),   (21, 22, 23, 24),   (25, 26, 27, 28),  (29, 30, 31, 32))]]\n");
  uint16_t h[2] = {0x3c00, 0};
  memref1 mh = {h, h, 1, {1}, {1}};
  wavert_unranked_memref uh = {1, &mh};
  EXPECT_STDOUT(_mlir_ciface_printMemrefShapeF16(&uh),
                "Unranked Memref base@ = BASE rank = 1 offset = 1 sizes = [1] strides = [1]\n");
  EXPECT_STDOUT(_mlir_ciface_printMemrefShapeBF16(&uh),
                "Unranked Memref base@ = BASE rank = 1 offset = 1 sizes = [1] strides = [1]\n");
  EXPECT_STDOUT(_mlir_ciface_printMemrefShapeI16(&uh),
                "Unranked Memref base@ = BASE rank = 1 offset = 1 sizes = [1] strides = [1]\n");
  memref0 m0 = {h, h, 0};
  wavert_unranked_memref u0 = {0, &m0};
  EXPECT_STDOUT(_mlir_ciface_printMemrefShapeF64(&u0),
                "Unranked Memref base@ = BASE rank = 0 offset = 0 sizes = [] strides = []\n");
}

static void test_apfloat(void) {
  /* (semantics, bits) as vector.print passes them; each printed with %lg. */
  EXPECT_STDOUT((printApFloat(10, 0x3c), printComma(), printApFloat(10, 0x7e), printComma(),
                 printApFloat(10, 0x7f), printComma(), printApFloat(10, 0xff), printComma(),
                 printApFloat(10, 0x01), printComma(), printApFloat(10, 0xff3c)),
                "1.5, 448, nan, -nan, 0.00195312, 1.5"); /* f8E4M3FN; high bits ignored */
  EXPECT_STDOUT((printApFloat(7, 0x3c), printComma(), printApFloat(7, 0x7c), printComma(),
                 printApFloat(7, 0xfc), printComma(), printApFloat(7, 0x7e), printComma(),
                 printApFloat(7, 0x80)),
                "1, inf, -inf, nan, -0"); /* f8E5M2 */
  EXPECT_STDOUT((printApFloat(8, 0x40), printComma(), printApFloat(8, 0x80), printComma(),
                 printApFloat(11, 0x40), printComma(), printApFloat(11, 0x80), printComma(),
                 printApFloat(12, 0x58), printComma(), printApFloat(9, 0x38), printComma(),
                 printApFloat(9, 0x78), printComma(), printApFloat(13, 0x30)),
                "1, nan, 1, nan, 1, 1, inf, 1"); /* FNUZ types, f8E4M3, f8E3M4 */
  EXPECT_STDOUT((printApFloat(15, 0x7f), printComma(), printApFloat(15, 0x80), printComma(),
                 printApFloat(15, 0x00), printComma(), printApFloat(15, 0xff)),
                "1, 2, 5.87747e-39, inf"); /* f8E8M0FNU: its NaN converts to +inf upstream */
  EXPECT_STDOUT((printApFloat(18, 0x7), printComma(), printApFloat(18, 0xf), printComma(),
                 printApFloat(18, 0x1), printComma(), printApFloat(17, 0x1f), printComma(),
                 printApFloat(16, 0x1f), printComma(), printApFloat(16, 0x20)),
                "6, -6, 0.5, 7.5, 28, -0"); /* f4E2M1FN, f6E2M3FN, f6E3M2FN */
  EXPECT_STDOUT((printApFloat(0, 0x3c00), printComma(), printApFloat(1, 0x3f80), printComma(),
                 printApFloat(2, 0x40490fdb), printComma(),
                 printApFloat(3, UINT64_C(0x4000000000000000)), printComma(),
                 printApFloat(14, 0x1fc00)),
                "1, 1, 3.14159, 2, 1"); /* half, bfloat, single, double, tf32 */
  EXPECT_STDERR(printApFloat(5, 0), "printApFloat: floating-point semantics 5 is not supported\n");
}

static void test_verify_types(void) {
  int64_t errors = -2;
  int8_t a8[3] = {'a', 'b', 'c'}, e8[3] = {'a', 'x', 'c'};
  memref1 ma8 = {a8, a8, 0, {3}, {1}}, me8 = {e8, e8, 0, {3}, {1}};
  EXPECT_STDERR(errors = verifyMemRefI8(1, &ma8, &me8), "b != x offset = 1\n");
  CHECK(errors == 1);
  int16_t a16[2] = {-3, 7}, e16[2] = {-3, 7};
  memref1 ma16 = {a16, a16, 0, {2}, {1}}, me16 = {e16, e16, 0, {2}, {1}};
  EXPECT_STDERR(errors = verifyMemRefI16(1, &ma16, &me16), "");
  CHECK(errors == 0);
  e16[0] = 3;
  EXPECT_STDERR(errors = verifyMemRefI16(1, &ma16, &me16), "-3 != 3 offset = 0\n");
  CHECK(errors == 1);
  int64_t a64[4] = {1, 2, 3, 4}, e64[4] = {1, 2, 30, 40};
  memref2 ma64 = {a64, a64, 0, {2, 2}, {2, 1}}, me64 = {e64, e64, 0, {2, 2}, {2, 1}};
  wavert_unranked_memref ua64 = {2, &ma64}, ue64 = {2, &me64};
  EXPECT_STDERR(errors = _mlir_ciface_verifyMemRefI64(&ua64, &ue64),
                "3 != 30 offset = 2\n4 != 40 offset = 3\n");
  CHECK(errors == 2);
  uint16_t ah[3] = {0x3c00, 0x8000, 0x7e00}, eh[3] = {0x3c00, 0x0000, 0x7e00};
  memref1 mah = {ah, ah, 0, {3}, {1}}, meh = {eh, eh, 0, {3}, {1}};
  EXPECT_STDERR(errors = verifyMemRefF16(1, &mah, &meh), "nan != nan offset = 2\n");
  CHECK(errors == 1); /* -0 == 0; a NaN never matches */
  uint16_t ab[2] = {0x3f80, 0x4000}, eb[2] = {0x3f80, 0x4040};
  memref1 mab = {ab, ab, 0, {2}, {1}}, meb = {eb, eb, 0, {2}, {1}};
  wavert_unranked_memref uab = {1, &mab}, ueb = {1, &meb};
  EXPECT_STDERR(errors = _mlir_ciface_verifyMemRefBF16(&uab, &ueb), "2 != 3 offset = 1\n");
  CHECK(errors == 1);
  uint64_t ai[2] = {5, UINT64_MAX}, ei[2] = {5, 0};
  memref1 mai = {ai, ai, 0, {2}, {1}}, mei = {ei, ei, 0, {2}, {1}};
  EXPECT_STDERR(errors = verifyMemRefInd(1, &mai, &mei),
                "18446744073709551615 != 0 offset = 1\n");
  CHECK(errors == 1);
  double ac[2] = {1, 2}, ec[2] = {1, -2};
  memref0 mac = {ac, ac, 0}, mec = {ec, ec, 0};
  EXPECT_STDERR(errors = verifyMemRefC64(0, &mac, &mec), "(1,2) != (1,-2) offset = 0\n");
  CHECK(errors == 1);
  /* Rank 0: upstream compares no header, so differing offsets still compare elements (at
   * the actual offset in both). */
  float af[2] = {1, 2}, ef[2] = {1, 5};
  memref0 maf = {af, af, 1}, mef = {ef, ef, 0};
  EXPECT_STDERR(errors = verifyMemRefF32(0, &maf, &mef), "2 != 5 offset = 1\n");
  CHECK(errors == 1);
  /* A differing offset at rank 1 is a shape mismatch. */
  memref1 off_a = {af, af, 1, {1}, {1}}, off_e = {ef, ef, 0, {1}, {1}};
  EXPECT_STDERR(errors = verifyMemRefF32(1, &off_a, &off_e),
                "base@ = BASE rank = 1 offset = 1 sizes = [1] strides = [1]"
                "base@ = BASE rank = 1 offset = 0 sizes = [1] strides = [1]");
  CHECK(errors == -1);
}

static void test_alloc_random_sort(void) {
  void *p = mlirAlloc(24);
  CHECK(p != NULL);
  mlirFree(p);
  void *q = mlirAlignedAlloc(64, 128);
  CHECK(q != NULL && ((uintptr_t)q % 64) == 0);
  mlirAlignedFree(q);

  /* std::mt19937(42) through std::uniform_int_distribution<uint64_t>(0, m) for each m:
   * every branch of libstdc++'s algorithm (below 2^32 - 1, equal, above). */
  const uint64_t bounds[9] = {0, 1, 6, 100, UINT64_C(0xfffffffe), UINT64_C(0xffffffff),
                              UINT64_C(0x100000000), UINT64_MAX, 1000000};
  const uint64_t drawn[9] = {0, 1, 6, 18, 3143890025u, 3348747335u, 1914837113u,
                             UINT64_C(2877591057541362902), 58083};
  void *g = rtsrand(42);
  CHECK(g != NULL);
  for (int i = 0; i < 9; ++i) {
    uint64_t value = rtrand(g, bounds[i]);
    if (value != drawn[i]) {
      fprintf(stderr, "test_runner.c: rtrand(g, %" PRIu64 ") = %" PRIu64 ", expected %" PRIu64
              "\n", bounds[i], value, drawn[i]);
      failures += 1;
    }
  }
  rtdrand(g);

  /* std::shuffle of 0..n-1 with std::mt19937(7): the paired draws (n * n < 2^32) with an odd
   * and an even n, and the single draws (n = 70000), checked through a hash. */
  const uint64_t lengths[5] = {1, 2, 7, 10, 70000};
  const uint64_t hashes[5] = {0, 31, 2663500041u, UINT64_C(59021690633805),
                              UINT64_C(12260056449843562224)};
  uint64_t *values = malloc(70000 * sizeof(*values));
  for (int k = 0; k < 5; ++k) {
    void *h = rtsrand(7);
    wavert_memref_1d m = {values, values, 0, {(int64_t)lengths[k]}, {1}};
    _mlir_ciface_shuffle(&m, h);
    rtdrand(h);
    uint64_t hash = 0;
    for (uint64_t i = 0; i < lengths[k]; ++i) hash = hash * 31 + values[i];
    if (hash != hashes[k]) {
      fprintf(stderr, "test_runner.c: shuffle of %" PRIu64 ": hash %" PRIu64 ", expected %" PRIu64
              "\n", lengths[k], hash, hashes[k]);
      failures += 1;
    }
    if (lengths[k] == 7) {
      const uint64_t expected[7] = {3, 0, 1, 2, 6, 4, 5};
      CHECK(memcmp(values, expected, sizeof(expected)) == 0);
    }
  }
  free(values);

  int64_t i64[6] = {99, 5, -3, 7, 0, -100};
  wavert_memref_1d mi = {i64, i64, 1, {5}, {1}};
  _mlir_ciface_stdSortI64(4, &mi); /* elements 1..4 only */
  const int64_t sorted_i64[6] = {99, -3, 0, 5, 7, -100};
  CHECK(memcmp(i64, sorted_i64, sizeof(i64)) == 0);
  double f64[4] = {2.5, -1, 1e300, 0.5};
  wavert_memref_1d md = {f64, f64, 0, {4}, {1}};
  _mlir_ciface_stdSortF64(4, &md);
  CHECK(f64[0] == -1 && f64[1] == 0.5 && f64[2] == 2.5 && f64[3] == 1e300);
  float f32[3] = {3, -INFINITY, 1};
  wavert_memref_1d mf = {f32, f32, 0, {3}, {1}};
  _mlir_ciface_stdSortF32(3, &mf);
  CHECK(f32[0] == -INFINITY && f32[1] == 1 && f32[2] == 3);
}

int main(void) {
  test_ranks();
  test_element_types();
  test_interfaces();
  test_vector_print();
  test_verify();
  test_memref_copy();
  test_more_printers();
  test_apfloat();
  test_verify_types();
  test_alloc_random_sort();
  if (failures != 0) {
    fprintf(stderr, "test_runner: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_runner: ok\n");
  return 0;
}
