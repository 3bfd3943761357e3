/*
 * wavert_mgpu.h — ABI for host code from MLIR's gpu-to-llvm lowering: the mgpu* runtime
 * functions that MLIR's GPU host lowering (gpu-to-llvm, the gpu.binary launch translation
 * with #gpu.select_object, and the nvgpu TMA lowering) emits calls to, implemented by
 * libwavert on the CUDA driver and on HIP.
 *
 * Names, argument types and meaning follow MLIR release 22's runtime wrappers
 * (mlir/lib/ExecutionEngine/CudaRuntimeWrappers.cpp, RocmRuntimeWrappers.cpp) and the
 * declarations gpu-to-llvm emits, so host code from an unmodified upstream pipeline links
 * against libwavert instead of libmlir_cuda_runtime / libmlir_rocm_runtime. Where libwavert
 * differs from upstream, it is said at the declaration. Sizes are in bytes unless stated;
 * grid/block extents are in blocks/threads.
 *
 * Device and stream. Inside a host call (wavert_call_begin ... wavert_call_end, which pywave
 * makes around every call of compiled host code) every function works on the call's device,
 * and a NULL stream means the call's stream. Outside a call they work on the default device
 * of the calling thread (mgpuSetDefaultDevice; ordinal 0 initially; the CUDA device of that
 * ordinal if the CUDA driver reports any device, else the HIP one), with the device's context
 * made current for the duration of the call, and a NULL stream is the legacy default stream.
 *
 * Errors. Upstream prints driver errors and carries on; libwavert never prints and never
 * aborts. Inside a call the first error is recorded and returned by wavert_call_end (pywave
 * raises it when the call returns); the function returns NULL / does nothing. Outside a call
 * the thread's first error since wavert_clear_error() stays readable with wavert_last_status()
 * and wavert_last_error() (later errors do not replace it).
 *
 * Thread safety: every function is thread-safe except mgpuModuleUnload, which must not run
 * while another thread uses that module or its functions (as with the driver's own unload).
 * Handles (modules, functions, streams, events) are opaque pointers.
 */
#ifndef WAVERT_MGPU_H
#define WAVERT_MGPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define WAVERT_MGPU_EXPORT __declspec(dllexport)
#else
#define WAVERT_MGPU_EXPORT __attribute__((visibility("default")))
#endif

/* ---- Modules and launches ------------------------------------------------------------------ */

/* Load a code object (cubin, fatbin or NUL-terminated PTX on CUDA; hsaco on HIP) of `size`
 * bytes. The image is copied: the caller keeps `data`. The module is loaded on the current
 * device now (load errors are reported here) and on any other device on its first launch
 * there. Released by mgpuModuleUnload. */
WAVERT_MGPU_EXPORT void *mgpuModuleLoad(void *data, size_t size);

/* Load NUL-terminated PTX text with the driver JIT at optimisation level `opt_level` (0-4,
 * CU_JIT_OPTIMIZATION_LEVEL); the JIT's error log is in the error message. CUDA only: on HIP
 * it fails with WAVERT_ERROR_UNSUPPORTED (upstream asserts). */
WAVERT_MGPU_EXPORT void *mgpuModuleLoadJIT(void *data, int opt_level);

/* Unload every device's copy (after the device's pending work, so queued kernels finish)
 * and free the module and its functions. Accepts NULL. */
WAVERT_MGPU_EXPORT void mgpuModuleUnload(void *module);

/* Kernel `name` of `module`, or NULL (error recorded) if it has none. Borrowed: valid until
 * mgpuModuleUnload. The same name gives the same handle. */
WAVERT_MGPU_EXPORT void *mgpuModuleGetFunction(void *module, const char *name);

/* Launch `function` on grid (gx, gy, gz) blocks of (bx, by, bz) threads with `smem` bytes of
 * dynamic shared memory on `stream`; params[i] points at the i-th kernel argument's value.
 * `params_count` (the number of params) is not needed by CUDA or HIP and is ignored.
 * Checked before the driver runs, as wavert_function_launch: extents >= 0 and within the
 * device's and the kernel's limits, shared memory within the opt-in maximum (opted in above
 * 48 KiB); an empty grid launches nothing. `extra` must be NULL (WAVERT_ERROR_UNSUPPORTED). */
WAVERT_MGPU_EXPORT void mgpuLaunchKernel(void *function, intptr_t gx, intptr_t gy, intptr_t gz,
                                         intptr_t bx, intptr_t by, intptr_t bz, int32_t smem,
                                         void *stream, void **params, void **extra,
                                         size_t params_count);

/* mgpuLaunchKernel with thread-block clusters of (cx, cy, cz) blocks (cuLaunchKernelEx with
 * the cluster-dimension attribute and the spread scheduling policy; cluster sizes above 8
 * blocks are opted into). The grid is in blocks: each grid extent must be a multiple of the
 * cluster's (WAVERT_ERROR_INVALID_ARGUMENT otherwise). CUDA >= 12 only. */
WAVERT_MGPU_EXPORT void mgpuLaunchClusterKernel(void *function, intptr_t cx, intptr_t cy,
                                                intptr_t cz, intptr_t gx, intptr_t gy,
                                                intptr_t gz, intptr_t bx, intptr_t by,
                                                intptr_t bz, int32_t smem, void *stream,
                                                void **params, void **extra);

/* ---- Streams and events (the driver's handles) ------------------------------------------- */

/* A non-blocking stream, ordered after the work enqueued so far on the call's stream. */
WAVERT_MGPU_EXPORT void *mgpuStreamCreate(void);
/* Accepts NULL. The call's own stream is never destroyed. */
WAVERT_MGPU_EXPORT void mgpuStreamDestroy(void *stream);
/* Block until `stream`'s work is done; inside a call the call's stream is then ordered after
 * it. */
WAVERT_MGPU_EXPORT void mgpuStreamSynchronize(void *stream);
WAVERT_MGPU_EXPORT void mgpuStreamWaitEvent(void *stream, void *event);
/* An event without timing. */
WAVERT_MGPU_EXPORT void *mgpuEventCreate(void);
WAVERT_MGPU_EXPORT void mgpuEventDestroy(void *event);
WAVERT_MGPU_EXPORT void mgpuEventSynchronize(void *event);
WAVERT_MGPU_EXPORT void mgpuEventRecord(void *event, void *stream);

/* ---- Memory -------------------------------------------------------------------------------- */

/* `size` bytes of device memory, or of managed memory (reachable from host and device;
 * cuMemAllocManaged / hipMallocManaged) when `host_shared` is non-zero (gpu.alloc
 * host_shared; upstream's ROCm wrapper ignores it). Not stream-ordered (`stream` unused).
 * Size 0 gives NULL without an error. Freed by mgpuMemFree. */
WAVERT_MGPU_EXPORT void *mgpuMemAlloc(uint64_t size, void *stream, int8_t host_shared);
/* Accepts NULL. Not stream-ordered. */
WAVERT_MGPU_EXPORT void mgpuMemFree(void *ptr, void *stream);
/* Copy `size` bytes (any direction; unified addressing decides), ordered on `stream`. A NULL
 * dst or src with a non-zero size is INVALID_ARGUMENT (recorded, the driver not called); so is
 * mgpuMemset32/16's NULL dst. */
WAVERT_MGPU_EXPORT void mgpuMemcpy(void *dst, void *src, size_t size, void *stream);
/* Set `count` 32-bit / 16-bit elements at `dst` to `value`, ordered on `stream`. */
WAVERT_MGPU_EXPORT void mgpuMemset32(void *dst, uint32_t value, size_t count, void *stream);
WAVERT_MGPU_EXPORT void mgpuMemset16(void *dst, uint16_t value, size_t count, void *stream);

/* Page-lock `size` bytes of host memory at `ptr` for the device (cuMemHostRegister /
 * hipHostRegister, flags 0). Size 0 does nothing. */
WAVERT_MGPU_EXPORT void mgpuMemHostRegister(void *ptr, uint64_t size);
/* Register the data of a ranked memref: `descriptor` points at MLIR's descriptor of rank
 * `rank` ({allocated, aligned, offset, sizes[rank], strides[rank]}, 64-bit fields), elements
 * of `element_size` bytes. The memref must be compact row-major (strides of size-1
 * dimensions are not checked; upstream only asserts); the bytes registered start at
 * aligned + offset elements. Size overflow and negative sizes are errors; an empty memref does
 * nothing. */
WAVERT_MGPU_EXPORT void mgpuMemHostRegisterMemRef(int64_t rank, void *descriptor,
                                                  int64_t element_size);
WAVERT_MGPU_EXPORT void mgpuMemHostUnregister(void *ptr);
/* Unregister what mgpuMemHostRegisterMemRef registered for the same memref. */
WAVERT_MGPU_EXPORT void mgpuMemHostUnregisterMemRef(int64_t rank, void *descriptor,
                                                    int64_t element_size);

/* The 1-D memref descriptors returned by mgpuMemGetDeviceMemRef1d*. */
typedef struct wavert_mgpu_memref_1d_f32 {
  float *allocated;
  float *aligned;
  int64_t offset;
  int64_t sizes[1];
  int64_t strides[1];
} wavert_mgpu_memref_1d_f32;
typedef struct wavert_mgpu_memref_1d_i32 {
  int32_t *allocated;
  int32_t *aligned;
  int64_t offset;
  int64_t sizes[1];
  int64_t strides[1];
} wavert_mgpu_memref_1d_i32;

/* The device view of a registered (page-locked) host memref passed as its expanded
 * descriptor: both pointers become the device address of `aligned` (cuMemHostGetDevicePointer
 * / hipHostGetDevicePointer); offset, size and stride are kept. On failure the pointers are
 * NULL. */
WAVERT_MGPU_EXPORT wavert_mgpu_memref_1d_f32 mgpuMemGetDeviceMemRef1dFloat(
    float *allocated, float *aligned, int64_t offset, int64_t size, int64_t stride);
WAVERT_MGPU_EXPORT wavert_mgpu_memref_1d_i32 mgpuMemGetDeviceMemRef1dInt32(
    int32_t *allocated, int32_t *aligned, int64_t offset, int64_t size, int64_t stride);

/* Make device `ordinal` the calling thread's default device (used outside host calls).
 * An invalid ordinal is reported by the next function that needs the device. */
WAVERT_MGPU_EXPORT void mgpuSetDefaultDevice(int32_t ordinal);

/* ---- Tensor memory accelerator (nvgpu.tma.create.descriptor; CUDA >= 12, sm_90) ---------- */

/* cuTensorMapEncodeTiled: write a 128-byte CUtensorMap into `tensor_map` (host memory,
 * 64-byte aligned). The enums are the driver's CUtensorMapDataType, ...Interleave,
 * ...Swizzle, ...L2promotion and ...FloatOOBfill values. */
WAVERT_MGPU_EXPORT void mgpuTensorMapEncodeTiled(
    void *tensor_map, int32_t data_type, uint32_t rank, void *global_address,
    const uint64_t *global_dims, const uint64_t *global_strides, const uint32_t *box_dims,
    const uint32_t *element_strides, int32_t interleave, int32_t swizzle, int32_t l2_promotion,
    int32_t oob_fill);

/* A tiled TMA descriptor for the memref `descriptor` of rank `rank` (1-5; MLIR's ranked
 * descriptor, as for mgpuMemHostRegisterMemRef) with box `box_dims[rank]` (outermost first),
 * element strides 1, copied to device memory; returns its device address (what the kernel
 * takes), or NULL on failure. Unlike upstream, the global strides are the memref's own
 * (upstream assumes a compact layout) and the memref's offset is honoured. Descriptors are
 * kept per device and content, so re-creating the same one reuses its device copy; they live
 * until the process exits (upstream never frees them either). */
WAVERT_MGPU_EXPORT void *mgpuTensorMapEncodeTiledMemref(int64_t rank, void *descriptor,
                                                        int64_t data_type, int64_t interleave,
                                                        int64_t swizzle, int64_t l2_promotion,
                                                        int64_t oob_fill, int64_t *box_dims);

#ifdef __cplusplus
}
#endif
#endif /* WAVERT_MGPU_H */
