/*
 * main.c: call an ahead-of-time export of saxpy.mlir from C, no Python involved.
 *
 * Builds against the export with pkg-config (see the Makefile): y = 2.5 * x + y on 100003
 * floats in device memory that libwavert allocates, then checks every element on the host.
 * Exit status: 0 PASS, 1 FAIL or error, 77 no GPU (the message names the missing driver or
 * device).
 */
#include <stdio.h>
#include <stdlib.h>

#include "aot_saxpy.h"

#define N 100003

static int fail(const char *what, int32_t status, const char *message) {
  fprintf(stderr, "aot_saxpy: %s: %s (%s)\n", what, wavert_status_string((wavert_status)status),
          message);
  return 1;
}

int main(void) {
  wavert_device *device;
  wavert_status status = wavert_device_get(kDLCUDA, 0, &device);
  if (status == WAVERT_ERROR_UNAVAILABLE || status == WAVERT_ERROR_NOT_FOUND) {
    printf("aot_saxpy: no CUDA GPU: %s (%s); skipping\n", wavert_last_error(),
           wavert_status_string(status));
    return 77;
  }
  if (status != WAVERT_OK) return fail("wavert_device_get", status, wavert_last_error());

  size_t bytes = N * sizeof(float);
  float *hx = malloc(bytes), *hy = malloc(bytes), *out = malloc(bytes);
  if (!hx || !hy || !out) return fail("malloc", WAVERT_ERROR_OUT_OF_MEMORY, "host memory");
  for (int i = 0; i < N; ++i) {
    hx[i] = (float)(i % 1000) * 0.5f;
    hy[i] = (float)(i % 7) - 3.0f;
  }
  void *dx = NULL, *dy = NULL;
  if ((status = wavert_memory_alloc(device, bytes, &dx)) != WAVERT_OK ||
      (status = wavert_memory_alloc(device, bytes, &dy)) != WAVERT_OK ||
      (status = wavert_memory_copy(device, dx, hx, bytes, NULL)) != WAVERT_OK ||
      (status = wavert_memory_copy(device, dy, hy, bytes, NULL)) != WAVERT_OK)
    return fail("device memory", status, wavert_last_error());

  int64_t shape[1] = {N};
  DLTensor x = {dx, {kDLCUDA, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLTensor y = {dy, {kDLCUDA, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  int32_t st = aot_saxpy_saxpy(2.5f, &x, &y, NULL);
  if (st != WAVERT_OK) return fail("aot_saxpy_saxpy", st, aot_saxpy_last_error());
  /* A NULL-stream copy waits for the legacy default stream, which the kernel ran on. */
  if ((status = wavert_memory_copy(device, out, dy, bytes, NULL)) != WAVERT_OK)
    return fail("copy back", status, wavert_last_error());

  int bad = 0;
  for (int i = 0; i < N; ++i) {
    float want = 2.5f * hx[i] + hy[i];
    if (out[i] != want && bad++ < 5)
      fprintf(stderr, "y[%d] = %g, expected %g\n", i, out[i], want);
  }
  aot_saxpy_unload();
  wavert_memory_free(device, dx);
  wavert_memory_free(device, dy);
  free(hx);
  free(hy);
  free(out);
  if (bad) {
    printf("aot_saxpy: FAIL (%d of %d elements wrong)\n", bad, N);
    return 1;
  }
  printf("aot_saxpy: PASS (%d elements)\n", N);
  return 0;
}
