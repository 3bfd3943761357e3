/* test_edges.c — arithmetic at the edges, against fake_cuda: INT64_MAX and INT64_MIN, products
 * of 2^32, negative values, element sizes and shared-memory sums that overflow. Each is a status
 * whose message names the quantity, and nothing reaches the driver; the largest values that
 * still fit are accepted. Run it under UBSan (meson -Db_sanitize=undefined) to see that no
 * signed overflow happens on the way. */
#include <limits.h>
#include <stdint.h>

#include "fake_cuda.h"
#include "test_util.h"
#include "wavert_jit.h"
#include "wavert_mgpu.h"

#define D WAVERT_DYNAMIC
#define P32 (INT64_C(1) << 32)

static wavert_device *device;  /* fake H200 limits */
static wavert_device *device1; /* block dimensions and threads per block of INT_MAX */
static char storage[64];
static wavert_module *modules[4]; /* released at the end */
static int module_count;

/* `expression` returns `status` with a message containing `text`, and calls no driver entry. */
#define CHECK_REJECTED(expression, status, text)                                              \
  do {                                                                                        \
    fake_cuda_reset();                                                                        \
    wavert_clear_error();                                                                     \
    CHECK_STATUS(expression, status);                                                         \
    if (strstr(wavert_last_error(), (text)) == NULL) {                                        \
      fprintf(stderr, "%s:%d: expected a message containing \"%s\", got \"%s\"\n", __FILE__,  \
              __LINE__, (text), wavert_last_error());                                         \
      exit(1);                                                                                \
    }                                                                                         \
    CHECK(fake_cuda_call_at(0) == NULL);                                                      \
  } while (0)

static wavert_status memref(DLDataType dtype, int32_t rank, int64_t *shape, int64_t *strides,
                            uint32_t flags, const int64_t *type_strides, int64_t offset,
                            int64_t *words) {
  int64_t sizes[8] = {D, D, D, D, D, D, D, D};
  DLTensor tensor = {storage, {kDLCUDA, 0}, rank, dtype, shape, strides, 0};
  wavert_memref_type type = {dtype, flags, rank, sizes, type_strides, offset};
  return wavert_memref_from_dltensor(&tensor, &type, words);
}

static void test_memref_strides(void) {
  const DLDataType i8 = {kDLInt, 8, 1};
  const DLDataType f64 = {kDLFloat, 64, 1};
  int64_t words[WAVERT_MEMREF_WORDS(4)];
  const int64_t any[4] = {D, D, D, D};

  /* (2, 2^32, 2^32, 2): the row-major stride of dimension 0 would be 2^65 (it used to wrap to 0
   * and be accepted). */
  int64_t huge[] = {2, P32, P32, 2};
  CHECK_REJECTED(memref(i8, 4, huge, NULL, 0, NULL, 0, words), WAVERT_ERROR_INVALID_ARGUMENT,
                 "tensor of shape [2, 4294967296, 4294967296, 2]: the row-major stride of "
                 "dimension 0 overflows int64 (limit 9223372036854775807 elements)");
  /* The same with NULL strides and a strided layout (the compact strides are its strides). */
  CHECK_REJECTED(memref(i8, 4, huge, NULL, WAVERT_MEMREF_STRIDED, any, 0, words),
                 WAVERT_ERROR_INVALID_ARGUMENT, "row-major stride of dimension 0 overflows");
  /* (2^32, 2^32, 2): dimension 0's stride 2^33 fits, the element count 2^65 does not. */
  int64_t three[] = {P32, P32, 2};
  CHECK_REJECTED(memref(i8, 3, three, NULL, 0, NULL, 0, words), WAVERT_ERROR_INVALID_ARGUMENT,
                 "its byte extent overflows int64");
  /* Empty tensors have no extent, but an identity layout still writes row-major strides. */
  int64_t empty[] = {0, INT64_C(1) << 40, INT64_C(1) << 40};
  CHECK_REJECTED(memref(i8, 3, empty, NULL, 0, NULL, 0, words), WAVERT_ERROR_INVALID_ARGUMENT,
                 "the row-major stride of dimension 0 overflows");
  int64_t empty_strides[] = {1, 1, 1};
  CHECK_OK(memref(i8, 3, empty, empty_strides, WAVERT_MEMREF_STRIDED, any, 0, words));

  /* The largest compact tensor that fits: 2^62 one-byte elements. */
  int64_t big[] = {INT64_C(1) << 30, INT64_C(1) << 31, 2};
  CHECK_OK(memref(i8, 3, big, NULL, 0, NULL, 0, words));
  CHECK(words[6] == INT64_C(1) << 32 && words[7] == 2 && words[8] == 1);
  /* One more row: 2^63 elements. */
  int64_t over[] = {INT64_C(1) << 31, INT64_C(1) << 31, 2};
  CHECK_REJECTED(memref(i8, 3, over, NULL, 0, NULL, 0, words), WAVERT_ERROR_INVALID_ARGUMENT,
                 "tensor of shape [2147483648, 2147483648, 2] and strides [4294967296, 2, 1] "
                 "(8-bit elements): its byte extent overflows int64 (limit 9223372036854775807 "
                 "bytes)");

  /* Explicit strides: INT64_MAX, a reach of 2^63, and negative strides whose span overflows. */
  int64_t two[] = {2};
  int64_t stride_max[] = {INT64_MAX};
  CHECK_REJECTED(memref(i8, 1, two, stride_max, WAVERT_MEMREF_STRIDED, any, 0, words),
                 WAVERT_ERROR_INVALID_ARGUMENT, "its byte extent overflows int64");
  int64_t three1[] = {3};
  int64_t stride_62[] = {INT64_C(1) << 62};
  CHECK_REJECTED(memref(i8, 1, three1, stride_62, WAVERT_MEMREF_STRIDED, any, 0, words),
                 WAVERT_ERROR_INVALID_ARGUMENT, "its byte extent overflows int64");
  int64_t stride_neg[] = {-(INT64_C(1) << 62)};
  CHECK_REJECTED(memref(i8, 1, three1, stride_neg, WAVERT_MEMREF_STRIDED, any, 0, words),
                 WAVERT_ERROR_INVALID_ARGUMENT, "its byte extent overflows int64");
  int64_t mixed_shape[] = {2, 2};
  int64_t mixed[] = {INT64_C(1) << 62, -(INT64_C(1) << 62)};
  CHECK_REJECTED(memref(i8, 2, mixed_shape, mixed, WAVERT_MEMREF_STRIDED, any, 0, words),
                 WAVERT_ERROR_INVALID_ARGUMENT, "its byte extent overflows int64");
  int64_t stride_min[] = {INT64_MIN + 1}; /* a span of INT64_MAX, so INT64_MAX + 1 elements */
  CHECK_REJECTED(memref(i8, 1, two, stride_min, WAVERT_MEMREF_STRIDED, any, 0, words),
                 WAVERT_ERROR_INVALID_ARGUMENT, "strides [-9223372036854775807] (8-bit");
  int64_t stride_half[] = {INT64_MIN / 2};
  CHECK_OK(memref(i8, 1, two, stride_half, WAVERT_MEMREF_STRIDED, any, 0, words));
  CHECK(words[4] == INT64_MIN / 2);
  /* A stride of 0 (broadcast) over INT64_MAX elements spans one element. */
  int64_t longest[] = {INT64_MAX};
  int64_t zero[] = {0};
  CHECK_OK(memref(f64, 1, longest, zero, WAVERT_MEMREF_STRIDED, any, 0, words));

  /* Element size: 2^60 elements fit int64, their 2^63 bytes of f64 do not; 2^59 do. */
  int64_t elements60[] = {INT64_C(1) << 60};
  CHECK_REJECTED(memref(f64, 1, elements60, NULL, 0, NULL, 0, words),
                 WAVERT_ERROR_INVALID_ARGUMENT, "(64-bit elements): its byte extent overflows");
  int64_t elements59[] = {INT64_C(1) << 59};
  CHECK_OK(memref(f64, 1, elements59, NULL, 0, NULL, 0, words));
  /* Sub-byte elements: INT64_MAX 4-bit elements are 2^62 bytes. */
  const DLDataType i4 = {kDLInt, 4, 1};
  CHECK_OK(memref(i4, 1, longest, NULL, 0, NULL, 0, words));
  /* Lanes multiply the element size: 2^47 elements of 64 x 65535 bits. */
  const DLDataType wide = {kDLFloat, 64, 65535};
  int64_t elements47[] = {INT64_C(1) << 47};
  CHECK_REJECTED(memref(wide, 1, elements47, NULL, 0, NULL, 0, words),
                 WAVERT_ERROR_INVALID_ARGUMENT, "(4194240-bit elements): its byte extent");

  /* Negative sizes, INT64_MIN included. */
  int64_t negative[] = {2, INT64_MIN};
  CHECK_REJECTED(memref(i8, 2, negative, NULL, 0, NULL, 0, words), WAVERT_ERROR_INVALID_ARGUMENT,
                 "tensor dimension 1 has negative size -9223372036854775808");
}

static void test_memref_offsets(void) {
  const DLDataType f32 = {kDLFloat, 32, 1};
  const DLDataType i8 = {kDLInt, 8, 1};
  int64_t words[WAVERT_MEMREF_WORDS(1)];
  const int64_t any[1] = {D};
  int64_t one[] = {1};

  /* Static offset x element size: 2^62 f32 elements are 2^67 bits. */
  CHECK_REJECTED(memref(f32, 1, one, NULL, WAVERT_MEMREF_STRIDED, any, INT64_C(1) << 62, words),
                 WAVERT_ERROR_INVALID_ARGUMENT,
                 "static offset 4611686018427387904 of 32-bit elements: its size in bits "
                 "overflows int64 (limit 9223372036854775807)");
  CHECK_REJECTED(memref(i8, 1, one, NULL, WAVERT_MEMREF_STRIDED, any, INT64_MAX, words),
                 WAVERT_ERROR_INVALID_ARGUMENT, "static offset 9223372036854775807 of 8-bit");
  /* The largest static offset of bytes that fits in bits: the base lies below the data. */
  int64_t offset = INT64_MAX / 8;
  CHECK_OK(memref(i8, 1, one, NULL, WAVERT_MEMREF_STRIDED, any, offset, words));
  CHECK(words[2] == offset);
  CHECK((uint64_t)words[1] + (uint64_t)offset == (uint64_t)(uintptr_t)storage);

  /* byte_offset past the end of the address space (a negative offset converted). */
  int64_t sizes[] = {D};
  DLTensor tensor = {storage, {kDLCUDA, 0}, 1, i8, one, NULL, (uint64_t)-16};
  wavert_memref_type type = {i8, 0, 1, sizes, NULL, 0};
  CHECK_REJECTED(wavert_memref_from_dltensor(&tensor, &type, words),
                 WAVERT_ERROR_INVALID_ARGUMENT, "+ byte_offset 18446744073709551600 overflows a "
                                                "64-bit address");
}

static wavert_function *function(wavert_device *on, const char *name, int static_shared) {
  static const char image[] = "// fake ptx";
  wavert_module *module = NULL;
  fake_cuda_set_function_attribute(1, static_shared);
  CHECK_OK(wavert_module_load(on, image, sizeof(image), &module));
  CHECK(module_count < 4);
  modules[module_count++] = module;
  wavert_function *f = NULL;
  CHECK_OK(wavert_module_get_function(module, name, &f));
  fake_cuda_set_function_attribute(1, 0);
  return f;
}

static void test_launch(void) {
  wavert_function *plain = function(device, "plain", 0);
  wavert_function *stat16 = function(device, "stat16", 16);
  wavert_function *wide = function(device1, "wide", 0);

  /* INT64_MAX dynamic shared memory with 16 static bytes: the sum used to wrap to a negative
   * total, pass the check and reach the driver as 0xFFFFFFFF. */
  CHECK_REJECTED(wavert_function_launch(stat16, 1, 1, 1, 1, 1, 1, INT64_MAX, NULL, NULL),
                 WAVERT_ERROR_LIMIT_EXCEEDED,
                 "launch of kernel 'stat16': dynamic shared memory 9223372036854775807 bytes + "
                 "static 16 bytes overflows int64 (the device maximum is 232448 bytes)");
  CHECK_REJECTED(wavert_function_launch(stat16, 1, 1, 1, 1, 1, 1, INT64_MAX - 16, NULL, NULL),
                 WAVERT_ERROR_LIMIT_EXCEEDED, "exceeds the device maximum 232448 bytes");
  CHECK_REJECTED(wavert_function_launch(plain, 1, 1, 1, 1, 1, 1, INT64_MAX, NULL, NULL),
                 WAVERT_ERROR_LIMIT_EXCEEDED, "exceeds the device maximum 232448 bytes");
  CHECK_REJECTED(wavert_function_launch(plain, 1, 1, 1, 1, 1, 1, INT64_MIN, NULL, NULL),
                 WAVERT_ERROR_INVALID_ARGUMENT,
                 "dynamic shared memory -9223372036854775808 bytes is negative");
  /* Every extent at INT64_MAX and INT64_MIN. */
  static const char *const names[] = {"grid x", "grid y", "grid z",
                                      "block x", "block y", "block z"};
  for (int i = 0; i < 6; ++i) {
    int64_t e[6] = {1, 1, 1, 1, 1, 1};
    char text[96];
    e[i] = INT64_MAX;
    snprintf(text, sizeof(text), "%s = 9223372036854775807 exceeds the device limit", names[i]);
    CHECK_REJECTED(wavert_function_launch(plain, e[0], e[1], e[2], e[3], e[4], e[5], 0, NULL,
                                          NULL),
                   WAVERT_ERROR_LIMIT_EXCEEDED, text);
    e[i] = INT64_MIN;
    snprintf(text, sizeof(text), "%s = -9223372036854775808 is negative", names[i]);
    CHECK_REJECTED(wavert_function_launch(plain, e[0], e[1], e[2], e[3], e[4], e[5], 0, NULL,
                                          NULL),
                   WAVERT_ERROR_INVALID_ARGUMENT, text);
  }
  /* 2^32 grid blocks in x. */
  CHECK_REJECTED(wavert_function_launch(plain, P32, 1, 1, 1, 1, 1, 0, NULL, NULL),
                 WAVERT_ERROR_LIMIT_EXCEEDED, "grid x = 4294967296 exceeds the device limit");

  /* A device whose block dimensions allow INT_MAX each: their product overflows int64. */
  CHECK_REJECTED(wavert_function_launch(wide, 1, 1, 1, INT_MAX, INT_MAX, INT_MAX, 0, NULL, NULL),
                 WAVERT_ERROR_LIMIT_EXCEEDED,
                 "launch of kernel 'wide': threads per block (2147483647 x 2147483647 x "
                 "2147483647) overflows int64 (the device limit is 2147483647)");
  CHECK_REJECTED(wavert_function_launch(wide, 1, 1, 1, 65536, 65536, 1, 0, NULL, NULL),
                 WAVERT_ERROR_LIMIT_EXCEEDED,
                 "4294967296 threads per block (65536 x 65536 x 1) exceeds the device limit "
                 "2147483647");
  /* Within every limit: launched, values unchanged. */
  fake_cuda_reset();
  CHECK_OK(wavert_function_launch(plain, INT32_MAX, 65535, 65535, 1024, 1, 1, 232448, NULL,
                                  NULL));
  CHECK(fake_cuda_launch_count() == 1);
  CHECK(fake_cuda_launch_at(0)->grid[0] == 2147483647u);
  CHECK(fake_cuda_launch_at(0)->shared_bytes == 232448);
}

static void test_memory(void) {
  void *ptr = storage;
  CHECK_REJECTED(wavert_memory_alloc(device, SIZE_MAX, &ptr), WAVERT_ERROR_INVALID_ARGUMENT,
                 "wavert_memory_alloc: size = 18446744073709551615 bytes exceeds the limit "
                 "PTRDIFF_MAX = 9223372036854775807");
  CHECK(ptr == storage); /* not written */
  CHECK_REJECTED(wavert_memory_alloc(device, (size_t)1 << 63, &ptr),
                 WAVERT_ERROR_INVALID_ARGUMENT, "size = 9223372036854775808 bytes exceeds");
  void *end = (void *)(uintptr_t)(UINTPTR_MAX - 15);
  CHECK_REJECTED(wavert_memory_copy(device, end, storage, 32, NULL),
                 WAVERT_ERROR_INVALID_ARGUMENT,
                 "wavert_memory_copy: dst = 0xfffffffffffffff0 + 32 bytes wraps around");
  CHECK_REJECTED(wavert_memory_copy(device, storage, end, 32, NULL),
                 WAVERT_ERROR_INVALID_ARGUMENT, "wavert_memory_copy: src = ");
  CHECK_REJECTED(wavert_memory_copy(device, storage, storage + 32, (size_t)-1, NULL),
                 WAVERT_ERROR_INVALID_ARGUMENT, "size = 18446744073709551615 bytes exceeds");
  /* 2^62 four-byte elements are 2^64 bytes; 2^61 of them are 2^63, past PTRDIFF_MAX. */
  CHECK_REJECTED(wavert_memory_set(device, storage, 0, 4, (size_t)1 << 62, NULL),
                 WAVERT_ERROR_INVALID_ARGUMENT,
                 "wavert_memory_set: 4611686018427387904 elements of 4 bytes overflow a 64-bit "
                 "byte count");
  CHECK_REJECTED(wavert_memory_set(device, storage, 0, 4, (size_t)1 << 61, NULL),
                 WAVERT_ERROR_INVALID_ARGUMENT,
                 "wavert_memory_set: count x element size = 9223372036854775808 bytes exceeds");
  CHECK_REJECTED(wavert_memory_set(device, end, 0, 2, 9, NULL), WAVERT_ERROR_INVALID_ARGUMENT,
                 "wraps around the 64-bit address space");
  /* The same calls in range reach the driver. */
  fake_cuda_reset();
  CHECK_OK(wavert_memory_set(device, storage, 0x01020304u, 4, 8, NULL));
  CHECK_OK(wavert_memory_copy(device, storage + 32, storage, 32, NULL));
  CHECK(fake_cuda_calls("cuMemsetD32_v2") == 1 && fake_cuda_calls("cuMemcpy") == 1);

  static const char image[] = "// fake ptx";
  wavert_module *module = NULL;
  CHECK_REJECTED(wavert_module_load(device, image, SIZE_MAX, &module),
                 WAVERT_ERROR_INVALID_ARGUMENT, "wavert_module_load: size = 18446744073709551615");
  wavert_kernel *kernel = NULL;
  CHECK_REJECTED(wavert_kernel_create(image, SIZE_MAX, "k", &kernel),
                 WAVERT_ERROR_INVALID_ARGUMENT, "wavert_kernel_create: size = ");
  CHECK(module == NULL && kernel == NULL);
}

/* Run `body` inside a host call; the call must end with INVALID_ARGUMENT mentioning `text`. */
#define CHECK_CALL_FAILS(body, text)                                                          \
  do {                                                                                        \
    wavert_call_state state;                                                                  \
    CHECK_OK(wavert_call_begin(device, NULL, &state));                                        \
    fake_cuda_reset();                                                                        \
    body;                                                                                     \
    CHECK(wavert_jit_failed());                                                               \
    CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);                     \
    CHECK_MESSAGE(text);                                                                      \
    CHECK(fake_cuda_calls("cuMemAlloc_v2") + fake_cuda_calls("cuMemcpyAsync") +               \
              fake_cuda_calls("cuMemsetD32Async") + fake_cuda_calls("cuMemsetD16Async") +     \
              fake_cuda_calls("cuLaunchKernel") ==                                            \
          0);                                                                                 \
  } while (0)

static void test_jit(void) {
  void *end = (void *)(uintptr_t)(UINTPTR_MAX - 15);
  /* A negative size computed by generated code reaches mgpuMemAlloc as a huge uint64. */
  CHECK_CALL_FAILS(CHECK(mgpuMemAlloc((uint64_t)-8, NULL, 0) == NULL),
                   "mgpuMemAlloc: size = 18446744073709551608 bytes exceeds the limit");
  CHECK_CALL_FAILS(mgpuMemcpy(end, storage, 32, NULL),
                   "mgpuMemcpy: dst = 0xfffffffffffffff0 + 32 bytes wraps around");
  CHECK_CALL_FAILS(mgpuMemcpy(storage, storage, UINT64_MAX, NULL),
                   "mgpuMemcpy: size = 18446744073709551615 bytes exceeds");
  CHECK_CALL_FAILS(mgpuMemset32(storage, 0, UINT64_C(1) << 62, NULL),
                   "mgpuMemset32: 4611686018427387904 elements of 4 bytes overflow");
  CHECK_CALL_FAILS(mgpuMemset16(end, 0, 9, NULL), "mgpuMemset16: ptr = ");
  static const char image[] = "// fake ptx";
  wavert_kernel *slot = NULL;
  CHECK_CALL_FAILS(wavert_jit_launch(&slot, image, INT64_MIN, "k", 1, 1, 1, 1, 1, 1, 0, NULL,
                                     NULL),
                   "image_size is negative");
  CHECK_CALL_FAILS(wavert_jit_launch(&slot, image, sizeof(image), "k", 1, 1, 1, 1, 1, 1,
                                     INT32_MIN, NULL, NULL),
                   "dynamic shared memory -2147483648 bytes is negative");
  wavert_kernel_release(slot);
}

int main(void) {
  /* Device 1: CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK (1) and MAX_BLOCK_DIM_X/Y/Z (2..4). */
  for (int attribute = 1; attribute <= 4; ++attribute)
    fake_cuda_set_device_attribute(1, attribute, INT_MAX);
  fake_cuda_set_function_attribute(0, INT_MAX); /* the kernels' own thread limit */
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device));
  CHECK_OK(wavert_device_get(kDLCUDA, 1, &device1));

  test_memref_strides();
  test_memref_offsets();
  test_launch();
  test_memory();
  test_jit();
  for (int i = 0; i < module_count; ++i) wavert_module_release(modules[i]);
  puts("test_edges: ok");
  return 0;
}
