/* test_handles.c — handles used past their life and NULL pointers, against fake_cuda: a second
 * release of a module, kernel object or stream is INVALID_ARGUMENT and reaches no driver call; a
 * second free of device memory is the driver's error; wavert_device_dl with NULL is a status;
 * NULL dst/src of mgpuMemcpy and mgpuMemset32/16 are INVALID_ARGUMENT and reach no driver
 * call. Run under ASan (meson -Db_sanitize=address,undefined) to see that no
 * freed memory is read. */
#include <stdint.h>
#include <time.h>

#include "fake_cuda.h"
#include "test_util.h"
#include "wavert_jit.h"
#include "wavert_mgpu.h"

static wavert_device *device;
static const char image[] = "// fake ptx: kernels scale, add";

/* `expression` returns `status` with a message containing `text`, and calls no driver entry. */
#define CHECK_REJECTED(expression, status, text)                                              \
  do {                                                                                        \
    fake_cuda_reset();                                                                        \
    wavert_clear_error();                                                                     \
    CHECK_STATUS(expression, status);                                                         \
    CHECK_MESSAGE(text);                                                                      \
    CHECK(fake_cuda_call_at(0) == NULL);                                                      \
  } while (0)

static void test_device_dl(void) {
  DLDevice dl = {kDLCPU, -1};
  CHECK_REJECTED(wavert_device_dl(NULL, &dl), WAVERT_ERROR_INVALID_ARGUMENT,
                 "wavert_device_dl: device or out_device is NULL");
  CHECK(dl.device_type == kDLCPU && dl.device_id == -1); /* not written */
  CHECK_REJECTED(wavert_device_dl(device, NULL), WAVERT_ERROR_INVALID_ARGUMENT,
                 "wavert_device_dl");
  CHECK_OK(wavert_device_dl(device, &dl));
  CHECK(dl.device_type == kDLCUDA && dl.device_id == 0);
}

static void test_module_release(void) {
  wavert_module *module = NULL;
  CHECK_OK(wavert_module_load(device, image, sizeof(image), &module));
  wavert_module_retain(module);
  fake_cuda_reset();
  CHECK_OK(wavert_module_release(module)); /* one reference left */
  CHECK(fake_cuda_calls("cuModuleUnload") == 0);
  CHECK_OK(wavert_module_release(module));
  CHECK(fake_cuda_calls("cuModuleUnload") == 1);
  CHECK_REJECTED(wavert_module_release(module), WAVERT_ERROR_INVALID_ARGUMENT,
                 "is not a live module (released already, or not from wavert_module_load)");
  /* Something that never was a module: rejected without being read. */
  static char not_a_module[64];
  CHECK_REJECTED(wavert_module_release((wavert_module *)not_a_module),
                 WAVERT_ERROR_INVALID_ARGUMENT, "is not a live module");
  CHECK_OK(wavert_module_release(NULL));
}

static void test_kernel_release(void) {
  wavert_kernel *kernel = NULL;
  wavert_function *function = NULL;
  CHECK_OK(wavert_kernel_create(image, sizeof(image), "scale", &kernel));
  CHECK_OK(wavert_kernel_get_function(kernel, device, &function));
  fake_cuda_reset();
  CHECK_OK(wavert_kernel_release(kernel));
  CHECK(fake_cuda_calls("cuModuleUnload") == 1);
  CHECK_REJECTED(wavert_kernel_release(kernel), WAVERT_ERROR_INVALID_ARGUMENT,
                 "is not a live kernel object");
  CHECK_OK(wavert_kernel_release(NULL));
}

static void test_stream_release(void) {
  void *stream = NULL;
  CHECK_OK(wavert_stream_create(device, &stream));
  int live = fake_cuda_live_streams();
  CHECK_OK(wavert_stream_release(device, stream));
  CHECK(fake_cuda_live_streams() == live - 1);
  CHECK_REJECTED(wavert_stream_release(device, stream), WAVERT_ERROR_INVALID_ARGUMENT,
                 "is not a live stream of wavert_stream_create");
  /* The driver's special handles are not streams one may destroy. */
  CHECK_REJECTED(wavert_stream_release(device, (void *)(uintptr_t)2),
                 WAVERT_ERROR_INVALID_ARGUMENT, "wavert_stream_release: stream 0x2");
  CHECK_OK(wavert_stream_release(device, NULL));
}

static void test_memory_free(void) {
  void *ptr = NULL;
  CHECK_OK(wavert_memory_alloc(device, 64, &ptr));
  CHECK_OK(wavert_memory_free(device, ptr));
  wavert_clear_error();
  CHECK_STATUS(wavert_memory_free(device, ptr), WAVERT_ERROR_DRIVER);
  CHECK_MESSAGE("CUDA_ERROR_INVALID_VALUE");
}

/* Run `body` inside a host call; the call must end with INVALID_ARGUMENT mentioning `text`,
 * and no copy or memset may reach the driver. */
#define CHECK_CALL_FAILS(body, text)                                                          \
  do {                                                                                        \
    wavert_call_state state;                                                                  \
    CHECK_OK(wavert_call_begin(device, NULL, &state));                                        \
    fake_cuda_reset();                                                                        \
    body;                                                                                     \
    CHECK(wavert_jit_failed());                                                               \
    CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);                     \
    CHECK_MESSAGE(text);                                                                      \
    CHECK(fake_cuda_calls("cuMemcpyAsync") + fake_cuda_calls("cuMemsetD32Async") +            \
              fake_cuda_calls("cuMemsetD16Async") ==                                          \
          0);                                                                                 \
  } while (0)

static void test_null_copies(void) {
  static char storage[64];
  CHECK_CALL_FAILS(mgpuMemcpy(NULL, storage, 16, NULL),
                   "mgpuMemcpy: dst or src is NULL (size 16 bytes)");
  CHECK_CALL_FAILS(mgpuMemcpy(storage, NULL, 16, NULL), "dst or src is NULL");
  CHECK_CALL_FAILS(mgpuMemset32(NULL, 7, 4, NULL),
                   "mgpuMemset32: dst is NULL (4 elements)");
  CHECK_CALL_FAILS(mgpuMemset16(NULL, 7, 4, NULL), "mgpuMemset16: dst is NULL");
  /* Outside a host call (upstream host code): recorded as this thread's last error. */
  wavert_clear_error();
  fake_cuda_reset();
  mgpuMemcpy(storage, NULL, 16, NULL);
  CHECK(wavert_last_status() == WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("dst or src is NULL");
  wavert_clear_error();
  mgpuMemset32(NULL, 7, 4, NULL);
  CHECK(wavert_last_status() == WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("dst is NULL");
  CHECK(fake_cuda_calls("cuMemcpyAsync") + fake_cuda_calls("cuMemsetD32Async") == 0);
  /* Size 0 with NULL stays a no-op, as before. */
  wavert_clear_error();
  mgpuMemcpy(NULL, NULL, 0, NULL);
  CHECK(wavert_last_status() == WAVERT_OK);
}

/* Nanoseconds per wavert_kernel_create + wavert_kernel_release pair (no driver call: the host
 * allocations and the registry), printed for the record. */
static void time_release(void) {
  enum { N = 200000 };
  struct timespec start, end;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (int i = 0; i < N; ++i) {
    wavert_kernel *kernel = NULL;
    CHECK_OK(wavert_kernel_create(image, sizeof(image), "scale", &kernel));
    CHECK_OK(wavert_kernel_release(kernel));
  }
  clock_gettime(CLOCK_MONOTONIC, &end);
  double ns = (double)(end.tv_sec - start.tv_sec) * 1e9 + (double)(end.tv_nsec - start.tv_nsec);
  printf("test_handles: kernel create + release: %.0f ns per pair (%d pairs)\n", ns / N, N);
}

int main(void) {
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device));
  time_release();
  test_device_dl();
  test_module_release();
  test_kernel_release();
  test_stream_release();
  test_memory_free();
  test_null_copies();
  puts("test_handles: ok");
  return 0;
}
