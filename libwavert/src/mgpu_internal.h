/*
 * mgpu_internal.h — what mgpu.c (MLIR's mgpu* runtime ABI) and wave.c (Wave's helpers) need
 * from the other libwavert units: the current host call (call.c), a module load with a JIT
 * optimisation level (module.c) and a launch with thread-block clusters (launch.c). Internal;
 * not installed.
 */
#ifndef WAVERT_MGPU_INTERNAL_H
#define WAVERT_MGPU_INTERNAL_H

#include "internal.h"
#include "wavert_jit.h"

/* The calling thread's host call (wavert_call_begin): its device, and its stream in
 * *out_stream (may be NULL). NULL outside a call (out_stream untouched). */
wavert_device *wavert__call_current(void **out_stream);

/* Record `status` (with this thread's last error message) as the current call's error if it
 * is the first; a no-op outside a call or for WAVERT_OK. Returns `status`. */
wavert_status wavert__call_record(wavert_status status);

/* `object` as one of the current call's Wave objects (wavert_call_set_objects), or NULL with
 * the error recorded (outside a call: set, not recorded): a pointer outside the registered
 * array, or not at one of its elements, is never dereferenced. `helper` names the caller. */
const wavert_object *wavert__call_object(const char *helper, const void *object);

/* The function of kernel slot `*slot` on the call's device, creating the slot's kernel from
 * (image, image_size, name) on first use (thread-safe: one thread's kernel wins, the others'
 * are released). Inside a host call only; errors are returned, not recorded. */
wavert_status wavert__call_function(wavert_kernel **slot, const void *image, int64_t image_size,
                                    const char *name, wavert_function **out_function);

/* wavert_module_load, with the driver JIT's optimisation level `jit_opt_level` (0-4) for PTX;
 * -1 = the driver's default (wavert_module_load itself). WAVERT_ERROR_UNSUPPORTED when the
 * backend has no JIT and jit_opt_level >= 0. */
wavert_status wavert__module_load(wavert_device *device, const void *image, size_t size,
                                  int jit_opt_level, wavert_module **out_module);

/* wavert_function_launch (same validation and shared-memory opt-in), with thread-block
 * clusters of cluster[0..2] blocks when `cluster` is not NULL. The caller checks that the
 * backend has launch_cluster and that each grid extent is a multiple of the cluster's. */
wavert_status wavert__function_launch_cluster(wavert_function *function, const uint32_t *cluster,
                                              int64_t gx, int64_t gy, int64_t gz, int64_t bx,
                                              int64_t by, int64_t bz,
                                              int64_t dynamic_shared_bytes, void *stream,
                                              void **params);

/* Check the thread-block cluster extents `cluster[0..2]` of a launch of kernel `kernel` with
 * grid `grid[0..2]` (`caller` names the entry point in messages) and narrow them into
 * out[0..2]. Errors (not recorded in the call; the caller does that): UNSUPPORTED when
 * `backend` has no launch_cluster (HIP), INVALID_ARGUMENT when an extent is not in
 * [1, UINT32_MAX] or a positive grid extent is not a multiple of it (CUDA's rule for
 * cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION). */
wavert_status wavert__cluster_extents(const wavert__backend *backend, const char *caller,
                                      const char *kernel, const int64_t cluster[3],
                                      const int64_t grid[3], uint32_t out[3]);

/* The scope every mgpu* entry point runs in (mgpu.c): inside a host call, the call's device
 * and stream, errors recorded in the call; outside one, a call begun on the thread's default
 * device and ended by wavert__mgpu_scope_end, whose error becomes the thread's last error
 * unless an earlier one is still pending (the first error is kept). */
typedef struct wavert__mgpu_scope {
  wavert_device *device;
  void *stream; /* the call's stream */
  int outside;  /* the call was begun here */
  wavert_call_state state;
  wavert_status prior; /* outside: the thread's pending error, kept as the first */
  char prior_message[1024];
} wavert__mgpu_scope;

/* Enter the scope of an mgpu call; 0 (error reported) when there is no device. */
int wavert__mgpu_scope_begin(wavert__mgpu_scope *s);
void wavert__mgpu_scope_end(wavert__mgpu_scope *s);

#endif /* WAVERT_MGPU_INTERNAL_H */
