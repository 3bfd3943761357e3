/*
 * fake_cusparse.h — the test-only stand-in for libcusparse and libcusparseLt (fake_cusparse.c):
 * what it records and how tests steer it. Tests link it and point $WAVERT_CUSPARSE_LIBRARY and
 * $WAVERT_CUSPARSELT_LIBRARY at the same file. It works on fake_cuda's "device" memory (host
 * memory) and records the context current (fake_cuda) when a handle is created.
 */
#ifndef WAVERT_FAKE_CUSPARSE_H
#define WAVERT_FAKE_CUSPARSE_H

#include <stddef.h>
#include <stdint.h>

/* A descriptor as the fake keeps it (cusparse*Descr_t and cuSPARSELt matrices). */
typedef struct fake_cusparse_descr {
  int kind; /* 'v' dense vector, 'd' dense matrix, 'o' COO, 'r' CSR, 'c' CSC, 'b' BSR */
  int64_t rows, cols, nnz, ld, row_block, col_block;
  void *positions, *indices, *values;
  int position_type, index_type, base, value_type, order;
} fake_cusparse_descr;

/* The last product (SpMV, SpMM, SDDMM, SpGEMM phase, cuSPARSELt matmul). */
typedef struct fake_cusparse_product {
  char name[48];
  void *handle;
  void *stream; /* the handle's stream at the call (cuSPARSELt: the stream argument) */
  int op_a, op_b, compute_type, algorithm;
  const void *a, *b, *c;
  double alpha, beta; /* decoded with compute_type */
  void *buffer;
  size_t buffer_size; /* SpGEMM phases: the size passed in */
} fake_cusparse_product;

/* Forget the call log (settings and live objects are kept). */
void fake_cusparse_reset(void);
/* Calls of entry point `name` since the last reset. */
int fake_cusparse_calls(const char *name);
/* The next call of `name` returns `status` (once). */
void fake_cusparse_fail_next(const char *name, int status);
/* Live cuSPARSE handles, descriptors (vectors, dense and sparse matrices), SpGEMM descriptors;
 * cuSPARSELt handles, matrix descriptors and plans. */
int fake_cusparse_live_handles(void);
int fake_cusparse_live_descriptors(void);
int fake_cusparse_live_spgemm(void);
int fake_cusparselt_live_handles(void);
int fake_cusparselt_live_matrices(void);
int fake_cusparselt_live_plans(void);
/* Live cuSPARSELt algorithm selections (cusparseLtAlgSelectionDestroy, as in 0.8). */
int fake_cusparselt_live_algs(void);
/* What cusparseLtGetVersion reports (default 700: 0.7.0, the 32I, 16F, 32F compute types). */
void fake_cusparselt_set_version(int version);
/* The context current when the last cuSPARSE / cuSPARSELt handle was created. */
void *fake_cusparse_handle_context(void);
/* The stream bound to the last cuSPARSE handle created ((void *)-1 when it is destroyed). */
void *fake_cusparse_bound_stream(void);
/* What a cuSPARSE descriptor holds (NULL for an unknown one). */
const fake_cusparse_descr *fake_cusparse_descr_of(const void *descriptor);
/* What the cuSPARSELt matrix in `memory` holds (its descriptor bytes), NULL if not initialised. */
const fake_cusparse_descr *fake_cusparselt_matrix_of(const void *memory);
const fake_cusparse_product *fake_cusparse_last_product(void);
/* Buffer size the *_bufferSize / SpGEMM / cuSPARSELt size queries report (default 256). */
void fake_cusparse_set_buffer_size(size_t bytes);
/* Value cusparseLtSpMMAPruneCheck writes (0: 2:4, default). */
void fake_cusparselt_set_prune_valid(int value);

#endif /* WAVERT_FAKE_CUSPARSE_H */
