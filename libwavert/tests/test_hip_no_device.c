/* test_hip_no_device.c — the REAL HIP runtime (default library search: $WAVERT_HIP_LIBRARY is
 * cleared) on a machine without an AMD GPU: selecting kDLROCM gives a clear "no AMD device"
 * (WAVERT_ERROR_UNAVAILABLE), never a crash. Exits 77 (skipped) when libamdhip64 is not
 * installed, or when an AMD GPU is present. */
#define _POSIX_C_SOURCE 200809L /* unsetenv */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

int main(void) {
  unsetenv("WAVERT_HIP_LIBRARY");
  /* No dlopen of libamdhip64 here: some builds abort while loading, which is what libwavert's
   * probe process guards against. */
  int32_t count = -1;
  wavert_status status = wavert_device_count(kDLROCM, &count);
  printf("wavert_device_count(kDLROCM): %s, count %d, message '%s'\n",
         wavert_status_string(status), (int)count, wavert_last_error());
  if (status == WAVERT_ERROR_UNAVAILABLE && strstr(wavert_last_error(), "cannot open")) {
    printf("skipped: libamdhip64 (HIP runtime) is not installed\n");
    return TEST_SKIP;
  }
  if (status == WAVERT_OK && count > 0) {
    printf("skipped: an AMD GPU is present (this test is for machines without one)\n");
    return TEST_SKIP;
  }
  /* Either the runtime reports zero devices (then device_get says "no AMD device"), or it
   * cannot be initialised at all without an AMD driver: both are UNAVAILABLE, with a message. */
  if (status == WAVERT_OK) {
    CHECK(count == 0);
    wavert_device *device = NULL;
    CHECK_STATUS(wavert_device_get(kDLROCM, 0, &device), WAVERT_ERROR_UNAVAILABLE);
    CHECK(device == NULL);
    CHECK_MESSAGE("no AMD device");
  } else {
    CHECK_STATUS(status, WAVERT_ERROR_UNAVAILABLE);
    CHECK_MESSAGE("HIP");
    wavert_device *device = NULL;
    CHECK_STATUS(wavert_device_get(kDLROCM, 0, &device), WAVERT_ERROR_UNAVAILABLE);
  }
  printf("selecting the HIP backend: %s\n", wavert_last_error());
  /* The CUDA backend is unaffected. */
  wavert_device_count(kDLCUDA, &count);
  puts("test_hip_no_device: ok");
  return 0;
}
