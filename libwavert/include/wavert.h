/*
 * wavert.h — the public C API of libwavert, the GPU launch runtime under pywave.
 *
 * libwavert loads GPU code objects (PTX, cubin, fatbin on NVIDIA; hsaco on AMD) from memory,
 * launches their kernels and converts DLPack tensors into MLIR memref descriptors. The GPU
 * drivers (libcuda.so.1, libamdhip64.so) are opened with dlopen on first use: nothing from a
 * GPU SDK is needed to build or link against this library. The entry points that generated
 * host code calls (wavert_call_*, wavert_jit_*) are in wavert_jit.h, not here.
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
 *  - A NULL handle or out_ pointer gives WAVERT_ERROR_INVALID_ARGUMENT.
 *
 * DLPack: the DLPack data types (DLTensor and the types it uses, DLManagedTensor,
 * DLManagedTensorVersioned) are declared here from the DLPack specification v1.3, ABI- and
 * name-compatible with dmlc/dlpack's dlpack.h, under dlpack.h's own include guard
 * DLPACK_DLPACK_H_. So either order works in one translation unit:
 *  - dlpack.h (any 1.x) first: its declarations are used and ours are skipped;
 *  - wavert.h first: ours are used, and a later #include <dlpack.h> adds nothing (its guard is
 *    already defined). Include dlpack.h first when you need its other declarations (the C
 *    exchange API of DLPack 1.3, DLPACK_DLL).
 * A pre-1.0 dlpack.h (DLPACK_VERSION, no DLManagedTensorVersioned) is refused with #error.
 */
#ifndef WAVERT_H
#define WAVERT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this header and of the library built from it. While MAJOR is 0, a MINOR bump may
 * remove or change exported symbols (0.2.0 removed the thirteen wavert_jit_* mirrors of MLIR's
 * mgpu* runtime functions: generated host code calls the mgpu* names of wavert_mgpu.h). */
#define WAVERT_VERSION_MAJOR 0
#define WAVERT_VERSION_MINOR 2
#define WAVERT_VERSION_PATCH 0

/* Symbol visibility: exported while building libwavert (WAVERT_BUILDING, set by its build),
 * imported by users on Windows. */
#if defined(_WIN32)
#if defined(WAVERT_BUILDING)
#define WAVERT_EXPORT __declspec(dllexport)
#else
#define WAVERT_EXPORT __declspec(dllimport)
#endif
#else
#define WAVERT_EXPORT __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------------------------------ */
/* DLPack v1.3 (ABI-compatible declarations)                                                  */
/* ------------------------------------------------------------------------------------------ */
#if defined(DLPACK_DLPACK_H_)
/* dlpack.h came first: use its declarations, which must be DLPack 1.x. */
#if !defined(DLPACK_MAJOR_VERSION) || DLPACK_MAJOR_VERSION != 1
#error "wavert.h needs DLPack 1.x; the dlpack.h included before it is another major version"
#endif
#else
#define DLPACK_DLPACK_H_ /* dlpack.h's guard: a later #include <dlpack.h> adds nothing */
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
#endif /* DLPACK_DLPACK_H_ */

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
  /* A kernel faulted and the device reported it: on the CPU device in checked mode, an
   * out-of-bounds memref access, a barrier not reached by every thread of a block, or a data
   * race on workgroup memory. The message names the kernel, the block, the thread(s), the
   * op, the index and the memref. */
  WAVERT_ERROR_KERNEL_FAULT = 8,
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

/* The DLPack device (type, ordinal) of a device handle into *out_device. INVALID_ARGUMENT for
 * a NULL device or out_device. Thread-safe. */
WAVERT_EXPORT wavert_status wavert_device_dl(const wavert_device *device, DLDevice *out_device);

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

/* Read one device attribute (cached after the first read): counts and extents for the
 * limits, bytes for shared memory, the compute capability's digits (HIP: gcnArch major/minor).
 * INVALID_ARGUMENT for NULL arguments or an attribute not in the enum; DRIVER when the driver
 * query fails. Thread-safe. */
WAVERT_EXPORT wavert_status wavert_device_attribute_get(wavert_device *device,
                                                        wavert_device_attribute attribute,
                                                        int64_t *out_value);

/* Target chip name into buf (NUL-terminated, truncated to size): "sm_90" on CUDA, the
 * gcnArchName on HIP ("gfx942"). INVALID_ARGUMENT for NULL arguments or size 0; UNSUPPORTED
 * when the backend cannot name the chip; DRIVER when the driver query fails. Thread-safe. */
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

/* Add one reference. `module` must be live (not yet released by its last reference). */
WAVERT_EXPORT void wavert_module_retain(wavert_module *module);

/* Drop one reference; the last one waits for the device's pending work (so kernels already
 * enqueued finish) and unloads the code object. Accepts NULL (WAVERT_OK). Release each
 * reference once: a handle whose last reference is gone is invalid for every function, its
 * functions too. Release detects it (INVALID_ARGUMENT, nothing freed), unless a later
 * wavert_module_load returned the same address; the other functions do not. */
WAVERT_EXPORT wavert_status wavert_module_release(wavert_module *module);

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
  /* User constant memory of the kernel in bytes. */
  WAVERT_FUNCTION_CONST_SIZE_BYTES = 5,
  /* Virtual architecture of the PTX the kernel was compiled from, and the architecture of
   * the code loaded: major * 10 + minor (90 for sm_90 / compute_90). */
  WAVERT_FUNCTION_PTX_VERSION = 6,
  WAVERT_FUNCTION_BINARY_VERSION = 7,
  /* Dynamic shared memory a launch may use now, in bytes: the driver's default (48 KiB minus
   * the static shared memory on CUDA) until a larger launch opts the kernel in. */
  WAVERT_FUNCTION_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
} wavert_function_attribute;

/* Read one attribute of a kernel: MAX_THREADS_PER_BLOCK and NUM_REGS are counts (the kernel's
 * own thread limit, registers per thread), SHARED_SIZE_BYTES and LOCAL_SIZE_BYTES bytes (static
 * shared memory per block, local memory per thread), the others as the enum says
 * (cuFuncGetAttribute / hipFuncGetAttribute). Makes the device's context current for the
 * query. INVALID_ARGUMENT for NULL arguments or an attribute not in the enum; DRIVER when the
 * driver query fails. Thread-safe. */
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
 * Makes the device's context current for the call if it is not and restores the caller's
 * afterwards; with it current already, the launch is the only driver call. Thread-safe. */
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

/* Create a kernel object for kernel `name` of the code object `image` (size bytes; formats as
 * in wavert_module_load). `image` is NOT copied and must outlive the kernel object; `name` is
 * copied. Nothing is loaded yet. INVALID_ARGUMENT for a NULL image, name or out_kernel or an
 * empty image; OUT_OF_MEMORY. Thread-safe. */
WAVERT_EXPORT wavert_status wavert_kernel_create(const void *image, size_t size,
                                                 const char *name, wavert_kernel **out_kernel);

/* Release the kernel object and its per-device modules (see wavert_module_release).
 * Accepts NULL (WAVERT_OK). Not safe while another thread uses the kernel. Release it once:
 * afterwards the handle and its functions are invalid; a second release is detected
 * (INVALID_ARGUMENT, nothing freed) unless a later wavert_kernel_create returned the same
 * address. */
WAVERT_EXPORT wavert_status wavert_kernel_release(wavert_kernel *kernel);

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

/* MLIR's descriptor of a rank-1 memref, as its C interface passes and returns one
 * (StridedMemRefType<T, 1>: mlir/ExecutionEngine/CRunnerUtils.h), for any element type T:
 * the elements are at aligned + offset + i * strides[0], i < sizes[0], counted in T. The one
 * rank-1 descriptor of libwavert's headers (wavert_jit.h, wavert_mgpu.h, wavert_sparse_*.h). */
typedef struct wavert_memref_1d {
  void *allocated;
  void *aligned;
  int64_t offset;
  int64_t sizes[1];
  int64_t strides[1];
} wavert_memref_1d;

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

/* Every function in this section is thread-safe (the driver synchronises; the caller keeps a
 * stream or allocation alive while another thread uses it), makes the device's context
 * current for the call, and returns INVALID_ARGUMENT for a NULL device and DRIVER when the
 * driver call fails (OUT_OF_MEMORY for a failed allocation). */

/* Create a non-blocking stream on `device`. The caller owns it: wavert_stream_release. */
WAVERT_EXPORT wavert_status wavert_stream_create(wavert_device *device, void **out_stream);
/* Check, as far as the driver allows, that `stream` can be handed to it for `device`, without
 * letting a bad handle crash the process: NULL and the driver's special handles (CUDA:
 * CU_STREAM_LEGACY = 1, CU_STREAM_PER_THREAD = 2; HIP: hipStreamPerThread = 2) pass; any
 * other handle must be 8-byte aligned and point to readable memory (tested with a system
 * call, never a load), and the driver must name its context (cuStreamGetCtx) or device
 * (hipStreamGetDevice) as `device`'s. Errors: INVALID_ARGUMENT naming the handle and the
 * failed check. Cannot be told apart from a live stream: a destroyed stream whose memory was
 * reused by another stream of the same device, and readable memory that is not a stream on
 * drivers whose query trusts its argument (the query is then made on that memory). */
WAVERT_EXPORT wavert_status wavert_stream_check(wavert_device *device, void *stream);
/* Destroy a stream from wavert_stream_create, after the work already enqueued on it (the
 * driver finishes it). Accepts NULL (WAVERT_OK). Release each stream once: a stream already
 * released, or not made by wavert_stream_create (a framework's stream, a CU_STREAM_* constant),
 * is INVALID_ARGUMENT and reaches no driver call, unless a later wavert_stream_create returned
 * the same handle. */
WAVERT_EXPORT wavert_status wavert_stream_release(wavert_device *device, void *stream);
/* Block until all work on `stream` (NULL = the legacy default stream) has finished; reports a
 * sticky error from an earlier kernel fault. */
WAVERT_EXPORT wavert_status wavert_stream_synchronize(wavert_device *device, void *stream);
/* Make `waiting` wait (on the device, without a host sync) for the work enqueued on `stream`
 * so far. Nothing to do when both are the same stream. */
WAVERT_EXPORT wavert_status wavert_stream_wait_stream(wavert_device *device, void *waiting,
                                                      void *stream);

/* Allocate `size` bytes of device memory (size 0 gives NULL and WAVERT_OK). */
WAVERT_EXPORT wavert_status wavert_memory_alloc(wavert_device *device, size_t size,
                                                void **out_ptr);
/* Free memory from wavert_memory_alloc (after the work already enqueued, as the driver
 * frees it). Accepts NULL. Free each allocation once: the pointer is handed to the driver's
 * free, which reports memory it does not know (CUDA: DRIVER, CUDA_ERROR_INVALID_VALUE) unless
 * the address was allocated again meanwhile (then that allocation is freed). */
WAVERT_EXPORT wavert_status wavert_memory_free(wavert_device *device, void *ptr);
/* What memory a pointer addresses, as the driver answers (wavert_memory_kind). */
typedef enum wavert_memory_type {
  /* Memory the driver does not know: plain host memory (malloc, a stack, a global). */
  WAVERT_MEMORY_UNREGISTERED = 0,
  /* Host memory known to the driver: page-locked by it (cuMemHostAlloc) or registered
   * (cuMemHostRegister). */
  WAVERT_MEMORY_HOST = 1,
  /* Device memory (cuMemAlloc / hipMalloc; wavert_memory_alloc, gpu.alloc). */
  WAVERT_MEMORY_DEVICE = 2,
  /* Managed memory, reachable from host and device (cuMemAllocManaged / hipMallocManaged;
   * gpu.alloc host_shared). */
  WAVERT_MEMORY_MANAGED = 3,
} wavert_memory_type;
/* The kind of memory at `ptr` and the ordinal of the device it belongs to (-1 for
 * unregistered memory), asked of `device`'s driver (CUDA: cuPointerGetAttributes with
 * CU_POINTER_ATTRIBUTE_MEMORY_TYPE, IS_MANAGED and DEVICE_ORDINAL; HIP >= 6:
 * hipPointerGetAttribute). A pointer inside an allocation has the allocation's kind; NULL is
 * unregistered. Thread-safe; needs no current context. Errors: INVALID_ARGUMENT (NULL device
 * or out pointer), UNSUPPORTED (the driver has no pointer query), DRIVER. */
WAVERT_EXPORT wavert_status wavert_memory_kind(wavert_device *device, const void *ptr,
                                               wavert_memory_type *out_kind,
                                               int32_t *out_ordinal);
/* Copy `size` bytes (host<->device or device<->device; unified addressing decides the
 * direction), ordered on `stream`. With stream == NULL the call returns when the copy is done.
 * A NULL dst or src gives INVALID_ARGUMENT. */
WAVERT_EXPORT wavert_status wavert_memory_copy(wavert_device *device, void *dst, const void *src,
                                               size_t size, void *stream);
/* Set `count` elements of `element_bytes` (1, 2 or 4) bytes at `ptr` to `value`, ordered on
 * `stream`; NULL stream = synchronous. count 0 does nothing; another element size or a NULL
 * ptr gives INVALID_ARGUMENT. */
WAVERT_EXPORT wavert_status wavert_memory_set(wavert_device *device, void *ptr, uint32_t value,
                                              size_t element_bytes, size_t count, void *stream);

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
