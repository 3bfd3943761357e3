/* test_no_device.c — a driver that reports no device (cuInit: CUDA_ERROR_NO_DEVICE): the
 * count is 0 and getting a device is WAVERT_ERROR_UNAVAILABLE "no CUDA device". */
#include "fake_cuda.h"
#include "test_util.h"

int main(void) {
  fake_cuda_set_device_count(0);
  int32_t count = -1;
  CHECK_OK(wavert_device_count(kDLCUDA, &count));
  CHECK(count == 0);
  wavert_device *device = NULL;
  CHECK_STATUS(wavert_device_get(kDLCUDA, 0, &device), WAVERT_ERROR_UNAVAILABLE);
  CHECK_MESSAGE("no CUDA device");
  CHECK(device == NULL);
  puts("test_no_device: ok");
  return 0;
}
