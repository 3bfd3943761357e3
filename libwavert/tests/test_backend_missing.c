/* test_backend_missing.c — a driver library that cannot be opened gives
 * WAVERT_ERROR_UNAVAILABLE naming the library, on every call, without crashing. Run with
 * WAVERT_CUDA_LIBRARY and WAVERT_HIP_LIBRARY pointing at files that do not exist. */
#include "test_util.h"

static void check_missing(int32_t device_type, const char *library) {
  int32_t count = 7;
  for (int attempt = 0; attempt < 2; ++attempt) {
    wavert_clear_error();
    CHECK_STATUS(wavert_device_count(device_type, &count), WAVERT_ERROR_UNAVAILABLE);
    CHECK(count == 7);
    CHECK_MESSAGE(library);
    CHECK_MESSAGE("cannot open");
  }
  wavert_device *device = NULL;
  CHECK_STATUS(wavert_device_get(device_type, 0, &device), WAVERT_ERROR_UNAVAILABLE);
  CHECK(device == NULL);
  CHECK_MESSAGE(library);
}

int main(void) {
  const char *cuda = getenv("WAVERT_CUDA_LIBRARY");
  const char *hip = getenv("WAVERT_HIP_LIBRARY");
  CHECK(cuda != NULL && hip != NULL);
  check_missing(kDLCUDA, cuda);
  check_missing(kDLROCM, hip);
  CHECK_MESSAGE("WAVERT_HIP_LIBRARY");
  puts("test_backend_missing: ok");
  return 0;
}
