/* test_mgpu.c — MLIR's mgpu* runtime ABI (wavert_mgpu.h) against fake_cuda: the default
 * device outside host calls and the call's device and stream inside, argument forwarding
 * (launch, cluster launch, memory, host registration, TMA), errors recorded in the call or
 * kept as the thread's first error, and size overflow. */
#include "fake_cuda.h"
#include "test_util.h"
#include "wavert_jit.h"
#include "wavert_mgpu.h"
#include "memref_types.h"

static const char image[] = "// fake ptx: kernels scale, add";
static wavert_device *device0, *device1;


static void test_default_device(void) {
  wavert_clear_error();
  fake_cuda_reset();
  void *ptr = mgpuMemAlloc(64, NULL, 0);
  CHECK(ptr != NULL);
  CHECK(fake_cuda_calls("cuMemAlloc_v2") == 1);
  CHECK(fake_cuda_current_context() == NULL); /* the caller's (no) context is restored */
  void *shared = mgpuMemAlloc(16, NULL, 1);
  CHECK(shared != NULL && fake_cuda_calls("cuMemAllocManaged") == 1);
  CHECK(mgpuMemAlloc(0, NULL, 0) == NULL);
  mgpuMemset32(ptr, 0xdeadbeefu, 16, NULL);
  CHECK(((uint32_t *)ptr)[15] == 0xdeadbeefu);
  mgpuMemset16(shared, 0xabcd, 8, NULL);
  CHECK(((uint16_t *)shared)[7] == 0xabcd);
  mgpuMemcpy(shared, ptr, 16, NULL);
  CHECK(((uint32_t *)shared)[3] == 0xdeadbeefu);
  mgpuMemFree(ptr, NULL);
  mgpuMemFree(shared, NULL);
  mgpuMemFree(NULL, NULL);
  CHECK(fake_cuda_calls("cuMemFree_v2") == 2);

  /* Module on default device 1, launched outside a call: context 1, legacy stream. */
  mgpuSetDefaultDevice(1);
  void *module = mgpuModuleLoad((void *)image, sizeof(image));
  CHECK(module != NULL);
  void *function = mgpuModuleGetFunction(module, "scale");
  CHECK(function != NULL && mgpuModuleGetFunction(module, "scale") == function);
  mgpuLaunchKernel(function, 2, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL, 0);
  CHECK(fake_cuda_launch_count() == 1);
  CHECK(fake_cuda_launch_at(0)->context == fake_cuda_primary_context(1));
  CHECK(fake_cuda_launch_at(0)->stream == NULL);
  CHECK(fake_cuda_current_context() == NULL);
  mgpuModuleUnload(module);
  mgpuModuleUnload(NULL);
  mgpuSetDefaultDevice(0);

  void *stream = mgpuStreamCreate();
  void *event = mgpuEventCreate();
  CHECK(stream != NULL && event != NULL);
  mgpuEventRecord(event, stream);
  mgpuStreamWaitEvent(NULL, event);
  mgpuEventSynchronize(event);
  mgpuStreamSynchronize(stream);
  mgpuEventDestroy(event);
  mgpuStreamDestroy(stream);
  CHECK(wavert_last_status() == WAVERT_OK);
}

static void test_errors_outside_call(void) {
  wavert_clear_error();
  mgpuSetDefaultDevice(5);
  CHECK(mgpuMemAlloc(64, NULL, 0) == NULL);
  CHECK(wavert_last_status() == WAVERT_ERROR_NOT_FOUND);
  CHECK_MESSAGE("no CUDA device 5: there are 2");
  mgpuSetDefaultDevice(0);
  /* A later error does not replace the first one. */
  CHECK(mgpuModuleGetFunction(NULL, "scale") == NULL);
  CHECK(wavert_last_status() == WAVERT_ERROR_NOT_FOUND);
  CHECK_MESSAGE("no CUDA device 5");
  /* ...and successful calls leave it alone. */
  void *ptr = mgpuMemAlloc(8, NULL, 0);
  CHECK(ptr != NULL);
  mgpuMemFree(ptr, NULL);
  CHECK_MESSAGE("no CUDA device 5");
  wavert_clear_error();
  CHECK(mgpuModuleGetFunction(NULL, "scale") == NULL);
  CHECK(wavert_last_status() == WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("mgpuModuleGetFunction: module or name is NULL");
  wavert_clear_error();
  mgpuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL, 0);
  CHECK_MESSAGE("mgpuLaunchKernel: the function is NULL");
  wavert_clear_error();
  fake_cuda_fail_next("cuMemAlloc_v2", 2);
  CHECK(mgpuMemAlloc(64, NULL, 0) == NULL);
  CHECK(wavert_last_status() == WAVERT_ERROR_OUT_OF_MEMORY);
  CHECK_MESSAGE("cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY");
  wavert_clear_error();
}

static void test_launches_in_call(void) {
  void *caller_stream = (void *)(uintptr_t)0x5100;
  void *explicit_stream = (void *)(uintptr_t)0x5200;
  size_t sizes[2] = {8, 4};
  fake_cuda_set_param_sizes(2, sizes);
  void *module = mgpuModuleLoad((void *)image, sizeof(image)); /* on default device 0 */
  void *function = mgpuModuleGetFunction(module, "scale");
  CHECK(function != NULL);
  fake_cuda_reset();
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device1, caller_stream, &state));
  void *pointer = (void *)(uintptr_t)0x7000;
  int32_t scalar = -3;
  void *params[2] = {&pointer, &scalar};
  mgpuLaunchKernel(function, 4, 2, 1, 128, 1, 1, 1024, NULL, params, NULL, 2);
  mgpuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, explicit_stream, params, NULL, 2);
  CHECK(fake_cuda_calls("cuModuleLoadDataEx") == 1); /* loaded on device 1 once */
  CHECK(fake_cuda_launch_count() == 2);
  const fake_cuda_launch *l = fake_cuda_launch_at(0);
  CHECK(l->context == fake_cuda_primary_context(1) && l->stream == caller_stream);
  CHECK(l->grid[0] == 4 && l->grid[1] == 2 && l->block[0] == 128 && l->shared_bytes == 1024);
  CHECK(l->params[0] == 0x7000 && (int32_t)l->params[1] == -3);
  CHECK(l->cluster[0] == 0);
  CHECK(fake_cuda_launch_at(1)->stream == explicit_stream);

  /* Cluster launch: grid in blocks, the cluster attribute and the spread policy. */
  mgpuLaunchClusterKernel(function, 2, 1, 1, 4, 2, 1, 128, 1, 1, 0, NULL, params, NULL);
  l = fake_cuda_launch_at(2);
  CHECK(l != NULL && l->cluster[0] == 2 && l->cluster[1] == 1 && l->cluster[2] == 1);
  CHECK(l->grid[0] == 4 && l->grid[1] == 2 && l->cluster_policy == 1);
  CHECK(l->stream == caller_stream && l->params[0] == 0x7000);
  /* 16 blocks per cluster needs the non-portable opt-in (the fake refuses it otherwise). */
  mgpuLaunchClusterKernel(function, 16, 1, 1, 32, 1, 1, 64, 1, 1, 0, NULL, params, NULL);
  CHECK(fake_cuda_launch_count() == 4 && fake_cuda_launch_at(3)->cluster[0] == 16);
  CHECK(!wavert_jit_failed());
  CHECK_OK(wavert_call_end(&state));

  /* Errors are recorded, the first is kept and returned by wavert_call_end. */
  CHECK_OK(wavert_call_begin(device1, caller_stream, &state));
  mgpuLaunchClusterKernel(function, 3, 1, 1, 4, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
  CHECK(wavert_jit_failed());
  mgpuLaunchKernel(function, 1, 70000, 1, 1, 1, 1, 0, NULL, params, NULL, 2);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("mgpuLaunchClusterKernel of kernel 'scale': grid x = 4 is not a multiple of "
                "cluster x = 3");
  CHECK_OK(wavert_call_begin(device1, caller_stream, &state));
  mgpuLaunchKernel(function, 1, 70000, 1, 1, 1, 1, 0, NULL, params, NULL, 2);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_LIMIT_EXCEEDED);
  CHECK_MESSAGE("launch of kernel 'scale': grid y = 70000 exceeds the device limit 65535");
  CHECK_OK(wavert_call_begin(device1, NULL, &state));
  mgpuLaunchKernel(function, 1, 1, 1, 1, 1, 1, -1, NULL, params, NULL, 2);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("dynamic shared memory -1 bytes is negative");
  CHECK_OK(wavert_call_begin(device1, NULL, &state));
  mgpuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, NULL, params, params, 2);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_UNSUPPORTED);
  CHECK_MESSAGE("arguments through `extra` are not supported");
  CHECK_OK(wavert_call_begin(device1, NULL, &state));
  CHECK(mgpuModuleGetFunction(module, "missing_kernel") == NULL);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_NOT_FOUND);
  CHECK_MESSAGE("no kernel named 'missing_kernel'");
  CHECK_OK(wavert_call_begin(device1, NULL, &state));
  mgpuLaunchKernel(function, 0, 1, 1, 1, 1, 1, 0, NULL, params, NULL, 2); /* empty grid */
  CHECK_OK(wavert_call_end(&state));

  fake_cuda_reset();
  mgpuModuleUnload(module); /* loaded on devices 0 and 1 */
  CHECK(fake_cuda_calls("cuModuleUnload") == 2);
  fake_cuda_set_param_sizes(0, sizes);
}

static void test_module_jit(void) {
  wavert_clear_error();
  void *module = mgpuModuleLoadJIT((void *)image, 3);
  CHECK(module != NULL && fake_cuda_last_jit_opt_level() == 3);
  mgpuModuleUnload(module);
  module = mgpuModuleLoad((void *)image, sizeof(image) - 1); /* not NUL-terminated */
  CHECK(module != NULL && fake_cuda_last_jit_opt_level() == -1);
  mgpuModuleUnload(module);
  CHECK(mgpuModuleLoadJIT((void *)"BAD ptx", 2) == NULL);
  CHECK(wavert_last_status() == WAVERT_ERROR_DRIVER);
  CHECK_MESSAGE("CUDA_ERROR_INVALID_PTX");
  CHECK_MESSAGE("JIT log: ptxas fatal : fake syntax error on line 1");
  wavert_clear_error();
  CHECK(mgpuModuleLoadJIT((void *)image, 7) == NULL);
  CHECK_MESSAGE("mgpuModuleLoadJIT: optimisation level 7 is not 0-4");
  wavert_clear_error();
  CHECK(mgpuModuleLoad(NULL, 0) == NULL);
  CHECK_MESSAGE("mgpuModuleLoad: the image is NULL or empty");
  wavert_clear_error();
}

static void test_memory_in_call(void) {
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  void *ptr = mgpuMemAlloc(64, NULL, 0);
  CHECK(ptr != NULL);
  mgpuMemset32(ptr, 7, SIZE_MAX / 2, NULL); /* count * 4 overflows */
  CHECK(wavert_jit_failed());
  mgpuMemFree(ptr, NULL);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("mgpuMemset32: ");
  CHECK_MESSAGE("elements of 4 bytes overflow a 64-bit byte count");
  wavert_clear_error();
}

static void test_host_register(void) {
  float data[16];
  memref2 m = {data, data, 2, {3, 4}, {4, 1}};
  fake_cuda_reset();
  mgpuMemHostRegisterMemRef(2, &m, 4);
  CHECK(fake_cuda_registered(data + 2) == 48);
  CHECK(wavert_last_status() == WAVERT_OK);
  wavert_memref_1d d = mgpuMemGetDeviceMemRef1dFloat(data, data + 2, 1, 5, 2);
  CHECK((uintptr_t)d.aligned == (uintptr_t)(data + 2) + FAKE_CUDA_DEVICE_ALIAS);
  CHECK(d.allocated == d.aligned && d.offset == 1 && d.sizes[0] == 5 && d.strides[0] == 2);
  mgpuMemHostUnregisterMemRef(2, &m, 4);
  CHECK(fake_cuda_registered(data + 2) == 0);
  CHECK(wavert_last_status() == WAVERT_OK);

  /* Unregistered memory: the driver's error, and NULL device pointers. */
  mgpuMemHostUnregister(data);
  CHECK(wavert_last_status() == WAVERT_ERROR_DRIVER);
  CHECK_MESSAGE("cuMemHostUnregister: CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED");
  wavert_clear_error();
  int32_t ints[4];
  wavert_memref_1d di = mgpuMemGetDeviceMemRef1dInt32(ints, ints, 0, 4, 1);
  CHECK(di.aligned == NULL && di.sizes[0] == 4);
  CHECK_MESSAGE("cuMemHostGetDevicePointer: CUDA_ERROR_INVALID_VALUE");
  wavert_clear_error();

  mgpuMemHostRegister(ints, sizeof(ints));
  CHECK(fake_cuda_registered(ints) == sizeof(ints));
  di = mgpuMemGetDeviceMemRef1dInt32(ints, ints, 0, 4, 1);
  CHECK((uintptr_t)di.aligned == (uintptr_t)ints + FAKE_CUDA_DEVICE_ALIAS);
  mgpuMemHostUnregister(ints);
  CHECK(fake_cuda_registered(ints) == 0 && wavert_last_status() == WAVERT_OK);

  /* Layout and size checks, inside a call: recorded, first kept. */
  int calls = fake_cuda_calls("cuMemHostRegister_v2");
  wavert_call_state state;
  memref2 strided = {data, data, 0, {2, 4}, {8, 1}};
  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  mgpuMemHostRegisterMemRef(2, &strided, 4);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("only compact row-major memrefs can be registered: dimension 0 has stride 8, "
                "expected 4");
  memref2 huge = {data, data, 0, {(int64_t)1 << 40, (int64_t)1 << 40}, {(int64_t)1 << 40, 1}};
  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  mgpuMemHostRegisterMemRef(2, &huge, 4);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("element count overflows 64 bits");
  memref1 big = {data, data, 0, {(int64_t)1 << 62}, {1}};
  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  mgpuMemHostRegisterMemRef(1, &big, 8);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("elements of 8 bytes overflow the address space");
  memref1 negative = {data, data, 0, {-1}, {1}};
  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  mgpuMemHostRegisterMemRef(1, &negative, 4);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("size -1 of dimension 0 is negative");
  memref2 empty = {data, data, 0, {0, 4}, {4, 1}};
  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  mgpuMemHostRegisterMemRef(2, &empty, 4);
  mgpuMemHostUnregisterMemRef(2, &empty, 4);
  mgpuMemHostRegister(data, 0);
  CHECK_OK(wavert_call_end(&state));
  CHECK(fake_cuda_calls("cuMemHostRegister_v2") == calls);
  wavert_clear_error();
  /* A rank-0 memref registers one element at aligned + offset. */
  struct {
    void *allocated, *aligned;
    int64_t offset;
  } scalar = {data, data, 3};
  mgpuMemHostRegisterMemRef(0, &scalar, 4);
  CHECK(fake_cuda_registered(data + 3) == 4);
  mgpuMemHostUnregisterMemRef(0, &scalar, 4);
  CHECK(fake_cuda_registered(data + 3) == 0 && wavert_last_status() == WAVERT_OK);
  wavert_clear_error();
}

static void test_tensor_map(void) {
  uint16_t *global = (uint16_t *)(uintptr_t)0x10000;
  memref2 m = {global, global, 8, {64, 128}, {256, 1}};
  int64_t box[2] = {32, 64};
  fake_cuda_reset();
  void *map = mgpuTensorMapEncodeTiledMemref(2, &m, 6 /* FLOAT16 */, 0, 3, 1, 0, box);
  CHECK(map != NULL && wavert_last_status() == WAVERT_OK);
  const fake_cuda_tensor_map *t = fake_cuda_last_tensor_map();
  CHECK(t->data_type == 6 && t->rank == 2 && t->address == global + 8);
  CHECK(t->dims[0] == 128 && t->dims[1] == 64 && t->strides[0] == 512);
  CHECK(t->box[0] == 64 && t->box[1] == 32);
  CHECK(t->element_strides[0] == 1 && t->element_strides[1] == 1);
  CHECK(t->swizzle == 3 && t->l2_promotion == 1 && t->interleave == 0 && t->oob_fill == 0);
  CHECK(((unsigned char *)map)[100] == 6); /* the device copy holds the encoded map */
  CHECK(fake_cuda_calls("cuMemAlloc_v2") == 1);
  /* The same descriptor again reuses its device copy; another one gets its own. */
  CHECK(mgpuTensorMapEncodeTiledMemref(2, &m, 6, 0, 3, 1, 0, box) == map);
  CHECK(fake_cuda_calls("cuMemAlloc_v2") == 1);
  box[0] = 16;
  void *other = mgpuTensorMapEncodeTiledMemref(2, &m, 6, 0, 3, 1, 0, box);
  CHECK(other != NULL && other != map && fake_cuda_calls("cuMemAlloc_v2") == 2);

  CHECK(mgpuTensorMapEncodeTiledMemref(6, &m, 6, 0, 3, 1, 0, box) == NULL);
  CHECK_MESSAGE("mgpuTensorMapEncodeTiledMemref: rank 6 is not 1-5");
  wavert_clear_error();
  CHECK(mgpuTensorMapEncodeTiledMemref(2, &m, 13, 0, 3, 1, 0, box) == NULL);
  CHECK_MESSAGE("data type 13 is not 0-12");
  wavert_clear_error();
  memref2 overflow = {global, global, 0, {64, 128}, {(int64_t)1 << 62, 1}};
  CHECK(mgpuTensorMapEncodeTiledMemref(2, &overflow, 8, 0, 0, 0, 0, box) == NULL);
  CHECK_MESSAGE("stride 4611686018427387904 of dimension 0 is not a positive byte count");
  wavert_clear_error();

  /* The plain form writes the caller's map. */
  _Alignas(64) unsigned char out[128];
  uint64_t dims[1] = {1024};
  uint32_t box1[1] = {256}, element_strides[1] = {1};
  mgpuTensorMapEncodeTiled(out, 7, 1, global, dims, NULL, box1, element_strides, 0, 0, 0, 1);
  CHECK(wavert_last_status() == WAVERT_OK && t->map == out && out[100] == 7 && t->oob_fill == 1);
}

int main(void) {
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device0));
  CHECK_OK(wavert_device_get(kDLCUDA, 1, &device1));
  test_default_device();
  test_errors_outside_call();
  test_launches_in_call();
  test_module_jit();
  test_memory_in_call();
  test_host_register();
  test_tensor_map();
  printf("test_mgpu: ok\n");
  return 0;
}
