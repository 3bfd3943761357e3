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
 * Generated host code. pywave's host code calls these functions under these names (the one
 * declaration of each) and returns early after every call when wavert_jit_failed()
 * (wavert_jit.h) says the call has recorded an error. A new runtime function is declared
 * here and implemented in src/mgpu.c inside a scope; the check comes with its mgpu* name.
 *
 * Thread safety: every function is thread-safe except mgpuModuleUnload, which must not run
 * while another thread uses that module or its functions (as with the driver's own unload).
 * Handles (modules, functions, streams, events) are opaque pointers.
 */
#ifndef WAVERT_MGPU_H
#define WAVERT_MGPU_H

#include <stddef.h>
#include <stdint.h>

#include "wavert.h" /* wavert_memref_1d, the descriptor mgpuMemGetDeviceMemRef1d* return */

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


/* The device view of a registered (page-locked) host memref passed as its expanded
 * descriptor: both pointers become the device address of `aligned` (cuMemHostGetDevicePointer
 * / hipHostGetDevicePointer); offset, size and stride are kept. On failure the pointers are
 * NULL. */
WAVERT_MGPU_EXPORT wavert_memref_1d mgpuMemGetDeviceMemRef1dFloat(
    float *allocated, float *aligned, int64_t offset, int64_t size, int64_t stride);
WAVERT_MGPU_EXPORT wavert_memref_1d mgpuMemGetDeviceMemRef1dInt32(
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

/* ---- Sparse linear algebra: cuSPARSE and cuSPARSELt (CUDA only) --------------------------- */

/* What MLIR's sparsifier with `enable-gpu-libgen` (through gpu-to-llvm) calls: signatures as in
 * CudaRuntimeWrappers.cpp built with cuSPARSE and cuSPARSELt. libcusparse / libcusparseLt are
 * opened on first use: $WAVERT_CUSPARSE_LIBRARY / $WAVERT_CUSPARSELT_LIBRARY if set, else the
 * sonames (libcusparse.so.12/.13/.11, libcusparseLt.so.0: the loader's path and a copy already
 * loaded, e.g. by torch or pywave from NVIDIA's wheels), else lib64/ of $CUDA_HOME, $CUDA_PATH
 * and /usr/local/cuda. A library that cannot be opened (WAVERT_ERROR_UNAVAILABLE, naming it),
 * a non-CUDA device (WAVERT_ERROR_UNSUPPORTED) and every cuSPARSE status are errors recorded as
 * for every mgpu* function; the function then returns NULL / 0.
 *
 * Enums are the libraries' integers as MLIR passes them: `dtp`/`ctp` cudaDataType_t (compute
 * types for alpha and beta: R/C 16F, 16BF, 32F, 64F, 32I, else WAVERT_ERROR_INVALID_ARGUMENT),
 * `itp`/`ptp` cusparseIndexType_t (1-3), `ma`/`mb` cusparseOperation_t (0-2). Sizes are
 * elements and must be >= 0. Indices are zero-based; dense matrices are row-major with leading
 * dimension `cols`. Every product computes C = op(A) op(B) + C (alpha = beta = 1), on `stream`
 * (NULL: the call's stream) — upstream ignores the stream and uses the legacy default one.
 * Buffer sizes are bytes (0 possible; upstream once returned at least 1).
 *
 * Environments. One cuSPARSE handle and one cuSPARSELt handle per CUDA device, made by
 * mgpuCreateSparse[Lt]Env or by the first function that needs one (upstream requires the
 * call), released by mgpuDestroySparse[Lt]Env; a handle is used by one thread at a time
 * (libwavert serialises). Descriptors are owned by the caller: each create has its destroy
 * (which accepts NULL). */
WAVERT_MGPU_EXPORT void mgpuCreateSparseEnv(void);
WAVERT_MGPU_EXPORT void mgpuDestroySparseEnv(void);

/* Dense vector of `size` elements / rows x cols row-major matrix at device memory `values`
 * (borrowed: must outlive the descriptor). */
WAVERT_MGPU_EXPORT void *mgpuCreateDnVec(intptr_t size, void *values, int32_t dtp,
                                         void *stream);
WAVERT_MGPU_EXPORT void mgpuDestroyDnVec(void *vec, void *stream);
WAVERT_MGPU_EXPORT void *mgpuCreateDnMat(intptr_t rows, intptr_t cols, void *values,
                                         int32_t dtp, void *stream);
WAVERT_MGPU_EXPORT void mgpuDestroyDnMat(void *mat, void *stream);

/* Sparse matrices over device arrays (borrowed). COO: row and column index arrays of `nnz`;
 * COO AoS: one array of `nnz` (row, column) pairs (cuSPARSE < 12.0 only, else
 * WAVERT_ERROR_UNSUPPORTED); CSR: rows + 1 row positions, nnz column indices; CSC: cols + 1
 * column positions, nnz row indices; BSR (cuSPARSE >= 12.1): brows x bcols blocks of
 * row_block x col_block row-major values, bnnz blocks. */
WAVERT_MGPU_EXPORT void *mgpuCreateCoo(intptr_t rows, intptr_t cols, intptr_t nnz,
                                       void *row_idxs, void *col_idxs, void *values,
                                       int32_t itp, int32_t dtp, void *stream);
WAVERT_MGPU_EXPORT void *mgpuCreateCooAoS(intptr_t rows, intptr_t cols, intptr_t nnz,
                                          void *idxs, void *values, int32_t itp, int32_t dtp,
                                          void *stream);
WAVERT_MGPU_EXPORT void *mgpuCreateCsr(intptr_t rows, intptr_t cols, intptr_t nnz,
                                       void *row_pos, void *col_idxs, void *values,
                                       int32_t ptp, int32_t itp, int32_t dtp, void *stream);
WAVERT_MGPU_EXPORT void *mgpuCreateCsc(intptr_t rows, intptr_t cols, intptr_t nnz,
                                       void *col_pos, void *row_idxs, void *values,
                                       int32_t ptp, int32_t itp, int32_t dtp, void *stream);
WAVERT_MGPU_EXPORT void *mgpuCreateBsr(intptr_t brows, intptr_t bcols, intptr_t bnnz,
                                       intptr_t row_block, intptr_t col_block, void *row_pos,
                                       void *col_idxs, void *values, int32_t ptp, int32_t itp,
                                       int32_t dtp, void *stream);
WAVERT_MGPU_EXPORT void mgpuDestroySpMat(void *mat, void *stream);
/* Writes the matrix's rows, cols and nnz as int64_t through r, c, n. */
WAVERT_MGPU_EXPORT void mgpuSpMatGetSize(void *mat, void *r, void *c, void *n, void *stream);
/* Point a CSR matrix at new position, index and value arrays (SpGEMM's result). */
WAVERT_MGPU_EXPORT void mgpuSetCsrPointers(void *mat, void *positions, void *indices,
                                           void *values, void *stream);

/* y = op(A) x + y (A sparse), C = op(A) op(B) + C (A sparse, B and C dense), and SDDMM
 * C = (op(A) op(B)) .* spy(C) + C (A, B dense; C sparse). The *BufferSize functions return the
 * bytes of device buffer the product needs; the product takes that buffer. */
WAVERT_MGPU_EXPORT intptr_t mgpuSpMVBufferSize(int32_t ma, void *a, void *x, void *y,
                                               int32_t ctp, void *stream);
WAVERT_MGPU_EXPORT void mgpuSpMV(int32_t ma, void *a, void *x, void *y, int32_t ctp, void *buf,
                                 void *stream);
WAVERT_MGPU_EXPORT intptr_t mgpuSpMMBufferSize(int32_t ma, int32_t mb, void *a, void *b,
                                               void *c, int32_t ctp, void *stream);
WAVERT_MGPU_EXPORT void mgpuSpMM(int32_t ma, int32_t mb, void *a, void *b, void *c, int32_t ctp,
                                 void *buf, void *stream);
WAVERT_MGPU_EXPORT intptr_t mgpuSDDMMBufferSize(int32_t ma, int32_t mb, void *a, void *b,
                                                void *c, int32_t ctp, void *stream);
WAVERT_MGPU_EXPORT void mgpuSDDMM(int32_t ma, int32_t mb, void *a, void *b, void *c,
                                  int32_t ctp, void *buf, void *stream);

/* SpGEMM C = op(A) op(B) (all CSR) in cuSPARSE's phases: work estimation and compute take a
 * buffer of `bs` bytes (0 and NULL to ask) and return the bytes they need; copy writes C's
 * arrays (set with mgpuSetCsrPointers after mgpuSpMatGetSize). */
WAVERT_MGPU_EXPORT void *mgpuSpGEMMCreateDescr(void *stream);
WAVERT_MGPU_EXPORT void mgpuSpGEMMDestroyDescr(void *descr, void *stream);
WAVERT_MGPU_EXPORT intptr_t mgpuSpGEMMWorkEstimation(void *descr, int32_t ma, int32_t mb,
                                                     void *a, void *b, void *c, int32_t ctp,
                                                     intptr_t bs, void *buf, void *stream);
WAVERT_MGPU_EXPORT intptr_t mgpuSpGEMMCompute(void *descr, int32_t ma, int32_t mb, void *a,
                                              void *b, void *c, int32_t ctp, intptr_t bs,
                                              void *buf, void *stream);
WAVERT_MGPU_EXPORT void mgpuSpGEMMCopy(void *descr, int32_t ma, int32_t mb, void *a, void *b,
                                       void *c, int32_t ctp, void *stream);

/* cuSPARSELt 2:4 structured SpMM (cuSPARSELt >= 0.5). The matrices live in memory MLIR
 * allocates, 16-byte aligned: 44104 bytes for the sparse A (mgpuCusparseLtCreate2To4SpMat),
 * 11032 for a dense one (mgpuCreateCuSparseLtDnMat). mgpuCuSparseLtSpMMBufferSize plans
 * C = A B + C, prunes A in place when prune_flag is 1 or 2, checks that A is 2:4 when it is 2
 * (WAVERT_ERROR_INVALID_ARGUMENT if not; this synchronises the stream), and writes three int64
 * byte counts to `bs`: workspace, compressed A, compression buffer. mgpuCuSparseLtSpMM
 * compresses A into those buffers and multiplies (alpha = beta = 1.0f). `ctp` is MLIR's
 * compute type, 0 (16-bit float) or 1 (32-bit integer) as cuSPARSELt 0.4/0.5 number them;
 * libwavert passes the loaded library's own value (0.6 and later renumbered the enum;
 * upstream passes the integer unchanged). The plan and algorithm selection are released by
 * mgpuDestroyCuSparseLtSpMat (upstream releases the plan in mgpuCuSparseLtSpMM). libwavert
 * remembers the matrices it made: using or destroying memory that holds none (never made,
 * destroyed already) is WAVERT_ERROR_INVALID_ARGUMENT, and the library is not called. */
WAVERT_MGPU_EXPORT void mgpuCreateSparseLtEnv(void);
WAVERT_MGPU_EXPORT void mgpuDestroySparseLtEnv(void);
WAVERT_MGPU_EXPORT void mgpuCreateCuSparseLtDnMat(void *dh, intptr_t rows, intptr_t cols,
                                                  void *values, int32_t dtp, void *stream);
WAVERT_MGPU_EXPORT void mgpuDestroyCuSparseLtDnMat(void *dh, void *stream);
WAVERT_MGPU_EXPORT void mgpuCusparseLtCreate2To4SpMat(void *sh, intptr_t rows, intptr_t cols,
                                                      void *values, int32_t dtp, void *stream);
WAVERT_MGPU_EXPORT void mgpuDestroyCuSparseLtSpMat(void *sh, void *stream);
WAVERT_MGPU_EXPORT void mgpuCuSparseLtSpMMBufferSize(void *bs, int32_t ma, int32_t mb, void *a,
                                                     void *b, void *c, int32_t ctp,
                                                     int32_t prune_flag, void *stream);
WAVERT_MGPU_EXPORT void mgpuCuSparseLtSpMM(void *a, void *b, void *c, void *workspace,
                                           void *compressed, void *compress_buffer,
                                           void *stream);

#ifdef __cplusplus
}
#endif
#endif /* WAVERT_MGPU_H */
