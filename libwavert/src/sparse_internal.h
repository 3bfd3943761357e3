/*
 * sparse_internal.h — what the sparse tensor storage (sparse_storage.c) needs from the file
 * reader (sparse_file.c). Internal; not installed.
 */
#ifndef WAVERT_SPARSE_INTERNAL_H
#define WAVERT_SPARSE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "wavert_sparse_file.h"

/* The most levels / dimensions a sparse tensor or file may have. */
#define WAVERT__SPARSE_MAX_RANK 64

/* Report a failure of a sparse runtime function: recorded as the host call's first error
 * inside a call; outside one, the thread's last error unless an earlier one is pending. */
void wavert__sparse_fail(wavert_status status, const char *format, ...) WAVERT__PRINTF(2, 3);

/* The bytes of an element of PrimaryType `value_type` (1..10; 0 for any other). */
size_t wavert__sparse_value_bytes(uint32_t value_type);

/* Live reader `handle`'s rank, dimension sizes (the reader's array) and NSE: 1, or 0 (error
 * reported, `function` named) when it is not a live reader. */
int wavert__sparse_reader_header(const char *function, void *handle, uint64_t *out_rank,
                                 const uint64_t **out_dims, uint64_t *out_nse);

/* ReadToBuffers with `crd_bytes`-byte coordinates and values of `value_type`: 1 (sorted),
 * 0 (not sorted) or -1 (error reported). */
int wavert__sparse_reader_read(void *handle, wavert_memref_1d *dim2lvl,
                               wavert_memref_1d *coordinates,
                               wavert_memref_1d *values, size_t crd_bytes,
                               uint32_t value_type, const char *function);

#endif /* WAVERT_SPARSE_INTERNAL_H */
