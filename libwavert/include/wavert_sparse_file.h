/*
 * wavert_sparse_file.h — ABI for host code from MLIR's sparsifier: the sparse tensor file
 * reader of MLIR's sparse runtime (SparseTensorRuntime.h), which `sparse_tensor.new` of a file
 * name lowers to, implemented by libwavert (src/sparse_file.c).
 *
 * Names, argument types and meaning follow MLIR release 22's runtime, so host code from the
 * unmodified sparsifier (enable-runtime-library=false, and the reader part of =true) links
 * against libwavert instead of libmlir_c_runner_utils. `index` is uint64_t; memrefs are
 * MLIR's 1-D descriptors (wavert_memref_1d), passed by address as
 * `llvm.emit_c_interface` passes them.
 *
 * Formats. The file name chooses it, as upstream: a name containing ".mtx" is Matrix Market
 * (header `%%MatrixMarket matrix coordinate FIELD SYMMETRY`, case-insensitive; FIELD real,
 * integer, complex or pattern; SYMMETRY general or symmetric, the latter square only; `%`
 * comment lines and blank lines, then `ROWS COLS NSE`, then NSE lines `I J [VALUE]`); a name
 * containing ".tns" is extended FROSTT (`#` comment lines, `RANK NSE`, a line of RANK
 * dimension sizes, then NSE lines of RANK coordinates and a value). Coordinates are 1-based
 * decimal integers within their dimension; values are C's strtod syntax. A symmetric file is
 * read as stored (its IsSymmetric bit says so; upstream's readToBuffers does not mirror
 * entries either). Duplicate coordinates are kept as they are.
 *
 * Limits (a file beyond them is an error, never an allocation): rank 1..64, each dimension
 * size below 2^28 (generated code allocates dense levels from it unchecked), NSE at most the
 * product of the dimension sizes and at most what the file's remaining bytes can hold (each
 * entry needs two bytes per coordinate), lines of at most 4095 characters.
 *
 * Errors. Upstream prints and exits the process; libwavert records the error as the mgpu*
 * functions do (wavert_mgpu.h): inside a host call the first error is the call's (pywave raises
 * it as an ArgumentError when the call returns, and generated code returns early after each
 * of these calls); outside a call it is the thread's last error unless an earlier one is still
 * pending. A failed function returns NULL, 0 or false and writes no output memref except as
 * said. Every status is WAVERT_ERROR_INVALID_ARGUMENT (the file, the environment or an
 * argument is wrong) or WAVERT_ERROR_OUT_OF_MEMORY. Messages name the function, the file and
 * the line.
 *
 * Readers are opaque handles, registered while alive: a NULL, released or foreign reader
 * argument is an error, never dereferenced. A reader is thread-compatible (one thread at a
 * time); different readers are independent.
 */
#ifndef WAVERT_SPARSE_FILE_H
#define WAVERT_SPARSE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wavert.h" /* wavert_memref_1d */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define WAVERT_SPARSE_FILE_EXPORT __declspec(dllexport)
#else
#define WAVERT_SPARSE_FILE_EXPORT __attribute__((visibility("default")))
#endif

/* The 1-D memrefs here are wavert_memref_1d (wavert.h); the element type is the function's
 * (index = uint64_t, or as named by the ReadToBuffers suffix). Buffers are the caller's and
 * are not kept. */

/* MLIR's PrimaryType: the element type a reader is asked for (createCheckedSparseTensorReader's
 * `value_type`). */
enum {
  WAVERT_SPARSE_F64 = 1, WAVERT_SPARSE_F32 = 2, WAVERT_SPARSE_F16 = 3, WAVERT_SPARSE_BF16 = 4,
  WAVERT_SPARSE_I64 = 5, WAVERT_SPARSE_I32 = 6, WAVERT_SPARSE_I16 = 7, WAVERT_SPARSE_I8 = 8,
  WAVERT_SPARSE_C64 = 9, WAVERT_SPARSE_C32 = 10
};

/* The value of environment variable TENSOR<id> (upstream's convention for test inputs), or
 * NULL (error) when it is not set. Borrowed from the environment. */
WAVERT_SPARSE_FILE_EXPORT char *getTensorFilename(uint64_t id);

/* Open `filename` (NUL-terminated) and read its header. `dim_shape` (index) holds the
 * tensor type's dimension sizes, 0 for a dynamic one: the file's rank must be its size and
 * each static size must equal the file's. `value_type` (PrimaryType) must be one the file's
 * field converts to: pattern to any; integer to any real type (not complex); real to
 * f64/f32/f16/bf16; complex to c64/c32; FROSTT (no field) to any real type. Returns an owned
 * reader released by delSparseTensorReader, or NULL. */
WAVERT_SPARSE_FILE_EXPORT void *_mlir_ciface_createCheckedSparseTensorReader(
    char *filename, wavert_memref_1d *dim_shape, uint32_t value_type);

/* The file's dimension sizes as an index memref of the file's rank, written to `out`; its
 * buffer is the reader's (valid until delSparseTensorReader). For a reader that is not alive
 * (a failed createCheckedSparseTensorReader's NULL), an error, and `out` an empty memref
 * whose buffer holds 64 zeros, which code that reads on without checking may read. */
WAVERT_SPARSE_FILE_EXPORT void _mlir_ciface_getSparseTensorReaderDimSizes(
    wavert_memref_1d *out, void *reader);

/* The file's rank, number of stored entries and symmetry (Matrix Market `symmetric`). */
WAVERT_SPARSE_FILE_EXPORT uint64_t getSparseTensorReaderDimRank(void *reader);
WAVERT_SPARSE_FILE_EXPORT uint64_t getSparseTensorReaderNSE(void *reader);
WAVERT_SPARSE_FILE_EXPORT bool getSparseTensorReaderIsSymmetric(void *reader);

/* Read the NSE entries (once per reader; the file is closed after) into `coordinates`
 * (lvl_rank coordinates per entry, entry after entry, lvl_rank = dim2lvl's size; at least
 * lvl_rank * NSE elements of the suffix's overhead type) and `values` (at least NSE elements
 * of the value type), both compact. Coordinates are 0-based and mapped to levels by `dim2lvl`
 * (index, MLIR's encoding: level l is dimension dim2lvl[l], or dimension i floordiv / mod c
 * for the floor / mod encodings); `lvl2dim` is not needed and may be anything. A level
 * coordinate that does not fit the overhead type, a value that does not fit an integer value
 * type, and every malformed line are errors. Returns whether the entries are in
 * lexicographic level order. A pattern file's values are 1 (complex: 1 + 0i). On failure the
 * buffers, once checked, hold zeros (coordinates within every level, for code that goes on
 * without returning); the reader stays alive for delSparseTensorReader.
 * Suffixes: overhead 0 (index), 64, 32, 16, 8 (unsigned); values F64, F32, F16, BF16 (the
 * 16-bit patterns, rounded to nearest even), I64, I32, I16, I8, C64, C32 (re, im pairs). */
#define WAVERT_SPARSE_READ_TO_BUFFERS(C, V)                                                   \
  WAVERT_SPARSE_FILE_EXPORT bool _mlir_ciface_getSparseTensorReaderReadToBuffers##C##V(       \
      void *reader, wavert_memref_1d *dim2lvl, wavert_memref_1d *lvl2dim,      \
      wavert_memref_1d *coordinates, wavert_memref_1d *values);
#define WAVERT_SPARSE_READ_TO_BUFFERS_V(C)                                                    \
  WAVERT_SPARSE_READ_TO_BUFFERS(C, F64) WAVERT_SPARSE_READ_TO_BUFFERS(C, F32)                 \
  WAVERT_SPARSE_READ_TO_BUFFERS(C, F16) WAVERT_SPARSE_READ_TO_BUFFERS(C, BF16)                \
  WAVERT_SPARSE_READ_TO_BUFFERS(C, I64) WAVERT_SPARSE_READ_TO_BUFFERS(C, I32)                 \
  WAVERT_SPARSE_READ_TO_BUFFERS(C, I16) WAVERT_SPARSE_READ_TO_BUFFERS(C, I8)                  \
  WAVERT_SPARSE_READ_TO_BUFFERS(C, C64) WAVERT_SPARSE_READ_TO_BUFFERS(C, C32)
WAVERT_SPARSE_READ_TO_BUFFERS_V(0)
WAVERT_SPARSE_READ_TO_BUFFERS_V(64)
WAVERT_SPARSE_READ_TO_BUFFERS_V(32)
WAVERT_SPARSE_READ_TO_BUFFERS_V(16)
WAVERT_SPARSE_READ_TO_BUFFERS_V(8)
#undef WAVERT_SPARSE_READ_TO_BUFFERS_V
#undef WAVERT_SPARSE_READ_TO_BUFFERS

/* Close the file (if still open) and free the reader. Accepts NULL; a reader that is not
 * alive (released already) is an error, not a double free. */
WAVERT_SPARSE_FILE_EXPORT void delSparseTensorReader(void *reader);

#ifdef __cplusplus
}
#endif

#endif /* WAVERT_SPARSE_FILE_H */
