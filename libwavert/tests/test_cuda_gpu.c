/* test_cuda_gpu.c — libwavert on a real NVIDIA GPU through libcuda.so.1: PTX JIT load, memory,
 * launch and results, the bad-image message, release while kernels are queued, 96 KiB of
 * dynamic shared memory, the host-call path. Exits 77 (skipped) without a driver or device. */
#include "test_ptx.h"
#include "test_util.h"
#include "wavert_jit.h"

#define N 100000

static wavert_device *device;

static void test_vector_add(wavert_module *module) {
  wavert_function *vadd = NULL;
  CHECK_OK(wavert_module_get_function(module, "vadd", &vadd));
  static float a[N], b[N], c[N];
  for (int i = 0; i < N; ++i) a[i] = (float)i, b[i] = 2.0f * (float)i, c[i] = -1.0f;
  void *da = NULL, *db = NULL, *dc = NULL;
  CHECK_OK(wavert_memory_alloc(device, sizeof(a), &da));
  CHECK_OK(wavert_memory_alloc(device, sizeof(b), &db));
  CHECK_OK(wavert_memory_alloc(device, sizeof(c), &dc));
  CHECK_OK(wavert_memory_copy(device, da, a, sizeof(a), NULL));
  CHECK_OK(wavert_memory_copy(device, db, b, sizeof(b), NULL));
  CHECK_OK(wavert_memory_set(device, dc, 0, 4, N, NULL));
  int32_t n = N;
  void *params[] = {&da, &db, &dc, &n};
  void *stream = NULL;
  CHECK_OK(wavert_stream_create(device, &stream));
  CHECK_OK(wavert_function_launch(vadd, (N + 255) / 256, 1, 1, 256, 1, 1, 0, stream, params));
  CHECK_OK(wavert_memory_copy(device, c, dc, sizeof(c), stream));
  CHECK_OK(wavert_stream_synchronize(device, stream));
  for (int i = 0; i < N; ++i) CHECK(c[i] == 3.0f * (float)i);

  /* Through the host-call path and a kernel cache, as generated code does it. */
  wavert_kernel *slot = NULL;
  wavert_call_state state;
  CHECK_OK(wavert_memory_set(device, dc, 0, 4, N, NULL));
  CHECK_OK(wavert_call_begin(device, stream, &state));
  CHECK(wavert_jit_launch(&slot, ptx, sizeof(ptx), "vadd", (N + 127) / 128, 1, 1, 128, 1, 1, 0,
                          NULL, params) == WAVERT_OK);
  CHECK(wavert_jit_launch(&slot, ptx, sizeof(ptx), "vadd", 1, 1, 70000, 128, 1, 1, 0, NULL,
                          params) == WAVERT_ERROR_LIMIT_EXCEEDED);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_LIMIT_EXCEEDED);
  CHECK_MESSAGE("grid z = 70000 exceeds the device limit 65535");
  CHECK_OK(wavert_memory_copy(device, c, dc, sizeof(c), stream));
  CHECK_OK(wavert_stream_synchronize(device, stream));
  for (int i = 0; i < N; ++i) CHECK(c[i] == 3.0f * (float)i);
  wavert_kernel_release(slot);

  CHECK_OK(wavert_stream_release(device, stream));
  CHECK_OK(wavert_memory_free(device, da));
  CHECK_OK(wavert_memory_free(device, db));
  CHECK_OK(wavert_memory_free(device, dc));
}

static void test_dynamic_shared(wavert_module *module) {
  wavert_function *function = NULL;
  CHECK_OK(wavert_module_get_function(module, "smem_last", &function));
  int64_t optin = 0;
  CHECK_OK(wavert_device_attribute_get(device, WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                       &optin));
  const int64_t sizes[] = {48 * 1024, 96 * 1024, optin};
  void *out = NULL;
  CHECK_OK(wavert_memory_alloc(device, 4, &out));
  for (int i = 0; i < 3; ++i) {
    if (sizes[i] > optin) continue;
    uint32_t words = (uint32_t)(sizes[i] / 4), seen = 0;
    void *params[] = {&out, &words};
    CHECK_OK(wavert_memory_set(device, out, 0, 4, 1, NULL));
    CHECK_OK(wavert_function_launch(function, 1, 1, 1, 32, 1, 1, sizes[i], NULL, params));
    CHECK_OK(wavert_memory_copy(device, &seen, out, 4, NULL));
    CHECK(seen == words);
  }
  CHECK_STATUS(wavert_function_launch(function, 1, 1, 1, 32, 1, 1, optin + 1, NULL, NULL),
               WAVERT_ERROR_LIMIT_EXCEEDED);
  CHECK_MESSAGE("exceeds the device maximum");
  CHECK_OK(wavert_memory_free(device, out));
}

static void test_release_while_enqueued(void) {
  wavert_module *module = NULL;
  wavert_function *spin = NULL;
  CHECK_OK(wavert_module_load(device, ptx, sizeof(ptx), &module));
  CHECK_OK(wavert_module_get_function(module, "spin", &spin));
  void *out = NULL;
  CHECK_OK(wavert_memory_alloc(device, 8, &out));
  CHECK_OK(wavert_memory_set(device, out, 0, 4, 2, NULL));
  uint64_t cycles = 50u * 1000u * 1000u; /* tens of milliseconds */
  void *params[] = {&cycles, &out};
  CHECK_OK(wavert_function_launch(spin, 1, 1, 1, 1, 1, 1, 0, NULL, params));
  wavert_module_release(module); /* last reference: waits for the spin kernel, then unloads */
  uint64_t spent = 0;
  CHECK_OK(wavert_memory_copy(device, &spent, out, 8, NULL));
  CHECK(spent >= cycles);
  CHECK_OK(wavert_device_synchronize(device));
  CHECK_OK(wavert_memory_free(device, out));
}

int main(void) {
  int32_t count = 0;
  if (wavert_device_count(kDLCUDA, &count) != WAVERT_OK || count == 0) {
    printf("skipped: %s\n", count == 0 && wavert_last_status() == WAVERT_OK
                                ? "no CUDA device"
                                : wavert_last_error());
    return TEST_SKIP;
  }
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device));
  char chip[32];
  CHECK_OK(wavert_device_chip(device, chip, sizeof(chip)));
  printf("device 0: %s\n", chip);

  wavert_module *module = NULL;
  static const char bad[] = ".version 6.0\n.target sm_52\nthis is not ptx\n";
  CHECK_STATUS(wavert_module_load(device, bad, sizeof(bad), &module), WAVERT_ERROR_DRIVER);
  CHECK_MESSAGE("cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX");
  printf("bad image: %s\n", wavert_last_error());
  static const unsigned char junk[] = {0x7f, 'E', 'L', 'F', 1, 2, 3, 4, 5, 6, 7, 8};
  CHECK_STATUS(wavert_module_load(device, junk, sizeof(junk), &module), WAVERT_ERROR_DRIVER);
  CHECK_MESSAGE("cuModuleLoadDataEx: CUDA_ERROR_");
  printf("bad binary: %s\n", wavert_last_error());

  /* PTX without its terminating NUL loads too. */
  CHECK_OK(wavert_module_load(device, ptx, sizeof(ptx) - 1, &module));
  test_vector_add(module);
  test_dynamic_shared(module);
  wavert_module_release(module);
  test_release_while_enqueued();
  puts("test_cuda_gpu: ok");
  return 0;
}
