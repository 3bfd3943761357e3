/*
 * launch_floor.c — the raw-driver launch floor as a shared library, called by bench/launch.py
 * through ctypes in the benchmark's own process and thread (same CPU, same CUDA context, same
 * stream as the launchers it is compared with), so that its rounds interleave with theirs.
 *
 * The driver is libcuda opened with dlopen ($WAVERT_CUDA_LIBRARY when set, as libwavert does,
 * else libcuda.so.1); nothing else is linked. The kernel is `empty` with P .u64 parameters
 * (PTX, JIT-compiled by the driver), loaded into the context current on the calling thread.
 *
 * Build:  cc -std=c11 -O2 -shared -fPIC bench/launch_floor.c -ldl -o liblaunch_floor.so
 *
 * API (every function returns 0 or a CUresult / -1; launch_floor_error() says why):
 *   launch_floor_open(library, ordinal)    dlopen the driver (library NULL: the default), cuInit;
 *                                           when no context is current on this thread, make the
 *                                           primary context of device `ordinal` current (what
 *                                           the CUDA runtime of torch and CuPy uses).
 *   launch_floor_kernel(params, &function) load `empty` with 0 <= params <= 512 parameters.
 *   launch_floor_run(function, stream, launches, &seconds)
 *                                           `launches` back-to-back cuLaunchKernel calls (grid
 *                                           1x1x1, block 1x1x1, no shared memory) on `stream`,
 *                                           with the kernel's parameters (8 zero bytes each,
 *                                           from one static array); `seconds`: the
 *                                           CLOCK_MONOTONIC time of the loop (no synchronisation:
 *                                           the enqueue cost, as bench/launch.py times the
 *                                           others). Stops at the first failing launch.
 * Single-threaded use (the benchmark's main thread); no state is freed (a benchmark process).
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MAX_PARAMS 512 /* 4 KiB of parameters: the limit of every CUDA driver */

#if defined(__GNUC__)
#define EXPORT __attribute__((visibility("default")))
#else
#define EXPORT
#endif

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);
typedef int (*init_fn)(unsigned);
typedef int (*load_fn)(void **, const void *, unsigned, int *, void **);
typedef int (*get_function_fn)(void **, void *, const char *);
typedef int (*device_get_fn)(int *, int);
typedef int (*retain_fn)(void **, int);
typedef int (*ctx_get_fn)(void **);
typedef int (*ctx_set_fn)(void *);

static struct {
  launch_fn launch;
  load_fn load;
  get_function_fn get_function;
} driver;

static char error_text[256];
static unsigned long long values[MAX_PARAMS];
static void *param_addresses[MAX_PARAMS + 1];

static int fail(int code, const char *what) {
  snprintf(error_text, sizeof(error_text), "%s (result %d)", what, code);
  return code != 0 ? code : -1;
}

EXPORT const char *launch_floor_error(void) { return error_text; }

EXPORT int launch_floor_open(const char *library, int ordinal) {
  if (driver.launch != NULL) return 0;
  void *cuda = dlopen(library != NULL && library[0] != '\0' ? library : "libcuda.so.1",
                      RTLD_NOW | RTLD_LOCAL);
  if (cuda == NULL) {
    snprintf(error_text, sizeof(error_text), "dlopen: %s", dlerror());
    return -1;
  }
  init_fn init = (init_fn)dlsym(cuda, "cuInit");
  device_get_fn device_get = (device_get_fn)dlsym(cuda, "cuDeviceGet");
  retain_fn retain = (retain_fn)dlsym(cuda, "cuDevicePrimaryCtxRetain");
  ctx_get_fn ctx_get = (ctx_get_fn)dlsym(cuda, "cuCtxGetCurrent");
  ctx_set_fn ctx_set = (ctx_set_fn)dlsym(cuda, "cuCtxSetCurrent");
  launch_fn launch = (launch_fn)dlsym(cuda, "cuLaunchKernel");
  driver.load = (load_fn)dlsym(cuda, "cuModuleLoadDataEx");
  driver.get_function = (get_function_fn)dlsym(cuda, "cuModuleGetFunction");
  if (init == NULL || device_get == NULL || retain == NULL || ctx_get == NULL ||
      ctx_set == NULL || launch == NULL || driver.load == NULL || driver.get_function == NULL)
    return fail(-1, "the driver lacks a cu* entry point");
  int rc = init(0);
  if (rc != 0) return fail(rc, "cuInit");
  void *context = NULL;
  if ((rc = ctx_get(&context)) != 0) return fail(rc, "cuCtxGetCurrent");
  if (context == NULL) {
    int device = 0;
    if ((rc = device_get(&device, ordinal)) != 0) return fail(rc, "cuDeviceGet");
    if ((rc = retain(&context, device)) != 0) return fail(rc, "cuDevicePrimaryCtxRetain");
    if ((rc = ctx_set(context)) != 0) return fail(rc, "cuCtxSetCurrent");
  }
  for (int i = 0; i < MAX_PARAMS; ++i) param_addresses[i] = &values[i];
  driver.launch = launch;
  return 0;
}

EXPORT int launch_floor_kernel(int params, void **function) {
  if (driver.launch == NULL) return fail(-1, "launch_floor_kernel before launch_floor_open");
  if (params < 0 || params > MAX_PARAMS || function == NULL)
    return fail(-1, "launch_floor_kernel: params must be in 0..512 and function not NULL");
  static char ptx[128 + MAX_PARAMS * 24];
  size_t used = (size_t)snprintf(ptx, sizeof(ptx),
                                 ".version 6.0\n.target sm_52\n.address_size 64\n"
                                 ".visible .entry empty(");
  for (int i = 0; i < params; ++i)
    used += (size_t)snprintf(ptx + used, sizeof(ptx) - used, "%s.param .u64 p%d", i ? ", " : "",
                             i);
  snprintf(ptx + used, sizeof(ptx) - used, ")\n{\n  ret;\n}\n");
  void *module = NULL;
  int rc = driver.load(&module, ptx, 0, NULL, NULL);
  if (rc != 0) return fail(rc, "cuModuleLoadDataEx");
  if ((rc = driver.get_function(function, module, "empty")) != 0)
    return fail(rc, "cuModuleGetFunction");
  return 0;
}

EXPORT int launch_floor_run(void *function, void *stream, long long launches, double *seconds) {
  if (driver.launch == NULL) return fail(-1, "launch_floor_run before launch_floor_open");
  if (function == NULL || launches < 0 || seconds == NULL)
    return fail(-1, "launch_floor_run: function or seconds is NULL, or launches < 0");
  const launch_fn launch = driver.launch;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long long i = 0; i < launches; ++i) {
    int rc = launch(function, 1, 1, 1, 1, 1, 1, 0, stream, param_addresses, NULL);
    if (rc != 0) return fail(rc, "cuLaunchKernel");
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  *seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  return 0;
}
