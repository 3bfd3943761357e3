/* test_sparse_storage.c — the tensor storage of MLIR's sparse runtime (wavert_sparse_storage.h):
 * CSR, BSR, COO and dense tensors filled by lexInsert in any order and read back through
 * their positions / coordinates / values buffers; a CSC tensor from a Matrix Market reader;
 * assembled tensors (action 2: CSR, DCSR, COO, u8 positions), and the errors (level types,
 * actions and widths libwavert does not take, coordinates out
 * of range, duplicates, positions that overflow their width, insertions after the end, dead
 * tensors), each recorded with a message, never a crash (ASan + UBSan in CI). */
#define _DEFAULT_SOURCE /* mkstemp */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "test_util.h"
#include "wavert_sparse_storage.h"

enum { DENSE = 0x10000, COMPRESSED = 0x40000, SINGLETON = 0x80000, NONUNIQUE = 1 };
enum { INDEX = 0, U8 = 4 };
#define FLOOR2(d) (UINT64_C(1) << 60 | UINT64_C(2) << 20 | (d))
#define MOD2(d) (UINT64_C(2) << 60 | UINT64_C(2) << 20 | (d))

static wavert_memref_1d memref(void *data, int64_t size) {
  wavert_memref_1d m = {data, data, 0, {size}, {1}};
  return m;
}

static void expect_error(wavert_status status, const char *text) {
  CHECK(wavert_last_status() == status);
  CHECK_MESSAGE(text);
  wavert_clear_error();
}

/* A rank-2 tensor of `lvl_rank` levels (sizes, types, dim2lvl given), f32 values. */
static void *make(uint64_t rows, uint64_t cols, int64_t lvl_rank, uint64_t *lvl_sizes,
                  uint64_t *types, uint64_t *dim2lvl, uint32_t pos_type, uint32_t action,
                  void *ptr) {
  uint64_t dims[2] = {rows, cols};
  wavert_memref_1d d = memref(dims, 2), l = memref(lvl_sizes, lvl_rank),
                          t = memref(types, lvl_rank), m = memref(dim2lvl, lvl_rank);
  return _mlir_ciface_newSparseTensor(&d, &l, &t, &m, &m, pos_type, INDEX, WAVERT_SPARSE_F32,
                                      action, ptr);
}

static void insert(void *t, uint64_t a, uint64_t b, uint64_t c, uint64_t d, int64_t rank,
                   float value) {
  uint64_t coords[4] = {a, b, c, d};
  wavert_memref_1d m = memref(coords, rank);
  float holder[3] = {-1, value, -1};
  wavert_sparse_memref_0d v = {holder, holder, 1};
  _mlir_ciface_lexInsertF32(t, &m, &v);
}

/* The buffer views. */
static uint64_t *positions(void *t, uint64_t l, int64_t *count) {
  wavert_memref_1d out;
  _mlir_ciface_sparsePositions0(&out, t, l);
  *count = out.sizes[0];
  return out.aligned;
}
static uint64_t *coordinates(void *t, uint64_t l, int64_t *count) {
  wavert_memref_1d out;
  _mlir_ciface_sparseCoordinates0(&out, t, l);
  *count = out.sizes[0];
  return out.aligned;
}
static float *values(void *t, int64_t *count) {
  wavert_memref_1d out;
  _mlir_ciface_sparseValuesF32(&out, t);
  *count = out.sizes[0];
  return out.aligned;
}

#define CHECK_ARRAY(got, count, ...)                                                          \
  do {                                                                                        \
    const __typeof__((got)[0]) want[] = {__VA_ARGS__};                                        \
    CHECK((count) == (int64_t)(sizeof(want) / sizeof(want[0])));                              \
    CHECK(memcmp((got), want, sizeof(want)) == 0);                                            \
  } while (0)

static void test_csr_bsr_coo_dense(void) {
  int64_t n;
  /* CSR of a 4 x 5 matrix, inserted out of order. */
  uint64_t sizes[4] = {4, 5}, types[4] = {DENSE, COMPRESSED}, map[4] = {0, 1};
  void *t = make(4, 5, 2, sizes, types, map, INDEX, 0, NULL);
  CHECK(t != NULL);
  insert(t, 3, 4, 0, 0, 2, 5);
  insert(t, 0, 1, 0, 0, 2, 2);
  insert(t, 0, 0, 0, 0, 2, 1);
  insert(t, 2, 2, 0, 0, 2, 3);
  endLexInsert(t);
  CHECK(sparseLvlSize(t, 1) == 5 && sparseDimSize(t, 0) == 4);
  uint64_t *p = positions(t, 1, &n);
  CHECK_ARRAY(p, n, 0, 2, 2, 3, 4);
  uint64_t *c = coordinates(t, 1, &n);
  CHECK_ARRAY(c, n, 0, 1, 2, 4);
  float *v = values(t, &n);
  CHECK_ARRAY(v, n, 1, 2, 3, 5);
  insert(t, 1, 1, 0, 0, 2, 9);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "lexInsertF32: the tensor is finished");
  delSparseTensor(t);
  /* BSR, 2 x 2 blocks, of a 4 x 6 matrix: dense block rows, compressed block columns. */
  uint64_t bsizes[4] = {2, 3, 2, 2}, btypes[4] = {DENSE, COMPRESSED, DENSE, DENSE};
  uint64_t bmap[4] = {FLOOR2(0), FLOOR2(1), MOD2(0), MOD2(1)};
  t = make(4, 6, 4, bsizes, btypes, bmap, INDEX, 0, NULL);
  insert(t, 1, 2, 1, 1, 4, 7); /* (3, 5) */
  insert(t, 0, 0, 0, 1, 4, 1); /* (0, 1) */
  insert(t, 0, 0, 1, 0, 4, 2); /* (1, 0) */
  endLexInsert(t);
  p = positions(t, 1, &n);
  CHECK_ARRAY(p, n, 0, 1, 2);
  c = coordinates(t, 1, &n);
  CHECK_ARRAY(c, n, 0, 2);
  v = values(t, &n);
  CHECK_ARRAY(v, n, 0, 1, 2, 0, 0, 0, 0, 7);
  positions(t, 0, &n);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "level 0 is not a (loose) compressed level");
  delSparseTensor(t);
  /* COO: compressed (non-unique) then singleton; a duplicate coordinate is kept. */
  uint64_t ctypes[4] = {COMPRESSED | NONUNIQUE, SINGLETON};
  t = make(4, 5, 2, sizes, ctypes, map, INDEX, 0, NULL);
  insert(t, 2, 1, 0, 0, 2, 3);
  insert(t, 0, 4, 0, 0, 2, 1);
  insert(t, 2, 0, 0, 0, 2, 2);
  insert(t, 2, 1, 0, 0, 2, 4);
  endLexInsert(t);
  p = positions(t, 0, &n);
  CHECK_ARRAY(p, n, 0, 4);
  c = coordinates(t, 0, &n);
  CHECK_ARRAY(c, n, 0, 2, 2, 2);
  c = coordinates(t, 1, &n);
  CHECK_ARRAY(c, n, 4, 0, 1, 1);
  v = values(t, &n);
  CHECK_ARRAY(v, n, 1, 2, 3, 4); /* stable: equal coordinates keep their insertion order */
  /* Sorting a COO in place returns it; another level type is an error. */
  CHECK(make(4, 5, 2, sizes, ctypes, map, INDEX, 3, t) == t);
  uint64_t unordered[4] = {COMPRESSED | NONUNIQUE | 2, SINGLETON | 2}; /* as the sparsifier */
  void *u = make(4, 5, 2, sizes, unordered, map, INDEX, 0, NULL);
  insert(u, 3, 3, 0, 0, 2, 8);
  insert(u, 1, 2, 0, 0, 2, 7);
  CHECK(make(4, 5, 2, sizes, ctypes, map, INDEX, 3, u) == u);
  c = coordinates(u, 0, &n);
  CHECK_ARRAY(c, n, 1, 3);
  delSparseTensor(u);
  CHECK(make(4, 5, 2, sizes, types, map, INDEX, 3, t) == NULL);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "the tensor to sort has other levels or values");
  delSparseTensor(t);
  /* All dense: every position has a value; an empty tensor. */
  uint64_t dtypes[4] = {DENSE, DENSE};
  uint64_t small[4] = {2, 3};
  t = make(2, 3, 2, small, dtypes, map, INDEX, 0, NULL);
  insert(t, 1, 2, 0, 0, 2, 6);
  v = values(t, &n); /* finished by the first view */
  CHECK_ARRAY(v, n, 0, 0, 0, 0, 0, 6);
  delSparseTensor(t);
  t = make(4, 5, 2, sizes, types, map, INDEX, 0, NULL);
  endLexInsert(t);
  p = positions(t, 1, &n);
  CHECK_ARRAY(p, n, 0, 0, 0, 0, 0);
  coordinates(t, 1, &n);
  CHECK(n == 0);
  values(t, &n);
  CHECK(n == 0);
  delSparseTensor(t);
  CHECK(wavert_last_status() == WAVERT_OK);
}

static void test_from_reader(void) {
  char path[] = "/tmp/wavert-storage-XXXXXX.mtx";
  int fd = mkstemps(path, 4);
  CHECK(fd >= 0);
  const char *text = "%%MatrixMarket matrix coordinate real general\n3 4 4\n"
                     "3 1 3\n1 4 1\n2 2 2\n1 1 0.5\n";
  CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  CHECK(close(fd) == 0);
  uint64_t shape[2] = {0, 0};
  wavert_memref_1d s = memref(shape, 2);
  void *reader = _mlir_ciface_createCheckedSparseTensorReader(path, &s, WAVERT_SPARSE_F32);
  CHECK(reader != NULL);
  /* CSC: level 0 is dimension 1. */
  uint64_t sizes[2] = {4, 3}, types[2] = {DENSE, COMPRESSED}, map[2] = {1, 0};
  void *t = make(3, 4, 2, sizes, types, map, INDEX, 1, reader);
  CHECK(t != NULL);
  int64_t n;
  uint64_t *p = positions(t, 1, &n);
  CHECK_ARRAY(p, n, 0, 2, 3, 3, 4);
  uint64_t *c = coordinates(t, 1, &n);
  CHECK_ARRAY(c, n, 0, 2, 1, 0);
  float *v = values(t, &n);
  CHECK_ARRAY(v, n, 0.5, 3, 2, 1);
  delSparseTensor(t);
  /* The reader's entries are read once. */
  CHECK(make(3, 4, 2, sizes, types, map, INDEX, 1, reader) == NULL);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "were read already");
  delSparseTensorReader(reader);
  /* Sizes that do not match the file; a dead reader. */
  reader = _mlir_ciface_createCheckedSparseTensorReader(path, &s, WAVERT_SPARSE_F32);
  CHECK(make(3, 5, 2, sizes, types, map, INDEX, 1, reader) == NULL);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "dimension 1 of the file has size 4; the tensor 5");
  delSparseTensorReader(reader);
  CHECK(make(3, 4, 2, sizes, types, map, INDEX, 1, reader) == NULL);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "is not a live sparse tensor reader");
  CHECK(unlink(path) == 0);
}

/* Action 2 (kPack, sparse_tensor.assemble): CSR, DCSR, a COO (positions and coordinates as
 * an array of structures) and BSR-like dense-under-compressed levels with u8 positions,
 * copied from the caller's buffers (which may change afterwards); then the errors. */
static void test_pack(void) {
  int64_t n;
  uint64_t sizes[2] = {4, 5}, map[2] = {0, 1};
  /* CSR: rows 0 and 2 hold (0,1)=1, (0,4)=2, (2,0)=3. */
  uint64_t csr_types[2] = {DENSE, COMPRESSED};
  uint64_t pos[5] = {0, 2, 2, 3, 3}, crd[3] = {1, 4, 0};
  float val[3] = {1, 2, 3};
  intptr_t csr_buffers[3] = {(intptr_t)pos, (intptr_t)crd, (intptr_t)val};
  void *t = make(4, 5, 2, sizes, csr_types, map, INDEX, 2, csr_buffers);
  CHECK(t != NULL);
  pos[1] = 99;
  val[0] = -1; /* copies were taken */
  uint64_t *p = positions(t, 1, &n);
  CHECK_ARRAY(p, n, 0, 2, 2, 3, 3);
  uint64_t *c = coordinates(t, 1, &n);
  CHECK_ARRAY(c, n, 1, 4, 0);
  float *v = values(t, &n);
  CHECK_ARRAY(v, n, 1.0f, 2.0f, 3.0f);
  delSparseTensor(t);

  /* DCSR: two compressed levels. */
  uint64_t dcsr_types[2] = {COMPRESSED, COMPRESSED};
  uint64_t pos0[2] = {0, 2}, crd0[2] = {1, 3}, pos1[3] = {0, 1, 3}, crd1[3] = {2, 0, 4};
  float dval[3] = {5, 6, 7};
  intptr_t dcsr_buffers[5] = {(intptr_t)pos0, (intptr_t)crd0, (intptr_t)pos1, (intptr_t)crd1,
                              (intptr_t)dval};
  t = make(4, 5, 2, sizes, dcsr_types, map, INDEX, 2, dcsr_buffers);
  CHECK(t != NULL);
  p = positions(t, 0, &n);
  CHECK_ARRAY(p, n, 0, 2);
  c = coordinates(t, 0, &n);
  CHECK_ARRAY(c, n, 1, 3);
  p = positions(t, 1, &n);
  CHECK_ARRAY(p, n, 0, 1, 3);
  c = coordinates(t, 1, &n);
  CHECK_ARRAY(c, n, 2, 0, 4);
  v = values(t, &n);
  CHECK_ARRAY(v, n, 5.0f, 6.0f, 7.0f);
  delSparseTensor(t);

  /* COO: the coordinates come as (row, column) pairs and are stored per level. */
  uint64_t coo_types[2] = {COMPRESSED | NONUNIQUE, SINGLETON};
  uint64_t cpos[2] = {0, 3}, aos[6] = {0, 4, 2, 1, 2, 3};
  float cval[3] = {8, 9, 10};
  intptr_t coo_buffers[3] = {(intptr_t)cpos, (intptr_t)aos, (intptr_t)cval};
  t = make(4, 5, 2, sizes, coo_types, map, INDEX, 2, coo_buffers);
  CHECK(t != NULL);
  c = coordinates(t, 0, &n);
  CHECK_ARRAY(c, n, 0, 2, 2);
  c = coordinates(t, 1, &n);
  CHECK_ARRAY(c, n, 4, 1, 3);
  v = values(t, &n);
  CHECK_ARRAY(v, n, 8.0f, 9.0f, 10.0f);
  delSparseTensor(t);

  /* Compressed rows of dense pairs (2 x 2 blocks' inner levels), u8 positions: values are
   * the compressed level's size times the dense one. */
  uint64_t bsizes[3] = {2, 2, 2}, btypes[3] = {DENSE, COMPRESSED, DENSE}, bmap[3] = {0, 1, 1};
  uint8_t bpos[3] = {0, 1, 1};
  uint64_t bcrd[1] = {1};
  float bval[2] = {11, 12};
  intptr_t b_buffers[3] = {(intptr_t)bpos, (intptr_t)bcrd, (intptr_t)bval};
  uint64_t dims[2] = {2, 4};
  wavert_memref_1d dm = memref(dims, 2), lm = memref(bsizes, 3), tm = memref(btypes, 3),
                          mm = memref(bmap, 3);
  t = _mlir_ciface_newSparseTensor(&dm, &lm, &tm, &mm, &mm, U8, INDEX, WAVERT_SPARSE_F32, 2,
                                   b_buffers);
  CHECK(t != NULL);
  wavert_memref_1d out;
  _mlir_ciface_sparsePositions8(&out, t, 1);
  CHECK_ARRAY((uint8_t *)out.aligned, out.sizes[0], 0, 1, 1);
  v = values(t, &n);
  CHECK_ARRAY(v, n, 11.0f, 12.0f);
  delSparseTensor(t);

  /* Errors: decreasing positions, a coordinate out of range, a singleton outside a COO. */
  uint64_t bad_pos[5] = {0, 2, 1, 3, 3};
  intptr_t bad1[3] = {(intptr_t)bad_pos, (intptr_t)crd, (intptr_t)val};
  CHECK(make(4, 5, 2, sizes, csr_types, map, INDEX, 2, bad1) == NULL);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "position 2 of level 1 is below the one before");
  uint64_t bad_crd[3] = {1, 5, 0};
  pos[1] = 2;
  intptr_t bad2[3] = {(intptr_t)pos, (intptr_t)bad_crd, (intptr_t)val};
  CHECK(make(4, 5, 2, sizes, csr_types, map, INDEX, 2, bad2) == NULL);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT,
               "coordinate 5 of level 1 (entry 1) is not below its size 5");
  uint64_t single[2] = {DENSE, SINGLETON};
  CHECK(make(4, 5, 2, sizes, single, map, INDEX, 2, csr_buffers) == NULL);
  expect_error(WAVERT_ERROR_UNSUPPORTED, "assembling singleton level 1");
}

static void test_errors(void) {
  uint64_t sizes[2] = {4, 5}, types[2] = {DENSE, COMPRESSED}, map[2] = {0, 1};
  /* n:m levels; the SoA property on a compressed level (singleton levels only) */
  uint64_t nm[2] = {DENSE, 0x200000}, soa[2] = {DENSE, COMPRESSED | 4};
  uint64_t batch[2] = {0x20000, COMPRESSED};
  CHECK(make(4, 5, 2, sizes, nm, map, INDEX, 0, NULL) == NULL);
  expect_error(WAVERT_ERROR_UNSUPPORTED, "level 1 has level type 0x200000");
  CHECK(make(4, 5, 2, sizes, soa, map, INDEX, 0, NULL) == NULL);
  expect_error(WAVERT_ERROR_UNSUPPORTED, "level 1 has level type 0x40004");
  CHECK(make(4, 5, 2, sizes, batch, map, INDEX, 0, NULL) == NULL);
  expect_error(WAVERT_ERROR_UNSUPPORTED, "level 0 has level type 0x20000");
  CHECK(make(4, 5, 2, sizes, types, map, INDEX, 2, NULL) == NULL);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "action 2 (assemble) needs the level buffers");
  CHECK(make(4, 5, 2, sizes, types, map, INDEX, 4, NULL) == NULL);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "action 4 is not one of MLIR's");
  CHECK(make(4, 5, 2, sizes, types, map, INDEX, 3, NULL) == NULL);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "(nil) is not a live sparse tensor");
  CHECK(make(4, 5, 2, sizes, types, map, 9, 0, NULL) == NULL);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "position type 9");
  CHECK(make(4, 5, 0, sizes, types, map, INDEX, 0, NULL) == NULL);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "the level sizes memref must have 1..64 elements");
  void *t = make(4, 5, 2, sizes, types, map, INDEX, 0, NULL);
  insert(t, 4, 0, 0, 0, 2, 1);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "coordinate 4 of level 0 is not below its size 4");
  insert(t, 1, 1, 0, 0, 2, 1);
  insert(t, 1, 1, 0, 0, 2, 2);
  endLexInsert(t);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "2 entries at the same coordinates");
  /* A failed build leaves an empty tensor whose positions still cover every row. */
  int64_t n;
  uint64_t *p = positions(t, 1, &n);
  CHECK_ARRAY(p, n, 0, 0, 0, 0, 0);
  values(t, &n);
  CHECK(n == 0 && wavert_last_status() == WAVERT_OK);
  delSparseTensor(t);
  /* Views of the wrong width or type; a dead tensor. */
  t = make(4, 5, 2, sizes, types, map, INDEX, 0, NULL);
  wavert_memref_1d out;
  _mlir_ciface_sparsePositions32(&out, t, 1);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "the tensor's positions are 8-byte");
  CHECK(out.sizes[0] == 0 && out.aligned != NULL);
  _mlir_ciface_sparseValuesF64(&out, t);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "the tensor's values are of type 2");
  delSparseTensor(t);
  delSparseTensor(t);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "delSparseTensor");
  CHECK(sparseLvlSize(t, 0) == 0);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "sparseLvlSize");
  endLexInsert(NULL);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "endLexInsert: (nil) is not a live sparse tensor");
  delSparseTensor(NULL);
  CHECK(wavert_last_status() == WAVERT_OK);
  /* 8-bit positions: 256 entries do not fit. */
  uint64_t wide[2] = {1, 300};
  t = make(1, 300, 2, wide, types, map, U8, 0, NULL);
  for (uint64_t j = 0; j < 256; ++j) insert(t, 0, j, 0, 0, 2, 1);
  endLexInsert(t);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "position 256 does not fit the tensor's 1-byte");
  delSparseTensor(t);
  /* A dense level whose positions would exceed the limit. */
  uint64_t huge[2] = {UINT64_C(1) << 40, 1}, dense2[2] = {DENSE, DENSE};
  t = make(UINT64_C(1) << 40, 1, 2, huge, dense2, map, INDEX, 0, NULL);
  insert(t, (UINT64_C(1) << 40) - 1, 0, 0, 0, 2, 1);
  endLexInsert(t);
  expect_error(WAVERT_ERROR_INVALID_ARGUMENT, "level 0 has more than 2147483648 positions");
  delSparseTensor(t);
}

int main(void) {
  test_csr_bsr_coo_dense();
  test_from_reader();
  test_pack();
  test_errors();
  printf("test_sparse_storage: ok\n");
  return 0;
}
