/*
 * fake_cusparse.c — a recording stand-in for libcusparse and libcusparseLt, built only for the
 * tests. It exports the entry points libwavert's sparse.c uses (cuSPARSE 12.1-like: no
 * cusparseCreateCooAoS), keeps descriptors in a registry so that double or unknown destroys
 * fail, computes SpMV for a CSR (32-bit indices) f64 matrix on fake_cuda's host-memory "device"
 * memory, records products, and can fail a chosen call once.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cuda.h"
#include "fake_cusparse.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_LOG 4096
#define MAX_LIVE 256
#define LIVE_MAGIC 0x5ba75eu

typedef int status_t;
enum { SUCCESS = 0, NOT_INITIALIZED = 1, ALLOC_FAILED = 2, INVALID_VALUE = 3 };

typedef struct {
  void *stream;
} fake_handle;

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static const char *log_names[MAX_LOG];
static int log_count;
static char fail_name[64];
static status_t fail_status;
static void *live[MAX_LIVE]; /* handles, descriptors, SpGEMM descriptors */
static char live_kind[MAX_LIVE];
static int lt_handles, lt_matrices, lt_plans, lt_algs;
static int lt_version = 700; /* cusparseLtGetVersion: 0.7.0 */
static void *handle_context;
static fake_handle *last_handle; /* the last cuSPARSE handle created, while it lives */
static fake_cusparse_product last_product;
static size_t buffer_size = 256;
static int prune_valid;

static status_t note(const char *name) {
  status_t result = SUCCESS;
  pthread_mutex_lock(&mutex);
  if (log_count < MAX_LOG) log_names[log_count++] = name;
  if (fail_name[0] != '\0' && strcmp(fail_name, name) == 0) {
    result = fail_status;
    fail_name[0] = '\0';
  }
  pthread_mutex_unlock(&mutex);
  return result;
}

#define NOTE(name)                          \
  do {                                      \
    status_t injected_ = note(name);        \
    if (injected_ != SUCCESS) return injected_; \
  } while (0)

/* Registry of live objects: 'h' handle, 'D' descriptor, 'g' SpGEMM descriptor. */
static int live_add(void *object, char kind) {
  pthread_mutex_lock(&mutex);
  int added = 0;
  for (int i = 0; i < MAX_LIVE && !added; ++i)
    if (live[i] == NULL) {
      live[i] = object;
      live_kind[i] = kind;
      added = 1;
    }
  pthread_mutex_unlock(&mutex);
  return added;
}

static int live_has(const void *object, char kind) {
  pthread_mutex_lock(&mutex);
  int found = 0;
  for (int i = 0; i < MAX_LIVE; ++i) found |= live[i] == object && live_kind[i] == kind;
  pthread_mutex_unlock(&mutex);
  return found && object != NULL;
}

static int live_remove(void *object, char kind) {
  pthread_mutex_lock(&mutex);
  int found = 0;
  for (int i = 0; i < MAX_LIVE && !found; ++i)
    if (live[i] == object && live_kind[i] == kind && object != NULL) {
      live[i] = NULL;
      found = 1;
    }
  pthread_mutex_unlock(&mutex);
  return found;
}

static int live_count(char kind) {
  pthread_mutex_lock(&mutex);
  int n = 0;
  for (int i = 0; i < MAX_LIVE; ++i) n += live[i] != NULL && live_kind[i] == kind;
  pthread_mutex_unlock(&mutex);
  return n;
}

/* ---- test controls ------------------------------------------------------------------------ */

EXPORT void fake_cusparse_reset(void) {
  pthread_mutex_lock(&mutex);
  log_count = 0;
  memset(&last_product, 0, sizeof(last_product));
  pthread_mutex_unlock(&mutex);
}

EXPORT int fake_cusparse_calls(const char *name) {
  int n = 0;
  pthread_mutex_lock(&mutex);
  for (int i = 0; i < log_count; ++i) n += strcmp(log_names[i], name) == 0;
  pthread_mutex_unlock(&mutex);
  return n;
}

EXPORT void fake_cusparse_fail_next(const char *name, int status) {
  pthread_mutex_lock(&mutex);
  snprintf(fail_name, sizeof(fail_name), "%s", name);
  fail_status = status;
  pthread_mutex_unlock(&mutex);
}

EXPORT int fake_cusparse_live_handles(void) { return live_count('h'); }
EXPORT int fake_cusparse_live_descriptors(void) { return live_count('D'); }
EXPORT int fake_cusparse_live_spgemm(void) { return live_count('g'); }
EXPORT int fake_cusparselt_live_handles(void) { return lt_handles; }
EXPORT int fake_cusparselt_live_matrices(void) { return lt_matrices; }
EXPORT int fake_cusparselt_live_plans(void) { return lt_plans; }
EXPORT int fake_cusparselt_live_algs(void) { return lt_algs; }
EXPORT void fake_cusparselt_set_version(int version) { lt_version = version; }
EXPORT void *fake_cusparse_handle_context(void) { return handle_context; }
EXPORT void *fake_cusparse_bound_stream(void) {
  return last_handle != NULL ? last_handle->stream : (void *)(uintptr_t)-1;
}
EXPORT const fake_cusparse_product *fake_cusparse_last_product(void) { return &last_product; }
EXPORT void fake_cusparse_set_buffer_size(size_t bytes) { buffer_size = bytes; }
EXPORT void fake_cusparselt_set_prune_valid(int value) { prune_valid = value; }

EXPORT const fake_cusparse_descr *fake_cusparse_descr_of(const void *descriptor) {
  return live_has(descriptor, 'D') ? descriptor : NULL;
}

/* ---- cuSPARSE: handles and descriptors ---------------------------------------------------- */

EXPORT const char *cusparseGetErrorString(status_t status) {
  return status == INVALID_VALUE ? "invalid value (fake)" : "fake cuSPARSE error";
}

EXPORT status_t cusparseCreate(fake_handle **out) {
  NOTE("cusparseCreate");
  fake_handle *handle = calloc(1, sizeof(*handle));
  if (handle == NULL || !live_add(handle, 'h')) return ALLOC_FAILED;
  handle_context = fake_cuda_current_context();
  last_handle = handle;
  *out = handle;
  return SUCCESS;
}

EXPORT status_t cusparseDestroy(fake_handle *handle) {
  NOTE("cusparseDestroy");
  if (!live_remove(handle, 'h')) return NOT_INITIALIZED;
  if (handle == last_handle) last_handle = NULL;
  free(handle);
  return SUCCESS;
}

EXPORT status_t cusparseSetStream(fake_handle *handle, void *stream) {
  NOTE("cusparseSetStream");
  if (!live_has(handle, 'h')) return NOT_INITIALIZED;
  handle->stream = stream;
  return SUCCESS;
}

static status_t new_descr(fake_cusparse_descr **out, fake_cusparse_descr fields) {
  if (out == NULL || fields.rows < 0 || fields.cols < 0 || fields.nnz < 0) return INVALID_VALUE;
  fake_cusparse_descr *d = malloc(sizeof(*d));
  if (d == NULL) return ALLOC_FAILED;
  *d = fields;
  if (!live_add(d, 'D')) {
    free(d);
    return ALLOC_FAILED;
  }
  *out = d;
  return SUCCESS;
}

static status_t destroy_descr(fake_cusparse_descr *d) {
  if (!live_remove(d, 'D')) return INVALID_VALUE;
  free(d);
  return SUCCESS;
}

EXPORT status_t cusparseCreateDnVec(fake_cusparse_descr **out, int64_t size, void *values,
                                    int type) {
  NOTE("cusparseCreateDnVec");
  return new_descr(out, (fake_cusparse_descr){.kind = 'v', .rows = size, .cols = 1,
                                              .values = values, .value_type = type});
}

EXPORT status_t cusparseDestroyDnVec(fake_cusparse_descr *d) {
  NOTE("cusparseDestroyDnVec");
  return destroy_descr(d);
}

EXPORT status_t cusparseCreateDnMat(fake_cusparse_descr **out, int64_t rows, int64_t cols,
                                    int64_t ld, void *values, int type, int order) {
  NOTE("cusparseCreateDnMat");
  return new_descr(out, (fake_cusparse_descr){.kind = 'd', .rows = rows, .cols = cols, .ld = ld,
                                              .values = values, .value_type = type,
                                              .order = order});
}

EXPORT status_t cusparseDestroyDnMat(fake_cusparse_descr *d) {
  NOTE("cusparseDestroyDnMat");
  return destroy_descr(d);
}

EXPORT status_t cusparseCreateCoo(fake_cusparse_descr **out, int64_t rows, int64_t cols,
                                  int64_t nnz, void *row_idxs, void *col_idxs, void *values,
                                  int index_type, int base, int type) {
  NOTE("cusparseCreateCoo");
  return new_descr(out, (fake_cusparse_descr){.kind = 'o', .rows = rows, .cols = cols,
                                              .nnz = nnz, .positions = row_idxs,
                                              .indices = col_idxs, .values = values,
                                              .index_type = index_type, .base = base,
                                              .value_type = type});
}

static status_t create_compressed(int kind, fake_cusparse_descr **out, int64_t rows,
                                  int64_t cols, int64_t nnz, void *positions, void *indices,
                                  void *values, int position_type, int index_type, int base,
                                  int type) {
  return new_descr(out, (fake_cusparse_descr){.kind = kind, .rows = rows, .cols = cols,
                                              .nnz = nnz, .positions = positions,
                                              .indices = indices, .values = values,
                                              .position_type = position_type,
                                              .index_type = index_type, .base = base,
                                              .value_type = type});
}

EXPORT status_t cusparseCreateCsr(fake_cusparse_descr **out, int64_t rows, int64_t cols,
                                  int64_t nnz, void *positions, void *indices, void *values,
                                  int position_type, int index_type, int base, int type) {
  NOTE("cusparseCreateCsr");
  return create_compressed('r', out, rows, cols, nnz, positions, indices, values, position_type,
                           index_type, base, type);
}

EXPORT status_t cusparseCreateCsc(fake_cusparse_descr **out, int64_t rows, int64_t cols,
                                  int64_t nnz, void *positions, void *indices, void *values,
                                  int position_type, int index_type, int base, int type) {
  NOTE("cusparseCreateCsc");
  return create_compressed('c', out, rows, cols, nnz, positions, indices, values, position_type,
                           index_type, base, type);
}

EXPORT status_t cusparseCreateBsr(fake_cusparse_descr **out, int64_t brows, int64_t bcols,
                                  int64_t bnnz, int64_t row_block, int64_t col_block,
                                  void *positions, void *indices, void *values,
                                  int position_type, int index_type, int base, int type,
                                  int order) {
  NOTE("cusparseCreateBsr");
  return new_descr(out, (fake_cusparse_descr){.kind = 'b', .rows = brows, .cols = bcols,
                                              .nnz = bnnz, .row_block = row_block,
                                              .col_block = col_block, .positions = positions,
                                              .indices = indices, .values = values,
                                              .position_type = position_type,
                                              .index_type = index_type, .base = base,
                                              .value_type = type, .order = order});
}

EXPORT status_t cusparseDestroySpMat(fake_cusparse_descr *d) {
  NOTE("cusparseDestroySpMat");
  return destroy_descr(d);
}

EXPORT status_t cusparseSpMatGetSize(fake_cusparse_descr *d, int64_t *rows, int64_t *cols,
                                     int64_t *nnz) {
  NOTE("cusparseSpMatGetSize");
  if (!live_has(d, 'D')) return INVALID_VALUE;
  *rows = d->rows;
  *cols = d->cols;
  *nnz = d->nnz;
  return SUCCESS;
}

EXPORT status_t cusparseCsrSetPointers(fake_cusparse_descr *d, void *positions, void *indices,
                                       void *values) {
  NOTE("cusparseCsrSetPointers");
  if (!live_has(d, 'D') || d->kind != 'r') return INVALID_VALUE;
  d->positions = positions;
  d->indices = indices;
  d->values = values;
  return SUCCESS;
}

/* ---- cuSPARSE: products ------------------------------------------------------------------- */

/* The real part of a scalar of cudaDataType `type` (half and bfloat16 for 1.0 only). */
static double decode(const void *scalar, int type) {
  switch (type) {
    case 0: case 4: return *(const float *)scalar;
    case 1: case 5: return *(const double *)scalar;
    case 10: case 11: return *(const int32_t *)scalar;
    case 2: case 6: return *(const uint16_t *)scalar == 0x3C00 ? 1.0 : -999.0;
    case 14: case 15: return *(const uint16_t *)scalar == 0x3F80 ? 1.0 : -999.0;
    default: return -1000.0;
  }
}

static status_t record(const char *name, fake_handle *handle, int op_a, int op_b,
                       const void *alpha, const void *a, const void *b, const void *beta,
                       const void *c, int compute, int algorithm, void *buffer, size_t size) {
  if (!live_has(handle, 'h')) return NOT_INITIALIZED;
  if (!live_has(a, 'D') || !live_has(b, 'D') || !live_has(c, 'D')) return INVALID_VALUE;
  pthread_mutex_lock(&mutex);
  last_product = (fake_cusparse_product){.handle = handle, .stream = handle->stream,
                                         .op_a = op_a, .op_b = op_b, .compute_type = compute,
                                         .algorithm = algorithm, .a = a, .b = b, .c = c,
                                         .alpha = decode(alpha, compute),
                                         .beta = decode(beta, compute), .buffer = buffer,
                                         .buffer_size = size};
  snprintf(last_product.name, sizeof(last_product.name), "%s", name);
  pthread_mutex_unlock(&mutex);
  return SUCCESS;
}

EXPORT status_t cusparseSpMV_bufferSize(fake_handle *h, int op, const void *alpha,
                                        const void *a, const void *x, const void *beta,
                                        void *y, int compute, int algorithm, size_t *size) {
  NOTE("cusparseSpMV_bufferSize");
  status_t s = record("cusparseSpMV_bufferSize", h, op, -1, alpha, a, x, beta, y, compute,
                      algorithm, NULL, 0);
  if (s == SUCCESS) *size = buffer_size;
  return s;
}

/* y = alpha A x + beta y for CSR A with 32-bit positions and indices, all f64. */
static void spmv_csr_f64(const fake_cusparse_descr *a, const fake_cusparse_descr *x,
                         const fake_cusparse_descr *y, double alpha, double beta) {
  const int32_t *pos = a->positions, *idx = a->indices;
  const double *val = a->values, *xv = x->values;
  double *yv = y->values;
  for (int64_t i = 0; i < a->rows; ++i) {
    double sum = 0.0;
    for (int32_t k = pos[i]; k < pos[i + 1]; ++k) sum += val[k] * xv[idx[k]];
    yv[i] = alpha * sum + beta * yv[i];
  }
}

EXPORT status_t cusparseSpMV(fake_handle *h, int op, const void *alpha, const void *a,
                             const void *x, const void *beta, void *y, int compute,
                             int algorithm, void *buffer) {
  NOTE("cusparseSpMV");
  status_t s = record("cusparseSpMV", h, op, -1, alpha, a, x, beta, y, compute, algorithm,
                      buffer, 0);
  const fake_cusparse_descr *ma = a, *vx = x, *vy = y;
  if (s == SUCCESS && op == 0 && ma->kind == 'r' && ma->position_type == 2 &&
      ma->index_type == 2 && ma->value_type == 1 && vx->value_type == 1 && compute == 1)
    spmv_csr_f64(ma, vx, vy, *(const double *)alpha, *(const double *)beta);
  return s;
}

#define PRODUCT_PAIR(query, run)                                                              \
  EXPORT status_t query(fake_handle *h, int op_a, int op_b, const void *alpha, const void *a, \
                        const void *b, const void *beta, void *c, int compute, int algorithm, \
                        size_t *size) {                                                      \
    NOTE(#query);                                                                            \
    status_t s = record(#query, h, op_a, op_b, alpha, a, b, beta, c, compute, algorithm, NULL, \
                        0);                                                                  \
    if (s == SUCCESS) *size = buffer_size;                                                   \
    return s;                                                                                \
  }                                                                                          \
  EXPORT status_t run(fake_handle *h, int op_a, int op_b, const void *alpha, const void *a,   \
                      const void *b, const void *beta, void *c, int compute, int algorithm,   \
                      void *buffer) {                                                        \
    NOTE(#run);                                                                              \
    return record(#run, h, op_a, op_b, alpha, a, b, beta, c, compute, algorithm, buffer, 0);  \
  }
PRODUCT_PAIR(cusparseSpMM_bufferSize, cusparseSpMM)
PRODUCT_PAIR(cusparseSDDMM_bufferSize, cusparseSDDMM)
#undef PRODUCT_PAIR

EXPORT status_t cusparseSpGEMM_createDescr(void **out) {
  NOTE("cusparseSpGEMM_createDescr");
  void *d = malloc(16);
  if (d == NULL || !live_add(d, 'g')) return ALLOC_FAILED;
  *out = d;
  return SUCCESS;
}

EXPORT status_t cusparseSpGEMM_destroyDescr(void *d) {
  NOTE("cusparseSpGEMM_destroyDescr");
  if (!live_remove(d, 'g')) return INVALID_VALUE;
  free(d);
  return SUCCESS;
}

/* Work estimation / compute: report buffer_size when asked (NULL buffer), else take it. */
#define SPGEMM_PHASE(name)                                                                    \
  EXPORT status_t name(fake_handle *h, int op_a, int op_b, const void *alpha, const void *a,  \
                       const void *b, const void *beta, void *c, int compute, int algorithm,  \
                       void *descr, size_t *size, void *buffer) {                            \
    NOTE(#name);                                                                             \
    if (!live_has(descr, 'g')) return INVALID_VALUE;                                         \
    status_t s = record(#name, h, op_a, op_b, alpha, a, b, beta, c, compute, algorithm,      \
                        buffer, *size);                                                      \
    if (s == SUCCESS && buffer == NULL) *size = buffer_size;                                 \
    return s;                                                                                \
  }
SPGEMM_PHASE(cusparseSpGEMM_workEstimation)
SPGEMM_PHASE(cusparseSpGEMM_compute)
#undef SPGEMM_PHASE

EXPORT status_t cusparseSpGEMM_copy(fake_handle *h, int op_a, int op_b, const void *alpha,
                                    const void *a, const void *b, const void *beta, void *c,
                                    int compute, int algorithm, void *descr) {
  NOTE("cusparseSpGEMM_copy");
  if (!live_has(descr, 'g')) return INVALID_VALUE;
  return record("cusparseSpGEMM_copy", h, op_a, op_b, alpha, a, b, beta, c, compute, algorithm,
                NULL, 0);
}

/* ---- cuSPARSELt (opaque objects in caller memory) ---------------------------------------- */

/* What the fake writes at the start of an initialised cuSPARSELt object. */
typedef struct {
  unsigned magic;
  fake_cusparse_descr descr;
} lt_object;

static int lt_live(const void *object) {
  return object != NULL && ((const lt_object *)object)->magic == LIVE_MAGIC;
}

EXPORT const fake_cusparse_descr *fake_cusparselt_matrix_of(const void *memory) {
  return lt_live(memory) ? &((const lt_object *)memory)->descr : NULL;
}

EXPORT status_t cusparseLtInit(void *handle) {
  NOTE("cusparseLtInit");
  ((lt_object *)handle)->magic = LIVE_MAGIC;
  handle_context = fake_cuda_current_context();
  lt_handles += 1;
  return SUCCESS;
}

EXPORT status_t cusparseLtDestroy(void *handle) {
  NOTE("cusparseLtDestroy");
  if (!lt_live(handle)) return NOT_INITIALIZED;
  ((lt_object *)handle)->magic = 0;
  lt_handles -= 1;
  return SUCCESS;
}

static status_t lt_matrix_init(const void *handle, void *mat, int kind, int64_t rows,
                               int64_t cols, int64_t ld, int type, int order) {
  if (!lt_live(handle)) return NOT_INITIALIZED;
  /* cuSPARSELt wants zeroed descriptor memory: the fake checks a byte past its own. */
  if (lt_live(mat) || ((const unsigned char *)mat)[1000] != 0) return INVALID_VALUE;
  lt_object *object = mat;
  object->magic = LIVE_MAGIC;
  object->descr = (fake_cusparse_descr){.kind = kind, .rows = rows, .cols = cols, .ld = ld,
                                        .value_type = type, .order = order};
  lt_matrices += 1;
  return SUCCESS;
}

EXPORT status_t cusparseLtDenseDescriptorInit(const void *handle, void *mat, int64_t rows,
                                              int64_t cols, int64_t ld, uint32_t alignment,
                                              int type, int order) {
  NOTE("cusparseLtDenseDescriptorInit");
  if (alignment != 16) return INVALID_VALUE;
  return lt_matrix_init(handle, mat, 'd', rows, cols, ld, type, order);
}

EXPORT status_t cusparseLtStructuredDescriptorInit(const void *handle, void *mat, int64_t rows,
                                                   int64_t cols, int64_t ld, uint32_t alignment,
                                                   int type, int order, int sparsity) {
  NOTE("cusparseLtStructuredDescriptorInit");
  if (alignment != 16 || sparsity != 0) return INVALID_VALUE;
  return lt_matrix_init(handle, mat, 's', rows, cols, ld, type, order);
}

EXPORT status_t cusparseLtMatDescriptorDestroy(void *mat) {
  NOTE("cusparseLtMatDescriptorDestroy");
  if (!lt_live(mat)) return INVALID_VALUE;
  ((lt_object *)mat)->magic = 0;
  lt_matrices -= 1;
  return SUCCESS;
}

EXPORT status_t cusparseLtMatmulDescriptorInit(const void *handle, void *matmul, int op_a,
                                               int op_b, const void *a, const void *b,
                                               const void *c, const void *d, int compute) {
  NOTE("cusparseLtMatmulDescriptorInit");
  if (!lt_live(handle) || !lt_live(a) || !lt_live(b) || !lt_live(c) || !lt_live(d))
    return INVALID_VALUE;
  lt_object *object = matmul;
  object->magic = LIVE_MAGIC;
  object->descr = (fake_cusparse_descr){.kind = 'm', .rows = op_a, .cols = op_b,
                                        .value_type = compute};
  return SUCCESS;
}

EXPORT status_t cusparseLtMatmulAlgSelectionInit(const void *handle, void *selection,
                                                 const void *matmul, int algorithm) {
  NOTE("cusparseLtMatmulAlgSelectionInit");
  if (!lt_live(handle) || !lt_live(matmul) || algorithm != 0 || lt_live(selection))
    return INVALID_VALUE;
  ((lt_object *)selection)->magic = LIVE_MAGIC;
  lt_algs += 1;
  return SUCCESS;
}

EXPORT status_t cusparseLtAlgSelectionDestroy(void *selection) {
  NOTE("cusparseLtAlgSelectionDestroy");
  if (!lt_live(selection)) return INVALID_VALUE;
  ((lt_object *)selection)->magic = 0;
  lt_algs -= 1;
  return SUCCESS;
}

EXPORT status_t cusparseLtGetVersion(const void *handle, int *version) {
  NOTE("cusparseLtGetVersion");
  if (!lt_live(handle)) return NOT_INITIALIZED;
  *version = lt_version;
  return SUCCESS;
}

EXPORT status_t cusparseLtMatmulAlgSetAttribute(const void *handle, void *selection,
                                                int attribute, const void *data, size_t size) {
  NOTE("cusparseLtMatmulAlgSetAttribute");
  if (!lt_live(handle) || !lt_live(selection) || attribute != 0 || size != sizeof(int) ||
      *(const int *)data != 0)
    return INVALID_VALUE;
  return SUCCESS;
}

EXPORT status_t cusparseLtMatmulPlanInit(const void *handle, void *plan, const void *matmul,
                                         const void *selection) {
  NOTE("cusparseLtMatmulPlanInit");
  if (!lt_live(handle) || !lt_live(matmul) || !lt_live(selection) || lt_live(plan))
    return INVALID_VALUE;
  ((lt_object *)plan)->magic = LIVE_MAGIC;
  lt_plans += 1;
  return SUCCESS;
}

EXPORT status_t cusparseLtMatmulPlanDestroy(void *plan) {
  NOTE("cusparseLtMatmulPlanDestroy");
  if (!lt_live(plan)) return INVALID_VALUE;
  ((lt_object *)plan)->magic = 0;
  lt_plans -= 1;
  return SUCCESS;
}

EXPORT status_t cusparseLtMatmulGetWorkspace(const void *handle, const void *plan,
                                             size_t *size) {
  NOTE("cusparseLtMatmulGetWorkspace");
  if (!lt_live(handle) || !lt_live(plan)) return INVALID_VALUE;
  *size = buffer_size;
  return SUCCESS;
}

EXPORT status_t cusparseLtSpMMACompressedSize(const void *handle, const void *plan,
                                              size_t *compressed, size_t *compress_buffer) {
  NOTE("cusparseLtSpMMACompressedSize");
  if (!lt_live(handle) || !lt_live(plan)) return INVALID_VALUE;
  *compressed = buffer_size + 1;
  *compress_buffer = buffer_size + 2;
  return SUCCESS;
}

EXPORT status_t cusparseLtSpMMAPrune(const void *handle, const void *matmul, const void *in,
                                     void *out, int algorithm, void *stream) {
  NOTE("cusparseLtSpMMAPrune");
  (void)in, (void)out, (void)stream;
  if (!lt_live(handle) || !lt_live(matmul) || algorithm != 1) return INVALID_VALUE;
  return SUCCESS;
}

EXPORT status_t cusparseLtSpMMAPruneCheck(const void *handle, const void *matmul,
                                          const void *in, int *valid, void *stream) {
  NOTE("cusparseLtSpMMAPruneCheck");
  (void)in, (void)stream;
  if (!lt_live(handle) || !lt_live(matmul) || valid == NULL) return INVALID_VALUE;
  *valid = prune_valid; /* fake_cuda's device memory is host memory */
  return SUCCESS;
}

EXPORT status_t cusparseLtSpMMACompress(const void *handle, const void *plan, const void *dense,
                                        void *compressed, void *buffer, void *stream) {
  NOTE("cusparseLtSpMMACompress");
  (void)dense, (void)compressed, (void)buffer, (void)stream;
  if (!lt_live(handle) || !lt_live(plan)) return INVALID_VALUE;
  return SUCCESS;
}

EXPORT status_t cusparseLtMatmul(const void *handle, const void *plan, const void *alpha,
                                 const void *a, const void *b, const void *beta, const void *c,
                                 void *d, void *workspace, void **streams, int32_t count) {
  NOTE("cusparseLtMatmul");
  if (!lt_live(handle) || !lt_live(plan) || d != c) return INVALID_VALUE;
  pthread_mutex_lock(&mutex);
  last_product = (fake_cusparse_product){.handle = (void *)handle,
                                         .stream = count > 0 ? streams[0] : NULL,
                                         .a = a, .b = b, .c = c,
                                         .alpha = *(const float *)alpha,
                                         .beta = *(const float *)beta, .buffer = workspace};
  snprintf(last_product.name, sizeof(last_product.name), "cusparseLtMatmul");
  pthread_mutex_unlock(&mutex);
  return SUCCESS;
}
