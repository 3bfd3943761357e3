/*
 * hip_probe.c — wavert-hip-probe: opens the first HIP runtime of its arguments that loads,
 * calls hipInit and hipGetDeviceCount, and reports through its exit status (hip_probe.h).
 * libwavert spawns it before loading the runtime itself, because some runtimes abort while
 * loading (see hip_probe in backend_hip.c); a crash here is a signal in the parent's waitpid.
 * Standalone: needs only libdl, not libwavert. libwavert compiles the same file (without
 * WAVERT_HIP_PROBE_MAIN) for its fork-based fallback, so both probes run the same code.
 */
#include <dlfcn.h>
#include <stdlib.h>

#include "hip_probe.h"

typedef int hipError_t;
enum { hipSuccess = 0, hipErrorNoDevice = 100 };

int wavert__hip_probe_run(int count, char *const *names) {
  void *library = NULL;
  for (int i = 0; i < count && library == NULL; ++i)
    library = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) return WAVERT__PROBE_NO_LIBRARY;
  hipError_t (*init)(unsigned) = (hipError_t(*)(unsigned))dlsym(library, "hipInit");
  hipError_t (*device_count)(int *) = (hipError_t(*)(int *))dlsym(library, "hipGetDeviceCount");
  if (init == NULL || device_count == NULL) return WAVERT__PROBE_INIT_FAILED;
  int n = 0;
  hipError_t result = init(0);
  if (result == hipSuccess) result = device_count(&n);
  if (result == hipErrorNoDevice || (result == hipSuccess && n == 0))
    return WAVERT__PROBE_NO_DEVICE;
  return result == hipSuccess ? WAVERT__PROBE_DEVICES : WAVERT__PROBE_INIT_FAILED;
}

#ifdef WAVERT_HIP_PROBE_MAIN
int main(int argc, char **argv) {
  if (argc < 2) return WAVERT__PROBE_USAGE;
  /* _Exit: a crash in the runtime's exit-time destructors would read as a crash while
   * loading, and the parent runs those destructors at its own exit anyway. */
  _Exit(wavert__hip_probe_run(argc - 1, argv + 1));
}
#endif
