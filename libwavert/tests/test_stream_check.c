/* test_stream_check.c — wavert_stream_check against fake_cuda: special handles pass, handles
 * that are misaligned, point to unmapped memory, to memory that is not a stream, or to another
 * device's stream are INVALID_ARGUMENT naming the handle; nothing crashes. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_cuda.h"
#include "test_util.h"

int main(void) {
  wavert_device *device = NULL, *other = NULL;
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device));
  CHECK_OK(wavert_device_get(kDLCUDA, 1, &other));

  /* NULL (legacy default), CU_STREAM_LEGACY, CU_STREAM_PER_THREAD: no driver call. */
  fake_cuda_reset();
  CHECK_OK(wavert_stream_check(device, NULL));
  CHECK_OK(wavert_stream_check(device, (void *)1));
  CHECK_OK(wavert_stream_check(device, (void *)2));
  CHECK(fake_cuda_calls("cuStreamGetCtx") == 0);

  CHECK_STATUS(wavert_stream_check(NULL, NULL), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(wavert_stream_check(device, (void *)0x1234), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("0x1234");
  CHECK_MESSAGE("not 8-byte aligned");
  CHECK_STATUS(wavert_stream_check(device, (void *)3), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(wavert_stream_check(device, (void *)UINTPTR_MAX), WAVERT_ERROR_INVALID_ARGUMENT);

  /* Unmapped: small integers, the top of the address space, a page just unmapped. */
  CHECK_STATUS(wavert_stream_check(device, (void *)8), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("no readable memory");
  CHECK_STATUS(wavert_stream_check(device, (void *)(UINTPTR_MAX & ~(uintptr_t)7)),
               WAVERT_ERROR_INVALID_ARGUMENT);
  long page = sysconf(_SC_PAGESIZE);
  void *gone = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(gone != MAP_FAILED);
  CHECK(munmap(gone, (size_t)page) == 0);
  CHECK_STATUS(wavert_stream_check(device, gone), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("no readable memory");
  void *guard = mmap(NULL, (size_t)page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(guard != MAP_FAILED);
  CHECK_STATUS(wavert_stream_check(device, guard), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK(munmap(guard, (size_t)page) == 0);
  CHECK(fake_cuda_calls("cuStreamGetCtx") == 0);

  /* Readable memory that is not a stream: the driver's answer. */
  static uint64_t not_a_stream[4];
  CHECK_STATUS(wavert_stream_check(device, not_a_stream), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("is not a CUDA stream the driver knows");
  CHECK_MESSAGE("cuStreamGetCtx");

  /* A live stream of this device passes; on another device it is refused. */
  void *stream = NULL, *stream1 = NULL;
  CHECK_OK(wavert_stream_create(device, &stream));
  CHECK_OK(wavert_stream_create(other, &stream1));
  CHECK_OK(wavert_stream_check(device, stream));
  CHECK_OK(wavert_stream_check(other, stream1));
  CHECK_STATUS(wavert_stream_check(device, stream1), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("not to the primary context");
  CHECK_MESSAGE("CUDA device 0");
  CHECK_OK(wavert_stream_release(device, stream));
  CHECK_OK(wavert_stream_release(other, stream1));
  CHECK(fake_cuda_current_context() == NULL); /* no context left current */
  puts("test_stream_check: OK");
  return 0;
}
