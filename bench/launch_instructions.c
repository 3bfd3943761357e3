/*
 * launch_instructions.c — the host-call launch path of a pywave host function, for counting
 * instructions per launch with callgrind on the recording driver stand-in (no GPU):
 * wavert_call_begin, a helper shaped like the generated one (parameter array, then
 * wavert_jit_launch), wavert_call_end; the device's context current (steady state).
 *
 * Build and run (from the repository root, after building the C tests into build/tests):
 *   cc -std=c11 -O2 bench/launch_instructions.c -Ilibwavert/include -Lbuild/tests/libwavert \
 *      -lwavert -Wl,-rpath,$PWD/build/tests/libwavert -o /tmp/launch_instructions
 *   export WAVERT_CUDA_LIBRARY=$PWD/build/tests/libwavert/tests/libfake_cuda.so
 *   for n in 1000 11000; do valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \
 *      /tmp/launch_instructions $n; done
 * Instructions per launch = (Ir of 11000 - Ir of 1000) / 10000 (the setup cancels);
 * `callgrind_annotate /tmp/cg.11000` splits them between libwavert and the stand-in.
 * The program prints the driver calls one steady-state launch made (with the stand-in).
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <wavert.h>
#include <wavert_jit.h>

static const char image[] = "// a PTX image the stand-in accepts";

/* What generated code does per gpu.launch_func: the kernel parameters' addresses, then the
 * launch through the module's kernel slot. */
static wavert_kernel *slot;
static void helper(void *a, void *b, void *c, int64_t n) {
  void *params[] = {&a, &b, &c, &n};
  if (wavert_jit_launch(&slot, image, sizeof(image), "add", 1, 1, 1, 32, 1, 1, 0, NULL,
                        params) != WAVERT_OK)
    return; /* recorded; wavert_call_end reports it */
}

static int call(wavert_device *device, void *stream) {
  wavert_call_state state;
  if (wavert_call_begin(device, stream, &state) != WAVERT_OK) return 1;
  helper((void *)0x1000, (void *)0x2000, (void *)0x3000, 1);
  return wavert_call_end(&state) != WAVERT_OK;
}

int main(int argc, char **argv) {
  int launches = argc > 1 ? atoi(argv[1]) : 1000;
  wavert_device *device = NULL;
  if (wavert_device_get(kDLCUDA, 0, &device) != WAVERT_OK) {
    fprintf(stderr, "no device: %s\n", wavert_last_error());
    return 77;
  }
  /* The caller's current context is the device's (what torch leaves after its own work).
   * wavert_device_synchronize enters and restores, so set it with the driver directly. */
  void *driver = dlopen(getenv("WAVERT_CUDA_LIBRARY"), RTLD_NOW | RTLD_LOCAL);
  int (*retain)(void **, int) = driver ? (int (*)(void **, int))dlsym(driver, "cuDevicePrimaryCtxRetain") : NULL;
  int (*set_current)(void *) = driver ? (int (*)(void *))dlsym(driver, "cuCtxSetCurrent") : NULL;
  void (*reset)(void) = driver ? (void (*)(void))dlsym(driver, "fake_cuda_reset") : NULL;
  const char *(*call_at)(int) = driver ? (const char *(*)(int))dlsym(driver, "fake_cuda_call_at") : NULL;
  void *context = NULL;
  if (retain == NULL || retain(&context, 0) != 0 || set_current(context) != 0) {
    fprintf(stderr, "set $WAVERT_CUDA_LIBRARY to the driver stand-in (libfake_cuda.so)\n");
    return 1;
  }
  void *stream = (void *)(uintptr_t)0x5100;
  for (int i = 0; i < 2; ++i) /* first use: module load; then one call to settle */
    if (call(device, stream) != 0) {
      fprintf(stderr, "launch: %s\n", wavert_last_error());
      return 1;
    }
  if (reset != NULL && call_at != NULL) {
    reset();
    call(device, stream);
    printf("driver calls of one steady-state launch:");
    for (int i = 0; call_at(i) != NULL; ++i) printf(" %s", call_at(i));
    printf("\n");
  }
  for (int i = 0; i < launches; ++i)
    if (call(device, stream) != 0) {
      fprintf(stderr, "launch: %s\n", wavert_last_error());
      return 1;
    }
  wavert_kernel_release(slot);
  return 0;
}
