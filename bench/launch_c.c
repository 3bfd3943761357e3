/*
 * launch_c.c — launch overhead of wavert_function_launch against raw cuLaunchKernel (libcuda
 * opened with dlopen) for an empty kernel: per-launch microseconds of each and their ratio
 * (target <= 1.05). Exits 77 without a GPU.
 *
 * Build and run (from the repository root, after `meson setup builddir && ninja -C builddir`):
 *   cc -std=c11 -O2 bench/launch_c.c -Ilibwavert/include -Lbuilddir/libwavert -lwavert \
 *      -Wl,-rpath,$PWD/builddir/libwavert -ldl -o /tmp/launch_c
 *   /tmp/launch_c [launches]
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <wavert.h>

static const char ptx[] =
    ".version 6.0\n.target sm_52\n.address_size 64\n"
    ".visible .entry empty(.param .u64 p0, .param .u64 p1, .param .u32 p2)\n{\n  ret;\n}\n";

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);
typedef int (*get_function_fn)(void **, void *, const char *);
typedef int (*load_fn)(void **, const void *);
typedef int (*sync_fn)(void);

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
  int launches = argc > 1 ? atoi(argv[1]) : 100000;
  wavert_device *device = NULL;
  if (wavert_device_get(kDLCUDA, 0, &device) != WAVERT_OK) {
    printf("no GPU: %s\n", wavert_last_error());
    return 77;
  }
  wavert_module *module = NULL;
  wavert_function *function = NULL;
  void *stream = NULL;
  if (wavert_module_load(device, ptx, sizeof(ptx), &module) != WAVERT_OK ||
      wavert_module_get_function(module, "empty", &function) != WAVERT_OK ||
      wavert_stream_create(device, &stream) != WAVERT_OK) {
    fprintf(stderr, "setup: %s\n", wavert_last_error());
    return 1;
  }

  /* The raw driver path: same device, same (primary) context, same stream. */
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  launch_fn cu_launch = cuda ? (launch_fn)dlsym(cuda, "cuLaunchKernel") : NULL;
  load_fn cu_load = cuda ? (load_fn)dlsym(cuda, "cuModuleLoadData") : NULL;
  get_function_fn cu_get = cuda ? (get_function_fn)dlsym(cuda, "cuModuleGetFunction") : NULL;
  sync_fn cu_sync = cuda ? (sync_fn)dlsym(cuda, "cuCtxSynchronize") : NULL;
  void *raw_module = NULL, *raw_function = NULL;
  /* wavert_device_synchronize made the primary context current and restored "none", so make
   * it current for the raw calls through a call bracket. */
  wavert_call_state state;
  if (cu_launch == NULL || wavert_call_begin(device, stream, &state) != WAVERT_OK ||
      cu_load(&raw_module, ptx) != 0 || cu_get(&raw_function, raw_module, "empty") != 0) {
    fprintf(stderr, "raw driver setup failed\n");
    return 1;
  }

  unsigned long long a = 0, b = 0;
  unsigned n = 0;
  void *params[] = {&a, &b, &n};
  double best_raw = 1e30, best_wavert = 1e30;
  for (int round = 0; round < 5; ++round) {
    double start = now_us();
    for (int i = 0; i < launches; ++i)
      cu_launch(raw_function, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL);
    cu_sync();
    double raw = (now_us() - start) / launches;

    start = now_us();
    for (int i = 0; i < launches; ++i)
      if (wavert_function_launch(function, 1, 1, 1, 32, 1, 1, 0, stream, params) != WAVERT_OK) {
        fprintf(stderr, "launch: %s\n", wavert_last_error());
        return 1;
      }
    cu_sync();
    double wavert = (now_us() - start) / launches;
    if (raw < best_raw) best_raw = raw;
    if (wavert < best_wavert) best_wavert = wavert;
  }
  wavert_call_end(&state);
  printf("launches per round: %d (best of 5)\n", launches);
  printf("raw cuLaunchKernel:      %.3f us/launch\n", best_raw);
  printf("wavert_function_launch:  %.3f us/launch\n", best_wavert);
  printf("ratio: %.3f (target <= 1.05)\n", best_wavert / best_raw);
  wavert_stream_release(device, stream);
  wavert_module_release(module);
  return 0;
}
