/*
 * mgpu_internal.h — what mgpu.c (MLIR's mgpu* runtime ABI) and wave.c (Wave's helpers) need
 * from the other libwavert units: the current host call (call.c), a module load with a JIT
 * optimisation level (module.c) and the check of thread-block cluster extents (launch.c).
 * Internal; not installed.
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

/* The calling thread's current host call's context lease (launches of the call enter the
 * device's context into it once; wavert_call_end ends it), or NULL outside a host call. */
wavert__context_lease *wavert__call_lease(void);

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
