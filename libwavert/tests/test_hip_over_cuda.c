/* test_hip_over_cuda.c — libwavert's HIP backend (device type kDLROCM) running real kernels:
 * $WAVERT_HIP_LIBRARY is hip_over_cuda.c, a libamdhip64 stand-in over the CUDA driver, so the
 * HIP code path (chip query, hipModuleLoadData, argument packing through
 * hipModuleLaunchKernel, dynamic shared memory with the > 48 KiB opt-in, streams, memory,
 * error messages, release, Wave's lowered launches) runs on an NVIDIA GPU. Exits 77
 * (skipped) without libcuda.so.1 or a CUDA device. */
#include <dlfcn.h>
#include <stdlib.h>

#include "test_ptx.h"
#include "test_util.h"
#include "wavert_jit.h"
#include "wavert_mgpu.h"

#define N 100000

static wavert_device *device;

static void test_vector_add(wavert_module *module) {
  wavert_function *vadd = NULL;
  CHECK_OK(wavert_module_get_function(module, "vadd", &vadd));
  CHECK_STATUS(wavert_module_get_function(module, "no_such_kernel", &vadd), WAVERT_ERROR_NOT_FOUND);
  CHECK_MESSAGE("no kernel named 'no_such_kernel'");
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

  /* Through the host-call path and a kernel cache, as generated code does it; a second
   * stream ordered after the call's stream with an event (hipEventRecord/hipStreamWaitEvent). */
  wavert_kernel *slot = NULL;
  wavert_call_state state;
  CHECK_OK(wavert_memory_set(device, dc, 0, 4, N, stream));
  CHECK_OK(wavert_call_begin(device, stream, &state));
  CHECK(wavert_jit_launch(&slot, ptx, sizeof(ptx), "vadd", (N + 127) / 128, 1, 1, 128, 1, 1, 0,
                          NULL, params) == WAVERT_OK);
  void *other = mgpuStreamCreate();
  CHECK(other != NULL && !wavert_jit_failed());
  CHECK(wavert_jit_launch(&slot, ptx, sizeof(ptx), "vadd", 1, 1, 70000, 128, 1, 1, 0, NULL,
                          params) == WAVERT_ERROR_LIMIT_EXCEEDED);
  mgpuStreamSynchronize(other);
  mgpuStreamDestroy(other);
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

/* Wave's lowered launch ABI on the HIP backend: one load per handle, a launch on the call's
 * stream, clusters refused (HIP has none) without touching the driver. */
static void test_wave_launches(void) {
  static float a[N], b[N], c[N];
  for (int i = 0; i < N; ++i) a[i] = (float)i, b[i] = 2.0f * (float)i, c[i] = -1.0f;
  void *da = NULL, *db = NULL, *dc = NULL, *stream = NULL, *handle = NULL;
  CHECK_OK(wavert_memory_alloc(device, sizeof(a), &da));
  CHECK_OK(wavert_memory_alloc(device, sizeof(b), &db));
  CHECK_OK(wavert_memory_alloc(device, sizeof(c), &dc));
  CHECK_OK(wavert_memory_copy(device, da, a, sizeof(a), NULL));
  CHECK_OK(wavert_memory_copy(device, db, b, sizeof(b), NULL));
  CHECK_OK(wavert_memory_set(device, dc, 0, 4, N, NULL));
  CHECK_OK(wavert_stream_create(device, &stream));
  int32_t n = N;
  void *params[] = {&da, &db, &dc, &n};
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device, stream, &state));
  void *fn = wavert_jit_wave_load_kernel(stream, &handle, ptx, sizeof(ptx), "vadd");
  CHECK(fn != NULL && handle != NULL);
  CHECK(wavert_jit_wave_load_kernel(stream, &handle, ptx, sizeof(ptx), "vadd") == fn);
  wavert_jit_wave_launch_kernel(NULL, fn, 0, (N + 255) / 256, 1, 1, 256, 1, 1, 1, 1, 1, params,
                                4);
  CHECK(!wavert_jit_failed());
  wavert_jit_wave_launch_kernel(NULL, fn, 0, 2, 2, 1, 256, 1, 1, 2, 2, 1, params, 4);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_UNSUPPORTED);
  CHECK_MESSAGE("has no thread-block clusters");
  CHECK_OK(wavert_memory_copy(device, c, dc, sizeof(c), stream));
  CHECK_OK(wavert_stream_synchronize(device, stream));
  for (int i = 0; i < N; ++i) CHECK(c[i] == 3.0f * (float)i);
  wavert_kernel_release(handle);
  CHECK_OK(wavert_stream_release(device, stream));
  CHECK_OK(wavert_memory_free(device, da));
  CHECK_OK(wavert_memory_free(device, db));
  CHECK_OK(wavert_memory_free(device, dc));
}

static void test_dynamic_shared(wavert_module *module) {
  wavert_function *function = NULL;
  CHECK_OK(wavert_module_get_function(module, "smem_last", &function));
  int64_t plain = 0, optin = 0;
  CHECK_OK(wavert_device_attribute_get(device, WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK,
                                       &plain));
  CHECK_OK(wavert_device_attribute_get(device, WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                       &optin));
  printf("shared memory per block: %lld B, opt-in %lld B\n", (long long)plain, (long long)optin);
  /* 48 KiB (the edge, no opt-in), 96 KiB and the maximum (hipFuncSetAttribute opt-in). */
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
  uint64_t cycles = 50u * 1000u * 1000u;
  void *params[] = {&cycles, &out};
  CHECK_OK(wavert_function_launch(spin, 1, 1, 1, 1, 1, 1, 0, NULL, params));
  wavert_module_release(module); /* last reference: hipDeviceSynchronize, then hipModuleUnload */
  uint64_t spent = 0;
  CHECK_OK(wavert_memory_copy(device, &spent, out, 8, NULL));
  CHECK(spent >= cycles);
  CHECK_OK(wavert_device_synchronize(device));
  CHECK_OK(wavert_memory_free(device, out));
}

int main(void) {
  const char *driver = getenv("WAVERT_HIP_OVER_CUDA_DRIVER"); /* the stand-in's override */
  if (dlopen(driver != NULL && driver[0] ? driver : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL) ==
      NULL) {
    printf("skipped: no CUDA driver (libcuda.so.1) behind the HIP stand-in\n");
    return TEST_SKIP;
  }
  int32_t count = 0;
  if (wavert_device_count(kDLROCM, &count) != WAVERT_OK || count == 0) {
    printf("skipped: %s\n", count == 0 && wavert_last_status() == WAVERT_OK
                                ? "no CUDA device behind the HIP stand-in"
                                : wavert_last_error());
    return TEST_SKIP;
  }
  CHECK_OK(wavert_device_get(kDLROCM, 0, &device));
  DLDevice dl = {kDLCPU, -1};
  CHECK_OK(wavert_device_dl(device, &dl));
  CHECK(dl.device_type == kDLROCM);
  char chip[32];
  CHECK_OK(wavert_device_chip(device, chip, sizeof(chip)));
  printf("HIP device 0 (over CUDA): %s\n", chip);
  CHECK(strcmp(chip, "gfx942") == 0); /* "gfx942:sramecc+:xnack-" without its features */

  wavert_module *module = NULL;
  static const unsigned char junk[] = {0x7f, 'E', 'L', 'F', 1, 2, 3, 4, 5, 6, 7, 8, 0};
  CHECK_STATUS(wavert_module_load(device, junk, sizeof(junk), &module), WAVERT_ERROR_DRIVER);
  CHECK(module == NULL);
  CHECK_MESSAGE("hipModuleLoadData: hipError");
  printf("bad image: %s\n", wavert_last_error());

  CHECK_OK(wavert_module_load(device, ptx, sizeof(ptx), &module));
  test_vector_add(module);
  test_wave_launches();
  test_dynamic_shared(module);
  wavert_module_release(module);
  test_release_while_enqueued();
  puts("test_hip_over_cuda: ok");
  return 0;
}
