/* test_memory_kind.c — wavert_memory_kind against fake_cuda, which answers
 * cuPointerGetAttributes from its table of allocations: device, managed, registered host and
 * unknown memory, pointers inside an allocation, the device ordinal, argument errors. */
#include <stdint.h>

#include "fake_cuda.h"
#include "test_util.h"
#include "wavert_jit.h"
#include "wavert_mgpu.h"

int main(void) {
  wavert_device *device = NULL, *device1 = NULL;
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device));
  CHECK_OK(wavert_device_get(kDLCUDA, 1, &device1));
  wavert_memory_type kind = WAVERT_MEMORY_MANAGED;
  int32_t ordinal = 7;

  void *ptr = NULL;
  CHECK_OK(wavert_memory_alloc(device1, 64, &ptr));
  CHECK(fake_cuda_live_allocations() == 1);
  CHECK_OK(wavert_memory_kind(device, ptr, &kind, &ordinal));
  CHECK(kind == WAVERT_MEMORY_DEVICE && ordinal == 1);
  CHECK_OK(wavert_memory_kind(device, (char *)ptr + 63, &kind, &ordinal));
  CHECK(kind == WAVERT_MEMORY_DEVICE && ordinal == 1);
  CHECK_OK(wavert_memory_kind(device, (char *)ptr + 64, &kind, &ordinal));
  CHECK(kind == WAVERT_MEMORY_UNREGISTERED && ordinal == -1);

  /* managed memory, through the call bracket as gpu.alloc host_shared allocates it */
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  void *managed = mgpuMemAlloc(32, NULL, 1);
  CHECK_OK(wavert_call_end(&state));
  CHECK(managed != NULL && fake_cuda_live_allocations() == 2);
  CHECK_OK(wavert_memory_kind(device1, managed, &kind, &ordinal));
  CHECK(kind == WAVERT_MEMORY_MANAGED && ordinal == 0);

  int64_t host[4];
  CHECK_OK(wavert_memory_kind(device, host, &kind, &ordinal));
  CHECK(kind == WAVERT_MEMORY_UNREGISTERED && ordinal == -1);
  CHECK_OK(wavert_memory_kind(device, NULL, &kind, &ordinal));
  CHECK(kind == WAVERT_MEMORY_UNREGISTERED);

  CHECK_STATUS(wavert_memory_kind(NULL, host, &kind, &ordinal), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(wavert_memory_kind(device, host, NULL, &ordinal), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("out_kind");

  fake_cuda_fail_next("cuPointerGetAttributes", 1);
  CHECK_STATUS(wavert_memory_kind(device, ptr, &kind, &ordinal), WAVERT_ERROR_DRIVER);
  CHECK_MESSAGE("cuPointerGetAttributes");

  CHECK_OK(wavert_memory_free(device1, ptr));
  CHECK_OK(wavert_memory_free(device, managed));
  CHECK(fake_cuda_live_allocations() == 0);
  CHECK_OK(wavert_memory_kind(device, ptr, &kind, &ordinal));
  CHECK(kind == WAVERT_MEMORY_UNREGISTERED);
  puts("test_memory_kind: ok");
  return 0;
}
