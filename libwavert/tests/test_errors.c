/* test_errors.c — status strings, the per-thread last error, device handles and attributes,
 * and driver failures reported with the call, error name and text (against fake_cuda). */
#include <pthread.h>

#include "fake_cuda.h"
#include "test_util.h"

static void *other_thread(void *arg) {
  (void)arg;
  CHECK(wavert_last_status() == WAVERT_OK);
  CHECK(strcmp(wavert_last_error(), "") == 0);
  int32_t count = 0;
  CHECK_STATUS(wavert_device_count(kDLVulkan, &count), WAVERT_ERROR_UNSUPPORTED);
  return NULL;
}

static void test_status_and_last_error(void) {
  CHECK(wavert_version() == WAVERT_VERSION_MAJOR * 10000 + WAVERT_VERSION_MINOR * 100 +
                                WAVERT_VERSION_PATCH);
  for (int s = WAVERT_OK; s <= WAVERT_ERROR_UNSUPPORTED; ++s) {
    CHECK(wavert_status_string((wavert_status)s) != NULL);
    for (int t = WAVERT_OK; t < s; ++t)
      CHECK(strcmp(wavert_status_string((wavert_status)s), wavert_status_string((wavert_status)t)));
  }
  CHECK(strcmp(wavert_status_string(WAVERT_ERROR_INVALID_ARGUMENT), "invalid argument") == 0);
  CHECK(strcmp(wavert_status_string((wavert_status)99), "unknown status") == 0);
  CHECK(wavert_last_status() == WAVERT_OK);
  CHECK(strcmp(wavert_last_error(), "") == 0);

  int32_t count = 0;
  CHECK_STATUS(wavert_device_count(kDLOpenCL, &count), WAVERT_ERROR_UNSUPPORTED);
  CHECK(wavert_last_status() == WAVERT_ERROR_UNSUPPORTED);
  CHECK_MESSAGE("device type 4 is not supported");
  CHECK_STATUS(wavert_device_count(kDLCUDA, NULL), WAVERT_ERROR_INVALID_ARGUMENT);

  /* Errors are per thread: another thread starts clean, and its error does not leak here. */
  CHECK_STATUS(wavert_device_count(kDLOpenCL, &count), WAVERT_ERROR_UNSUPPORTED);
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, other_thread, NULL) == 0);
  pthread_join(thread, NULL);
  CHECK_MESSAGE("device type 4");

  /* Success does not clear; wavert_clear_error does. */
  CHECK_OK(wavert_device_count(kDLCUDA, &count));
  CHECK(wavert_last_status() == WAVERT_ERROR_UNSUPPORTED);
  wavert_clear_error();
  CHECK(wavert_last_status() == WAVERT_OK);
  CHECK(strcmp(wavert_last_error(), "") == 0);
}

static void test_devices(void) {
  int32_t count = 0;
  CHECK_OK(wavert_device_count(kDLCUDA, &count));
  CHECK(count == 2);
  wavert_device *device = NULL, *again = NULL, *second = NULL;
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device));
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &again));
  CHECK_OK(wavert_device_get(kDLCUDA, 1, &second));
  CHECK(device == again && device != second);
  DLDevice dl = {kDLCPU, -1};
  CHECK_OK(wavert_device_dl(second, &dl));
  CHECK(dl.device_type == kDLCUDA && dl.device_id == 1);

  wavert_device *untouched = (wavert_device *)&count;
  CHECK_STATUS(wavert_device_get(kDLCUDA, 2, &untouched), WAVERT_ERROR_NOT_FOUND);
  CHECK(untouched == (wavert_device *)&count); /* out params are written only on success */
  CHECK_MESSAGE("no CUDA device 2: there are 2");
  CHECK_STATUS(wavert_device_get(kDLCUDA, -1, &untouched), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(wavert_device_get(kDLOpenCL, 0, &untouched), WAVERT_ERROR_UNSUPPORTED);

  static const struct {
    wavert_device_attribute attribute;
    int64_t value;
  } expected[] = {
      {WAVERT_DEVICE_MAX_THREADS_PER_BLOCK, 1024},
      {WAVERT_DEVICE_MAX_BLOCK_DIM_X, 1024},
      {WAVERT_DEVICE_MAX_BLOCK_DIM_Z, 64},
      {WAVERT_DEVICE_MAX_GRID_DIM_X, 2147483647},
      {WAVERT_DEVICE_MAX_GRID_DIM_Z, 65535},
      {WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
      {WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448},
      {WAVERT_DEVICE_COMPUTE_CAPABILITY_MAJOR, 9},
      {WAVERT_DEVICE_COMPUTE_CAPABILITY_MINOR, 0},
      {WAVERT_DEVICE_MULTIPROCESSOR_COUNT, 132},
      {WAVERT_DEVICE_WARP_SIZE, 32},
  };
  fake_cuda_reset();
  for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); ++i) {
    int64_t value = -1;
    CHECK_OK(wavert_device_attribute_get(device, expected[i].attribute, &value));
    CHECK(value == expected[i].value);
  }
  CHECK(fake_cuda_calls("cuDeviceGetAttribute") == 0); /* cached */
  int64_t value = 0;
  CHECK_STATUS(wavert_device_attribute_get(device, (wavert_device_attribute)0, &value),
               WAVERT_ERROR_INVALID_ARGUMENT);

  char chip[16];
  CHECK_OK(wavert_device_chip(device, chip, sizeof(chip)));
  CHECK(strcmp(chip, "sm_90") == 0);
  char small[4];
  CHECK_OK(wavert_device_chip(device, small, sizeof(small)));
  CHECK(strcmp(small, "sm_") == 0);
  CHECK_OK(wavert_device_synchronize(device));
  CHECK(fake_cuda_current_context() == NULL); /* restored */
}

static void test_driver_errors(void) {
  wavert_device *device = NULL;
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device));
  wavert_module *module = NULL;
  static const char bad[] = "BAD ptx";
  CHECK_STATUS(wavert_module_load(device, bad, sizeof(bad), &module), WAVERT_ERROR_DRIVER);
  CHECK(module == NULL);
  CHECK_MESSAGE("cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)");
  CHECK_MESSAGE("ptxas fatal : fake syntax error on line 1");

  static const char image[] = "// fake ptx";
  fake_cuda_fail_next("cuModuleLoadDataEx", 200);
  CHECK_STATUS(wavert_module_load(device, image, sizeof(image), &module), WAVERT_ERROR_DRIVER);
  CHECK(strcmp(wavert_last_error(),
               "cuModuleLoadDataEx: CUDA_ERROR_INVALID_IMAGE (device kernel image is invalid)") == 0);
  CHECK_STATUS(wavert_module_load(device, image, 0, &module), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(wavert_module_load(NULL, image, sizeof(image), &module),
               WAVERT_ERROR_INVALID_ARGUMENT);

  /* PTX without a terminating NUL still loads (the runtime terminates a copy). */
  CHECK_OK(wavert_module_load(device, image, sizeof(image) - 1, &module));
  wavert_function *function = NULL;
  CHECK_STATUS(wavert_module_get_function(module, "missing_kernel", &function),
               WAVERT_ERROR_NOT_FOUND);
  CHECK(function == NULL);
  CHECK_MESSAGE("no kernel named 'missing_kernel'");
  CHECK_OK(wavert_module_get_function(module, "scale", &function));
  int64_t value = 0;
  CHECK_OK(wavert_function_attribute_get(function, WAVERT_FUNCTION_NUM_REGS, &value));
  CHECK(value == 16);
  /* Each attribute reads the driver's attribute of that meaning (CUfunction_attribute). */
  const struct {
    wavert_function_attribute attribute;
    int cu_attribute;
  } mapping[] = {{WAVERT_FUNCTION_CONST_SIZE_BYTES, 2},
                 {WAVERT_FUNCTION_PTX_VERSION, 5},
                 {WAVERT_FUNCTION_BINARY_VERSION, 6},
                 {WAVERT_FUNCTION_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8}};
  for (size_t i = 0; i < sizeof mapping / sizeof mapping[0]; ++i) {
    fake_cuda_set_function_attribute(mapping[i].cu_attribute, 1000 + (int)i);
    wavert_module *fresh = NULL;
    wavert_function *f = NULL;
    CHECK_OK(wavert_module_load(device, image, sizeof(image), &fresh));
    CHECK_OK(wavert_module_get_function(fresh, "scale", &f));
    CHECK_OK(wavert_function_attribute_get(f, mapping[i].attribute, &value));
    CHECK(value == 1000 + (int64_t)i);
    CHECK_OK(wavert_module_release(fresh));
    fake_cuda_set_function_attribute(mapping[i].cu_attribute,
                                     mapping[i].cu_attribute == 8 ? 48 * 1024 : 0);
  }
  CHECK_STATUS(wavert_function_attribute_get(function, (wavert_function_attribute)9, &value),
               WAVERT_ERROR_INVALID_ARGUMENT);
  fake_cuda_fail_next("cuFuncGetAttribute", 400);
  CHECK_STATUS(wavert_function_attribute_get(function, WAVERT_FUNCTION_NUM_REGS, &value),
               WAVERT_ERROR_DRIVER);
  CHECK_MESSAGE("cuFuncGetAttribute: CUDA_ERROR");
  wavert_module_release(module);
  wavert_module_release(NULL);

  void *ptr = NULL;
  fake_cuda_fail_next("cuMemAlloc_v2", 2);
  CHECK_STATUS(wavert_memory_alloc(device, 64, &ptr), WAVERT_ERROR_OUT_OF_MEMORY);
  CHECK_MESSAGE("cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  fake_cuda_fail_next("cuCtxSynchronize", 700);
  CHECK_STATUS(wavert_device_synchronize(device), WAVERT_ERROR_DRIVER);
  CHECK_MESSAGE("cuCtxSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS");
  CHECK(fake_cuda_current_context() == NULL);
}

int main(void) {
  test_status_and_last_error();
  test_devices();
  test_driver_errors();
  puts("test_errors: ok");
  return 0;
}
