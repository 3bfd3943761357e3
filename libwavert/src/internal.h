/*
 * internal.h — the structures behind the public handles and the helpers shared by the
 * libwavert source files (error reporting, backend registry, per-device pools).
 */
#ifndef WAVERT_INTERNAL_H
#define WAVERT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "wavert.h"

#if defined(__GNUC__)
#define WAVERT__PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define WAVERT__PRINTF(fmt, args)
#endif

/* Devices per backend that handles and kernel caches have room for. */
#define WAVERT__MAX_DEVICES 64
/* Backends, indexed by wavert_device.backend_index. */
#define WAVERT__BACKEND_CUDA 0
#define WAVERT__BACKEND_HIP 1
#define WAVERT__BACKEND_CPU 2
#define WAVERT__BACKEND_COUNT 3
/* Attribute slots (wavert_device_attribute values are 1..13). */
#define WAVERT__DEVICE_ATTRIBUTE_COUNT 14
/* Idle streams / events kept per device for the wavert_jit_* functions. */
#define WAVERT__POOL_SIZE 8

typedef struct wavert__backend wavert__backend;

struct wavert_device {
  const wavert__backend *backend;
  int32_t backend_index;
  DLDevice dl;
  intptr_t handle; /* CUdevice / HIP ordinal */
  void *context;   /* CUcontext (primary, retained); NULL on HIP */
  /* Read once when the handle is created; immutable afterwards. */
  int64_t attributes[WAVERT__DEVICE_ATTRIBUTE_COUNT];
  /* The grid x, y, z and block x, y, z limits of the attributes as unsigned numbers, a
   * negative one as 0: launch.c's one-compare test of an extent in [1, limit]. */
  uint64_t extent_limits[6];
  char chip[64]; /* "" when the backend cannot name the chip */
  pthread_mutex_t pool_mutex;
  int stream_count;
  int event_count;
  void *streams[WAVERT__POOL_SIZE];
  void *events[WAVERT__POOL_SIZE];
};

struct wavert_function {
  wavert_function *next; /* the module's list */
  wavert_module *module;
  wavert_device *device;
  void *handle; /* CUfunction / hipFunction_t */
  /* Read when the function is first got; immutable afterwards. */
  int64_t max_threads;
  int64_t static_shared;
  /* Largest MAX_DYNAMIC_SHARED_SIZE_BYTES set so far (raised under module->mutex). */
  _Atomic int64_t dynamic_shared_opt_in;
  char name[];
};

struct wavert_module {
  atomic_int refcount;
  wavert_device *device;
  void *handle; /* CUmodule / hipModule_t */
  pthread_mutex_t mutex;
  wavert_function *functions;
};

/* A kernel image loaded lazily per device (module.c; wavert_kernel_get_function). */
struct wavert_kernel {
  const void *image;
  size_t size;
  char *name;
  pthread_mutex_t mutex; /* serialises first loads */
  _Atomic(wavert_function *) functions[WAVERT__BACKEND_COUNT][WAVERT__MAX_DEVICES];
  wavert_module *modules[WAVERT__BACKEND_COUNT][WAVERT__MAX_DEVICES];
};

/* `kernel`'s function on `device` when it was loaded there before, else NULL (the per-launch
 * path of generated code, call.c: an atomic load, no call; wavert_kernel_get_function loads). */
static inline wavert_function *wavert__kernel_function_loaded(wavert_kernel *kernel,
                                                              const wavert_device *device) {
  return atomic_load_explicit(&kernel->functions[device->backend_index][device->dl.device_id],
                              memory_order_acquire);
}

/* Store `status` and a printf-formatted message as this thread's last error; returns
 * `status`. */
wavert_status wavert__error(wavert_status status, const char *format, ...) WAVERT__PRINTF(2, 3);

/* Byte counts and address ranges handed to the driver. Each returns WAVERT_OK, or sets an
 * INVALID_ARGUMENT error naming `function`, the quantity `what`, its value and the limit.
 * check_bytes: `bytes` <= PTRDIFF_MAX (a negative count converted to an unsigned type is
 * larger); check_range: [ptr, ptr + bytes) does not wrap around the address space;
 * check_elements: `count` elements of `element_bytes` bytes at `ptr` pass both. */
wavert_status wavert__check_bytes(const char *function, const char *what, uint64_t bytes);
wavert_status wavert__check_range(const char *function, const char *what, const void *ptr,
                                  uint64_t bytes);
wavert_status wavert__check_elements(const char *function, const void *ptr,
                                     uint64_t element_bytes, uint64_t count);

/* Make `device`'s context current for this thread if it is not already; `*out_saved` receives
 * what wavert__leave needs to restore the caller's. */
wavert_status wavert__enter(wavert_device *device, void **out_saved);
void wavert__leave(wavert_device *device, void *saved);

/* Whether a launch on `device` may be tried before entering its context: the backend's launch
 * checks the current context itself (backend.h, launch_checks_context) and the context this
 * thread last entered or restored through wavert__enter / wavert__leave is `device`'s. A hint
 * only: the caller (torch, CuPy, the user) may have switched the context since, which the
 * launch then reports and launch.c handles by entering. */
int wavert__context_hint_current(const wavert_device *device);
/* The hint itself (device.c): the context this thread last entered or restored on a backend
 * with launch_checks_context, NULL at first. */
extern _Thread_local void *wavert__context_hint __attribute__((visibility("hidden")));

/* A device context entered for a run of launches (launch.c): `device` is NULL until a launch
 * enters one; `saved` is the caller's context, restored by wavert__context_lease_end (which
 * empties the lease; a no-op on an empty one). A host call keeps one for its duration. */
typedef struct wavert__context_lease {
  wavert_device *device;
  void *saved;
  /* A host call's lease (call.c): this thread's wavert__context_hint, which launch.c reads
   * through it without a thread-local look-up of its own; NULL in any other lease. */
  void *const *hint;
} wavert__context_lease;
void wavert__context_lease_end(wavert__context_lease *lease);

/* wavert_function_launch (same validation, opt-in and errors) with the context handled
 * through `lease`: a lease holding `function`'s device launches at once; otherwise the launch
 * is tried first when wavert__context_hint_current says so, and on a miss or a failure the
 * context is entered into the lease (the launch retried only if entering switched the
 * context). The caller ends the lease. `cluster`: NULL, or the thread-block cluster extents
 * (cluster[0..2] blocks) of a cluster launch (backend launch_cluster). */
wavert_status wavert__function_launch_leased(wavert_function *function, const uint32_t *cluster,
                                             int64_t gx, int64_t gy, int64_t gz, int64_t bx,
                                             int64_t by, int64_t bz,
                                             int64_t dynamic_shared_bytes, void *stream,
                                             void **params, wavert__context_lease *lease);

/* Check the thread-block cluster extents `cluster[0..2]` of a launch of kernel `kernel` with
 * grid `grid[0..2]` (`caller` names the entry point in messages) and narrow them into
 * out[0..2]. Errors (not recorded in the call; the caller does that): UNSUPPORTED when
 * `backend` has no launch_cluster (HIP), INVALID_ARGUMENT when an extent is not in
 * [1, UINT32_MAX] or a positive grid extent is not a multiple of it (CUDA's rule for
 * cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION). */
wavert_status wavert__cluster_extents(const wavert__backend *backend, const char *caller,
                                      const char *kernel, const int64_t cluster[3],
                                      const int64_t grid[3], uint32_t out[3]);

/* Streams and events from the device's pool (created when empty) and back into it (destroyed
 * when full). The device's context must be current. */
wavert_status wavert__stream_acquire(wavert_device *device, void **out_stream);
void wavert__stream_recycle(wavert_device *device, void *stream);
wavert_status wavert__event_acquire(wavert_device *device, void **out_event);
void wavert__event_recycle(wavert_device *device, void *event);

/* Make `waiting` wait for the work enqueued on `stream` so far (event record + wait). The
 * device's context must be current. */
wavert_status wavert__stream_order(wavert_device *device, void *waiting, void *stream);

/* Live handles (handles.c), by kind. */
#define WAVERT__HANDLE_MODULE 1
#define WAVERT__HANDLE_KERNEL 2
#define WAVERT__HANDLE_STREAM 3
#define WAVERT__HANDLE_SPARSE_READER 4
#define WAVERT__HANDLE_SPARSE_TENSOR 5

/* Record `handle` (of `kind`) as live. OUT_OF_MEMORY when the registry cannot grow. */
wavert_status wavert__handle_add(const void *handle, int kind);

/* Drop one reference of a live `handle`: -1 when it is not live (released already, or never
 * made); with `refcount`, decrement it and return 1 for the last reference (the handle is then
 * no longer live) and 0 otherwise; without, return 1 (no longer live). */
int wavert__handle_drop(const void *handle, int kind, atomic_int *refcount);

/* Whether `handle` (of `kind`) is live, without changing it. */
int wavert__handle_live(const void *handle, int kind);

#endif /* WAVERT_INTERNAL_H */
