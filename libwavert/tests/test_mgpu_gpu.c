/* test_mgpu_gpu.c — MLIR's mgpu* runtime ABI on a real GPU, as host code from gpu-to-llvm
 * uses it: module load (PTX JIT on CUDA), streams and events, device and managed memory,
 * memcpy, memset 16/32, host registration (pointer and memref forms) with a zero-copy launch
 * on the device view of registered memory, launches outside and inside a host call, errors,
 * and on sm_90 a cluster launch and a TMA descriptor. Runs on the CUDA driver, or on HIP when
 * the CUDA driver has no device (meson runs it a second time over the HIP-over-CUDA
 * stand-in). Exits 77 (skipped) without a device. */
#include "test_ptx.h"
#include "test_util.h"
#include "wavert_jit.h"
#include "wavert_mgpu.h"
#include "memref_types.h"

#define N 4096


static int cuda; /* 1: the CUDA driver, 0: HIP */
static wavert_device *device;

static void check_no_error(void) { CHECK(wavert_last_status() == WAVERT_OK); }

static void *load_module(void) {
  void *module = cuda ? mgpuModuleLoadJIT((void *)ptx, 2) : mgpuModuleLoad((void *)ptx, sizeof(ptx));
  CHECK(module != NULL);
  if (!cuda) { /* HIP has no JIT entry point (upstream asserts) */
    CHECK(mgpuModuleLoadJIT((void *)ptx, 2) == NULL);
    CHECK(wavert_last_status() == WAVERT_ERROR_UNSUPPORTED);
    CHECK_MESSAGE("the HIP backend has no JIT");
    wavert_clear_error();
  }
  return module;
}

static void test_vadd(void *vadd) {
  static float a[N], b[N], c[N];
  for (int i = 0; i < N; ++i) a[i] = (float)i, b[i] = 0.5f * (float)i, c[i] = -1;
  memref1 ma = {a, a, 0, {N}, {1}}, mb = {b, b, 0, {N}, {1}};
  mgpuMemHostRegisterMemRef(1, &ma, 4);
  mgpuMemHostRegisterMemRef(1, &mb, 4);
  check_no_error();
  void *stream = mgpuStreamCreate();
  void *da = mgpuMemAlloc(sizeof(a), stream, 0);
  void *db = mgpuMemAlloc(sizeof(b), stream, 0);
  void *dc = mgpuMemAlloc(sizeof(c), stream, 0);
  CHECK(stream != NULL && da != NULL && db != NULL && dc != NULL);
  mgpuMemcpy(da, a, sizeof(a), stream);
  mgpuMemcpy(db, b, sizeof(b), stream);
  mgpuMemset32(dc, 0x7fc00000u, N, stream); /* NaN: every element must be written */
  int32_t n = N;
  void *params[] = {&da, &db, &dc, &n};
  mgpuLaunchKernel(vadd, N / 128, 1, 1, 128, 1, 1, 0, stream, params, NULL, 4);
  mgpuMemcpy(c, dc, sizeof(c), stream);
  void *event = mgpuEventCreate();
  mgpuEventRecord(event, stream);
  mgpuEventSynchronize(event);
  mgpuEventDestroy(event);
  check_no_error();
  for (int i = 0; i < N; ++i) CHECK(c[i] == 1.5f * (float)i);

  /* Zero copy: the kernel reads the registered host arrays through their device view. */
  wavert_memref_1d va = mgpuMemGetDeviceMemRef1dFloat(a, a, 0, N, 1);
  wavert_memref_1d vb = mgpuMemGetDeviceMemRef1dFloat(b, b, 0, N, 1);
  CHECK(va.aligned != NULL && vb.aligned != NULL);
  void *zero_copy[] = {&va.aligned, &vb.aligned, &dc, &n};
  mgpuMemset32(dc, 0, N, stream);
  mgpuLaunchKernel(vadd, N / 256, 1, 1, 256, 1, 1, 0, stream, zero_copy, NULL, 4);
  mgpuMemcpy(c, dc, sizeof(c), stream);
  mgpuStreamSynchronize(stream);
  check_no_error();
  for (int i = 0; i < N; ++i) CHECK(c[i] == 1.5f * (float)i);

  /* Inside a host call: NULL stream = the call's stream, errors come back from call_end. */
  wavert_call_state state;
  mgpuMemset32(dc, 0, N, stream);
  mgpuStreamSynchronize(stream);
  CHECK_OK(wavert_call_begin(device, stream, &state));
  mgpuLaunchKernel(vadd, N / 64, 1, 1, 64, 1, 1, 0, NULL, params, NULL, 4);
  mgpuMemcpy(c, dc, sizeof(c), NULL);
  mgpuStreamSynchronize(NULL);
  CHECK_OK(wavert_call_end(&state));
  for (int i = 0; i < N; ++i) CHECK(c[i] == 1.5f * (float)i);
  CHECK_OK(wavert_call_begin(device, stream, &state));
  mgpuLaunchKernel(vadd, 1, 70000, 1, 64, 1, 1, 0, NULL, params, NULL, 4);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_LIMIT_EXCEEDED);
  CHECK_MESSAGE("grid y = 70000 exceeds the device limit 65535");
  wavert_clear_error();

  /* Thread-block clusters (sm_90): the same result with clusters of 2 and of 16 blocks. */
  int64_t major = 0;
  CHECK_OK(wavert_device_attribute_get(device, WAVERT_DEVICE_COMPUTE_CAPABILITY_MAJOR, &major));
  if (cuda && major >= 9) {
    mgpuMemset32(dc, 0, N, stream);
    mgpuLaunchClusterKernel(vadd, 2, 1, 1, N / 128, 1, 1, 128, 1, 1, 0, stream, params, NULL);
    mgpuMemcpy(c, dc, sizeof(c), stream);
    mgpuStreamSynchronize(stream);
    check_no_error();
    for (int i = 0; i < N; ++i) CHECK(c[i] == 1.5f * (float)i);
    mgpuMemset32(dc, 0, N, stream);
    mgpuLaunchClusterKernel(vadd, 16, 1, 1, N / 64, 1, 1, 64, 1, 1, 0, stream, params, NULL);
    mgpuMemcpy(c, dc, sizeof(c), stream);
    mgpuStreamSynchronize(stream);
    check_no_error();
    for (int i = 0; i < N; ++i) CHECK(c[i] == 1.5f * (float)i);
    printf("cluster launches: ok\n");
  } else if (!cuda) {
    mgpuLaunchClusterKernel(vadd, 2, 1, 1, 2, 1, 1, 64, 1, 1, 0, stream, params, NULL);
    CHECK(wavert_last_status() == WAVERT_ERROR_UNSUPPORTED);
    CHECK_MESSAGE("the HIP backend has no thread-block clusters");
    wavert_clear_error();
  }

  mgpuMemHostUnregisterMemRef(1, &ma, 4);
  mgpuMemHostUnregisterMemRef(1, &mb, 4);
  mgpuMemFree(da, stream);
  mgpuMemFree(db, stream);
  mgpuMemFree(dc, stream);
  mgpuStreamDestroy(stream);
  check_no_error();
}

static void test_managed_and_memset16(void) {
  void *stream = mgpuStreamCreate();
  uint16_t *shared = mgpuMemAlloc(N * sizeof(uint16_t), stream, 1);
  CHECK(shared != NULL);
  mgpuMemset16(shared, 0xabcd, N, stream);
  mgpuMemset16(shared + N / 2, 0x1234, N / 2, stream);
  mgpuStreamSynchronize(stream);
  check_no_error();
  for (int i = 0; i < N; ++i) CHECK(shared[i] == (i < N / 2 ? 0xabcd : 0x1234)); /* host read */
  mgpuMemFree(shared, stream);
  mgpuStreamDestroy(stream);

  static uint32_t host[64];
  mgpuMemHostRegister(host, sizeof(host));
  check_no_error();
  mgpuMemHostUnregister(host);
  check_no_error();
  mgpuMemHostUnregister(host); /* not registered any more: the driver's error, kept */
  CHECK(wavert_last_status() == WAVERT_ERROR_DRIVER);
  printf("unregister twice: %s\n", wavert_last_error());
  wavert_clear_error();
}

static void test_tensor_map(void) {
  int64_t major = 0;
  CHECK_OK(wavert_device_attribute_get(device, WAVERT_DEVICE_COMPUTE_CAPABILITY_MAJOR, &major));
  float *global = mgpuMemAlloc(64 * 64 * sizeof(float), NULL, 0);
  memref2 m = {global, global, 0, {64, 64}, {64, 1}};
  int64_t box[2] = {16, 32};
  void *map = mgpuTensorMapEncodeTiledMemref(2, &m, 7 /* FLOAT32 */, 0, 0, 0, 0, box);
  if (cuda && major >= 9) {
    check_no_error();
    CHECK(map != NULL);
    CHECK(mgpuTensorMapEncodeTiledMemref(2, &m, 7, 0, 0, 0, 0, box) == map);
    printf("TMA descriptor: ok\n");
  } else if (!cuda) {
    CHECK(map == NULL && wavert_last_status() == WAVERT_ERROR_UNSUPPORTED);
  }
  wavert_clear_error();
  mgpuMemFree(global, NULL);
}

int main(void) {
  int32_t count = 0;
  if (wavert_device_count(kDLCUDA, &count) == WAVERT_OK && count > 0) {
    cuda = 1;
    CHECK_OK(wavert_device_get(kDLCUDA, 0, &device));
  } else if (wavert_device_count(kDLROCM, &count) == WAVERT_OK && count > 0) {
    CHECK_OK(wavert_device_get(kDLROCM, 0, &device));
  } else {
    printf("skipped: no CUDA or HIP device\n");
    return TEST_SKIP;
  }
  printf("backend: %s\n", cuda ? "CUDA" : "HIP");
  wavert_clear_error();

  static const char bad[] = ".version 6.0\n.target sm_52\nthis is not ptx\n";
  CHECK(mgpuModuleLoad((void *)bad, sizeof(bad)) == NULL);
  CHECK(wavert_last_status() == WAVERT_ERROR_DRIVER);
  printf("bad image: %s\n", wavert_last_error());
  wavert_clear_error();

  void *module = load_module();
  void *vadd = mgpuModuleGetFunction(module, "vadd");
  CHECK(vadd != NULL && mgpuModuleGetFunction(module, "no_such_kernel") == NULL);
  CHECK(wavert_last_status() == WAVERT_ERROR_NOT_FOUND);
  wavert_clear_error();
  test_vadd(vadd);
  test_managed_and_memset16();
  test_tensor_map();
  mgpuModuleUnload(module);
  check_no_error();
  puts("test_mgpu_gpu: ok");
  return 0;
}
