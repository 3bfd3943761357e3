/*
 * wavert.h — the whole public C API of libwavert, the GPU launch runtime under pywave.
 *
 * libwavert loads GPU code objects (PTX, cubin, fatbin on NVIDIA; hsaco on AMD) from memory,
 * launches their kernels and converts DLPack tensors into MLIR memref descriptors. The GPU
 * drivers (libcuda.so.1, libamdhip64.so) are opened with dlopen on first use: nothing from a
 * GPU SDK is needed to build or link against this library.
 *
 * Conventions used by every declaration below:
 *  - Every fallible call returns a wavert_status. On failure a message naming the failing
 *    call, value and limit (and, for driver failures, the driver's error name and text) is
 *    stored per thread; read it with wavert_last_error().
 *  - `out_` parameters come last and are written only on success.
 *  - Ownership is in the verb: `load`/`create` return an owned handle that `release` frees
 *    (release accepts NULL); `get` returns a borrowed handle whose lifetime is stated.
 *  - "thread-safe": the library synchronises; "thread-compatible": the caller must not use
 *    the same object from two threads at once.
 *
 * DLPack declarations follow the DLPack specification v1.3 (dmlc/dlpack, include/dlpack.h)
 * and are ABI-compatible with it; they are skipped when the real dlpack.h was included first.
 */
#ifndef WAVERT_H
#define WAVERT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WAVERT_VERSION_MAJOR 0
#define WAVERT_VERSION_MINOR 1
#define WAVERT_VERSION_PATCH 0

#if defined(_WIN32)
#define WAVERT_EXPORT __declspec(dllexport)
#else
#define WAVERT_EXPORT __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------------------------------ */
/* DLPack v1.3 (ABI-compatible declarations)                                                  */
/* ------------------------------------------------------------------------------------------ */
#ifndef DLPACK_EXTERN_C /* the real dlpack.h defines this; use its declarations if present */
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 3
/* Flags of DLManagedTensorVersioned.flags (DLPack >= 1.0). */
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)

typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
  kDLTrn = 18,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
  kDLFloat8_e3m4 = 7U,
  kDLFloat8_e4m3 = 8U,
  kDLFloat8_e4m3b11fnuz = 9U,
  kDLFloat8_e4m3fn = 10U,
  kDLFloat8_e4m3fnuz = 11U,
  kDLFloat8_e5m2 = 12U,
  kDLFloat8_e5m2fnuz = 13U,
  kDLFloat8_e8m0fnu = 14U,
  kDLFloat6_e2m3fn = 15U,
  kDLFloat6_e3m2fn = 16U,
  kDLFloat4_e2m1fn = 17U,
} DLDataTypeCode;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

/* Strides and shape are in elements; strides may be NULL (compact row-major, legacy
 * producers) and may be negative. The first element is at (char*)data + byte_offset. */
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* DLPack 1.3 C exchange API (type(obj).__dlpack_c_exchange_api__, PyCapsule
 * "dlpack_exchange_api"). Only the layout is declared here; libwavert itself never calls it. */
typedef int (*DLPackManagedTensorAllocator)(DLTensor *prototype, DLManagedTensorVersioned **out,
                                            void *error_ctx,
                                            void (*SetError)(void *error_ctx, const char *kind,
                                                             const char *message));
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(void *py_object,
                                                     DLManagedTensorVersioned **out);
typedef int (*DLPackManagedTensorToPyObjectNoSync)(DLManagedTensorVersioned *tensor,
                                                   void **out_py_object);
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void *py_object, DLTensor *out);
typedef int (*DLPackCurrentWorkStream)(DLDeviceType device_type, int32_t device_id,
                                       void **out_current_stream);

typedef struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;

typedef struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  DLPackManagedTensorAllocator managed_tensor_allocator;
  DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
  DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
  DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;
  DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;
#endif /* DLPACK_EXTERN_C */

/* ------------------------------------------------------------------------------------------ */
/* Status and errors                                                                          */
/* ------------------------------------------------------------------------------------------ */
typedef enum wavert_status {
  /* The call succeeded. */
  WAVERT_OK = 0,
  /* An argument is invalid: NULL where a value is needed, a negative size, a DLPack tensor
   * whose dtype, rank, shape, layout or device does not match the memref type. */
  WAVERT_ERROR_INVALID_ARGUMENT = 1,
  /* A launch configuration exceeds a device limit (grid or block extent, threads per block,
   * shared memory). The message names the dimension, the value and the limit. */
  WAVERT_ERROR_LIMIT_EXCEEDED = 2,
  /* A named object does not exist: a kernel name not in the module, a device ordinal at or
   * past the device count. */
  WAVERT_ERROR_NOT_FOUND = 3,
  /* The driver library could not be opened or initialised, or it reports no device of that
   * kind (no NVIDIA/AMD GPU, driver not installed). */
  WAVERT_ERROR_UNAVAILABLE = 4,
  /* A driver call failed; the message carries the call, the error name and its text. */
  WAVERT_ERROR_DRIVER = 5,
  /* Host or device memory could not be allocated. */
  WAVERT_ERROR_OUT_OF_MEMORY = 6,
  /* The request is valid but not supported by this backend or build. */
  WAVERT_ERROR_UNSUPPORTED = 7,
} wavert_status;

/* Static English text for a status code ("invalid argument", ...). Never NULL. */
WAVERT_EXPORT const char *wavert_status_string(wavert_status status);

/* The message of the last failing call on this thread ("" if none). The pointer stays valid
 * until the next libwavert call on this thread; copy it to keep it. Thread-safe (per thread). */
WAVERT_EXPORT const char *wavert_last_error(void);

/* Status of the last failing call on this thread (WAVERT_OK if none since the last clear). */
WAVERT_EXPORT wavert_status wavert_last_status(void);

/* Forget this thread's last error. */
WAVERT_EXPORT void wavert_clear_error(void);

/* Run-time version as MAJOR*10000 + MINOR*100 + PATCH. */
WAVERT_EXPORT int32_t wavert_version(void);

/* ------------------------------------------------------------------------------------------ */
/* Devices                                                                                    */
/* ------------------------------------------------------------------------------------------ */
/* One GPU of one backend. Device handles live until process exit (they hold the device's
 * primary context); all device functions are thread-safe. */
typedef struct wavert_device wavert_device;

/* Number of devices of DLPack device type `device_type` (kDLCUDA or kDLROCM). Opens the driver
 * on first use. A missing driver gives WAVERT_ERROR_UNAVAILABLE; another device type gives
 * WAVERT_ERROR_UNSUPPORTED. */
WAVERT_EXPORT wavert_status wavert_device_count(int32_t device_type, int32_t *out_count);

/* Borrowed handle for device `ordinal` of `device_type` (kDLCUDA -> CUDA driver, kDLROCM ->
 * HIP). Valid until process exit. WAVERT_ERROR_NOT_FOUND if ordinal >= wavert_device_count. */
WAVERT_EXPORT wavert_status wavert_device_get(int32_t device_type, int32_t ordinal,
                                              wavert_device **out_device);

/* The DLPack device (type, ordinal) of a device handle. Never fails. */
WAVERT_EXPORT DLDevice wavert_device_dl(const wavert_device *device);

typedef enum wavert_device_attribute {
  WAVERT_DEVICE_MAX_THREADS_PER_BLOCK = 1,
  WAVERT_DEVICE_MAX_BLOCK_DIM_X = 2,
  WAVERT_DEVICE_MAX_BLOCK_DIM_Y = 3,
  WAVERT_DEVICE_MAX_BLOCK_DIM_Z = 4,
  WAVERT_DEVICE_MAX_GRID_DIM_X = 5,
  WAVERT_DEVICE_MAX_GRID_DIM_Y = 6,
  WAVERT_DEVICE_MAX_GRID_DIM_Z = 7,
  /* Shared memory per block without opt-in (bytes; 48 KiB on NVIDIA). */
  WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  /* Shared memory per block with opt-in (bytes; 227 KiB on the H100/H200). */
  WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 9,
  WAVERT_DEVICE_COMPUTE_CAPABILITY_MAJOR = 10,
  WAVERT_DEVICE_COMPUTE_CAPABILITY_MINOR = 11,
  WAVERT_DEVICE_MULTIPROCESSOR_COUNT = 12,
  WAVERT_DEVICE_WARP_SIZE = 13,
} wavert_device_attribute;

/* Read one device attribute (cached after the first read). */
WAVERT_EXPORT wavert_status wavert_device_attribute_get(wavert_device *device,
                                                        wavert_device_attribute attribute,
                                                        int64_t *out_value);

/* Target chip name into buf (NUL-terminated, truncated to size): "sm_90" on CUDA, the
 * gcnArchName on HIP ("gfx942"). */
WAVERT_EXPORT wavert_status wavert_device_chip(wavert_device *device, char *buf, size_t size);

/* Block the calling thread until all work on the device has finished (cuCtxSynchronize /
 * hipDeviceSynchronize). Reports a sticky error from an earlier kernel fault. */
WAVERT_EXPORT wavert_status wavert_device_synchronize(wavert_device *device);

/* ------------------------------------------------------------------------------------------ */
/* Modules and functions                                                                      */
/* ------------------------------------------------------------------------------------------ */
/* A code object loaded on one device. Reference counted; thread-safe. */
typedef struct wavert_module wavert_module;
/* A kernel of a module. Borrowed: valid while its module lives. */
typedef struct wavert_function wavert_function;

/* Load a code object from memory onto `device`: PTX text (NUL-terminated or not), cubin,
 * fatbin on CUDA; hsaco on HIP. The image is copied by the driver; the caller keeps
 * ownership of `image`. For PTX the driver's JIT error log is included in the message on
 * failure. The returned module holds one reference. */
WAVERT_EXPORT wavert_status wavert_module_load(wavert_device *device, const void *image,
                                               size_t size, wavert_module **out_module);

/* Add one reference. */
WAVERT_EXPORT void wavert_module_retain(wavert_module *module);

/* Drop one reference; the last one waits for the device's pending work (so kernels already
 * enqueued finish) and unloads the code object. Accepts NULL. */
WAVERT_EXPORT void wavert_module_release(wavert_module *module);

/* Borrowed handle for kernel `name` (valid while `module` lives). WAVERT_ERROR_NOT_FOUND if
 * the module has no such kernel. Thread-safe. */
WAVERT_EXPORT wavert_status wavert_module_get_function(wavert_module *module, const char *name,
                                                       wavert_function **out_function);

typedef enum wavert_function_attribute {
  WAVERT_FUNCTION_MAX_THREADS_PER_BLOCK = 1,
  /* Static shared memory of the kernel in bytes. */
  WAVERT_FUNCTION_SHARED_SIZE_BYTES = 2,
  WAVERT_FUNCTION_NUM_REGS = 3,
  WAVERT_FUNCTION_LOCAL_SIZE_BYTES = 4,
} wavert_function_attribute;

WAVERT_EXPORT wavert_status wavert_function_attribute_get(wavert_function *function,
                                                          wavert_function_attribute attribute,
                                                          int64_t *out_value);

/* Launch `function` with grid (gx, gy, gz) blocks of (bx, by, bz) threads,
 * `dynamic_shared_bytes` bytes of dynamic shared memory, on `stream` (a CUstream /
 * hipStream_t; NULL = the legacy default stream) with `params` as in cuLaunchKernel (one
 * pointer per kernel parameter, pointing at its value).
 * Checked before the driver is called: every extent >= 0 and within the device limits
 * (grid x <= 2^31-1, y/z <= 65535, block dims, threads per block, including the kernel's own
 * limit), static + dynamic shared memory within the opt-in maximum. Above 48 KiB the kernel
 * is opted in with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (once per size increase).
 * A grid or block with a zero extent launches nothing and returns WAVERT_OK.
 * Makes the device's context current for the call and restores the caller's afterwards.
 * Thread-safe. */
WAVERT_EXPORT wavert_status wavert_function_launch(wavert_function *function, int64_t gx,
                                                   int64_t gy, int64_t gz, int64_t bx, int64_t by,
                                                   int64_t bz, int64_t dynamic_shared_bytes,
                                                   void *stream, void **params);

/* ------------------------------------------------------------------------------------------ */
/* Cached kernels: "this image + this kernel, on whichever device it runs"                    */
/* ------------------------------------------------------------------------------------------ */
/* A lazily filled, thread-safe (image, kernel name) -> per-device function cache. The first
 * use on a device loads the image there once (two threads racing end with one module). */
typedef struct wavert_kernel wavert_kernel;

/* `image` is NOT copied and must outlive the kernel object; `name` is copied. */
WAVERT_EXPORT wavert_status wavert_kernel_create(const void *image, size_t size,
                                                 const char *name, wavert_kernel **out_kernel);

/* Release the kernel object and its per-device modules (see wavert_module_release).
 * Accepts NULL. Not safe while another thread uses the kernel. */
WAVERT_EXPORT void wavert_kernel_release(wavert_kernel *kernel);

/* Borrowed function for `device`, loading the image on first use (valid while the kernel
 * object lives). Thread-safe. */
WAVERT_EXPORT wavert_status wavert_kernel_get_function(wavert_kernel *kernel,
                                                       wavert_device *device,
                                                       wavert_function **out_function);

/* ------------------------------------------------------------------------------------------ */
/* DLPack tensor -> MLIR memref descriptor                                                    */
/* ------------------------------------------------------------------------------------------ */
/* MLIR's dynamic-dimension / dynamic-stride marker (ShapedType::kDynamic). */
#define WAVERT_DYNAMIC INT64_MIN

/* Flags of wavert_memref_type.flags. */
/* The element type is a signless integer (iN): both kDLInt and kDLUInt of N bits match. */
#define WAVERT_MEMREF_SIGNLESS (1u << 0)
/* The layout is strided<[...], offset: ...>: any strides allowed where `strides` holds
 * WAVERT_DYNAMIC; without it the layout is the identity and the tensor must be compact
 * row-major (strides of size-1 dimensions are ignored, as in DLPack and NumPy). */
#define WAVERT_MEMREF_STRIDED (1u << 1)

/* What a memref type expects of a tensor. `sizes` and `strides` have `rank` entries each
 * (WAVERT_DYNAMIC = any); `strides` is read only with WAVERT_MEMREF_STRIDED. `offset` is the
 * layout's static offset in elements, or WAVERT_DYNAMIC. i1 expects kDLBool with 8 bits. */
typedef struct wavert_memref_type {
  DLDataType dtype;
  uint32_t flags;
  int32_t rank;
  const int64_t *sizes;
  const int64_t *strides;
  int64_t offset;
} wavert_memref_type;

/* Number of 64-bit words of a rank-`rank` memref descriptor: 3 + 2*rank
 * ({allocated, aligned, offset, sizes[rank], strides[rank]}, MLIR's LLVM lowering). */
#define WAVERT_MEMREF_WORDS(rank) (3 + 2 * (rank))

/* Fill the memref descriptor `out_words` (WAVERT_MEMREF_WORDS(type->rank) words) for
 * `tensor`: allocated = data, aligned = data + byte_offset (minus the static offset), offset
 * = the static offset or 0, sizes = shape, strides = tensor strides (NULL strides mean
 * compact row-major). Zero-size tensors may have NULL data. Fails with
 * WAVERT_ERROR_INVALID_ARGUMENT naming expected and actual (code, bits, lanes), rank, sizes
 * or strides when the tensor does not match. Does not check the device. Thread-safe. */
WAVERT_EXPORT wavert_status wavert_memref_from_dltensor(const DLTensor *tensor,
                                                        const wavert_memref_type *type,
                                                        int64_t *out_words);

/* ------------------------------------------------------------------------------------------ */
/* Streams, events and device memory                                                          */
/* ------------------------------------------------------------------------------------------ */
/* Streams are the driver's own handles (CUstream / hipStream_t) passed as void*. */

/* Create a non-blocking stream on `device`. The caller owns it: wavert_stream_release. */
WAVERT_EXPORT wavert_status wavert_stream_create(wavert_device *device, void **out_stream);
WAVERT_EXPORT wavert_status wavert_stream_release(wavert_device *device, void *stream);
/* Block until all work on `stream` has finished. */
WAVERT_EXPORT wavert_status wavert_stream_synchronize(wavert_device *device, void *stream);
/* Make `waiting` wait (on the device, without a host sync) for the work enqueued on `stream`
 * so far. */
WAVERT_EXPORT wavert_status wavert_stream_wait_stream(wavert_device *device, void *waiting,
                                                      void *stream);

/* Allocate `size` bytes of device memory (size 0 gives NULL and WAVERT_OK). */
WAVERT_EXPORT wavert_status wavert_memory_alloc(wavert_device *device, size_t size,
                                                void **out_ptr);
/* Free memory from wavert_memory_alloc. Accepts NULL. */
WAVERT_EXPORT wavert_status wavert_memory_free(wavert_device *device, void *ptr);
/* Copy `size` bytes (host<->device or device<->device; unified addressing decides the
 * direction), ordered on `stream`. With stream == NULL the call returns when the copy is done. */
WAVERT_EXPORT wavert_status wavert_memory_copy(wavert_device *device, void *dst, const void *src,
                                               size_t size, void *stream);
/* Set `count` elements of `element_bytes` (1, 2 or 4) bytes at `ptr` to `value`, ordered on
 * `stream`; NULL stream = synchronous. */
WAVERT_EXPORT wavert_status wavert_memory_set(wavert_device *device, void *ptr, uint32_t value,
                                              size_t element_bytes, size_t count, void *stream);

/* ------------------------------------------------------------------------------------------ */
/* Host-call context and entry points for JIT-compiled host code                             */
/* ------------------------------------------------------------------------------------------ */
/* pywave (or a C caller of exported host code) brackets each call of compiled host code with
 * wavert_call_begin / wavert_call_end. In between, the calling thread has a current device
 * and stream that the wavert_jit_* functions use; the device's context is current.
 * `state` is caller-provided storage (opaque, WAVERT_CALL_STATE_WORDS words). */
#define WAVERT_CALL_STATE_WORDS 8
typedef struct wavert_call_state {
  void *words[WAVERT_CALL_STATE_WORDS];
} wavert_call_state;

/* Make `device` current for this thread's host call (saving the previous context and call
 * in `state`); launches without an explicit stream go to `stream` (NULL = legacy default). */
WAVERT_EXPORT wavert_status wavert_call_begin(wavert_device *device, void *stream,
                                              wavert_call_state *state);

/* End the call begun with `state`: restore the previous context and call, and return the
 * first error raised by generated code during the call (WAVERT_OK if none; the message is
 * in wavert_last_error). */
WAVERT_EXPORT wavert_status wavert_call_end(wavert_call_state *state);

/* Launch from generated code: `*slot` is a wavert_kernel* owned by the generated module,
 * created on first use from (image, image_size, name) and released by the module's owner
 * with wavert_kernel_release(*slot). The device is the call's device; stream NULL means
 * the call's stream. On failure the error is recorded for wavert_call_end and the status
 * is returned so generated code can return early. */
WAVERT_EXPORT int32_t wavert_jit_launch(wavert_kernel **slot, const void *image,
                                        int64_t image_size, const char *name, int64_t gx,
                                        int64_t gy, int64_t gz, int64_t bx, int64_t by,
                                        int64_t bz, int32_t dynamic_shared_bytes, void *stream,
                                        void **params);

/* Non-zero if generated code has recorded an error during the current call. */
WAVERT_EXPORT int32_t wavert_jit_failed(void);

/* Runtime functions of MLIR's gpu-to-llvm lowering (the mgpu* wrappers), on the call's
 * device. Each records failures for wavert_call_end and returns a harmless value; generated
 * code checks wavert_jit_failed after each. Streams created here wait for the call's stream
 * at creation; a synchronised stream is made to order the call's stream after it. */
WAVERT_EXPORT void *wavert_jit_stream_create(void);
WAVERT_EXPORT void wavert_jit_stream_destroy(void *stream);
WAVERT_EXPORT void wavert_jit_stream_synchronize(void *stream);
WAVERT_EXPORT void wavert_jit_stream_wait_event(void *stream, void *event);
WAVERT_EXPORT void *wavert_jit_event_create(void);
WAVERT_EXPORT void wavert_jit_event_destroy(void *event);
WAVERT_EXPORT void wavert_jit_event_synchronize(void *event);
WAVERT_EXPORT void wavert_jit_event_record(void *event, void *stream);
WAVERT_EXPORT void *wavert_jit_mem_alloc(uint64_t size, void *stream, int8_t host_shared);
WAVERT_EXPORT void wavert_jit_mem_free(void *ptr, void *stream);
WAVERT_EXPORT void wavert_jit_memcpy(void *dst, void *src, uint64_t size, void *stream);
WAVERT_EXPORT void wavert_jit_memset32(void *dst, uint32_t value, uint64_t count, void *stream);
WAVERT_EXPORT void wavert_jit_memset16(void *dst, uint16_t value, uint64_t count, void *stream);

/* ------------------------------------------------------------------------------------------ */
/* 16-bit floating point                                                                      */
/* ------------------------------------------------------------------------------------------ */
/* Bit patterns of IEEE binary16 (f16) and bfloat16 values, rounded to nearest even (NaN stays
 * a quiet NaN, overflow gives infinity). Thread-safe, never fail. */
WAVERT_EXPORT uint16_t wavert_f16_from_f32(float value);
WAVERT_EXPORT uint16_t wavert_f16_from_f64(double value);
WAVERT_EXPORT uint16_t wavert_bf16_from_f32(float value);
WAVERT_EXPORT uint16_t wavert_bf16_from_f64(double value);
WAVERT_EXPORT float wavert_f32_from_f16(uint16_t bits);

#ifdef __cplusplus
}
#endif
#endif /* WAVERT_H */
