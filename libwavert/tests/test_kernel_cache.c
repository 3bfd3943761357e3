/* test_kernel_cache.c — wavert_kernel: 8 threads racing the first use load the image once and
 * get the same function; per-device entries; module reference counting and the
 * synchronise-before-unload of the last release. */
#define _POSIX_C_SOURCE 200809L /* pthread barriers */
#include <pthread.h>

#include "fake_cuda.h"
#include "test_util.h"

#define THREADS 8

static const char image[] = "// fake ptx for the cache";
static wavert_kernel *kernel;
static wavert_device *device0;
static wavert_function *results[THREADS];
static pthread_barrier_t barrier;

static void *racer(void *arg) {
  intptr_t index = (intptr_t)arg;
  pthread_barrier_wait(&barrier);
  CHECK_OK(wavert_kernel_get_function(kernel, device0, &results[index]));
  CHECK_OK(wavert_function_launch(results[index], 1, 1, 1, 32, 1, 1, 0, NULL, NULL));
  return NULL;
}

static void test_race(void) {
  CHECK_OK(wavert_kernel_create(image, sizeof(image), "scale", &kernel));
  fake_cuda_reset();
  pthread_barrier_init(&barrier, NULL, THREADS);
  pthread_t threads[THREADS];
  for (intptr_t i = 0; i < THREADS; ++i)
    CHECK(pthread_create(&threads[i], NULL, racer, (void *)i) == 0);
  for (int i = 0; i < THREADS; ++i) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&barrier);
  CHECK(fake_cuda_calls("cuModuleLoadDataEx") == 1);
  CHECK(fake_cuda_calls("cuModuleGetFunction") == 1);
  for (int i = 1; i < THREADS; ++i) CHECK(results[i] == results[0]);
  CHECK(fake_cuda_launch_count() == THREADS);

  /* Another device gets its own module; the first device's entry is untouched. */
  wavert_device *device1 = NULL;
  wavert_function *on1 = NULL, *again = NULL;
  CHECK_OK(wavert_device_get(kDLCUDA, 1, &device1));
  CHECK_OK(wavert_kernel_get_function(kernel, device1, &on1));
  CHECK(on1 != results[0]);
  CHECK(fake_cuda_calls("cuModuleLoadDataEx") == 2);
  CHECK_OK(wavert_kernel_get_function(kernel, device0, &again));
  CHECK(again == results[0]);
  CHECK(fake_cuda_calls("cuModuleLoadDataEx") == 2);

  fake_cuda_reset();
  wavert_kernel_release(kernel);
  CHECK(fake_cuda_calls("cuModuleUnload") == 2);
  wavert_kernel_release(NULL);
}

static void test_failures(void) {
  /* A failed first load is reported and retried next time; a missing kernel is NOT_FOUND. */
  wavert_kernel *k = NULL;
  wavert_function *function = NULL;
  CHECK_OK(wavert_kernel_create(image, sizeof(image), "scale", &k));
  fake_cuda_fail_next("cuModuleLoadDataEx", 200);
  CHECK_STATUS(wavert_kernel_get_function(k, device0, &function), WAVERT_ERROR_DRIVER);
  CHECK(function == NULL);
  CHECK_OK(wavert_kernel_get_function(k, device0, &function));
  wavert_kernel_release(k);

  CHECK_OK(wavert_kernel_create(image, sizeof(image), "missing_kernel", &k));
  fake_cuda_reset();
  CHECK_STATUS(wavert_kernel_get_function(k, device0, &function), WAVERT_ERROR_NOT_FOUND);
  CHECK(fake_cuda_calls("cuModuleUnload") == 1); /* the module loaded for it is not kept */
  wavert_kernel_release(k);
  CHECK_STATUS(wavert_kernel_create(image, 0, "scale", &k), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(wavert_kernel_create(image, sizeof(image), NULL, &k), WAVERT_ERROR_INVALID_ARGUMENT);
}

static int index_of(const char *name, int from) {
  for (int i = from; fake_cuda_call_at(i) != NULL; ++i)
    if (strcmp(fake_cuda_call_at(i), name) == 0) return i;
  return -1;
}

static void test_module_refcount(void) {
  wavert_module *module = NULL;
  wavert_function *function = NULL;
  CHECK_OK(wavert_module_load(device0, image, sizeof(image), &module));
  CHECK_OK(wavert_module_get_function(module, "scale", &function));
  wavert_module_retain(module);
  wavert_module_retain(module);
  fake_cuda_reset();
  wavert_module_release(module);
  wavert_module_release(module);
  CHECK(fake_cuda_calls("cuModuleUnload") == 0);
  CHECK_OK(wavert_function_launch(function, 1, 1, 1, 1, 1, 1, 0, NULL, NULL)); /* still alive */
  wavert_module_release(module);
  CHECK(fake_cuda_calls("cuModuleUnload") == 1);
  /* The last release waits for the device's work before unloading, in its context. */
  int sync = index_of("cuCtxSynchronize", 0);
  CHECK(sync >= 0 && index_of("cuModuleUnload", sync) > sync);
  CHECK(fake_cuda_current_context() == NULL);
}

int main(void) {
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device0));
  test_race();
  test_failures();
  test_module_refcount();
  puts("test_kernel_cache: ok");
  return 0;
}
