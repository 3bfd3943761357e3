/*
 * call.c — the host-call context (per thread: device, stream, first error, depth, context
 * lease) and the launch entry points that JIT-compiled host code calls, wavert_jit_launch and
 * wavert_jit_launch_cluster, on the call's device, recording errors instead of printing them
 * (MLIR's mgpu* runtime functions, in mgpu.c, use the same context). The call also carries
 * the Wave objects registered for it (wavert_call_set_objects), which wave.c's helpers look
 * up here.
 *
 * Beginning and ending a call make no driver call: launches enter the device's context only
 * when it is not current (launch.c), keep it entered in the call's lease for the rest of the
 * call, and wavert_call_end restores the caller's. In the steady state (the caller's current
 * context is the device's) a host call with one launch makes exactly one driver call, the
 * launch (tests/test_launch_floor.c).
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "wavert_jit.h"
#include "mgpu_internal.h"

typedef struct {
  wavert_device *device;
  void *stream;
  wavert_status status; /* first error recorded during the call */
  intptr_t depth;
  wavert__context_lease lease; /* the context launches of this call entered, if any */
  const wavert_object *objects; /* Wave objects of the call (borrowed), or NULL */
  int32_t nobjects;
  char message[1024];
} call_context;

static _Thread_local call_context current;

/* Layout of wavert_call_state.words. */
enum {
  STATE_MAGIC,
  STATE_PREVIOUS_LEASE_DEVICE,
  STATE_PREVIOUS_LEASE_SAVED,
  STATE_PREVIOUS_DEVICE,
  STATE_PREVIOUS_STREAM,
  STATE_PREVIOUS_STATUS,
  STATE_PREVIOUS_OBJECTS,
  STATE_PREVIOUS_NOBJECTS,
  STATE_WORDS_USED
};
_Static_assert(STATE_WORDS_USED <= WAVERT_CALL_STATE_WORDS, "wavert_call_state too small");
static const char state_magic = 0; /* its address marks a state begun and not yet ended */

static wavert_status record(wavert_status status);

wavert_status wavert_call_begin(wavert_device *device, void *stream, wavert_call_state *state) {
  if (state == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "wavert_call_begin: state is NULL");
  state->words[STATE_MAGIC] = (void *)&state_magic;
  state->words[STATE_PREVIOUS_LEASE_DEVICE] = current.lease.device;
  state->words[STATE_PREVIOUS_LEASE_SAVED] = current.lease.saved;
  state->words[STATE_PREVIOUS_DEVICE] = current.device;
  state->words[STATE_PREVIOUS_STREAM] = current.stream;
  state->words[STATE_PREVIOUS_STATUS] = (void *)(intptr_t)current.status;
  state->words[STATE_PREVIOUS_OBJECTS] = (void *)current.objects;
  state->words[STATE_PREVIOUS_NOBJECTS] = (void *)(intptr_t)current.nobjects;
  current.objects = NULL;
  current.nobjects = 0;
  current.device = device;
  current.stream = stream;
  current.status = WAVERT_OK;
  current.lease.device = NULL;
  current.lease.saved = NULL;
  current.depth += 1;
  return WAVERT_OK;
}

wavert_status wavert_call_end(wavert_call_state *state) {
  if (state == NULL || state->words[STATE_MAGIC] != (void *)&state_magic || current.depth == 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_call_end without a matching wavert_call_begin");
  if (current.device != NULL && current.device->backend->call_end != NULL)
    record(current.device->backend->call_end(current.device));
  wavert_status status = current.status;
  wavert__context_lease_end(&current.lease);
  state->words[STATE_MAGIC] = NULL;
  current.lease.device = state->words[STATE_PREVIOUS_LEASE_DEVICE];
  current.lease.saved = state->words[STATE_PREVIOUS_LEASE_SAVED];
  current.device = state->words[STATE_PREVIOUS_DEVICE];
  current.stream = state->words[STATE_PREVIOUS_STREAM];
  current.status = (wavert_status)(intptr_t)state->words[STATE_PREVIOUS_STATUS];
  current.objects = state->words[STATE_PREVIOUS_OBJECTS];
  current.nobjects = (int32_t)(intptr_t)state->words[STATE_PREVIOUS_NOBJECTS];
  current.depth -= 1;
  if (status != WAVERT_OK) return wavert__error(status, "%s", current.message);
  return WAVERT_OK;
}

int32_t wavert_jit_failed(void) { return current.depth == 0 || current.status != WAVERT_OK; }

/* Record `status` (with this thread's last error message) as the call's error if it is the
 * first; returns `status`. */
static wavert_status record(wavert_status status) {
  if (status != WAVERT_OK && current.depth > 0 && current.status == WAVERT_OK) {
    current.status = status;
    snprintf(current.message, sizeof(current.message), "%s", wavert_last_error());
  }
  return status;
}

static void *call_stream(void *stream) { return stream != NULL ? stream : current.stream; }

wavert_status wavert__call_function(wavert_kernel **slot, const void *image, int64_t image_size,
                                    const char *name, wavert_function **out_function) {
  wavert_kernel *kernel = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (kernel == NULL) {
    wavert_kernel *fresh = NULL;
    wavert_status status = wavert_kernel_create(image, (size_t)image_size, name, &fresh);
    if (status != WAVERT_OK) return status;
    if (__atomic_compare_exchange_n(slot, &kernel, fresh, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
      kernel = fresh;
    } else {
      wavert_kernel_release(fresh); /* another thread's kernel won; `kernel` holds it */
    }
  }
  return wavert_kernel_get_function(kernel, current.device, out_function);
}

/* wavert_jit_launch and wavert_jit_launch_cluster (`cluster` NULL: a plain launch). */
static int32_t jit_launch(const char *caller, wavert_kernel **slot, const void *image,
                          int64_t image_size, const char *name, const int64_t *cluster,
                          int64_t gx, int64_t gy, int64_t gz, int64_t bx, int64_t by, int64_t bz,
                          int32_t dynamic_shared_bytes, void *stream, void **params) {
  if (current.depth == 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "%s of kernel '%s': no host call in progress (wavert_call_begin)", caller,
                         name != NULL ? name : "?");
  if (current.device == NULL)
    return record(wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                                "%s of kernel '%s': the host call has no device (a host-only "
                                "call, begun with device NULL, launches no kernel)",
                                caller, name != NULL ? name : "?"));
  if (slot == NULL || image_size < 0)
    return record(wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                                "%s: slot is NULL or image_size is negative", caller));
  uint32_t cluster32[3] = {1, 1, 1};
  if (cluster != NULL) {
    const int64_t grid[3] = {gx, gy, gz};
    wavert_status checked = wavert__cluster_extents(current.device->backend, caller,
                                                    name != NULL ? name : "?", cluster, grid,
                                                    cluster32);
    if (checked != WAVERT_OK) return record(checked);
  }
  wavert_function *function = NULL;
  wavert_status status = wavert__call_function(slot, image, image_size, name, &function);
  if (status == WAVERT_OK)
    status = wavert__function_launch_leased(function, cluster != NULL ? cluster32 : NULL, gx, gy,
                                            gz, bx, by, bz, dynamic_shared_bytes,
                                            call_stream(stream), params, &current.lease);
  return record(status);
}

int32_t wavert_jit_launch(wavert_kernel **slot, const void *image, int64_t image_size,
                          const char *name, int64_t gx, int64_t gy, int64_t gz, int64_t bx,
                          int64_t by, int64_t bz, int32_t dynamic_shared_bytes, void *stream,
                          void **params) {
  return jit_launch("wavert_jit_launch", slot, image, image_size, name, NULL, gx, gy, gz, bx, by,
                    bz, dynamic_shared_bytes, stream, params);
}

int32_t wavert_jit_launch_cluster(wavert_kernel **slot, const void *image, int64_t image_size,
                                  const char *name, int64_t cx, int64_t cy, int64_t cz,
                                  int64_t gx, int64_t gy, int64_t gz, int64_t bx, int64_t by,
                                  int64_t bz, int32_t dynamic_shared_bytes, void *stream,
                                  void **params) {
  const int64_t cluster[3] = {cx, cy, cz};
  return jit_launch("wavert_jit_launch_cluster", slot, image, image_size, name, cluster, gx, gy,
                    gz, bx, by, bz, dynamic_shared_bytes, stream, params);
}

wavert_device *wavert__call_current(void **out_stream) {
  if (current.depth == 0) return NULL;
  if (out_stream != NULL) *out_stream = current.stream;
  return current.device;
}

wavert_status wavert__call_record(wavert_status status) { return record(status); }

wavert__context_lease *wavert__call_lease(void) { return current.depth > 0 ? &current.lease : NULL; }

wavert_status wavert_call_set_objects(const wavert_object *objects, int32_t count) {
  if (current.depth == 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_call_set_objects: no host call in progress (wavert_call_begin)");
  if (count < 0 || (objects == NULL && count > 0))
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_call_set_objects: %d objects at %p", (int)count,
                         (const void *)objects);
  current.objects = count > 0 ? objects : NULL;
  current.nobjects = count;
  return WAVERT_OK;
}

const wavert_object *wavert__call_object(const char *helper, const void *object) {
  if (current.depth == 0) {
    wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "%s: no host call in progress (wavert_call_begin)",
                  helper);
    return NULL;
  }
  const uintptr_t at = (uintptr_t)object, first = (uintptr_t)current.objects;
  const uintptr_t end = first + (uintptr_t)current.nobjects * sizeof(wavert_object);
  if (current.objects == NULL || at < first || at >= end || (at - first) % sizeof(wavert_object)) {
    record(wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "%s: %p is not one of the call's %d object arguments (the host code "
                         "passed it something else, such as the stream)",
                         helper, object, (int)current.nobjects));
    return NULL;
  }
  return (const wavert_object *)object;
}
