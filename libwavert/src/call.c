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

/* This thread's call context, its address computed once: in a shared library that is a call
 * of __tls_get_addr, which the compiler repeats after a branch or call rather than keep the
 * address in a register; the empty asm makes the pointer a value it must keep. */
static inline call_context *this_thread(void) {
  call_context *cur = &current;
  __asm__("" : "+r"(cur));
  return cur;
}

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
  call_context *const cur = this_thread();
  state->words[STATE_MAGIC] = (void *)&state_magic;
  state->words[STATE_PREVIOUS_LEASE_DEVICE] = cur->lease.device;
  state->words[STATE_PREVIOUS_LEASE_SAVED] = cur->lease.saved;
  state->words[STATE_PREVIOUS_DEVICE] = cur->device;
  state->words[STATE_PREVIOUS_STREAM] = cur->stream;
  state->words[STATE_PREVIOUS_STATUS] = (void *)(intptr_t)cur->status;
  state->words[STATE_PREVIOUS_OBJECTS] = (void *)cur->objects;
  state->words[STATE_PREVIOUS_NOBJECTS] = (void *)(intptr_t)cur->nobjects;
  cur->objects = NULL;
  cur->nobjects = 0;
  cur->device = device;
  cur->stream = stream;
  cur->status = WAVERT_OK;
  cur->lease.device = NULL;
  cur->lease.saved = NULL;
  if (__builtin_expect(cur->lease.hint == NULL, 0)) /* once a thread: a look-up of its own */
    cur->lease.hint = &wavert__context_hint;
  cur->depth += 1;
  return WAVERT_OK;
}

wavert_status wavert_call_end(wavert_call_state *state) {
  call_context *const cur = this_thread();
  if (state == NULL || state->words[STATE_MAGIC] != (void *)&state_magic || cur->depth == 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_call_end without a matching wavert_call_begin");
  if (cur->device != NULL && cur->device->backend->call_end != NULL)
    record(cur->device->backend->call_end(cur->device));
  wavert_status status = cur->status;
  wavert__context_lease_end(&cur->lease);
  state->words[STATE_MAGIC] = NULL;
  cur->lease.device = state->words[STATE_PREVIOUS_LEASE_DEVICE];
  cur->lease.saved = state->words[STATE_PREVIOUS_LEASE_SAVED];
  cur->device = state->words[STATE_PREVIOUS_DEVICE];
  cur->stream = state->words[STATE_PREVIOUS_STREAM];
  cur->status = (wavert_status)(intptr_t)state->words[STATE_PREVIOUS_STATUS];
  cur->objects = state->words[STATE_PREVIOUS_OBJECTS];
  cur->nobjects = (int32_t)(intptr_t)state->words[STATE_PREVIOUS_NOBJECTS];
  cur->depth -= 1;
  if (status != WAVERT_OK) return wavert__error(status, "%s", cur->message);
  return WAVERT_OK;
}

int32_t wavert_jit_failed(void) { return current.depth == 0 || current.status != WAVERT_OK; }

/* Record `status` (with this thread's last error message) as the call's error if it is the
 * first; returns `status`. */
static wavert_status record_in(call_context *cur, wavert_status status) {
  if (status != WAVERT_OK && cur->depth > 0 && cur->status == WAVERT_OK) {
    cur->status = status;
    snprintf(cur->message, sizeof(cur->message), "%s", wavert_last_error());
  }
  return status;
}

static wavert_status record(wavert_status status) { return record_in(&current, status); }

/* The kernel of `slot` (created at its first use) loaded on `device`: the function from the
 * kernel's cache when loaded there before (an atomic load), else wavert_kernel_get_function
 * loads it. */
static inline wavert_status call_function(wavert_device *device, wavert_kernel **slot,
                                          const void *image, int64_t image_size,
                                          const char *name, wavert_function **out_function) {
  wavert_kernel *kernel = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (__builtin_expect(kernel != NULL && device != NULL, 1)) {
    wavert_function *function = wavert__kernel_function_loaded(kernel, device);
    if (__builtin_expect(function != NULL, 1)) {
      *out_function = function;
      return WAVERT_OK;
    }
  }
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
  return wavert_kernel_get_function(kernel, device, out_function);
}

wavert_status wavert__call_function(wavert_kernel **slot, const void *image, int64_t image_size,
                                    const char *name, wavert_function **out_function) {
  return call_function(current.device, slot, image, image_size, name, out_function);
}

/* wavert_jit_launch and wavert_jit_launch_cluster (`cluster` NULL: a plain launch). The
 * thread's call context is looked up once (`cur`): each look-up of a thread-local of a shared
 * library is a call of the dynamic linker's __tls_get_addr. */
static int32_t jit_launch(const char *caller, wavert_kernel **slot, const void *image,
                          int64_t image_size, const char *name, const int64_t *cluster,
                          int64_t gx, int64_t gy, int64_t gz, int64_t bx, int64_t by, int64_t bz,
                          int32_t dynamic_shared_bytes, void *stream, void **params) {
  call_context *const cur = this_thread();
  if (cur->depth == 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "%s of kernel '%s': no host call in progress (wavert_call_begin)", caller,
                         name != NULL ? name : "?");
  wavert_device *const device = cur->device;
  if (device == NULL)
    return record_in(cur, wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                                        "%s of kernel '%s': the host call has no device (a "
                                        "host-only call, begun with device NULL, launches no "
                                        "kernel)",
                                        caller, name != NULL ? name : "?"));
  if (slot == NULL || image_size < 0)
    return record_in(cur, wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                                        "%s: slot is NULL or image_size is negative", caller));
  uint32_t cluster32[3] = {1, 1, 1};
  if (cluster != NULL) {
    const int64_t grid[3] = {gx, gy, gz};
    wavert_status checked = wavert__cluster_extents(device->backend, caller,
                                                    name != NULL ? name : "?", cluster, grid,
                                                    cluster32);
    if (checked != WAVERT_OK) return record_in(cur, checked);
  }
  wavert_function *function = NULL;
  wavert_status status = call_function(device, slot, image, image_size, name, &function);
  if (status == WAVERT_OK)
    status = wavert__function_launch_leased(function, cluster != NULL ? cluster32 : NULL, gx, gy,
                                            gz, bx, by, bz, dynamic_shared_bytes,
                                            stream != NULL ? stream : cur->stream, params,
                                            &cur->lease);
  return record_in(cur, status);
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
