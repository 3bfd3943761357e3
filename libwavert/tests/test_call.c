/* test_call.c — the host-call context and the wavert_jit_* entry points against fake_cuda:
 * begin/end with context restore, wavert_jit_launch (slot created once, errors recorded, first
 * error kept), wavert_jit_launch_cluster (cluster extents reach cuLaunchKernelEx, bad extents
 * refused before the driver), calls outside a host call, and the mgpu* streams, events and
 * memory inside a call (stream ordering, pooling, recorded errors). */
#include <pthread.h>

#include "fake_cuda.h"
#include "test_util.h"
#include "wavert_jit.h"
#include "wavert_mgpu.h"

static const char image[] = "// fake ptx for generated code";
static wavert_device *device;

static int32_t launch(wavert_kernel **slot, const char *name, int64_t gz, void *stream) {
  return wavert_jit_launch(slot, image, sizeof(image), name, 2, 1, gz, 64, 1, 1, 0, stream, NULL);
}

static void test_outside_call(void) {
  wavert_kernel *slot = NULL;
  wavert_clear_error();
  CHECK(launch(&slot, "scale", 1, NULL) == WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("no host call in progress (wavert_call_begin)");
  CHECK(slot == NULL);
  CHECK(wavert_jit_failed());
  wavert_call_state state = {{0}};
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(wavert_call_begin(device, NULL, NULL), WAVERT_ERROR_INVALID_ARGUMENT);
}

/* A host-only call (device NULL): begun and ended without the driver; a launch in it is an
 * error recorded for the end, naming the kernel. */
static void test_host_call(void) {
  wavert_kernel *slot = NULL;
  wavert_call_state state;
  fake_cuda_reset();
  CHECK_OK(wavert_call_begin(NULL, NULL, &state));
  CHECK(!wavert_jit_failed());
  CHECK(launch(&slot, "scale", 1, NULL) == WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK(wavert_jit_failed());
  CHECK(slot == NULL);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("the host call has no device");
  CHECK(fake_cuda_launch_count() == 0);
  CHECK_OK(wavert_call_begin(NULL, NULL, &state));
  CHECK_OK(wavert_call_end(&state));
}

static void test_launches(void) {
  wavert_kernel *slot = NULL;
  void *caller_stream = (void *)(uintptr_t)0x5100;
  wavert_call_state state;
  fake_cuda_reset();
  CHECK_OK(wavert_call_begin(device, caller_stream, &state));
  CHECK(fake_cuda_current_context() == NULL); /* entered by the first launch, not by begin */
  CHECK(!wavert_jit_failed());
  CHECK(launch(&slot, "scale", 1, NULL) == WAVERT_OK);
  CHECK(fake_cuda_current_context() == fake_cuda_primary_context(0));
  CHECK(fake_cuda_launch_at(0)->context == fake_cuda_primary_context(0));
  wavert_kernel *first = slot;
  CHECK(first != NULL);
  void *explicit_stream = (void *)(uintptr_t)0x5200;
  CHECK(launch(&slot, "scale", 3, explicit_stream) == WAVERT_OK);
  CHECK(slot == first);
  CHECK(fake_cuda_calls("cuModuleLoadDataEx") == 1);
  CHECK(fake_cuda_launch_count() == 2);
  CHECK(fake_cuda_launch_at(0)->stream == caller_stream); /* NULL = the call's stream */
  CHECK(fake_cuda_launch_at(1)->stream == explicit_stream && fake_cuda_launch_at(1)->grid[2] == 3);
  CHECK(!wavert_jit_failed());
  CHECK_OK(wavert_call_end(&state));
  CHECK(fake_cuda_current_context() == NULL);

  /* A failing launch: the status comes back at once and from wavert_call_end, with the first
   * error's message even after later failures and later successful calls. */
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  CHECK(launch(&slot, "scale", 70000, NULL) == WAVERT_ERROR_LIMIT_EXCEEDED);
  CHECK(wavert_jit_failed());
  wavert_kernel *other = NULL;
  CHECK(launch(&other, "missing_kernel", 1, NULL) == WAVERT_ERROR_NOT_FOUND);
  CHECK(launch(&slot, "scale", 1, NULL) == WAVERT_OK);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_LIMIT_EXCEEDED);
  CHECK(strcmp(wavert_last_error(),
               "launch of kernel 'scale': grid z = 70000 exceeds the device limit 65535") == 0);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT); /* ended already */

  /* The next call starts clean. */
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  CHECK(!wavert_jit_failed());
  CHECK_OK(wavert_call_end(&state));
  wavert_kernel_release(slot);
  wavert_kernel_release(other);
}

static void test_cluster_launches(void) {
  wavert_kernel *slot = NULL;
  wavert_call_state state;
  fake_cuda_reset();
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  /* 2x2x1 clusters over a 4x4x1 grid, 96 bytes of dynamic shared memory. */
  CHECK(wavert_jit_launch_cluster(&slot, image, sizeof(image), "scale", 2, 2, 1, 4, 4, 1, 32, 1,
                                  1, 96, NULL, NULL) == WAVERT_OK);
  CHECK(fake_cuda_launch_count() == 1);
  const fake_cuda_launch *l = fake_cuda_launch_at(0);
  CHECK(l->cluster[0] == 2 && l->cluster[1] == 2 && l->cluster[2] == 1);
  CHECK(l->grid[0] == 4 && l->grid[1] == 4 && l->grid[2] == 1 && l->block[0] == 32);
  CHECK(l->shared_bytes == 96);
  /* A plain launch through the same slot has no cluster attribute. */
  CHECK(wavert_jit_launch(&slot, image, sizeof(image), "scale", 4, 1, 1, 32, 1, 1, 0, NULL,
                          NULL) == WAVERT_OK);
  CHECK(fake_cuda_launch_at(1)->cluster[0] == 0);
  CHECK(fake_cuda_calls("cuModuleLoadDataEx") == 1);
  CHECK_OK(wavert_call_end(&state));

  /* Extents the driver would refuse are refused first, with the kernel named; the error is
   * the call's. */
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  CHECK(wavert_jit_launch_cluster(&slot, image, sizeof(image), "scale", 3, 1, 1, 4, 1, 1, 32, 1,
                                  1, 0, NULL, NULL) == WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK(wavert_jit_failed());
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("wavert_jit_launch_cluster of kernel 'scale': grid x = 4 is not a multiple of "
                "cluster x = 3");
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  CHECK(wavert_jit_launch_cluster(&slot, image, sizeof(image), "scale", 1, 0, 1, 4, 1, 1, 32, 1,
                                  1, 0, NULL, NULL) == WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("wavert_jit_launch_cluster of kernel 'scale': cluster y = 0 is not a positive "
                "32-bit count");
  CHECK(fake_cuda_launch_count() == 2);
  wavert_kernel_release(slot);
}

static void test_nested_calls(void) {
  wavert_device *device1 = NULL;
  CHECK_OK(wavert_device_get(kDLCUDA, 1, &device1));
  wavert_kernel *slot = NULL;
  wavert_call_state outer, inner;
  fake_cuda_reset();
  CHECK_OK(wavert_call_begin(device, (void *)(uintptr_t)0x1, &outer));
  CHECK_OK(wavert_call_begin(device1, (void *)(uintptr_t)0x2, &inner));
  CHECK(launch(&slot, "scale", 1, NULL) == WAVERT_OK);
  CHECK(fake_cuda_launch_at(0)->context == fake_cuda_primary_context(1));
  CHECK(launch(&slot, "scale", -1, NULL) == WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(wavert_call_end(&inner), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK(fake_cuda_current_context() == NULL); /* the outer call has not entered its device */
  CHECK(!wavert_jit_failed()); /* the outer call's record is its own */
  CHECK(launch(&slot, "scale", 1, NULL) == WAVERT_OK);
  CHECK(fake_cuda_launch_at(1)->context == fake_cuda_primary_context(0));
  CHECK(fake_cuda_launch_at(1)->stream == (void *)(uintptr_t)0x1);
  CHECK_OK(wavert_call_end(&outer));
  CHECK(fake_cuda_current_context() == NULL);
  CHECK(fake_cuda_calls("cuModuleLoadDataEx") == 2); /* one per device */
  wavert_kernel_release(slot);
}

static int index_of(const char *name, int from) {
  for (int i = from; fake_cuda_call_at(i) != NULL; ++i)
    if (strcmp(fake_cuda_call_at(i), name) == 0) return i;
  return -1;
}

static void test_mgpu(void) {
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  fake_cuda_reset();
  void *stream = mgpuStreamCreate();
  CHECK(stream != NULL);
  /* The new stream waits for the caller's stream: record, then wait. */
  int record = index_of("cuEventRecord", 0);
  CHECK(record >= 0 && index_of("cuStreamWaitEvent", record) > record);

  void *ptr = mgpuMemAlloc(256, stream, 0);
  CHECK(ptr != NULL);
  void *shared = mgpuMemAlloc(16, stream, 1);
  CHECK(shared != NULL && fake_cuda_calls("cuMemAllocManaged") == 1);
  CHECK(mgpuMemAlloc(0, stream, 0) == NULL);
  mgpuMemset32(ptr, 0x01020304u, 64, stream);
  mgpuMemset16(shared, 0xABCD, 8, stream);
  uint32_t host[64];
  mgpuMemcpy(host, ptr, sizeof(host), stream);
  CHECK(fake_cuda_calls("cuMemsetD32Async") == 1 && fake_cuda_calls("cuMemsetD16Async") == 1);
  CHECK(fake_cuda_calls("cuMemcpyAsync") == 1);
  CHECK(host[63] == 0x01020304u && ((uint16_t *)shared)[7] == 0xABCD);

  void *event = mgpuEventCreate();
  CHECK(event != NULL);
  mgpuEventRecord(event, stream);
  mgpuStreamWaitEvent(stream, event);
  mgpuEventSynchronize(event);
  mgpuEventDestroy(event);

  fake_cuda_reset();
  mgpuStreamSynchronize(stream);
  /* Synchronised, then the call's stream is ordered after it. */
  int sync = index_of("cuStreamSynchronize", 0);
  CHECK(sync >= 0 && index_of("cuStreamWaitEvent", sync) > sync);
  mgpuMemFree(ptr, stream);
  mgpuMemFree(shared, stream);
  mgpuStreamDestroy(stream);
  CHECK(!wavert_jit_failed());

  /* Pooled: a second stream reuses the first without a new driver stream. */
  fake_cuda_reset();
  void *again = mgpuStreamCreate();
  CHECK(again == stream && fake_cuda_calls("cuStreamCreate") == 0);
  mgpuStreamDestroy(again);

  /* Failures are recorded, not printed, and end the call with the first one. */
  fake_cuda_fail_next("cuMemAlloc_v2", 2);
  CHECK(mgpuMemAlloc(8, NULL, 0) == NULL);
  CHECK(wavert_jit_failed());
  fake_cuda_fail_next("cuEventSynchronize", 700);
  mgpuEventSynchronize((void *)(uintptr_t)0x1);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_OUT_OF_MEMORY);
  CHECK_MESSAGE("cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY");
}

static void *racer(void *arg) {
  wavert_kernel **slot = arg;
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  CHECK(launch(slot, "scale", 1, NULL) == WAVERT_OK);
  CHECK_OK(wavert_call_end(&state));
  return NULL;
}

static void test_slot_race(void) {
  wavert_kernel *slot = NULL;
  pthread_t threads[8];
  fake_cuda_reset();
  for (int i = 0; i < 8; ++i) CHECK(pthread_create(&threads[i], NULL, racer, &slot) == 0);
  for (int i = 0; i < 8; ++i) pthread_join(threads[i], NULL);
  CHECK(fake_cuda_calls("cuModuleLoadDataEx") == 1);
  CHECK(fake_cuda_launch_count() == 8);
  wavert_kernel_release(slot);
}

int main(void) {
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device));
  test_outside_call();
  test_host_call();
  test_launches();
  test_cluster_launches();
  test_nested_calls();
  test_mgpu();
  test_slot_race();
  puts("test_call: ok");
  return 0;
}
