/*
 * wavert_sparse_storage.h — ABI for host code from MLIR's sparsifier with
 * enable-runtime-library=true: the tensor storage of MLIR's sparse runtime
 * (SparseTensorRuntime.h), implemented by libwavert (src/sparse_storage.c) for tensors of
 * dense, compressed and singleton levels: CSR, CSC, DCSR, COO, BSR, dense.
 *
 * Names, argument types and meaning follow MLIR release 22's runtime; `index` is uint64_t,
 * memrefs are MLIR's descriptors passed by address (wavert_memref_1d from
 * wavert_sparse_file.h; wavert_sparse_memref_0d for one value). Tensors are opaque handles,
 * registered while alive (a NULL, released or foreign tensor is an error, never
 * dereferenced); one thread at a time per tensor.
 *
 * Errors are recorded as the file reader's are (wavert_sparse_file.h): the host call's first
 * error, generated code returning early; INVALID_ARGUMENT for bad arguments and data,
 * UNSUPPORTED for level types and actions libwavert does not implement, OUT_OF_MEMORY.
 * A buffer holds at most 2^31 elements.
 */
#ifndef WAVERT_SPARSE_STORAGE_H
#define WAVERT_SPARSE_STORAGE_H

#include <stdbool.h>
#include <stdint.h>

#include "wavert_sparse_file.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MLIR's 0-D memref descriptor: one value at aligned + offset elements. */
typedef struct wavert_sparse_memref_0d {
  void *allocated;
  void *aligned;
  int64_t offset;
} wavert_sparse_memref_0d;

/* A new tensor of dim_sizes' rank and lvl_sizes' levels, level l of type lvl_types[l]
 * (MLIR 22's LevelType: 0x10000 dense, 0x40000 compressed, 0x80000 singleton, each of the
 * last two possibly non-unique (+1) or non-ordered (+2); batch, loose compressed and n:m levels
 * are UNSUPPORTED), positions / coordinates of OverheadType pos_type / crd_type (0 index,
 * 1 u64, 2 u32, 3 u16, 4 u8), values of PrimaryType value_type. `action` (MLIR 22's Action)
 * 0 (kEmpty): no entries yet, filled by lexInsert<V> and finished by endLexInsert;
 * 1 (kFromReader): the entries of the reader `ptr`
 * (createCheckedSparseTensorReader; not released here) mapped to levels by dim2lvl (the
 * reader's encoding); 3 (kSortCOOInPlace): returns the tensor `ptr` itself (of the same
 * levels and value type), finished, whose entries are sorted already; 2 (kPack, from
 * sparse_tensor.assemble): a finished tensor holding copies of the caller's buffers, `ptr`
 * an array of pointers: positions then coordinates of each compressed level, for a trailing
 * COO (a non-unique compressed level, then singleton levels to the last) its positions and
 * its coordinates as an array of structures, then the values; dense levels take none
 * (upstream's order and sizes: n + 1 positions under a parent of size n, as many
 * coordinates as the last position says). Positions that decrease or coordinates not below
 * their level's size are INVALID_ARGUMENT; a singleton level outside a trailing COO is
 * UNSUPPORTED, as upstream. Any other action is INVALID_ARGUMENT. Entries are sorted into the
 * levels (a stable sort); two at the same coordinates are an error under unique levels.
 * `lvl2dim` is not used. Owned (kEmpty, kFromReader, kPack); released by delSparseTensor. */
WAVERT_SPARSE_FILE_EXPORT void *_mlir_ciface_newSparseTensor(
    wavert_memref_1d *dim_sizes, wavert_memref_1d *lvl_sizes,
    wavert_memref_1d *lvl_types, wavert_memref_1d *dim2lvl,
    wavert_memref_1d *lvl2dim, uint32_t pos_type, uint32_t crd_type,
    uint32_t value_type, uint32_t action, void *ptr);

/* Level l's size; dimension d's size (0 with an error for a bad tensor or index). */
WAVERT_SPARSE_FILE_EXPORT uint64_t sparseLvlSize(void *tensor, uint64_t l);
WAVERT_SPARSE_FILE_EXPORT uint64_t sparseDimSize(void *tensor, uint64_t d);

/* Borrowed views of the tensor's buffers (valid until delSparseTensor), written to `out`:
 * the positions / coordinates of compressed level `l` (the suffix's width must be the
 * tensor's: 0 and 64 are 8 bytes) and the values (the suffix must be the tensor's type).
 * A tensor still taking insertions is finished first. On failure `out` is an empty memref.
 * sparseCoordinatesBuffer<P>: the coordinates of levels l.. of a trailing COO (a (loose)
 * compressed level l followed by singleton levels only) interleaved, entry by entry (what
 * sparse_tensor.print and disassemble read); a copy valid until the next call or
 * delSparseTensor. */
#define WAVERT_SPARSE_OVERHEAD_ACCESSORS(P)                                                   \
  WAVERT_SPARSE_FILE_EXPORT void _mlir_ciface_sparsePositions##P(                             \
      wavert_memref_1d *out, void *tensor, uint64_t l);                               \
  WAVERT_SPARSE_FILE_EXPORT void _mlir_ciface_sparseCoordinates##P(                           \
      wavert_memref_1d *out, void *tensor, uint64_t l);                               \
  WAVERT_SPARSE_FILE_EXPORT void _mlir_ciface_sparseCoordinatesBuffer##P(                     \
      wavert_memref_1d *out, void *tensor, uint64_t l);
WAVERT_SPARSE_OVERHEAD_ACCESSORS(0)
WAVERT_SPARSE_OVERHEAD_ACCESSORS(64)
WAVERT_SPARSE_OVERHEAD_ACCESSORS(32)
WAVERT_SPARSE_OVERHEAD_ACCESSORS(16)
WAVERT_SPARSE_OVERHEAD_ACCESSORS(8)
#undef WAVERT_SPARSE_OVERHEAD_ACCESSORS

/* sparseValues<V>, and lexInsert<V>: add the entry at level coordinates `lvl_coords` (index,
 * one per level, each below its level's size) with the value `value` to a tensor made empty
 * (in any order: they are sorted when the tensor is finished). */
#define WAVERT_SPARSE_VALUE_ACCESSORS(V)                                                      \
  WAVERT_SPARSE_FILE_EXPORT void _mlir_ciface_sparseValues##V(wavert_memref_1d *out,   \
                                                              void *tensor);                 \
  WAVERT_SPARSE_FILE_EXPORT void _mlir_ciface_lexInsert##V(                                   \
      void *tensor, wavert_memref_1d *lvl_coords, wavert_sparse_memref_0d *value);
WAVERT_SPARSE_VALUE_ACCESSORS(F64)
WAVERT_SPARSE_VALUE_ACCESSORS(F32)
WAVERT_SPARSE_VALUE_ACCESSORS(F16)
WAVERT_SPARSE_VALUE_ACCESSORS(BF16)
WAVERT_SPARSE_VALUE_ACCESSORS(I64)
WAVERT_SPARSE_VALUE_ACCESSORS(I32)
WAVERT_SPARSE_VALUE_ACCESSORS(I16)
WAVERT_SPARSE_VALUE_ACCESSORS(I8)
WAVERT_SPARSE_VALUE_ACCESSORS(C64)
WAVERT_SPARSE_VALUE_ACCESSORS(C32)
#undef WAVERT_SPARSE_VALUE_ACCESSORS

/* Finish the insertions: build the levels. */
WAVERT_SPARSE_FILE_EXPORT void endLexInsert(void *tensor);

/* Release the tensor and its buffers. Accepts NULL; a released tensor is an error. */
WAVERT_SPARSE_FILE_EXPORT void delSparseTensor(void *tensor);

#ifdef __cplusplus
}
#endif

#endif /* WAVERT_SPARSE_STORAGE_H */
