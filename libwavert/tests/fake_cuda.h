/*
 * fake_cuda.h — the test-only stand-in for libcuda.so.1 (fake_cuda.c): what it records and
 * how tests steer it. Tests link it and point $WAVERT_CUDA_LIBRARY at the same file, so the
 * library libwavert dlopens is the one whose log they read.
 */
#ifndef WAVERT_FAKE_CUDA_H
#define WAVERT_FAKE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#define FAKE_CUDA_MAX_PARAMS 8

typedef struct fake_cuda_launch {
  void *function;
  char kernel[64];
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
  void *stream;
  void *context; /* current context at the launch */
  unsigned cluster[3]; /* cuLaunchKernelEx's cluster dimension; 0 for cuLaunchKernel */
  int cluster_policy;  /* its scheduling policy attribute (-1 if none) */
  uint64_t params[FAKE_CUDA_MAX_PARAMS]; /* each parameter's bytes, zero-extended */
} fake_cuda_launch;

/* Forget every recorded call and launch (settings are kept). */
void fake_cuda_reset(void);
/* Number of calls of driver entry point `name` (exported name, e.g. "cuMemAlloc_v2"). */
int fake_cuda_calls(const char *name);
/* The `index`-th recorded call's name, or NULL past the end. */
const char *fake_cuda_call_at(int index);
int fake_cuda_launch_count(void);
const fake_cuda_launch *fake_cuda_launch_at(int index);
/* Last cuFuncSetAttribute call: returns the number of calls; *attribute / *value of the last. */
int fake_cuda_last_set_attribute(int *attribute, int *value);
/* The next call of `name` returns `result` (once). */
void fake_cuda_fail_next(const char *name, int result);
/* Devices reported by cuDeviceGetCount (default 2; 0 makes cuInit return NO_DEVICE). Set it
 * before the first libwavert call. */
void fake_cuda_set_device_count(int count);
/* Attributes of functions obtained after this call (CU_FUNC_ATTRIBUTE_* index 0..8). */
void fake_cuda_set_function_attribute(int attribute, int value);
/* Device `ordinal`'s (0..7) CU_DEVICE_ATTRIBUTE_* `attribute` (0..127) reads `value`. Set it
 * before the device is first got: libwavert reads attributes once per device. */
void fake_cuda_set_device_attribute(int ordinal, int attribute, int value);
/* Parameter sizes in bytes used to record launch parameters (default: none recorded). */
void fake_cuda_set_param_sizes(int count, const size_t *sizes);
/* The calling thread's current context. */
void *fake_cuda_current_context(void);
/* The primary context of device `ordinal`. */
void *fake_cuda_primary_context(int ordinal);
/* Live streams / events / allocations. */
int fake_cuda_live_streams(void);
int fake_cuda_live_events(void);
/* Live cuMemAlloc_v2 / cuMemAllocManaged allocations (each cuMemFree_v2 of one counts down). */
int fake_cuda_live_allocations(void);


/* CU_JIT_OPTIMIZATION_LEVEL of the last successful cuModuleLoadDataEx, -1 if not given. */
int fake_cuda_last_jit_opt_level(void);

/* Host registration: cuMemHostGetDevicePointer returns the host address plus this. */
#define FAKE_CUDA_DEVICE_ALIAS ((uintptr_t)1 << 44)
/* Bytes registered at exactly `ptr` (cuMemHostRegister), 0 if none. */
size_t fake_cuda_registered(const void *ptr);

/* The arguments of the last cuTensorMapEncodeTiled call. The fake writes the call's
 * arguments into the map's 128 bytes (so equal arguments give equal maps). */
typedef struct fake_cuda_tensor_map {
  int data_type;
  unsigned rank;
  void *address;
  uint64_t dims[5];
  uint64_t strides[4];
  unsigned box[5];
  unsigned element_strides[5];
  int interleave, swizzle, l2_promotion, oob_fill;
  void *map;
} fake_cuda_tensor_map;
const fake_cuda_tensor_map *fake_cuda_last_tensor_map(void);

#endif /* WAVERT_FAKE_CUDA_H */
