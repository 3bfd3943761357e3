/* test_launch_validation.c — wavert_function_launch against fake_cuda: every validation rule
 * with its message, zero extents as no-ops, the dynamic shared memory opt-in (48 KiB edge
 * included), parameters reaching the driver unchanged, and context handling. */
#include <pthread.h>

#include "fake_cuda.h"
#include "test_util.h"

int cuCtxSetCurrent(void *context); /* fake_cuda's, to give the test thread a context */

static wavert_device *device;
static wavert_module *module;
static wavert_function *scale;    /* static shared 0, 1024 threads */
static wavert_function *stat16;   /* static shared 16 bytes */
static wavert_function *narrow;   /* the kernel's own limit: 256 threads */

static wavert_function *load_function(const char *name) {
  wavert_function *function = NULL;
  CHECK_OK(wavert_module_get_function(module, name, &function));
  return function;
}

static int no_driver_call(void) { return fake_cuda_call_at(0) == NULL; }

static void check_rejected(wavert_function *f, int64_t gx, int64_t gy, int64_t gz, int64_t bx,
                           int64_t by, int64_t bz, int64_t shared, wavert_status status,
                           const char *message) {
  fake_cuda_reset();
  wavert_clear_error();
  CHECK_STATUS(wavert_function_launch(f, gx, gy, gz, bx, by, bz, shared, NULL, NULL), status);
  if (strstr(wavert_last_error(), message) == NULL) {
    fprintf(stderr, "expected message containing \"%s\", got \"%s\"\n", message,
            wavert_last_error());
    exit(1);
  }
  CHECK(no_driver_call());
}

static void test_negative_and_zero(void) {
  static const char *const names[] = {"grid x", "grid y", "grid z", "block x", "block y", "block z"};
  for (int i = 0; i < 6; ++i) {
    int64_t e[6] = {1, 1, 1, 1, 1, 1};
    e[i] = -1;
    char message[128];
    snprintf(message, sizeof(message), "launch of kernel 'scale': %s = -1 is negative", names[i]);
    check_rejected(scale, e[0], e[1], e[2], e[3], e[4], e[5], 0, WAVERT_ERROR_INVALID_ARGUMENT,
                   message);
    /* Negative wins over zero elsewhere. */
    e[(i + 1) % 6] = 0;
    check_rejected(scale, e[0], e[1], e[2], e[3], e[4], e[5], 0, WAVERT_ERROR_INVALID_ARGUMENT,
                   "is negative");
  }
  check_rejected(scale, 1, 1, 1, 1, 1, 1, -5, WAVERT_ERROR_INVALID_ARGUMENT,
                 "dynamic shared memory -5 bytes is negative");
  for (int i = 0; i < 6; ++i) {
    int64_t e[6] = {1, 1, 1, 1, 1, 1};
    e[i] = 0;
    fake_cuda_reset();
    /* A zero extent is a no-op even with other values far over the limits. */
    CHECK_OK(wavert_function_launch(scale, e[0], e[1] * 70000, e[2], e[3] * 4096, e[4], e[5],
                                    1 << 30, NULL, NULL));
    CHECK(no_driver_call());
  }
}

static void test_limits(void) {
  check_rejected(scale, 1, 1, 70000, 1, 1, 1, 0, WAVERT_ERROR_LIMIT_EXCEEDED,
                 "launch of kernel 'scale': grid z = 70000 exceeds the device limit 65535");
  check_rejected(scale, 1, 65536, 1, 1, 1, 1, 0, WAVERT_ERROR_LIMIT_EXCEEDED,
                 "grid y = 65536 exceeds the device limit 65535");
  check_rejected(scale, INT64_C(2147483648), 1, 1, 1, 1, 1, 0, WAVERT_ERROR_LIMIT_EXCEEDED,
                 "grid x = 2147483648 exceeds the device limit 2147483647");
  check_rejected(scale, INT64_C(1) << 40, 1, 1, 1, 1, 1, 0, WAVERT_ERROR_LIMIT_EXCEEDED,
                 "grid x = 1099511627776 exceeds");
  check_rejected(scale, 1, 1, 1, 2048, 1, 1, 0, WAVERT_ERROR_LIMIT_EXCEEDED,
                 "launch of kernel 'scale': block x = 2048 exceeds the device limit 1024");
  check_rejected(scale, 1, 1, 1, 1, 1025, 1, 0, WAVERT_ERROR_LIMIT_EXCEEDED,
                 "block y = 1025 exceeds the device limit 1024");
  check_rejected(scale, 1, 1, 1, 1, 1, 65, 0, WAVERT_ERROR_LIMIT_EXCEEDED,
                 "block z = 65 exceeds the device limit 64");
  check_rejected(scale, 1, 1, 1, 32, 64, 1, 0, WAVERT_ERROR_LIMIT_EXCEEDED,
                 "2048 threads per block (32 x 64 x 1) exceeds the device limit 1024");
  check_rejected(narrow, 1, 1, 1, 512, 1, 1, 0, WAVERT_ERROR_LIMIT_EXCEEDED,
                 "launch of kernel 'narrow': 512 threads per block (512 x 1 x 1) exceeds the "
                 "kernel's limit 256");
  check_rejected(scale, 1, 1, 1, 1, 1, 1, 232449, WAVERT_ERROR_LIMIT_EXCEEDED,
                 "dynamic shared memory 232449 bytes + static 0 bytes exceeds the device maximum "
                 "232448 bytes");
  check_rejected(stat16, 1, 1, 1, 1, 1, 1, 280000, WAVERT_ERROR_LIMIT_EXCEEDED,
                 "dynamic shared memory 280000 bytes + static 16 bytes exceeds the device maximum "
                 "232448 bytes");
  check_rejected(stat16, 1, 1, 1, 1, 1, 1, 232448, WAVERT_ERROR_LIMIT_EXCEEDED,
                 "+ static 16 bytes exceeds");

  /* At the limits exactly: launched. */
  fake_cuda_reset();
  CHECK_OK(wavert_function_launch(scale, INT64_C(2147483647), 65535, 65535, 1024, 1, 1, 0, NULL,
                                  NULL));
  CHECK_OK(wavert_function_launch(narrow, 1, 1, 1, 16, 16, 1, 0, NULL, NULL));
  CHECK(fake_cuda_launch_count() == 2);
  const fake_cuda_launch *l = fake_cuda_launch_at(0);
  CHECK(l->grid[0] == 2147483647u && l->grid[1] == 65535 && l->grid[2] == 65535);
  CHECK(l->block[0] == 1024 && l->block[1] == 1 && l->block[2] == 1);
}

/* Launch `f` with `shared` dynamic bytes; returns the number of cuFuncSetAttribute calls so far
 * and its last value in *value. */
static int launch_shared(wavert_function *f, int64_t shared, int *value) {
  CHECK_OK(wavert_function_launch(f, 1, 1, 1, 32, 1, 1, shared, NULL, NULL));
  int attribute = -1;
  int calls = fake_cuda_last_set_attribute(&attribute, value);
  if (calls > 0) CHECK(attribute == 8); /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
  return calls;
}

static void test_shared_memory_opt_in(void) {
  int value = 0;
  fake_cuda_reset();
  /* 48 KiB of dynamic memory with no static memory fits the default: no opt-in. */
  CHECK(launch_shared(scale, 49152, &value) == 0);
  CHECK(launch_shared(scale, 49153, &value) == 1 && value == 49153);
  CHECK(launch_shared(scale, 49153, &value) == 1); /* set once per increase */
  CHECK(launch_shared(scale, 40000, &value) == 1);
  CHECK(launch_shared(scale, 96 * 1024, &value) == 2 && value == 96 * 1024);
  CHECK(launch_shared(scale, 50000, &value) == 2);
  CHECK(launch_shared(scale, 232448, &value) == 3 && value == 232448);
  CHECK(fake_cuda_launch_at(fake_cuda_launch_count() - 1)->shared_bytes == 232448);
  /* With static memory, exactly 48 KiB of dynamic memory already needs the opt-in. */
  CHECK(launch_shared(stat16, 49136, &value) == 3);
  CHECK(launch_shared(stat16, 49152, &value) == 4 && value == 49152);
  CHECK(launch_shared(stat16, 232432, &value) == 5 && value == 232432);
  CHECK(fake_cuda_launch_count() == 10);

  /* A failed opt-in is reported and retried by the next launch. */
  wavert_function *fresh = load_function("fresh");
  fake_cuda_fail_next("cuFuncSetAttribute", 1);
  CHECK_STATUS(wavert_function_launch(fresh, 1, 1, 1, 1, 1, 1, 60000, NULL, NULL),
               WAVERT_ERROR_DRIVER);
  CHECK_MESSAGE("cuFuncSetAttribute: CUDA_ERROR_INVALID_VALUE");
  CHECK(launch_shared(fresh, 60000, &value) == 6 && value == 60000);
}

static void test_parameters(void) {
  size_t sizes[] = {8, 4, 8, 2, 1};
  fake_cuda_set_param_sizes(5, sizes);
  void *pointer = (void *)(uintptr_t)0x7f0012345678u;
  int32_t n = -7;
  double alpha = 2.5;
  uint16_t half = 0xBEEF;
  int8_t flag = 1;
  void *params[] = {&pointer, &n, &alpha, &half, &flag};
  void *stream = (void *)(uintptr_t)0x5000;
  fake_cuda_reset();
  CHECK_OK(wavert_function_launch(scale, 7, 3, 2, 128, 2, 1, 100, stream, params));
  CHECK(fake_cuda_launch_count() == 1);
  const fake_cuda_launch *l = fake_cuda_launch_at(0);
  CHECK(strcmp(l->kernel, "scale") == 0);
  CHECK(l->grid[0] == 7 && l->grid[1] == 3 && l->grid[2] == 2);
  CHECK(l->block[0] == 128 && l->block[1] == 2 && l->block[2] == 1);
  CHECK(l->shared_bytes == 100 && l->stream == stream);
  CHECK(l->params[0] == (uint64_t)(uintptr_t)pointer);
  CHECK((int32_t)l->params[1] == -7);
  double alpha_seen;
  memcpy(&alpha_seen, &l->params[2], sizeof(alpha_seen));
  CHECK(alpha_seen == 2.5);
  CHECK(l->params[3] == 0xBEEF && l->params[4] == 1);
  fake_cuda_set_param_sizes(0, sizes);

  fake_cuda_fail_next("cuLaunchKernel", 1);
  CHECK_STATUS(wavert_function_launch(scale, 1, 1, 1, 1, 1, 1, 0, NULL, NULL), WAVERT_ERROR_DRIVER);
  CHECK(strcmp(wavert_last_error(), "cuLaunchKernel: CUDA_ERROR_INVALID_VALUE (invalid argument)") == 0);
  CHECK(fake_cuda_current_context() == NULL);
}

static void *fresh_thread(void *arg) {
  (void)arg;
  CHECK(fake_cuda_current_context() == NULL);
  CHECK_OK(wavert_function_launch(scale, 1, 1, 1, 1, 1, 1, 0, NULL, NULL));
  CHECK(fake_cuda_current_context() == NULL);
  return NULL;
}

static void test_contexts(void) {
  /* A thread that never touched the driver can launch; its (empty) context is restored. */
  fake_cuda_reset();
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, fresh_thread, NULL) == 0);
  pthread_join(thread, NULL);
  CHECK(fake_cuda_launch_count() == 1);
  CHECK(fake_cuda_launch_at(0)->context == fake_cuda_primary_context(0));

  /* The caller's own context (device 1's) comes back after a launch on device 0. */
  CHECK(cuCtxSetCurrent(fake_cuda_primary_context(1)) == 0);
  CHECK_OK(wavert_function_launch(scale, 1, 1, 1, 1, 1, 1, 0, NULL, NULL));
  CHECK(fake_cuda_launch_at(1)->context == fake_cuda_primary_context(0));
  CHECK(fake_cuda_current_context() == fake_cuda_primary_context(1));

  /* Hot path with the right context current: one context query and the launch, nothing else. */
  CHECK(cuCtxSetCurrent(fake_cuda_primary_context(0)) == 0);
  fake_cuda_reset();
  CHECK_OK(wavert_function_launch(scale, 1, 1, 1, 1, 1, 1, 0, NULL, NULL));
  CHECK(strcmp(fake_cuda_call_at(0), "cuCtxGetCurrent") == 0);
  CHECK(strcmp(fake_cuda_call_at(1), "cuLaunchKernel") == 0);
  CHECK(fake_cuda_call_at(2) == NULL);
  CHECK(cuCtxSetCurrent(NULL) == 0);
}

int main(void) {
  static const char image[] = "// fake ptx";
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device));
  CHECK_OK(wavert_module_load(device, image, sizeof(image), &module));
  scale = load_function("scale");
  CHECK(load_function("scale") == scale); /* same name, same handle */
  fake_cuda_set_function_attribute(1, 16);
  stat16 = load_function("stat16");
  fake_cuda_set_function_attribute(1, 0);
  fake_cuda_set_function_attribute(0, 256);
  narrow = load_function("narrow");
  fake_cuda_set_function_attribute(0, 1024);
  CHECK_STATUS(wavert_function_launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL),
               WAVERT_ERROR_INVALID_ARGUMENT);

  test_negative_and_zero();
  test_limits();
  test_shared_memory_opt_in();
  test_parameters();
  test_contexts();
  wavert_module_release(module);
  puts("test_launch_validation: ok");
  return 0;
}
