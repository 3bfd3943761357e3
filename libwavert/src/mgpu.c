/*
 * mgpu.c — MLIR's mgpu* runtime ABI (wavert_mgpu.h) over libwavert: modules through
 * wavert_module (lazily loaded per device), launches through the validated launch path,
 * streams (from the device's pool), events, memory, host registration, cluster launch and TMA
 * descriptors through the backend vtable. Generated host code calls these functions under
 * their upstream names and checks wavert_jit_failed after each (pywave/host/launch_rewrite.py).
 *
 * Every entry point runs in a "scope": inside a host call, the call's device and stream, and
 * errors recorded in the call; outside one, a call begun here on the thread's default device
 * and ended before returning, whose error becomes the thread's last error unless an earlier
 * one is still pending (the first error is kept).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "mgpu_internal.h"
#include "wavert_mgpu.h"
#include "wavert_jit.h"

static _Thread_local int32_t default_ordinal;

/* ---- scopes ---------------------------------------------------------------------------- */

typedef wavert__mgpu_scope scope;

/* The thread's default device: ordinal default_ordinal of CUDA if the CUDA driver reports a
 * device, else of HIP. */
static wavert_status default_device(wavert_device **out_device) {
  int32_t count = 0;
  if (wavert_device_count(kDLCUDA, &count) == WAVERT_OK && count > 0)
    return wavert_device_get(kDLCUDA, default_ordinal, out_device);
  if (wavert_device_count(kDLROCM, &count) == WAVERT_OK && count > 0)
    return wavert_device_get(kDLROCM, default_ordinal, out_device);
  return wavert__error(WAVERT_ERROR_UNAVAILABLE,
                       "mgpu runtime functions: no CUDA or AMD device (default device %d)",
                       (int)default_ordinal);
}

static void keep_first(const scope *s) {
  if (s->prior != WAVERT_OK) wavert__error(s->prior, "%s", s->prior_message);
}

/* scope_begin outside a host call: begin one on the thread's default device. */
static int scope_begin_outside(scope *s) {
  s->outside = 1;
  s->stream = NULL;
  s->prior = wavert_last_status();
  if (s->prior != WAVERT_OK)
    snprintf(s->prior_message, sizeof(s->prior_message), "%s", wavert_last_error());
  wavert_status status = default_device(&s->device);
  if (status == WAVERT_OK) status = wavert_call_begin(s->device, NULL, &s->state);
  if (status != WAVERT_OK) {
    keep_first(s);
    return 0;
  }
  /* Finding the device may have failed on the way (no CUDA driver, then HIP): not an error. */
  if (s->prior == WAVERT_OK)
    wavert_clear_error();
  else
    keep_first(s);
  return 1;
}

/* Enter the scope of an mgpu call; 0 (error reported) when there is no device. Inside a host
 * call (generated code's case) this is one look-up of the call, inlined into each entry. */
static inline int scope_begin(scope *s) {
  s->device = wavert__call_current(&s->stream);
  if (s->device == NULL) return scope_begin_outside(s);
  s->outside = 0;
  return 1;
}

static inline void scope_end(scope *s) {
  if (s->outside && wavert_call_end(&s->state) != WAVERT_OK) keep_first(s);
}

int wavert__mgpu_scope_begin(wavert__mgpu_scope *s) { return scope_begin(s); }
void wavert__mgpu_scope_end(wavert__mgpu_scope *s) { scope_end(s); }

/* Record a failure in the scope's call (success, the common case, costs no call). */
static inline wavert_status record(wavert_status status) {
  return status == WAVERT_OK ? status : wavert__call_record(status);
}

#define SCOPE_ERROR(status, ...) record(wavert__error((status), __VA_ARGS__))

/* ---- memref descriptors ------------------------------------------------------------------ */

/* MLIR's ranked memref descriptor: allocated, aligned, offset, sizes[rank], strides[rank]. */
typedef struct {
  char *allocated;
  char *aligned;
  int64_t offset;
  int64_t shape[]; /* sizes, then strides */
} ranked_memref;

/* Address of element 0 (aligned + offset elements) and the byte size of a compact memref
 * (`check_compact`: fail when it is not compact row-major). Reports the error. */
static wavert_status memref_extent(const char *function, int64_t rank, const void *descriptor,
                                   int64_t element_size, int check_compact, char **out_ptr,
                                   size_t *out_bytes) {
  if (descriptor == NULL || rank < 0 || element_size <= 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "%s: descriptor is NULL, or rank %lld or element size %lld is invalid",
                         function, (long long)rank, (long long)element_size);
  const ranked_memref *memref = descriptor;
  const int64_t *sizes = memref->shape;
  const int64_t *strides = memref->shape + rank;
  int64_t elements = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    if (sizes[i] < 0)
      return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "%s: size %lld of dimension %lld is negative",
                           function, (long long)sizes[i], (long long)i);
    if (check_compact && sizes[i] != 1 && strides[i] != elements && elements != 0)
      return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                           "%s: only compact row-major memrefs can be registered: dimension %lld "
                           "has stride %lld, expected %lld",
                           function, (long long)i, (long long)strides[i], (long long)elements);
    if (__builtin_mul_overflow(elements, sizes[i], &elements))
      return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                           "%s: the memref's element count overflows 64 bits", function);
  }
  int64_t bytes = 0, offset_bytes = 0;
  if (__builtin_mul_overflow(elements, element_size, &bytes) || (uint64_t)bytes > SIZE_MAX)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "%s: %lld elements of %lld bytes overflow the address space", function,
                         (long long)elements, (long long)element_size);
  if (memref->offset < 0 || __builtin_mul_overflow(memref->offset, element_size, &offset_bytes))
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "%s: offset %lld is invalid", function,
                         (long long)memref->offset);
  *out_ptr = memref->aligned + offset_bytes;
  *out_bytes = (size_t)bytes;
  return WAVERT_OK;
}

/* ---- modules ------------------------------------------------------------------------------ */

typedef struct mgpu_function mgpu_function;

typedef struct {
  void *image; /* owned copy */
  size_t size;
  int jit_opt_level; /* -1: not JIT options */
  pthread_mutex_t mutex; /* guards modules and functions */
  wavert_module *modules[WAVERT__BACKEND_COUNT][WAVERT__MAX_DEVICES];
  mgpu_function *functions;
} mgpu_module;

struct mgpu_function {
  mgpu_function *next;
  mgpu_module *module;
  _Atomic(wavert_function *) resolved[WAVERT__BACKEND_COUNT][WAVERT__MAX_DEVICES];
  char name[];
};

/* The module's copy on `device`, loaded on first use. Called with module->mutex held. */
static wavert_status module_on(mgpu_module *module, wavert_device *device,
                               wavert_module **out_module) {
  wavert_module **slot = &module->modules[device->backend_index][device->dl.device_id];
  if (*slot == NULL) {
    wavert_status status =
        wavert__module_load(device, module->image, module->size, module->jit_opt_level, slot);
    if (status != WAVERT_OK) return status;
  }
  *out_module = *slot;
  return WAVERT_OK;
}

/* The function's wavert_function on `device` (loading the module there on first use). */
static wavert_status function_on(mgpu_function *function, wavert_device *device,
                                 wavert_function **out_function) {
  _Atomic(wavert_function *) *slot =
      &function->resolved[device->backend_index][device->dl.device_id];
  wavert_function *resolved = atomic_load_explicit(slot, memory_order_acquire);
  if (resolved == NULL) {
    wavert_module *module = NULL;
    pthread_mutex_lock(&function->module->mutex);
    wavert_status status = module_on(function->module, device, &module);
    pthread_mutex_unlock(&function->module->mutex);
    if (status == WAVERT_OK) status = wavert_module_get_function(module, function->name, &resolved);
    if (status != WAVERT_OK) return status;
    atomic_store_explicit(slot, resolved, memory_order_release); /* same value if raced */
  }
  *out_function = resolved;
  return WAVERT_OK;
}

static void *module_load(const char *function, const void *data, size_t size, int jit_opt_level) {
  scope s;
  if (!scope_begin(&s)) return NULL;
  mgpu_module *module = NULL;
  if (data == NULL || size == 0) {
    SCOPE_ERROR(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the image is NULL or empty", function);
  } else if ((module = calloc(1, sizeof(*module))) == NULL ||
             (module->image = malloc(size)) == NULL) {
    free(module);
    module = NULL;
    SCOPE_ERROR(WAVERT_ERROR_OUT_OF_MEMORY, "%s: out of host memory", function);
  } else {
    memcpy(module->image, data, size);
    module->size = size;
    module->jit_opt_level = jit_opt_level;
    pthread_mutex_init(&module->mutex, NULL);
    wavert_module *loaded = NULL;
    if (record(module_on(module, s.device, &loaded)) != WAVERT_OK) {
      pthread_mutex_destroy(&module->mutex);
      free(module->image);
      free(module);
      module = NULL;
    }
  }
  scope_end(&s);
  return module;
}

void *mgpuModuleLoad(void *data, size_t size) {
  return module_load("mgpuModuleLoad", data, size, -1);
}

void *mgpuModuleLoadJIT(void *data, int opt_level) {
  if (opt_level < 0 || opt_level > 4) {
    scope s;
    if (scope_begin(&s)) {
      SCOPE_ERROR(WAVERT_ERROR_INVALID_ARGUMENT,
                  "mgpuModuleLoadJIT: optimisation level %d is not 0-4", opt_level);
      scope_end(&s);
    }
    return NULL;
  }
  size_t size = data != NULL ? strlen(data) + 1 : 0; /* PTX text with its NUL */
  return module_load("mgpuModuleLoadJIT", data, size, opt_level);
}

void mgpuModuleUnload(void *handle) {
  mgpu_module *module = handle;
  if (module == NULL) return;
  for (int b = 0; b < WAVERT__BACKEND_COUNT; ++b)
    for (int d = 0; d < WAVERT__MAX_DEVICES; ++d) wavert_module_release(module->modules[b][d]);
  for (mgpu_function *function = module->functions; function != NULL;) {
    mgpu_function *next = function->next;
    free(function);
    function = next;
  }
  pthread_mutex_destroy(&module->mutex);
  free(module->image);
  free(module);
}

void *mgpuModuleGetFunction(void *handle, const char *name) {
  mgpu_module *module = handle;
  scope s;
  if (!scope_begin(&s)) return NULL;
  mgpu_function *function = NULL;
  wavert_status status = WAVERT_OK;
  if (module == NULL || name == NULL) {
    status = SCOPE_ERROR(WAVERT_ERROR_INVALID_ARGUMENT,
                         "mgpuModuleGetFunction: module or name is NULL");
  } else {
    pthread_mutex_lock(&module->mutex);
    function = module->functions;
    while (function != NULL && strcmp(function->name, name) != 0) function = function->next;
    if (function == NULL) {
      size_t length = strlen(name);
      function = calloc(1, sizeof(*function) + length + 1);
      if (function != NULL) {
        memcpy(function->name, name, length + 1);
        function->module = module;
        function->next = module->functions;
        module->functions = function;
      }
    }
    pthread_mutex_unlock(&module->mutex);
    if (function == NULL)
      status = SCOPE_ERROR(WAVERT_ERROR_OUT_OF_MEMORY, "mgpuModuleGetFunction: out of host memory");
  }
  /* Resolve on the current device now, so that a missing kernel is reported here. */
  wavert_function *resolved = NULL;
  if (status == WAVERT_OK) status = record(function_on(function, s.device, &resolved));
  scope_end(&s);
  return status == WAVERT_OK ? function : NULL;
}

/* wavert_function_launch (same validation and shared-memory opt-in), with thread-block
 * clusters of cluster[0..2] blocks when `cluster` is not NULL (checked by the caller:
 * wavert__cluster_extents). Inside a host call the launch uses the call's context lease (ended
 * by wavert_call_end); else one of its own. */
static wavert_status launch_leased(wavert_function *function, const uint32_t *cluster, int64_t gx,
                                   int64_t gy, int64_t gz, int64_t bx, int64_t by, int64_t bz,
                                   int64_t dynamic_shared_bytes, void *stream, void **params) {
  wavert__context_lease *call_lease = wavert__call_lease();
  wavert__context_lease lease = {NULL, NULL, NULL};
  wavert_status status = wavert__function_launch_leased(
      function, cluster, gx, gy, gz, bx, by, bz, dynamic_shared_bytes, stream, params,
      call_lease != NULL ? call_lease : &lease);
  wavert__context_lease_end(&lease);
  return status;
}

static void launch(const char *name, void *handle, const intptr_t *cluster, intptr_t gx,
                   intptr_t gy, intptr_t gz, intptr_t bx, intptr_t by, intptr_t bz, int32_t smem,
                   void *stream, void **params, void **extra) {
  scope s;
  if (!scope_begin(&s)) return;
  mgpu_function *function = handle;
  uint32_t cluster32[3] = {1, 1, 1};
  wavert_status status = WAVERT_OK;
  if (function == NULL)
    status = SCOPE_ERROR(WAVERT_ERROR_INVALID_ARGUMENT,
                         "%s: the function is NULL (did mgpuModuleGetFunction fail?)", name);
  else if (extra != NULL)
    status = SCOPE_ERROR(WAVERT_ERROR_UNSUPPORTED,
                         "%s of kernel '%s': arguments through `extra` are not supported "
                         "(pass `params`)",
                         name, function->name);
  else if (cluster != NULL) {
    const int64_t cluster64[3] = {cluster[0], cluster[1], cluster[2]};
    const int64_t grid64[3] = {gx, gy, gz};
    status = record(wavert__cluster_extents(s.device->backend, name, function->name, cluster64,
                                            grid64, cluster32));
  }
  wavert_function *resolved = NULL;
  if (status == WAVERT_OK) status = record(function_on(function, s.device, &resolved));
  if (status == WAVERT_OK)
    record(launch_leased(resolved, cluster != NULL ? cluster32 : NULL, gx, gy, gz, bx, by, bz,
                         smem, stream != NULL ? stream : s.stream, params));
  scope_end(&s);
}

void mgpuLaunchKernel(void *function, intptr_t gx, intptr_t gy, intptr_t gz, intptr_t bx,
                      intptr_t by, intptr_t bz, int32_t smem, void *stream, void **params,
                      void **extra, size_t params_count) {
  (void)params_count; /* CUDA and HIP read the arguments through the kernel's signature */
  launch("mgpuLaunchKernel", function, NULL, gx, gy, gz, bx, by, bz, smem, stream, params, extra);
}

void mgpuLaunchClusterKernel(void *function, intptr_t cx, intptr_t cy, intptr_t cz, intptr_t gx,
                             intptr_t gy, intptr_t gz, intptr_t bx, intptr_t by, intptr_t bz,
                             int32_t smem, void *stream, void **params, void **extra) {
  const intptr_t cluster[3] = {cx, cy, cz};
  launch("mgpuLaunchClusterKernel", function, cluster, gx, gy, gz, bx, by, bz, smem, stream,
         params, extra);
}

/* ---- streams, events, memory ------------------------------------------------------------ */

/* Enter the scope and the device's context; 0 (error reported or recorded) if either fails.
 * Leave with scope_leave. */
static int scope_enter(scope *s, void **out_saved) {
  if (!scope_begin(s)) return 0;
  if (record(wavert__enter(s->device, out_saved)) == WAVERT_OK) return 1;
  scope_end(s);
  return 0;
}

static void scope_leave(scope *s, void *saved) {
  wavert__leave(s->device, saved);
  scope_end(s);
}

/* `stream`, or the scope's (the call's) stream for NULL. */
static void *scope_stream(const scope *s, void *stream) {
  return stream != NULL ? stream : s->stream;
}

void *mgpuStreamCreate(void) {
  scope s;
  void *saved = NULL, *stream = NULL;
  if (!scope_enter(&s, &saved)) return NULL;
  wavert_status status = wavert__stream_acquire(s.device, &stream);
  if (status == WAVERT_OK) {
    /* Work on the new stream must come after what the caller enqueued on its stream. */
    status = wavert__stream_order(s.device, stream, s.stream);
    if (status != WAVERT_OK) wavert__stream_recycle(s.device, stream);
  }
  record(status);
  scope_leave(&s, saved);
  return status == WAVERT_OK ? stream : NULL;
}

void mgpuStreamDestroy(void *stream) {
  scope s;
  void *saved = NULL;
  if (stream == NULL || !scope_enter(&s, &saved)) return;
  if (stream != s.stream) wavert__stream_recycle(s.device, stream);
  scope_leave(&s, saved);
}

void mgpuStreamSynchronize(void *stream) {
  scope s;
  void *saved = NULL;
  if (!scope_enter(&s, &saved)) return;
  stream = scope_stream(&s, stream);
  wavert_status status = s.device->backend->stream_synchronize(stream);
  /* Keep the caller's stream ordered after this one when the call returns. */
  if (status == WAVERT_OK && stream != s.stream)
    status = wavert__stream_order(s.device, s.stream, stream);
  record(status);
  scope_leave(&s, saved);
}

void mgpuStreamWaitEvent(void *stream, void *event) {
  scope s;
  void *saved = NULL;
  if (!scope_enter(&s, &saved)) return;
  record(s.device->backend->stream_wait_event(scope_stream(&s, stream), event));
  scope_leave(&s, saved);
}

void *mgpuEventCreate(void) {
  scope s;
  void *saved = NULL, *event = NULL;
  if (!scope_enter(&s, &saved)) return NULL;
  wavert_status status = record(wavert__event_acquire(s.device, &event));
  scope_leave(&s, saved);
  return status == WAVERT_OK ? event : NULL;
}

void mgpuEventDestroy(void *event) {
  scope s;
  void *saved = NULL;
  if (event == NULL || !scope_enter(&s, &saved)) return;
  wavert__event_recycle(s.device, event);
  scope_leave(&s, saved);
}

void mgpuEventSynchronize(void *event) {
  scope s;
  void *saved = NULL;
  if (!scope_enter(&s, &saved)) return;
  record(s.device->backend->event_synchronize(event));
  scope_leave(&s, saved);
}

void mgpuEventRecord(void *event, void *stream) {
  scope s;
  void *saved = NULL;
  if (!scope_enter(&s, &saved)) return;
  record(s.device->backend->event_record(event, scope_stream(&s, stream)));
  scope_leave(&s, saved);
}

void *mgpuMemAlloc(uint64_t size, void *stream, int8_t host_shared) {
  (void)stream; /* allocation is not stream-ordered, as in upstream's mgpuMemAlloc */
  scope s;
  void *saved = NULL, *ptr = NULL;
  if (size == 0 || !scope_enter(&s, &saved)) return NULL;
  wavert_status status = wavert__check_bytes("mgpuMemAlloc", "size", size);
  if (status == WAVERT_OK)
    status = s.device->backend->mem_alloc((size_t)size, host_shared != 0, &ptr);
  record(status);
  scope_leave(&s, saved);
  return status == WAVERT_OK ? ptr : NULL;
}

void mgpuMemFree(void *ptr, void *stream) {
  (void)stream;
  scope s;
  void *saved = NULL;
  if (ptr == NULL || !scope_enter(&s, &saved)) return;
  record(s.device->backend->mem_free(ptr));
  scope_leave(&s, saved);
}

void mgpuMemcpy(void *dst, void *src, size_t size, void *stream) {
  scope s;
  void *saved = NULL;
  if (size == 0 || !scope_enter(&s, &saved)) return;
  wavert_status status =
      dst == NULL || src == NULL
          ? wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                          "mgpuMemcpy: dst or src is NULL (size %zu bytes)", size)
          : wavert__check_bytes("mgpuMemcpy", "size", size);
  if (status == WAVERT_OK) status = wavert__check_range("mgpuMemcpy", "dst", dst, size);
  if (status == WAVERT_OK) status = wavert__check_range("mgpuMemcpy", "src", src, size);
  if (status == WAVERT_OK)
    status = s.device->backend->memcpy(dst, src, size, scope_stream(&s, stream), 0);
  record(status);
  scope_leave(&s, saved);
}

/* Set `count` elements of `element_bytes` (4 or 2) at `dst`, checking that they fit the
 * address space; `name` is the entry point, for messages. */
static void memset_checked(const char *name, void *dst, uint32_t value, size_t element_bytes,
                           size_t count, void *stream) {
  scope s;
  void *saved = NULL;
  if (count == 0 || !scope_enter(&s, &saved)) return;
  wavert_status status =
      dst == NULL ? wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "%s: dst is NULL (%zu elements)",
                                  name, count)
                  : wavert__check_elements(name, dst, element_bytes, count);
  if (status == WAVERT_OK)
    status = s.device->backend->memset(dst, value, element_bytes, count,
                                       scope_stream(&s, stream), 0);
  record(status);
  scope_leave(&s, saved);
}

void mgpuMemset32(void *dst, uint32_t value, size_t count, void *stream) {
  memset_checked("mgpuMemset32", dst, value, 4, count, stream);
}

void mgpuMemset16(void *dst, uint16_t value, size_t count, void *stream) {
  memset_checked("mgpuMemset16", dst, value, 2, count, stream);
}

/* ---- host registration ------------------------------------------------------------------- */

/* Run `operation` of the backend on the scope's device (context entered). */
#define ON_DEVICE(s, call)                                            \
  do {                                                                \
    void *saved_ = NULL;                                              \
    wavert_status entered_ = record(wavert__enter((s)->device, &saved_)); \
    if (entered_ == WAVERT_OK) {                                      \
      record((s)->device->backend->call);                             \
      wavert__leave((s)->device, saved_);                             \
    }                                                                 \
  } while (0)

/* (Un)register `size` bytes at `ptr` on the scope's device. */
static void register_in(scope *s, const char *name, void *ptr, size_t size, int registering) {
  if (ptr == NULL)
    SCOPE_ERROR(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the pointer is NULL", name);
  else if (registering)
    ON_DEVICE(s, host_register(ptr, size));
  else
    ON_DEVICE(s, host_unregister(ptr));
}

void mgpuMemHostRegister(void *ptr, uint64_t size) {
  if (size == 0) return;
  scope s;
  if (!scope_begin(&s)) return;
  if (size > SIZE_MAX)
    SCOPE_ERROR(WAVERT_ERROR_INVALID_ARGUMENT,
                "mgpuMemHostRegister: %llu bytes overflow the address space",
                (unsigned long long)size);
  else
    register_in(&s, "mgpuMemHostRegister", ptr, (size_t)size, 1);
  scope_end(&s);
}

void mgpuMemHostUnregister(void *ptr) {
  scope s;
  if (!scope_begin(&s)) return;
  register_in(&s, "mgpuMemHostUnregister", ptr, 0, 0);
  scope_end(&s);
}

static void memref_register(const char *name, int64_t rank, void *descriptor,
                            int64_t element_size, int registering) {
  char *ptr = NULL;
  size_t bytes = 0;
  scope s;
  if (!scope_begin(&s)) return;
  if (record(memref_extent(name, rank, descriptor, element_size, registering, &ptr, &bytes)) ==
          WAVERT_OK &&
      bytes > 0)
    register_in(&s, name, ptr, bytes, registering);
  scope_end(&s);
}

void mgpuMemHostRegisterMemRef(int64_t rank, void *descriptor, int64_t element_size) {
  memref_register("mgpuMemHostRegisterMemRef", rank, descriptor, element_size, 1);
}

void mgpuMemHostUnregisterMemRef(int64_t rank, void *descriptor, int64_t element_size) {
  memref_register("mgpuMemHostUnregisterMemRef", rank, descriptor, element_size, 0);
}

/* Device address of registered host memory `ptr`, or NULL (error recorded). */
static void *device_pointer(const char *name, void *ptr) {
  void *device_ptr = NULL;
  scope s;
  if (!scope_begin(&s)) return NULL;
  if (ptr == NULL)
    SCOPE_ERROR(WAVERT_ERROR_INVALID_ARGUMENT, "%s: the pointer is NULL", name);
  else
    ON_DEVICE(&s, host_device_pointer(ptr, &device_ptr));
  scope_end(&s);
  return device_ptr;
}

wavert_memref_1d mgpuMemGetDeviceMemRef1dFloat(float *allocated, float *aligned,
                                                        int64_t offset, int64_t size,
                                                        int64_t stride) {
  (void)allocated;
  float *device_ptr = device_pointer("mgpuMemGetDeviceMemRef1dFloat", aligned);
  return (wavert_memref_1d){device_ptr, device_ptr, offset, {size}, {stride}};
}

wavert_memref_1d mgpuMemGetDeviceMemRef1dInt32(int32_t *allocated, int32_t *aligned,
                                                        int64_t offset, int64_t size,
                                                        int64_t stride) {
  (void)allocated;
  int32_t *device_ptr = device_pointer("mgpuMemGetDeviceMemRef1dInt32", aligned);
  return (wavert_memref_1d){device_ptr, device_ptr, offset, {size}, {stride}};
}

void mgpuSetDefaultDevice(int32_t ordinal) { default_ordinal = ordinal; }

/* ---- TMA descriptors ---------------------------------------------------------------------- */

#define TENSOR_MAP_BYTES 128

/* Device copies of tensor maps, one per (device, content); kept until process exit. */
typedef struct tensor_map_copy {
  struct tensor_map_copy *next;
  wavert_device *device;
  unsigned char bytes[TENSOR_MAP_BYTES];
  void *device_ptr;
} tensor_map_copy;
static pthread_mutex_t tensor_map_mutex = PTHREAD_MUTEX_INITIALIZER;
static tensor_map_copy *tensor_map_copies;

/* Encode with the backend (context entered). */
static wavert_status encode_tiled(wavert_device *device, void *map, int32_t data_type,
                                  uint32_t rank, void *address, const uint64_t *dims,
                                  const uint64_t *strides, const uint32_t *box,
                                  const uint32_t *element_strides, int32_t interleave,
                                  int32_t swizzle, int32_t l2_promotion, int32_t oob_fill) {
  if (device->backend->tensor_map_encode_tiled == NULL)
    return wavert__error(WAVERT_ERROR_UNSUPPORTED,
                         "TMA descriptors: the %s backend has none (CUDA sm_90 and later)",
                         device->backend->name);
  void *saved = NULL;
  wavert_status status = wavert__enter(device, &saved);
  if (status != WAVERT_OK) return status;
  status = device->backend->tensor_map_encode_tiled(map, data_type, rank, address, dims, strides,
                                                    box, element_strides, interleave, swizzle,
                                                    l2_promotion, oob_fill);
  wavert__leave(device, saved);
  return status;
}

void mgpuTensorMapEncodeTiled(void *tensor_map, int32_t data_type, uint32_t rank,
                              void *global_address, const uint64_t *global_dims,
                              const uint64_t *global_strides, const uint32_t *box_dims,
                              const uint32_t *element_strides, int32_t interleave,
                              int32_t swizzle, int32_t l2_promotion, int32_t oob_fill) {
  scope s;
  if (!scope_begin(&s)) return;
  if (tensor_map == NULL)
    SCOPE_ERROR(WAVERT_ERROR_INVALID_ARGUMENT, "mgpuTensorMapEncodeTiled: tensor_map is NULL");
  else
    record(encode_tiled(s.device, tensor_map, data_type, rank, global_address, global_dims,
                        global_strides, box_dims, element_strides, interleave, swizzle,
                        l2_promotion, oob_fill));
  scope_end(&s);
}

/* The device copy of `map` on `device` (made on first use). */
static wavert_status tensor_map_device_copy(wavert_device *device, const unsigned char *map,
                                            void **out_device_ptr) {
  wavert_status status = WAVERT_OK;
  pthread_mutex_lock(&tensor_map_mutex);
  tensor_map_copy *copy = tensor_map_copies;
  while (copy != NULL &&
         (copy->device != device || memcmp(copy->bytes, map, TENSOR_MAP_BYTES) != 0))
    copy = copy->next;
  if (copy == NULL) {
    copy = calloc(1, sizeof(*copy));
    void *saved = NULL;
    if (copy == NULL)
      status = wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
    else if ((status = wavert__enter(device, &saved)) == WAVERT_OK) {
      status = device->backend->mem_alloc(TENSOR_MAP_BYTES, 0, &copy->device_ptr);
      if (status == WAVERT_OK) {
        status = device->backend->memcpy(copy->device_ptr, map, TENSOR_MAP_BYTES, NULL, 1);
        if (status != WAVERT_OK) device->backend->mem_free(copy->device_ptr);
      }
      wavert__leave(device, saved);
    }
    if (status == WAVERT_OK) {
      copy->device = device;
      memcpy(copy->bytes, map, TENSOR_MAP_BYTES);
      copy->next = tensor_map_copies;
      tensor_map_copies = copy;
    } else {
      free(copy);
      copy = NULL;
    }
  }
  pthread_mutex_unlock(&tensor_map_mutex);
  if (status == WAVERT_OK) *out_device_ptr = copy->device_ptr;
  return status;
}

/* Bytes per element of CUtensorMapDataType 0..12 (UINT8, UINT16, UINT32, INT32, UINT64,
 * INT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16, FLOAT32_FTZ, TFLOAT32, TFLOAT32_FTZ). */
static const int64_t tensor_map_element_bytes[13] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};

/* Fill the encoder's arrays (innermost dimension first) from a memref descriptor. */
static wavert_status tensor_map_layout(int64_t rank, const void *descriptor, int64_t data_type,
                                       const int64_t *box_dims, char **out_address,
                                       uint64_t dims[5], uint64_t strides[4], uint32_t box[5]) {
  static const char name[] = "mgpuTensorMapEncodeTiledMemref";
  if (rank < 1 || rank > 5)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "%s: rank %lld is not 1-5", name,
                         (long long)rank);
  if (data_type < 0 || data_type > 12)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "%s: data type %lld is not 0-12", name,
                         (long long)data_type);
  if (descriptor == NULL || box_dims == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "%s: descriptor or box_dims is NULL",
                         name);
  int64_t element_bytes = tensor_map_element_bytes[data_type];
  const ranked_memref *memref = descriptor;
  const int64_t *sizes = memref->shape;
  const int64_t *memref_strides = memref->shape + rank;
  for (int64_t r = 0; r < rank; ++r) {
    int64_t d = rank - 1 - r; /* memref dimension of encoder dimension r */
    if (sizes[d] < 1)
      return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "%s: size %lld of dimension %lld is not positive",
                           name, (long long)sizes[d], (long long)d);
    if (box_dims[d] < 1 || box_dims[d] > UINT32_MAX)
      return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "%s: box size %lld of dimension %lld is invalid",
                           name, (long long)box_dims[d], (long long)d);
    dims[r] = (uint64_t)sizes[d];
    box[r] = (uint32_t)box_dims[d];
    int64_t stride_bytes = 0;
    if (r > 0 && (memref_strides[d] < 1 ||
                  __builtin_mul_overflow(memref_strides[d], element_bytes, &stride_bytes)))
      return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                           "%s: stride %lld of dimension %lld is not a positive byte count",
                           name, (long long)memref_strides[d], (long long)d);
    if (r > 0) strides[r - 1] = (uint64_t)stride_bytes;
  }
  int64_t offset_bytes = 0;
  if (memref->offset < 0 || __builtin_mul_overflow(memref->offset, element_bytes, &offset_bytes))
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "%s: offset %lld is invalid", name,
                         (long long)memref->offset);
  *out_address = memref->aligned + offset_bytes;
  return WAVERT_OK;
}

void *mgpuTensorMapEncodeTiledMemref(int64_t rank, void *descriptor, int64_t data_type,
                                     int64_t interleave, int64_t swizzle, int64_t l2_promotion,
                                     int64_t oob_fill, int64_t *box_dims) {
  scope s;
  if (!scope_begin(&s)) return NULL;
  uint64_t dims[5] = {0}, strides[4] = {0};
  uint32_t box[5] = {0}, element_strides[5] = {1, 1, 1, 1, 1};
  char *address = NULL;
  _Alignas(64) unsigned char map[TENSOR_MAP_BYTES];
  memset(map, 0, sizeof(map));
  void *device_ptr = NULL;
  wavert_status status =
      record(tensor_map_layout(rank, descriptor, data_type, box_dims, &address, dims, strides, box));
  if (status == WAVERT_OK)
    status = record(encode_tiled(s.device, map, (int32_t)data_type, (uint32_t)rank, address, dims,
                                 strides, box, element_strides, (int32_t)interleave,
                                 (int32_t)swizzle, (int32_t)l2_promotion, (int32_t)oob_fill));
  if (status == WAVERT_OK) record(tensor_map_device_copy(s.device, map, &device_ptr));
  scope_end(&s);
  return device_ptr;
}
