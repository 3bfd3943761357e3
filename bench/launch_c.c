/*
 * launch_c.c — launch overhead of wavert_function_launch against raw cuLaunchKernel (libcuda
 * opened with dlopen) for an empty kernel of P 64-bit parameters: per-launch microseconds of
 * each and their ratio (target <= 1.05). Exits 77 without a GPU.
 *
 * Build and run (from the repository root, after `python3 -m pip install .`; `pywave config`
 * gives the installed wavert.h, libwavert and a run path to it, so the program starts without
 * LD_LIBRARY_PATH):
 *   cc -std=c11 -O2 bench/launch_c.c $(pywave config --cflags --libs) -ldl -o /tmp/launch_c
 *   /tmp/launch_c [launches] [P]      (defaults: 100000 launches, P = 3; 0 <= P <= 512)
 * Against a Meson build instead: -Ilibwavert/include -Lbuilddir/libwavert -lwavert
 * -Wl,-rpath,$PWD/builddir/libwavert. Without a GPU it prints one line naming what is missing
 * to stderr and exits 77; --help prints the usage.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <wavert.h>

#define MAX_PARAMS 512 /* 4 KiB of parameters: the limit of every CUDA driver */

/* The PTX of `empty` with `count` .u64 parameters into `buf` (size >= ptx_size(count)). */
static void empty_ptx(char *buf, size_t size, int count) {
  size_t used = (size_t)snprintf(buf, size,
                                 ".version 6.0\n.target sm_52\n.address_size 64\n"
                                 ".visible .entry empty(");
  for (int i = 0; i < count && used < size; ++i)
    used += (size_t)snprintf(buf + used, size - used, "%s.param .u64 p%d", i ? ", " : "", i);
  if (used < size) snprintf(buf + used, size - used, ")\n{\n  ret;\n}\n");
}

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);
typedef int (*get_function_fn)(void **, void *, const char *);
typedef int (*load_fn)(void **, const void *, unsigned, int *, void **);
typedef int (*sync_fn)(void);
typedef int (*device_get_fn)(int *, int);
typedef int (*retain_fn)(void **, int);
typedef int (*set_current_fn)(void *);

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: launch_c [launches > 0, default 100000] [parameters 0..%d, default 3]\n"
           "Per-launch microseconds of wavert_function_launch and of raw cuLaunchKernel for "
           "an empty kernel, and their ratio (target <= 1.05). Exits 77 without a GPU.\n",
           MAX_PARAMS);
    return 0;
  }
  int launches = argc > 1 ? atoi(argv[1]) : 100000;
  int count = argc > 2 ? atoi(argv[2]) : 3;
  if (launches <= 0 || count < 0 || count > MAX_PARAMS) {
    fprintf(stderr, "usage: launch_c [launches > 0] [parameters 0..%d]\n", MAX_PARAMS);
    return 2;
  }
  static char ptx[64 + MAX_PARAMS * 24];
  empty_ptx(ptx, sizeof(ptx), count);
  wavert_device *device = NULL;
  if (wavert_device_get(kDLCUDA, 0, &device) != WAVERT_OK) {
    fprintf(stderr, "bench/launch_c.c: needs an NVIDIA GPU (%s); nothing measured\n",
            wavert_last_error());
    return 77;
  }
  wavert_module *module = NULL;
  wavert_function *function = NULL;
  void *stream = NULL;
  if (wavert_module_load(device, ptx, strlen(ptx) + 1, &module) != WAVERT_OK ||
      wavert_module_get_function(module, "empty", &function) != WAVERT_OK ||
      wavert_stream_create(device, &stream) != WAVERT_OK) {
    fprintf(stderr, "setup: %s\n", wavert_last_error());
    return 1;
  }

  /* The raw driver path: same device, same (primary) context, same stream. The primary
   * context is made current the way the CUDA runtime (torch, CuPy) leaves it, so both loops
   * run in the steady state: the caller's current context is the device's. */
  const char *library = getenv("WAVERT_CUDA_LIBRARY"); /* the one libwavert opened */
  void *cuda = dlopen(library != NULL && library[0] != '\0' ? library : "libcuda.so.1",
                      RTLD_NOW | RTLD_LOCAL);
  launch_fn cu_launch = cuda ? (launch_fn)dlsym(cuda, "cuLaunchKernel") : NULL;
  load_fn cu_load = cuda ? (load_fn)dlsym(cuda, "cuModuleLoadDataEx") : NULL;
  get_function_fn cu_get = cuda ? (get_function_fn)dlsym(cuda, "cuModuleGetFunction") : NULL;
  sync_fn cu_sync = cuda ? (sync_fn)dlsym(cuda, "cuCtxSynchronize") : NULL;
  device_get_fn cu_device_get = cuda ? (device_get_fn)dlsym(cuda, "cuDeviceGet") : NULL;
  retain_fn cu_retain = cuda ? (retain_fn)dlsym(cuda, "cuDevicePrimaryCtxRetain") : NULL;
  set_current_fn cu_set_current = cuda ? (set_current_fn)dlsym(cuda, "cuCtxSetCurrent") : NULL;
  int cu_device = 0;
  void *context = NULL, *raw_module = NULL, *raw_function = NULL;
  if (cu_launch == NULL || cu_load == NULL || cu_get == NULL || cu_sync == NULL ||
      cu_device_get == NULL || cu_retain == NULL || cu_set_current == NULL ||
      cu_device_get(&cu_device, 0) != 0 || cu_retain(&context, cu_device) != 0 ||
      cu_set_current(context) != 0 || cu_load(&raw_module, ptx, 0, NULL, NULL) != 0 ||
      cu_get(&raw_function, raw_module, "empty") != 0) {
    fprintf(stderr, "raw driver setup failed\n");
    return 1;
  }

  static unsigned long long values[MAX_PARAMS];
  void *params[MAX_PARAMS + 1];
  for (int i = 0; i < count; ++i) params[i] = &values[i];
  if (cu_launch(raw_function, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL) != 0) {
    fprintf(stderr, "raw cuLaunchKernel failed\n");
    return 1;
  }
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
  printf("launches per round: %d (best of 5), kernel parameters: %d\n", launches, count);
  printf("raw cuLaunchKernel:      %.3f us/launch\n", best_raw);
  printf("wavert_function_launch:  %.3f us/launch\n", best_wavert);
  printf("ratio: %.3f (target <= 1.05)\n", best_wavert / best_raw);
  wavert_stream_release(device, stream);
  wavert_module_release(module);
  return 0;
}
