/* test_memref.c — wavert_memref_from_dltensor: descriptor words and every rejection rule
 * (dtype, signless, bool, rank, static sizes, identity and strided layouts, offsets). */
#include "test_util.h"

#define D WAVERT_DYNAMIC

static const DLDataType f32 = {kDLFloat, 32, 1};
static const DLDataType f16 = {kDLFloat, 16, 1};
static const DLDataType bf16 = {kDLBfloat, 16, 1};
static const DLDataType i32 = {kDLInt, 32, 1};
static const DLDataType u32 = {kDLUInt, 32, 1};
static const DLDataType i8 = {kDLInt, 8, 1};
static const DLDataType boolean = {kDLBool, 8, 1};

static float storage[1024];

static DLTensor tensor(DLDataType dtype, int32_t ndim, int64_t *shape, int64_t *strides) {
  DLTensor t = {storage, {kDLCUDA, 0}, ndim, dtype, shape, strides, 0};
  return t;
}

static wavert_memref_type type(DLDataType dtype, int32_t rank, const int64_t *sizes) {
  wavert_memref_type t = {dtype, 0, rank, sizes, NULL, 0};
  return t;
}

static void test_identity_layout(void) {
  int64_t shape[] = {3, 4, 5};
  int64_t sizes[] = {D, 4, D};
  int64_t words[WAVERT_MEMREF_WORDS(3)];
  DLTensor t = tensor(f32, 3, shape, NULL);
  t.byte_offset = 8;
  wavert_memref_type ty = type(f32, 3, sizes);
  CHECK_OK(wavert_memref_from_dltensor(&t, &ty, words));
  CHECK(words[0] == (int64_t)(uintptr_t)storage);
  CHECK(words[1] == (int64_t)(uintptr_t)storage + 8);
  CHECK(words[2] == 0);
  CHECK(words[3] == 3 && words[4] == 4 && words[5] == 5);
  CHECK(words[6] == 20 && words[7] == 5 && words[8] == 1);

  /* Explicit compact strides; a size-1 dimension's stride is ignored and written canonical. */
  int64_t shape1[] = {3, 1, 5};
  int64_t strides1[] = {5, 999, 1};
  int64_t sizes1[] = {D, D, D};
  t = tensor(f32, 3, shape1, strides1);
  ty = type(f32, 3, sizes1);
  CHECK_OK(wavert_memref_from_dltensor(&t, &ty, words));
  CHECK(words[6] == 5 && words[7] == 5 && words[8] == 1);

  /* Transposed strides do not fit the identity layout. */
  int64_t shape2[] = {4, 5};
  int64_t strides2[] = {1, 4};
  int64_t sizes2[] = {D, D};
  t = tensor(f32, 2, shape2, strides2);
  ty = type(f32, 2, sizes2);
  int64_t sentinel[WAVERT_MEMREF_WORDS(2)] = {42, 42, 42, 42, 42, 42, 42};
  CHECK_STATUS(wavert_memref_from_dltensor(&t, &ty, sentinel), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK(sentinel[0] == 42 && sentinel[6] == 42); /* not written on failure */
  CHECK_MESSAGE("compact row-major");
  CHECK_MESSAGE("[5, 1]");
  CHECK_MESSAGE("got strides [1, 4]");

  /* Rank 0. */
  t = tensor(f32, 0, NULL, NULL);
  ty = type(f32, 0, NULL);
  CHECK_OK(wavert_memref_from_dltensor(&t, &ty, words));
  CHECK(words[1] == (int64_t)(uintptr_t)storage && words[2] == 0);
}

static void test_dtypes(void) {
  int64_t shape[] = {4};
  int64_t sizes[] = {D};
  int64_t words[WAVERT_MEMREF_WORDS(1)];
  DLTensor t = tensor(f16, 1, shape, NULL);
  wavert_memref_type ty = type(bf16, 1, sizes);
  CHECK_STATUS(wavert_memref_from_dltensor(&t, &ty, words), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("expected bfloat16 (code=4, bits=16, lanes=1)");
  CHECK_MESSAGE("got float16 (code=2, bits=16, lanes=1)");

  t = tensor(i32, 1, shape, NULL);
  ty = type(f32, 1, sizes);
  CHECK_STATUS(wavert_memref_from_dltensor(&t, &ty, words), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("expected float32 (code=2, bits=32, lanes=1), got int32 (code=0, bits=32, lanes=1)");

  /* Signedness: exact without SIGNLESS, either with it; bits must still match. */
  t = tensor(u32, 1, shape, NULL);
  ty = type(i32, 1, sizes);
  CHECK_STATUS(wavert_memref_from_dltensor(&t, &ty, words), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("uint32");
  ty.flags = WAVERT_MEMREF_SIGNLESS;
  CHECK_OK(wavert_memref_from_dltensor(&t, &ty, words));
  t = tensor(i32, 1, shape, NULL);
  CHECK_OK(wavert_memref_from_dltensor(&t, &ty, words));
  t = tensor(i8, 1, shape, NULL);
  CHECK_STATUS(wavert_memref_from_dltensor(&t, &ty, words), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("signless");
  t = tensor(f32, 1, shape, NULL);
  CHECK_STATUS(wavert_memref_from_dltensor(&t, &ty, words), WAVERT_ERROR_INVALID_ARGUMENT);

  /* i1 is kDLBool with 8 bits; int8 is not bool. */
  t = tensor(boolean, 1, shape, NULL);
  ty = type(boolean, 1, sizes);
  CHECK_OK(wavert_memref_from_dltensor(&t, &ty, words));
  t = tensor(i8, 1, shape, NULL);
  CHECK_STATUS(wavert_memref_from_dltensor(&t, &ty, words), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("expected bool (code=6, bits=8, lanes=1), got int8 (code=0, bits=8, lanes=1)");

  /* Lanes and unmapped codes are named by number. */
  DLDataType f32x4 = {kDLFloat, 32, 4};
  t = tensor(f32x4, 1, shape, NULL);
  ty = type(f32, 1, sizes);
  CHECK_STATUS(wavert_memref_from_dltensor(&t, &ty, words), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("float32x4 (code=2, bits=32, lanes=4)");
  DLDataType odd = {42, 32, 1};
  t = tensor(odd, 1, shape, NULL);
  CHECK_STATUS(wavert_memref_from_dltensor(&t, &ty, words), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("unknown type code 42 (code=42, bits=32, lanes=1)");
}

static void test_rank_and_sizes(void) {
  int64_t shape[] = {4, 6};
  int64_t sizes[] = {4, 5};
  int64_t words[WAVERT_MEMREF_WORDS(3)];
  DLTensor t = tensor(f32, 2, shape, NULL);
  wavert_memref_type ty = type(f32, 3, sizes);
  CHECK_STATUS(wavert_memref_from_dltensor(&t, &ty, words), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("rank mismatch: expected 3, got 2");
  ty = type(f32, 2, sizes);
  CHECK_STATUS(wavert_memref_from_dltensor(&t, &ty, words), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("shape mismatch in dimension 1: expected [4, 5], got [4, 6]");
  int64_t dynamic_sizes[] = {4, D};
  ty = type(f32, 2, dynamic_sizes);
  CHECK_OK(wavert_memref_from_dltensor(&t, &ty, words));
  int64_t negative[] = {4, -1};
  t = tensor(f32, 2, negative, NULL);
  CHECK_STATUS(wavert_memref_from_dltensor(&t, &ty, words), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(wavert_memref_from_dltensor(NULL, &ty, words), WAVERT_ERROR_INVALID_ARGUMENT);
}

static void test_strided_layouts(void) {
  int64_t words[WAVERT_MEMREF_WORDS(2)];
  /* A transposed view: strided<[?, ?], offset: ?> takes any strides, negative included. */
  int64_t shape[] = {4, 5};
  int64_t strides[] = {1, -4};
  int64_t sizes[] = {D, D};
  int64_t any_strides[] = {D, D};
  DLTensor t = tensor(f32, 2, shape, strides);
  t.byte_offset = 64;
  wavert_memref_type ty = {f32, WAVERT_MEMREF_STRIDED, 2, sizes, any_strides, D};
  CHECK_OK(wavert_memref_from_dltensor(&t, &ty, words));
  CHECK(words[1] == (int64_t)(uintptr_t)storage + 64 && words[2] == 0);
  CHECK(words[5] == 1 && words[6] == -4);

  /* Static stride entries are checked. */
  int64_t unit_inner[] = {D, 1};
  ty.strides = unit_inner;
  CHECK_STATUS(wavert_memref_from_dltensor(&t, &ty, words), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("layout mismatch in dimension 1: expected strides [?, 1], got [1, -4]");
  int64_t row[] = {10, 1};
  int64_t padded[] = {10, 1};
  t = tensor(f32, 2, shape, row);
  ty.strides = padded;
  CHECK_OK(wavert_memref_from_dltensor(&t, &ty, words));
  CHECK(words[5] == 10 && words[6] == 1);

  /* NULL strides are compact row-major for a strided layout too. */
  t = tensor(f32, 2, shape, NULL);
  ty.strides = any_strides;
  CHECK_OK(wavert_memref_from_dltensor(&t, &ty, words));
  CHECK(words[5] == 5 && words[6] == 1);

  /* A static offset moves the aligned pointer back so aligned + offset is the first element. */
  ty.offset = 3;
  t.byte_offset = 12;
  CHECK_OK(wavert_memref_from_dltensor(&t, &ty, words));
  CHECK(words[1] == (int64_t)(uintptr_t)storage && words[2] == 3);
}

static void test_empty_tensors(void) {
  int64_t words[WAVERT_MEMREF_WORDS(2)];
  int64_t shape[] = {0, 5};
  int64_t odd_strides[] = {7, 3};
  int64_t sizes[] = {D, 5};
  DLTensor t = tensor(f32, 2, shape, odd_strides);
  t.data = NULL;
  wavert_memref_type ty = type(f32, 2, sizes);
  CHECK_OK(wavert_memref_from_dltensor(&t, &ty, words));
  CHECK(words[0] == 0 && words[1] == 0);
  CHECK(words[3] == 0 && words[4] == 5 && words[5] == 5 && words[6] == 1);
  /* A static size still has to match. */
  int64_t wrong[] = {0, 4};
  t.shape = wrong;
  CHECK_STATUS(wavert_memref_from_dltensor(&t, &ty, words), WAVERT_ERROR_INVALID_ARGUMENT);
  /* Non-empty with NULL data is rejected. */
  int64_t full[] = {2, 5};
  t.shape = full;
  t.strides = NULL;
  CHECK_STATUS(wavert_memref_from_dltensor(&t, &ty, words), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("data is NULL");
}

int main(void) {
  test_identity_layout();
  test_dtypes();
  test_rank_and_sizes();
  test_strided_layouts();
  test_empty_tensors();
  puts("test_memref: ok");
  return 0;
}
