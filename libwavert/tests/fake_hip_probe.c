/*
 * fake_hip_probe.c — a test-only libamdhip64 stand-in for the HIP probe: with $FAKE_HIP_ABORT
 * non-empty it aborts while loading (as some real runtimes do without an AMD GPU); otherwise
 * it reports no device, writing a line to stdout on load (the probe must keep it off the host
 * program's stdout). It exports only what the probe calls, so loading it in-process fails
 * with "no symbol hipGetErrorName": that tells a test that no probe ran.
 */
#include <stdio.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

__attribute__((constructor)) static void fake_hip_load(void) {
  const char *abort_now = getenv("FAKE_HIP_ABORT");
  if (abort_now != NULL && abort_now[0] != '\0') abort();
  fputs("fake_hip_probe: loaded\n", stdout);
  fflush(stdout);
}

EXPORT int hipInit(unsigned flags) {
  (void)flags;
  return 100; /* hipErrorNoDevice */
}

EXPORT int hipGetDeviceCount(int *count) {
  *count = 0;
  return 100;
}
