/*
 * backend.h — the driver vtable behind each wavert_device: one implementation for the CUDA
 * driver API (backend_cuda.c) and one for HIP (backend_hip.c), both opened with dlopen, and
 * the host CPU as a device (backend_cpu.c: kernels pywave compiled for the host).
 *
 * Every entry reports failures through wavert__error and returns the status. Entries that
 * touch a context or device (all but init and device_open) expect the device's context to be
 * current already (see wavert__enter), except enter/leave themselves.
 */
#ifndef WAVERT_BACKEND_H
#define WAVERT_BACKEND_H

#include "internal.h"

struct wavert__backend {
  const char *name;    /* "CUDA" / "HIP", for messages */
  const char *devices; /* "CUDA" / "AMD", for "no CUDA device" */
  /* Open the driver library and initialise it; count the devices (0 when the driver reports
   * that it has none). Called once, under the registry mutex. */
  wavert_status (*init)(int32_t *out_count);
  /* Fill handle, context, attributes and chip of a new device (ordinal in dl.device_id). */
  wavert_status (*device_open)(wavert_device *device);
  /* Non-zero when device->context is the context `enter` makes current, `enter`'s saved value
   * is the caller's context, and `launch` with another context current fails without side
   * effects (CUDA: a CUfunction belongs to its context). launch.c then tries a launch before
   * entering (wavert__context_hint_current). */
  int launch_checks_context;
  wavert_status (*enter)(wavert_device *device, void **out_saved);
  void (*leave)(wavert_device *device, void *saved);
  wavert_status (*synchronize)(wavert_device *device);
  /* The end of a host call on `device` (wavert_call_end, before it reports the call's first
   * error; the error returned becomes the call's if it has none). NULL: nothing to do (CUDA,
   * HIP: the call's work stays queued). CPU: waits for the work the thread queued on streams
   * during the call (backend_cpu.c). */
  wavert_status (*call_end)(wavert_device *device);

  wavert_status (*module_load)(wavert_device *device, const void *image, size_t size,
                               void **out_module);
  void (*module_unload)(void *module);
  /* WAVERT_ERROR_NOT_FOUND when the module has no kernel of that name. */
  wavert_status (*module_get_function)(void *module, const char *name, void **out_function);
  wavert_status (*function_attribute)(void *function, wavert_function_attribute attribute,
                                      int64_t *out_value);
  wavert_status (*function_opt_in_shared)(void *function, int64_t dynamic_shared_bytes);
  wavert_status (*launch)(void *function, const uint32_t grid[3], const uint32_t block[3],
                          uint32_t dynamic_shared_bytes, void *stream, void **params);

  wavert_status (*stream_create)(void **out_stream);
  /* Ask the driver whether `stream` (not NULL, not a special handle, pointing to readable
   * memory) is a stream of `device`: INVALID_ARGUMENT naming the handle when the driver says
   * no or it belongs to another device; OK when the driver cannot tell (no query entry).
   * Needs no current context (called without wavert__enter). */
  wavert_status (*stream_check)(wavert_device *device, void *stream);
  wavert_status (*stream_destroy)(void *stream);
  wavert_status (*stream_synchronize)(void *stream);
  wavert_status (*stream_wait_event)(void *stream, void *event);
  wavert_status (*event_create)(void **out_event);
  wavert_status (*event_destroy)(void *event);
  wavert_status (*event_record)(void *event, void *stream);
  wavert_status (*event_synchronize)(void *event);

  /* `managed`: memory reachable from host and device (cuMemAllocManaged / hipMallocManaged). */
  wavert_status (*mem_alloc)(size_t size, int managed, void **out_ptr);
  wavert_status (*mem_free)(void *ptr);
  /* The kind of memory at `ptr` and its device ordinal (-1: none); see wavert_memory_kind.
   * NULL: the driver has no pointer query. Needs no current context. */
  wavert_status (*memory_kind)(const void *ptr, wavert_memory_type *out_kind,
                               int32_t *out_ordinal);
  /* `sync`: blocking copy (stream ignored); otherwise ordered on `stream`. */
  wavert_status (*memcpy)(void *dst, const void *src, size_t size, void *stream, int sync);
  /* element_bytes is 1, 2 or 4. */
  wavert_status (*memset)(void *ptr, uint32_t value, size_t element_bytes, size_t count,
                          void *stream, int sync);

  /* Entries behind MLIR's mgpu* runtime ABI (mgpu.c). NULL: the backend has no such
   * operation (the caller reports WAVERT_ERROR_UNSUPPORTED). */
  /* Load PTX with the driver JIT at optimisation level `opt_level` (0-4). */
  wavert_status (*module_load_jit)(wavert_device *device, const void *image, size_t size,
                                   int opt_level, void **out_module);
  /* Launch with thread-block clusters of cluster[0..2] blocks; grid is in blocks (each extent
   * a multiple of the cluster's). Cluster sizes above the portable 8 are opted into. */
  wavert_status (*launch_cluster)(void *function, const uint32_t cluster[3],
                                  const uint32_t grid[3], const uint32_t block[3],
                                  uint32_t dynamic_shared_bytes, void *stream, void **params);
  /* Page-lock `size` bytes of host memory for the device (flags 0), and undo it. */
  wavert_status (*host_register)(void *ptr, size_t size);
  wavert_status (*host_unregister)(void *ptr);
  /* The device address of page-locked host memory `ptr`. */
  wavert_status (*host_device_pointer)(void *ptr, void **out_device_ptr);
  /* cuTensorMapEncodeTiled into `out_map` (128 bytes, 64-byte aligned); the enums are the
   * driver's CUtensorMap* values. */
  wavert_status (*tensor_map_encode_tiled)(void *out_map, int32_t data_type, uint32_t rank,
                                           void *address, const uint64_t *dims,
                                           const uint64_t *strides, const uint32_t *box,
                                           const uint32_t *element_strides, int32_t interleave,
                                           int32_t swizzle, int32_t l2_promotion,
                                           int32_t oob_fill);
};

extern const wavert__backend wavert__cuda_backend;
extern const wavert__backend wavert__hip_backend;
extern const wavert__backend wavert__cpu_backend; /* backend_cpu.c: the host CPU, kDLCPU 0 */

/* dlopen `env`'s path if set, else the first of `names` that opens; the message of a failure
 * names every library tried. */
wavert_status wavert__open_library(const char *what, const char *env, const char *const *names,
                                   void **out_handle);

#endif /* WAVERT_BACKEND_H */
