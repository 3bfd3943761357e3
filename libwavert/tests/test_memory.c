/* test_memory.c — streams, stream ordering and device memory against fake_cuda (whose
 * "device" memory is host memory): synchronous vs stream-ordered calls and argument checks. */
#include "fake_cuda.h"
#include "test_util.h"

int main(void) {
  wavert_device *device = NULL;
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device));

  void *ptr = (void *)&device;
  CHECK_OK(wavert_memory_alloc(device, 0, &ptr));
  CHECK(ptr == NULL);
  CHECK_OK(wavert_memory_alloc(device, 64, &ptr));
  CHECK(ptr != NULL);

  fake_cuda_reset();
  uint32_t host[16];
  CHECK_OK(wavert_memory_set(device, ptr, 0xA5A5A5A5u, 4, 16, NULL));
  CHECK(fake_cuda_calls("cuMemsetD32_v2") == 1);
  CHECK_OK(wavert_memory_copy(device, host, ptr, sizeof(host), NULL));
  CHECK(fake_cuda_calls("cuMemcpy") == 1);
  CHECK(host[0] == 0xA5A5A5A5u && host[15] == 0xA5A5A5A5u);

  void *stream = NULL;
  CHECK_OK(wavert_stream_create(device, &stream));
  CHECK(fake_cuda_live_streams() == 1);
  CHECK_OK(wavert_memory_set(device, ptr, 0x1234, 2, 4, stream));
  CHECK_OK(wavert_memory_set(device, (char *)ptr + 8, 0x7f, 1, 2, stream));
  CHECK(fake_cuda_calls("cuMemsetD16Async") == 1 && fake_cuda_calls("cuMemsetD8Async") == 1);
  CHECK_OK(wavert_memory_copy(device, host, ptr, sizeof(host), stream));
  CHECK(fake_cuda_calls("cuMemcpyAsync") == 1);
  CHECK_OK(wavert_stream_synchronize(device, stream));
  CHECK(host[0] == 0x12341234u && host[1] == 0x12341234u && host[2] == 0xA5A57F7Fu);

  CHECK_STATUS(wavert_memory_set(device, ptr, 0, 3, 4, NULL), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("element_bytes = 3");
  CHECK_STATUS(wavert_memory_copy(device, NULL, ptr, 4, NULL), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_OK(wavert_memory_copy(device, NULL, NULL, 0, NULL));
  CHECK_STATUS(wavert_memory_alloc(NULL, 4, &ptr), WAVERT_ERROR_INVALID_ARGUMENT);

  /* Ordering: an event recorded on `stream`, waited on by `waiting`, recycled. */
  void *waiting = NULL;
  CHECK_OK(wavert_stream_create(device, &waiting));
  fake_cuda_reset();
  CHECK_OK(wavert_stream_wait_stream(device, waiting, stream));
  CHECK(fake_cuda_calls("cuEventRecord") == 1 && fake_cuda_calls("cuStreamWaitEvent") == 1);
  CHECK_OK(wavert_stream_wait_stream(device, waiting, stream));
  CHECK(fake_cuda_calls("cuEventCreate") == 1); /* pooled */
  CHECK_OK(wavert_stream_wait_stream(device, stream, stream)); /* no-op */
  CHECK(fake_cuda_calls("cuEventRecord") == 2);

  CHECK_OK(wavert_stream_release(device, waiting));
  CHECK_OK(wavert_stream_release(device, stream));
  CHECK_OK(wavert_stream_release(device, NULL));
  CHECK(fake_cuda_live_streams() == 0);
  CHECK_OK(wavert_memory_free(device, ptr));
  CHECK_OK(wavert_memory_free(device, NULL));
  CHECK(fake_cuda_current_context() == NULL);
  puts("test_memory: ok");
  return 0;
}
