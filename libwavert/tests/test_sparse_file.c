/* test_sparse_file.c — MLIR's sparse tensor file reader (wavert_sparse_file.h) on files written
 * here: Matrix Market (general and symmetric; real, integer, complex and pattern fields;
 * comments, blank lines, CRLF) and extended FROSTT, read into every overhead width and value
 * type the sparsifier uses, through permuted and blocked level maps; and hostile files
 * (wrong headers, unsupported fields, overflowing or huge sizes, out-of-range and negative
 * coordinates, truncated and over-long lines, values that do not fit) that must each give a
 * recorded error naming the problem, never a crash or a read outside a buffer (the test runs
 * under ASan + UBSan in CI). A host call (on fake_cuda's device) records the first error. */
#define _DEFAULT_SOURCE /* mkdtemp, setenv */
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"
#include "wavert_jit.h"
#include "wavert_sparse_file.h"

static char folder[] = "/tmp/wavert-sparse-file-XXXXXX";
static char paths[256][128]; /* every file written, removed at the end */
static int files;

/* Write `size` bytes of `text` to a fresh file named `name` in the folder; its path. */
static char *write_bytes(const char *name, const char *text, size_t size) {
  CHECK(files < 256);
  char *path = paths[files];
  snprintf(path, sizeof(paths[0]), "%s/%d-%s", folder, files, name);
  files += 1;
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  CHECK(fwrite(text, 1, size, f) == size);
  CHECK(fclose(f) == 0);
  return path;
}

static char *write_file(const char *name, const char *text) {
  return write_bytes(name, text, strlen(text));
}

static wavert_memref_1d memref(void *data, int64_t size) {
  wavert_memref_1d m = {data, data, 0, {size}, {1}};
  return m;
}

/* A reader of `file` for a tensor of `rank` dynamic dimensions, of element type `type`. */
static void *open_dynamic(char *file, int64_t rank, uint32_t type) {
  uint64_t shape[8] = {0};
  wavert_memref_1d s = memref(shape, rank);
  return _mlir_ciface_createCheckedSparseTensorReader(file, &s, type);
}

/* The last error names `text`; then cleared (outside a call the first error is kept). */
static void expect_error(const char *text) {
  CHECK(wavert_last_status() == WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE(text);
  wavert_clear_error();
}

/* Opening `text` (as `name`) for `rank` dynamic dimensions of `type` fails naming `message`. */
static void expect_open_error(const char *name, const char *text, int64_t rank, uint32_t type,
                              const char *message) {
  CHECK(open_dynamic(write_file(name, text), rank, type) == NULL);
  expect_error(message);
}

/* An identity level map of `rank` levels. */
static wavert_memref_1d identity(uint64_t *storage, int64_t rank) {
  for (int64_t l = 0; l < rank; ++l) storage[l] = (uint64_t)l;
  return memref(storage, rank);
}

/* Reading the entries of `text` (a rank-2 .mtx read as f64 with index coordinates) fails
 * naming `message`; the reader is then released without an error. */
static void expect_read_error(const char *text, const char *message) {
  void *r = open_dynamic(write_file("bad.mtx", text), 2, WAVERT_SPARSE_F64);
  CHECK(r != NULL);
  uint64_t map[2], crd[16];
  double val[8];
  memset(crd, 0x55, sizeof(crd));
  memset(val, 0x55, sizeof(val));
  wavert_memref_1d m = identity(map, 2), c = memref(crd, 16), v = memref(val, 8);
  CHECK(!_mlir_ciface_getSparseTensorReaderReadToBuffers0F64(r, &m, &m, &c, &v));
  expect_error(message);
  /* The NSE entries the header announced are zeros (the rest of the buffers untouched). */
  const uint64_t nse = getSparseTensorReaderNSE(r);
  for (uint64_t i = 0; i < 16; ++i) CHECK(crd[i] == (i < 2 * nse ? 0 : 0x5555555555555555u));
  for (uint64_t i = 0; i < nse; ++i) CHECK(val[i] == 0);
  delSparseTensorReader(r);
  CHECK(wavert_last_status() == WAVERT_OK);
}

static void test_general_real(void) {
  char *file = write_file("a.mtx",
      "%%MatrixMarket Matrix Coordinate REAL General\r\n"
      "% a comment\r\n"
      "\r\n"
      "%another\n"
      "  3 4   5\n"
      "1 1 1.5\n"
      "1 4 -2e3\n"
      "\n"
      "2 2 0.25\r\n"
      "3 1 7\n"
      "3 3 -0.0\n"
      "% trailing comment\n\n");
  uint64_t shape[2] = {3, 0}; /* one static, one dynamic */
  wavert_memref_1d s = memref(shape, 2);
  void *r = _mlir_ciface_createCheckedSparseTensorReader(file, &s, WAVERT_SPARSE_F64);
  CHECK(r != NULL);
  CHECK(getSparseTensorReaderDimRank(r) == 2);
  CHECK(getSparseTensorReaderNSE(r) == 5);
  CHECK(!getSparseTensorReaderIsSymmetric(r));
  wavert_memref_1d dims = {0};
  _mlir_ciface_getSparseTensorReaderDimSizes(&dims, r);
  CHECK(dims.sizes[0] == 2 && dims.strides[0] == 1 && dims.offset == 0);
  CHECK(((uint64_t *)dims.aligned)[0] == 3 && ((uint64_t *)dims.aligned)[1] == 4);
  uint64_t map[2], crd[10];
  double val[5];
  wavert_memref_1d m = identity(map, 2), c = memref(crd, 10), v = memref(val, 5);
  CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers0F64(r, &m, &m, &c, &v));
  const uint64_t want_crd[10] = {0, 0, 0, 3, 1, 1, 2, 0, 2, 2};
  const double want_val[5] = {1.5, -2000, 0.25, 7, -0.0};
  CHECK(memcmp(crd, want_crd, sizeof(crd)) == 0);
  CHECK(memcmp(val, want_val, sizeof(val)) == 0 && signbit(val[4]));
  /* The dimension sizes stay readable after the entries, until the reader is released. */
  CHECK(((uint64_t *)dims.aligned)[1] == 4);
  /* Once only. */
  CHECK(!_mlir_ciface_getSparseTensorReaderReadToBuffers0F64(r, &m, &m, &c, &v));
  expect_error("were read already");
  delSparseTensorReader(r);
  CHECK(wavert_last_status() == WAVERT_OK);
}

static void test_order_and_maps(void) {
  const char *text =
      "%%MatrixMarket matrix coordinate real general\n"
      "4 6 4\n"
      "1 2 1\n"
      "2 1 2\n"
      "3 6 3\n"
      "4 5 4\n";
  /* Row-major: sorted. */
  uint64_t map[4], crd[16];
  float val[4];
  void *r = open_dynamic(write_file("m.mtx", text), 2, WAVERT_SPARSE_F32);
  wavert_memref_1d m = identity(map, 2), c = memref(crd, 8), v = memref(val, 4);
  CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers0F32(r, &m, &m, &c, &v));
  delSparseTensorReader(r);
  /* Transposed levels (CSC): level 0 is dimension 1; no longer sorted. */
  r = open_dynamic(write_file("m.mtx", text), 2, WAVERT_SPARSE_F32);
  map[0] = 1;
  map[1] = 0;
  uint32_t crd32[8];
  c = memref(crd32, 8);
  CHECK(!_mlir_ciface_getSparseTensorReaderReadToBuffers32F32(r, &m, &m, &c, &v));
  CHECK(wavert_last_status() == WAVERT_OK); /* unsorted, not failed */
  const uint32_t want_t[8] = {1, 0, 0, 1, 5, 2, 4, 3};
  CHECK(memcmp(crd32, want_t, sizeof(want_t)) == 0);
  CHECK(val[0] == 1 && val[3] == 4);
  delSparseTensorReader(r);
  /* 2x2 blocks (BSR): i floordiv 2, j floordiv 2, i mod 2, j mod 2. */
  r = open_dynamic(write_file("m.mtx", text), 2, WAVERT_SPARSE_F32);
  const uint64_t floor2 = UINT64_C(1) << 60 | 2 << 20, mod2 = UINT64_C(2) << 60 | 2 << 20;
  map[0] = floor2 | 0;
  map[1] = floor2 | 1;
  map[2] = mod2 | 0;
  map[3] = mod2 | 1;
  m = memref(map, 4);
  c = memref(crd, 16);
  CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers64F32(r, &m, &m, &c, &v));
  /* (0,1) -> (0,0,0,1); (1,0) -> (0,0,1,0); (2,5) -> (1,2,0,1); (3,4) -> (1,2,1,0): sorted. */
  const uint64_t want_b[16] = {0, 0, 0, 1, 0, 0, 1, 0, 1, 2, 0, 1, 1, 2, 1, 0};
  CHECK(memcmp(crd, want_b, sizeof(want_b)) == 0);
  delSparseTensorReader(r);
  /* A level coordinate beyond 8-bit coordinates. */
  r = open_dynamic(write_file("w.mtx", "%%MatrixMarket matrix coordinate real general\n"
                                       "300 2 1\n300 1 1\n"), 2, WAVERT_SPARSE_F32);
  uint8_t crd8[2];
  m = identity(map, 2);
  c = memref(crd8, 2);
  CHECK(!_mlir_ciface_getSparseTensorReaderReadToBuffers8F32(r, &m, &m, &c, &v));
  expect_error("level coordinate 299 does not fit 1-byte coordinates");
  delSparseTensorReader(r);
  /* Bad level maps. */
  const uint64_t bad_maps[][2] = {{0, 2}, {UINT64_C(3) << 60, 1}, {UINT64_C(1) << 60, 1},
                                  {floor2 | UINT64_C(1) << 40, 1}};
  for (size_t k = 0; k < sizeof(bad_maps) / sizeof(bad_maps[0]); ++k) {
    r = open_dynamic(write_file("m.mtx", text), 2, WAVERT_SPARSE_F32);
    memcpy(map, bad_maps[k], sizeof(bad_maps[k]));
    m = memref(map, 2);
    c = memref(crd, 8);
    CHECK(!_mlir_ciface_getSparseTensorReaderReadToBuffers0F32(r, &m, &m, &c, &v));
    expect_error("is not a level of a rank-2 tensor");
    delSparseTensorReader(r);
  }
  /* Buffers too small, a NULL map, a strided buffer. */
  r = open_dynamic(write_file("m.mtx", text), 2, WAVERT_SPARSE_F32);
  m = identity(map, 2);
  c = memref(crd, 7);
  CHECK(!_mlir_ciface_getSparseTensorReaderReadToBuffers0F32(r, &m, &m, &c, &v));
  expect_error("the coordinates memref has 7 elements; 8 are needed");
  delSparseTensorReader(r);
  r = open_dynamic(write_file("m.mtx", text), 2, WAVERT_SPARSE_F32);
  c = memref(crd, 8);
  v = memref(val, 3);
  CHECK(!_mlir_ciface_getSparseTensorReaderReadToBuffers0F32(r, &m, &m, &c, &v));
  expect_error("the values memref has 3 elements; 4 are needed");
  delSparseTensorReader(r);
  r = open_dynamic(write_file("m.mtx", text), 2, WAVERT_SPARSE_F32);
  CHECK(!_mlir_ciface_getSparseTensorReaderReadToBuffers0F32(r, NULL, NULL, &c, &v));
  expect_error("dim2lvl memref must have 1..64 elements");
  delSparseTensorReader(r);
  r = open_dynamic(write_file("m.mtx", text), 2, WAVERT_SPARSE_F32);
  v = memref(val, 4);
  c.strides[0] = 2;
  CHECK(!_mlir_ciface_getSparseTensorReaderReadToBuffers0F32(r, &m, &m, &c, &v));
  expect_error("is not a compact buffer");
  delSparseTensorReader(r);
}

static void test_symmetric_integer_pattern_complex(void) {
  uint64_t map[2], crd[8];
  wavert_memref_1d m = identity(map, 2), c = memref(crd, 8);
  /* Symmetric: read as stored, flagged. */
  void *r = open_dynamic(write_file("s.mtx", "%%MatrixMarket matrix coordinate integer symmetric\n"
                                             "3 3 3\n1 1 5\n3 1 -6\n3 2 9223372036854775807\n"),
                         2, WAVERT_SPARSE_I64);
  CHECK(r != NULL && getSparseTensorReaderIsSymmetric(r));
  int64_t i64[3];
  wavert_memref_1d v = memref(i64, 3);
  CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers0I64(r, &m, &m, &c, &v));
  CHECK(i64[0] == 5 && i64[1] == -6 && i64[2] == INT64_MAX); /* exact, not through a double */
  CHECK(crd[2] == 2 && crd[3] == 0 && crd[4] == 2 && crd[5] == 1);
  delSparseTensorReader(r);
  /* Integer values as i8 (fits) and as f16 / bf16 (rounded bit patterns). */
  const char *small = "%%MatrixMarket matrix coordinate integer general\n2 2 2\n1 1 -128\n2 2 3\n";
  r = open_dynamic(write_file("i.mtx", small), 2, WAVERT_SPARSE_I8);
  int8_t i8[2];
  v = memref(i8, 2);
  CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers16I8(r, &m, &m, &c, &v));
  CHECK(i8[0] == -128 && i8[1] == 3);
  delSparseTensorReader(r);
  r = open_dynamic(write_file("i.mtx", "%%MatrixMarket matrix coordinate integer general\n"
                                       "2 2 1\n1 1 128\n"), 2, WAVERT_SPARSE_I8);
  CHECK(!_mlir_ciface_getSparseTensorReaderReadToBuffers0I8(r, &m, &m, &c, &v));
  expect_error("the value does not fit i8");
  delSparseTensorReader(r);
  r = open_dynamic(write_file("h.mtx", "%%MatrixMarket matrix coordinate real general\n"
                                       "2 2 2\n1 1 1.5\n2 2 -2\n"), 2, WAVERT_SPARSE_F16);
  uint16_t h[2];
  v = memref(h, 2);
  CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers0F16(r, &m, &m, &c, &v));
  CHECK(h[0] == 0x3E00 && h[1] == 0xC000);
  delSparseTensorReader(r);
  r = open_dynamic(write_file("h.mtx", "%%MatrixMarket matrix coordinate real general\n"
                                       "2 2 2\n1 1 1.5\n2 2 1e39\n"), 2, WAVERT_SPARSE_BF16);
  CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers0BF16(r, &m, &m, &c, &v));
  CHECK(h[0] == 0x3FC0 && h[1] == 0x7F80); /* 1e39 overflows bfloat16: infinity */
  delSparseTensorReader(r);
  /* f32: beyond its range is infinity, not undefined behaviour. */
  r = open_dynamic(write_file("f.mtx", "%%MatrixMarket matrix coordinate real general\n"
                                       "2 2 2\n1 1 1e300\n2 2 -1e39\n"), 2, WAVERT_SPARSE_F32);
  float f[2];
  v = memref(f, 2);
  CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers0F32(r, &m, &m, &c, &v));
  CHECK(isinf(f[0]) && f[0] > 0 && isinf(f[1]) && f[1] < 0);
  delSparseTensorReader(r);
  /* Pattern: ones, also complex (1 + 0i). */
  const char *pattern = "%%MatrixMarket matrix coordinate pattern general\n2 3 2\n1 3\n2 1 \n";
  r = open_dynamic(write_file("p.mtx", pattern), 2, WAVERT_SPARSE_C32);
  float cf[4];
  v = memref(cf, 2);
  CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers0C32(r, &m, &m, &c, &v));
  CHECK(cf[0] == 1 && cf[1] == 0 && cf[2] == 1 && cf[3] == 0);
  CHECK(crd[0] == 0 && crd[1] == 2 && crd[2] == 1 && crd[3] == 0);
  delSparseTensorReader(r);
  r = open_dynamic(write_file("p.mtx", pattern), 2, WAVERT_SPARSE_I16);
  int16_t i16[2];
  v = memref(i16, 2);
  CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers0I16(r, &m, &m, &c, &v));
  CHECK(i16[0] == 1 && i16[1] == 1);
  delSparseTensorReader(r);
  /* Complex. */
  r = open_dynamic(write_file("c.mtx", "%%MatrixMarket matrix coordinate complex general\n"
                                       "1 2 2\n1 1 1.5 -2\n1 2 0 3e1\n"), 2, WAVERT_SPARSE_C64);
  double cd[4];
  v = memref(cd, 2);
  CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers0C64(r, &m, &m, &c, &v));
  CHECK(cd[0] == 1.5 && cd[1] == -2 && cd[2] == 0 && cd[3] == 30);
  delSparseTensorReader(r);
  /* No entries at all. */
  r = open_dynamic(write_file("z.mtx", "%%MatrixMarket matrix coordinate real general\n0 5 0\n"),
                   2, WAVERT_SPARSE_F64);
  v = memref(NULL, 0);
  wavert_memref_1d none = memref(NULL, 0);
  CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers0F64(r, &m, &m, &none, &v));
  delSparseTensorReader(r);
  CHECK(wavert_last_status() == WAVERT_OK);
}

static void test_frostt(void) {
  char *file = write_file("t.tns",
      "# extended FROSTT\n"
      "#  rank nse\n"
      "3 3\n"
      "2 3 4\n"
      "1 1 1 10\n"
      "2 3 4 -2.5\n"
      "1 2 3 1e2\n");
  uint64_t shape[3] = {2, 3, 4};
  wavert_memref_1d s = memref(shape, 3);
  void *r = _mlir_ciface_createCheckedSparseTensorReader(file, &s, WAVERT_SPARSE_F64);
  CHECK(r != NULL && getSparseTensorReaderDimRank(r) == 3 && getSparseTensorReaderNSE(r) == 3);
  uint64_t map[3];
  uint16_t crd[9];
  double val[3];
  wavert_memref_1d m = identity(map, 3), c = memref(crd, 9), v = memref(val, 3);
  CHECK(!_mlir_ciface_getSparseTensorReaderReadToBuffers16F64(r, &m, &m, &c, &v));
  CHECK(wavert_last_status() == WAVERT_OK); /* unsorted, not failed */
  const uint16_t want[9] = {0, 0, 0, 1, 2, 3, 0, 1, 2};
  CHECK(memcmp(crd, want, sizeof(want)) == 0 && val[1] == -2.5 && val[2] == 100);
  delSparseTensorReader(r);
  /* FROSTT values may be read as integers (truncated toward zero), within range only. */
  r = open_dynamic(write_file("t.tns", "2 2\n5 5\n1 1 -2.9\n2 2 40000\n"), 2,
                   WAVERT_SPARSE_I32);
  int32_t i32[2];
  uint64_t crd64[4];
  v = memref(i32, 2);
  m = identity(map, 2);
  c = memref(crd64, 4);
  CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers0I32(r, &m, &m, &c, &v));
  CHECK(i32[0] == -2 && i32[1] == 40000 && crd64[2] == 1 && crd64[3] == 1);
  delSparseTensorReader(r);
  const char *bad[] = {"1 1\n5\n1 nan\n", "1 1\n5\n1 1e300\n", "1 1\n5\n1 -inf\n"};
  for (size_t k = 0; k < 3; ++k) {
    r = open_dynamic(write_file("t.tns", bad[k]), 1, WAVERT_SPARSE_I64);
    int64_t i64[1];
    v = memref(i64, 1);
    m = identity(map, 1);
    c = memref(crd64, 1);
    CHECK(!_mlir_ciface_getSparseTensorReaderReadToBuffers0I64(r, &m, &m, &c, &v));
    expect_error("the value does not fit i64");
    delSparseTensorReader(r);
  }
  expect_open_error("t.tns", "# only comments\n", 1, WAVERT_SPARSE_F64,
                    "ends before the line 'RANK NSE'");
  expect_open_error("t.tns", "0 0\n\n", 0, WAVERT_SPARSE_F64, "rank 0 is not within 1..64");
  expect_open_error("t.tns", "65 0\n", 65, WAVERT_SPARSE_F64, "rank 65 is not within 1..64");
  expect_open_error("t.tns", "3 1\n2 2\n1 1 1 1\n", 3, WAVERT_SPARSE_F64,
                    "expected one dimension size per rank");
  expect_open_error("t.tns", "2 1\n2 2 2\n1 1 1\n", 2, WAVERT_SPARSE_F64,
                    "more dimension sizes than the rank");
  expect_open_error("t.tns", "2 1\n2 2\n1 1 1\n", 2, WAVERT_SPARSE_C64,
                    "FROSTT (no field) values, which are not read as c64");
}

static void test_hostile_headers(void) {
  const char *mm = "%%MatrixMarket matrix coordinate real general\n";
  char text[8192];
  expect_open_error("nofile.mtx", "", 2, WAVERT_SPARSE_F64, "the file is empty");
  uint64_t shape[2] = {0, 0};
  wavert_memref_1d s = memref(shape, 2);
  CHECK(_mlir_ciface_createCheckedSparseTensorReader("/nonexistent/x.mtx", &s, 2) == NULL);
  expect_error("cannot open /nonexistent/x.mtx");
  CHECK(_mlir_ciface_createCheckedSparseTensorReader(NULL, &s, 2) == NULL);
  expect_error("the file name is NULL");
  expect_open_error("a.txt", mm, 2, WAVERT_SPARSE_F64, "unknown format");
  expect_open_error("a.mtx", "%%MatrixMarket matrix array real general\n2 2\n", 2,
                    WAVERT_SPARSE_F64, "'matrix array' is not supported");
  expect_open_error("a.mtx", "%%MatrixMarket matrix coordinate double general\n", 2,
                    WAVERT_SPARSE_F64, "field 'double' is not supported");
  expect_open_error("a.mtx", "%%MatrixMarket matrix coordinate real hermitian\n", 2,
                    WAVERT_SPARSE_F64, "symmetry 'hermitian' is not supported");
  expect_open_error("a.mtx", "%%MatrixMarket matrix coordinate real skew-symmetric\n", 2,
                    WAVERT_SPARSE_F64, "symmetry 'skew-symmetric' is not supported");
  expect_open_error("a.mtx", "%MatrixMarket matrix coordinate real general\n1 1 0\n", 2,
                    WAVERT_SPARSE_F64, "not a Matrix Market header");
  expect_open_error("a.mtx", "%%MatrixMarket matrix coordinate real general extra\n", 2,
                    WAVERT_SPARSE_F64, "not a Matrix Market header");
  expect_open_error("a.mtx", "%%MatrixMarket matrix coordinate\n", 2, WAVERT_SPARSE_F64,
                    "not a Matrix Market header");
  snprintf(text, sizeof(text), "%s%% only a comment\n\n", mm);
  expect_open_error("a.mtx", text, 2, WAVERT_SPARSE_F64, "ends before the size line");
  snprintf(text, sizeof(text), "%s3 3\n", mm);
  expect_open_error("a.mtx", text, 2, WAVERT_SPARSE_F64, "line 2: expected the size line");
  snprintf(text, sizeof(text), "%s3 3 1 4\n", mm);
  expect_open_error("a.mtx", text, 2, WAVERT_SPARSE_F64, "expected the size line");
  snprintf(text, sizeof(text), "%s-3 3 1\n", mm);
  expect_open_error("a.mtx", text, 2, WAVERT_SPARSE_F64, "expected the size line");
  snprintf(text, sizeof(text), "%s3 3 1.5\n", mm);
  expect_open_error("a.mtx", text, 2, WAVERT_SPARSE_F64, "expected the size line");
  snprintf(text, sizeof(text), "%s99999999999999999999 3 1\n1 1 1\n", mm);
  expect_open_error("a.mtx", text, 2, WAVERT_SPARSE_F64, "expected the size line");
  snprintf(text, sizeof(text), "%s268435456 3 1\n1 1 1\n", mm);
  expect_open_error("a.mtx", text, 2, WAVERT_SPARSE_F64, "beyond libwavert's limit 268435455");
  snprintf(text, sizeof(text), "%s268435455 268435455 72057593501057025\n1 1 1\n", mm);
  expect_open_error("a.mtx", text, 2, WAVERT_SPARSE_F64, "bytes after it hold at most");
  snprintf(text, sizeof(text), "%s100000 100000 1000000000\n1 1 1\n", mm);
  expect_open_error("a.mtx", text, 2, WAVERT_SPARSE_F64,
                    "announces 1000000000 entries, but the 6 bytes after it hold at most 1");
  snprintf(text, sizeof(text), "%s2 2 5\n1 1 1\n1 2 1\n2 1 1\n2 2 1\n1 1 1\n", mm);
  expect_open_error("a.mtx", text, 2, WAVERT_SPARSE_F64,
                    "5 stored entries do not fit 4 positions");
  expect_open_error("a.mtx", "%%MatrixMarket matrix coordinate real symmetric\n2 3 1\n1 1 1\n",
                    2, WAVERT_SPARSE_F64, "a symmetric matrix must be square");
  /* Field and element type, rank and static sizes. */
  snprintf(text, sizeof(text), "%s2 3 1\n1 1 1\n", mm);
  expect_open_error("a.mtx", text, 2, WAVERT_SPARSE_I32, "real values, which are not read as i32");
  expect_open_error("a.mtx", text, 2, 0, "value type 0 is not MLIR's PrimaryType");
  expect_open_error("a.mtx", text, 2, 11, "value type 11 is not MLIR's PrimaryType");
  expect_open_error("a.mtx", "%%MatrixMarket matrix coordinate complex general\n1 1 0\n", 2,
                    WAVERT_SPARSE_F64, "complex values, which are not read as f64");
  expect_open_error("a.mtx", "%%MatrixMarket matrix coordinate integer general\n1 1 0\n", 2,
                    WAVERT_SPARSE_C32, "integer values, which are not read as c32");
  expect_open_error("a.mtx", text, 3, WAVERT_SPARSE_F64, "has rank 2; the tensor type has 3");
  shape[0] = 2;
  shape[1] = 4;
  CHECK(_mlir_ciface_createCheckedSparseTensorReader(write_file("a.mtx", text), &s,
                                                     WAVERT_SPARSE_F64) == NULL);
  expect_error("dimension 1 has size 3; the tensor type has 4");
  CHECK(_mlir_ciface_createCheckedSparseTensorReader(write_file("a.mtx", text), NULL,
                                                     WAVERT_SPARSE_F64) == NULL);
  expect_error("the dimension shape memref is NULL");
  /* A line too long, a NUL byte. */
  memset(text, 'x', 5000);
  text[5000] = '\0';
  expect_open_error("a.mtx", text, 2, WAVERT_SPARSE_F64, "line 1: longer than 4095 characters");
  CHECK(open_dynamic(write_bytes("a.mtx", "%%MatrixMarket\0matrix", 21), 2, 1) == NULL);
  expect_error("line 1: the line holds a NUL byte");
}

static void test_hostile_entries(void) {
  const char *mm = "%%MatrixMarket matrix coordinate real general\n3 3 3\n";
  char text[8192];
  snprintf(text, sizeof(text), "%s1 1 1\n-1 2 3\n2 2 2\n", mm);
  expect_read_error(text, "line 4: expected 2 coordinates");
  snprintf(text, sizeof(text), "%s1 1 1\n0 2 3\n2 2 2\n", mm);
  expect_read_error(text, "line 4: coordinate 0 is 0, not within 1..3 (1-based)");
  snprintf(text, sizeof(text), "%s1 1 1\n1 4 3\n2 2 2\n", mm);
  expect_read_error(text, "coordinate 1 is 4, not within 1..3");
  snprintf(text, sizeof(text), "%s1 18446744073709551617 3\n2 2 2\n3 3 3\n", mm);
  expect_read_error(text, "line 3: expected 2 coordinates");
  snprintf(text, sizeof(text), "%s1 1.0 3\n2 2 2\n3 3 3\n", mm);
  expect_read_error(text, "expected 2 coordinates");
  snprintf(text, sizeof(text), "%s1\n2 2 2\n3 3 3\n", mm);
  expect_read_error(text, "expected 2 coordinates");
  snprintf(text, sizeof(text), "%s1 1\n2 2 2\n3 3 3\n", mm);
  expect_read_error(text, "line 3: expected the entry's value");
  snprintf(text, sizeof(text), "%s1 1 x\n2 2 2\n3 3 3\n", mm);
  expect_read_error(text, "expected the entry's value");
  snprintf(text, sizeof(text), "%s1 1 1 2\n2 2 2\n3 3 3\n", mm);
  expect_read_error(text, "unexpected text after the entry's value");
  snprintf(text, sizeof(text), "%s1 1 1\n2 2 2\n", mm);
  expect_read_error(text, "ends after 2 of its 3 entries");
  snprintf(text, sizeof(text), "%s1 1 1\n2 2 2\n3 3 3\n1 2 4\n", mm);
  expect_read_error(text, "line 6: more entries than the 3 the header announces");
  snprintf(text, sizeof(text), "%s1 1 1\n2 2 2\n3 3 ", mm);
  expect_read_error(text, "expected the entry's value");
  int n = snprintf(text, sizeof(text), "%s1 1 1\n2 2 2\n3 3 ", mm);
  memset(text + n, '7', 4200);
  text[n + 4200] = '\n';
  text[n + 4201] = '\0';
  expect_read_error(text, "line 5: longer than 4095 characters");
  snprintf(text, sizeof(text), "%s1 1 1\n2 2 2\n3 3 3", mm); /* no final newline: fine */
  void *r = open_dynamic(write_file("ok.mtx", text), 2, WAVERT_SPARSE_F64);
  uint64_t map[2], crd[6];
  double val[3];
  wavert_memref_1d m = identity(map, 2), c = memref(crd, 6), v = memref(val, 3);
  CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers0F64(r, &m, &m, &c, &v));
  CHECK(val[2] == 3);
  delSparseTensorReader(r);
  /* Integer field: an overflowing integer, a fraction. */
  expect_read_error("%%MatrixMarket matrix coordinate integer general\n1 1 1\n"
                    "1 1 9223372036854775808\n", "the integer value overflows 64 bits");
  expect_read_error("%%MatrixMarket matrix coordinate integer general\n1 1 1\n1 1 1.5\n",
                    "expected the entry's value");
}

static void test_handles_and_environment(void) {
  /* Released, NULL and foreign readers are errors, not dereferences. */
  int not_a_reader = 0;
  CHECK(getSparseTensorReaderNSE(NULL) == 0);
  expect_error("getSparseTensorReaderNSE: (nil) is not a live sparse tensor reader");
  CHECK(getSparseTensorReaderDimRank(&not_a_reader) == 0);
  expect_error("is not a live sparse tensor reader");
  CHECK(!getSparseTensorReaderIsSymmetric(&not_a_reader));
  expect_error("is not a live sparse tensor reader");
  wavert_memref_1d out = {0};
  _mlir_ciface_getSparseTensorReaderDimSizes(&out, NULL);
  expect_error("is not a live sparse tensor reader");
  CHECK(out.aligned != NULL && out.sizes[0] == 0); /* 64 readable zeros */
  for (int d = 0; d < 64; ++d) CHECK(((const uint64_t *)out.aligned)[d] == 0);
  void *r = open_dynamic(write_file("e.mtx", "%%MatrixMarket matrix coordinate real general\n"
                                             "1 1 0\n"), 2, WAVERT_SPARSE_F64);
  CHECK(r != NULL);
  _mlir_ciface_getSparseTensorReaderDimSizes(NULL, r);
  expect_error("the result is NULL");
  delSparseTensorReader(r);
  delSparseTensorReader(r);
  expect_error("delSparseTensorReader");
  delSparseTensorReader(NULL);
  CHECK(wavert_last_status() == WAVERT_OK);
  /* TENSOR<id>. */
  CHECK(setenv("TENSOR7", "/some/file.mtx", 1) == 0);
  CHECK(strcmp(getTensorFilename(7), "/some/file.mtx") == 0);
  CHECK(unsetenv("TENSOR8") == 0);
  CHECK(getTensorFilename(8) == NULL);
  expect_error("environment variable TENSOR8 (the file of tensor 8) is not set");
  /* Outside a call the first error is kept. */
  CHECK(getTensorFilename(8) == NULL);
  CHECK(getSparseTensorReaderNSE(NULL) == 0);
  expect_error("TENSOR8");
}

/* Values are read with a '.' decimal point whatever the program's locale (when a locale
 * with a ',' is installed), and a folder named like a file is a read error. */
static void test_locale_and_folder(void) {
  const char *comma_locales[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8"};
  for (size_t k = 0; k < 4; ++k) {
    if (setlocale(LC_NUMERIC, comma_locales[k]) == NULL) continue;
    void *r = open_dynamic(write_file("l.mtx", "%%MatrixMarket matrix coordinate real general\n"
                                               "1 1 1\n1 1 2.5\n"), 2, WAVERT_SPARSE_F64);
    uint64_t map[2], crd[2];
    double val[1];
    wavert_memref_1d m = identity(map, 2), c = memref(crd, 2), v = memref(val, 1);
    CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers0F64(r, &m, &m, &c, &v));
    CHECK(val[0] == 2.5);
    delSparseTensorReader(r);
    CHECK(strtod("2,5", NULL) == 2.5); /* the program's own locale is untouched */
    setlocale(LC_NUMERIC, "C");
    break;
  }
  char dir[600];
  snprintf(dir, sizeof(dir), "%s/folder.mtx", folder);
  CHECK(mkdir(dir, 0700) == 0);
  CHECK(open_dynamic(dir, 2, WAVERT_SPARSE_F64) == NULL);
  CHECK(wavert_last_status() == WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(wavert_last_error(), "cannot open") != NULL ||
        strstr(wavert_last_error(), "read error") != NULL);
  wavert_clear_error();
  CHECK(rmdir(dir) == 0);
}

static void test_inside_a_call(void) {
  wavert_device *device;
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device));
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  CHECK(!wavert_jit_failed());
  CHECK(open_dynamic(write_file("a.mtx", "%%MatrixMarket matrix coordinate real general\n"
                                         "2 2 9\n"), 2, WAVERT_SPARSE_F64) == NULL);
  CHECK(wavert_jit_failed());
  CHECK(getSparseTensorReaderNSE(NULL) == 0); /* a later error: the first one stays */
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("createCheckedSparseTensorReader:");
  CHECK_MESSAGE("9 stored entries do not fit 4 positions");
  wavert_clear_error();
  /* A good read inside a call records nothing. */
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  void *r = open_dynamic(write_file("a.mtx", "%%MatrixMarket matrix coordinate pattern general\n"
                                             "2 2 1\n2 2\n"), 2, WAVERT_SPARSE_F32);
  uint64_t map[2], crd[2];
  float val[1];
  wavert_memref_1d m = identity(map, 2), c = memref(crd, 2), v = memref(val, 1);
  CHECK(_mlir_ciface_getSparseTensorReaderReadToBuffers0F32(r, &m, &m, &c, &v));
  delSparseTensorReader(r);
  CHECK(!wavert_jit_failed());
  CHECK_OK(wavert_call_end(&state));
  CHECK(crd[0] == 1 && crd[1] == 1 && val[0] == 1);
}

int main(void) {
  CHECK(mkdtemp(folder) != NULL);
  test_general_real();
  test_order_and_maps();
  test_symmetric_integer_pattern_complex();
  test_frostt();
  test_hostile_headers();
  test_hostile_entries();
  test_handles_and_environment();
  test_locale_and_folder();
  test_inside_a_call();
  for (int k = 0; k < files; ++k) CHECK(unlink(paths[k]) == 0);
  CHECK(rmdir(folder) == 0);
  printf("test_sparse_file: ok\n");
  return 0;
}
