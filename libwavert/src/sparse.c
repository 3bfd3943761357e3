/*
 * sparse.c — the sparse part of MLIR's mgpu* runtime ABI (wavert_mgpu.h): cuSPARSE's generic
 * API (SpMV, SpMM, SDDMM, SpGEMM on COO/CSR/CSC/BSR matrices) and cuSPARSELt's 2:4 structured
 * SpMM, as MLIR's sparsifier (`enable-gpu-libgen`) and gpu-to-llvm call them.
 *
 * libcusparse and libcusparseLt are opened with dlopen on first use ($WAVERT_CUSPARSE_LIBRARY /
 * $WAVERT_CUSPARSELT_LIBRARY, else the sonames — which also finds a copy already loaded, e.g.
 * by torch from NVIDIA's wheels — else lib64/ of $CUDA_HOME, $CUDA_PATH and /usr/local/cuda);
 * the few types and enums used are declared here (no SDK at build time). A library that cannot
 * be opened is an error of the call that needed it, recorded like every mgpu* error.
 *
 * Environments: one cuSPARSE handle and one cuSPARSELt handle per CUDA device, created by
 * mgpuCreateSparse[Lt]Env or by the first operation that needs one, released by
 * mgpuDestroySparse[Lt]Env. Every use holds `env_mutex` (a cuSPARSE handle must not be used by
 * two threads at once) and first binds the handle to the operation's stream.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "mgpu_internal.h"
#include "wavert_mgpu.h"

/* ---- cuSPARSE / cuSPARSELt declarations (cusparse.h, cusparseLt.h) ----------------------- */

typedef int cusparseStatus_t;
typedef struct cusparseContext *cusparseHandle_t;
typedef struct cusparseSpMatDescr *cusparseSpMatDescr_t;
typedef struct cusparseDnMatDescr *cusparseDnMatDescr_t;
typedef struct cusparseDnVecDescr *cusparseDnVecDescr_t;
typedef struct cusparseSpGEMMDescr *cusparseSpGEMMDescr_t;

enum { CUSPARSE_STATUS_SUCCESS = 0, CUSPARSE_STATUS_ALLOC_FAILED = 2 };
/* cusparseIndexType_t */
enum { CUSPARSE_INDEX_16U = 1, CUSPARSE_INDEX_32I = 2, CUSPARSE_INDEX_64I = 3 };
enum { CUSPARSE_INDEX_BASE_ZERO = 0 };
enum { CUSPARSE_ORDER_COL = 1, CUSPARSE_ORDER_ROW = 2 };
/* cusparseOperation_t: NON_TRANSPOSE, TRANSPOSE, CONJUGATE_TRANSPOSE. */
enum { CUSPARSE_OPERATION_LAST = 2 };
/* The default algorithm of SpMV, SpMM, SDDMM and SpGEMM. */
enum { CUSPARSE_ALG_DEFAULT = 0 };
/* cudaDataType_t (library_types.h) values that have a scalar "one" below. */
enum {
  CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_C_32F = 4, CUDA_C_64F = 5,
  CUDA_C_16F = 6, CUDA_R_32I = 10, CUDA_C_32I = 11, CUDA_R_16BF = 14, CUDA_C_16BF = 15,
};
/* cusparseLtSparsity_t, cusparseLtMatmulAlg_t, cusparseLtMatmulAlgAttribute_t,
 * cusparseLtPruneAlg_t */
enum {
  CUSPARSELT_SPARSITY_50_PERCENT = 0,
  CUSPARSELT_MATMUL_ALG_DEFAULT = 0,
  CUSPARSELT_MATMUL_ALG_CONFIG_ID = 0,
  CUSPARSELT_PRUNE_SPMMA_STRIP = 1,
};

/* cuSPARSE entry points: always present in cuSPARSE 11.2 and later. */
#define SPARSE_SYMBOLS(X)                                                                     \
  X(create, "cusparseCreate", (cusparseHandle_t *))                                          \
  X(destroy, "cusparseDestroy", (cusparseHandle_t))                                          \
  X(set_stream, "cusparseSetStream", (cusparseHandle_t, void *))                             \
  X(create_dn_vec, "cusparseCreateDnVec", (cusparseDnVecDescr_t *, int64_t, void *, int))    \
  X(destroy_dn_vec, "cusparseDestroyDnVec", (cusparseDnVecDescr_t))                          \
  X(create_dn_mat, "cusparseCreateDnMat",                                                    \
    (cusparseDnMatDescr_t *, int64_t, int64_t, int64_t, void *, int, int))                   \
  X(destroy_dn_mat, "cusparseDestroyDnMat", (cusparseDnMatDescr_t))                          \
  X(create_coo, "cusparseCreateCoo",                                                         \
    (cusparseSpMatDescr_t *, int64_t, int64_t, int64_t, void *, void *, void *, int, int, int)) \
  X(create_csr, "cusparseCreateCsr",                                                         \
    (cusparseSpMatDescr_t *, int64_t, int64_t, int64_t, void *, void *, void *, int, int, int, \
     int))                                                                                   \
  X(create_csc, "cusparseCreateCsc",                                                         \
    (cusparseSpMatDescr_t *, int64_t, int64_t, int64_t, void *, void *, void *, int, int, int, \
     int))                                                                                   \
  X(destroy_sp_mat, "cusparseDestroySpMat", (cusparseSpMatDescr_t))                          \
  X(spmv_buffer_size, "cusparseSpMV_bufferSize",                                             \
    (cusparseHandle_t, int, const void *, cusparseSpMatDescr_t, cusparseDnVecDescr_t,        \
     const void *, cusparseDnVecDescr_t, int, int, size_t *))                                \
  X(spmv, "cusparseSpMV",                                                                    \
    (cusparseHandle_t, int, const void *, cusparseSpMatDescr_t, cusparseDnVecDescr_t,        \
     const void *, cusparseDnVecDescr_t, int, int, void *))                                  \
  X(spmm_buffer_size, "cusparseSpMM_bufferSize",                                             \
    (cusparseHandle_t, int, int, const void *, cusparseSpMatDescr_t, cusparseDnMatDescr_t,   \
     const void *, cusparseDnMatDescr_t, int, int, size_t *))                                \
  X(spmm, "cusparseSpMM",                                                                    \
    (cusparseHandle_t, int, int, const void *, cusparseSpMatDescr_t, cusparseDnMatDescr_t,   \
     const void *, cusparseDnMatDescr_t, int, int, void *))                                  \
  X(sddmm_buffer_size, "cusparseSDDMM_bufferSize",                                           \
    (cusparseHandle_t, int, int, const void *, cusparseDnMatDescr_t, cusparseDnMatDescr_t,   \
     const void *, cusparseSpMatDescr_t, int, int, size_t *))                                \
  X(sddmm, "cusparseSDDMM",                                                                  \
    (cusparseHandle_t, int, int, const void *, cusparseDnMatDescr_t, cusparseDnMatDescr_t,   \
     const void *, cusparseSpMatDescr_t, int, int, void *))                                  \
  X(spgemm_create_descr, "cusparseSpGEMM_createDescr", (cusparseSpGEMMDescr_t *))            \
  X(spgemm_destroy_descr, "cusparseSpGEMM_destroyDescr", (cusparseSpGEMMDescr_t))            \
  X(spgemm_work_estimation, "cusparseSpGEMM_workEstimation",                                 \
    (cusparseHandle_t, int, int, const void *, cusparseSpMatDescr_t, cusparseSpMatDescr_t,   \
     const void *, cusparseSpMatDescr_t, int, int, cusparseSpGEMMDescr_t, size_t *, void *)) \
  X(spgemm_compute, "cusparseSpGEMM_compute",                                                \
    (cusparseHandle_t, int, int, const void *, cusparseSpMatDescr_t, cusparseSpMatDescr_t,   \
     const void *, cusparseSpMatDescr_t, int, int, cusparseSpGEMMDescr_t, size_t *, void *)) \
  X(spgemm_copy, "cusparseSpGEMM_copy",                                                      \
    (cusparseHandle_t, int, int, const void *, cusparseSpMatDescr_t, cusparseSpMatDescr_t,   \
     const void *, cusparseSpMatDescr_t, int, int, cusparseSpGEMMDescr_t))                   \
  X(sp_mat_get_size, "cusparseSpMatGetSize",                                                 \
    (cusparseSpMatDescr_t, int64_t *, int64_t *, int64_t *))                                 \
  X(csr_set_pointers, "cusparseCsrSetPointers", (cusparseSpMatDescr_t, void *, void *, void *))

/* cuSPARSELt entry points (0.5 and later: two compressed sizes, no plan workspace). Every
 * opaque object is passed by address. */
#define SPARSELT_SYMBOLS(X)                                                                   \
  X(init, "cusparseLtInit", (void *))                                                        \
  X(destroy, "cusparseLtDestroy", (const void *))                                            \
  X(dense_init, "cusparseLtDenseDescriptorInit",                                             \
    (const void *, void *, int64_t, int64_t, int64_t, uint32_t, int, int))                   \
  X(structured_init, "cusparseLtStructuredDescriptorInit",                                   \
    (const void *, void *, int64_t, int64_t, int64_t, uint32_t, int, int, int))              \
  X(mat_destroy, "cusparseLtMatDescriptorDestroy", (const void *))                           \
  X(matmul_init, "cusparseLtMatmulDescriptorInit",                                           \
    (const void *, void *, int, int, const void *, const void *, const void *, const void *, \
     int))                                                                                   \
  X(alg_init, "cusparseLtMatmulAlgSelectionInit", (const void *, void *, const void *, int)) \
  X(alg_set, "cusparseLtMatmulAlgSetAttribute",                                              \
    (const void *, void *, int, const void *, size_t))                                       \
  X(plan_init, "cusparseLtMatmulPlanInit", (const void *, void *, const void *, const void *)) \
  X(plan_destroy, "cusparseLtMatmulPlanDestroy", (const void *))                             \
  X(get_workspace, "cusparseLtMatmulGetWorkspace", (const void *, const void *, size_t *))   \
  X(compressed_size, "cusparseLtSpMMACompressedSize",                                        \
    (const void *, const void *, size_t *, size_t *))                                        \
  X(prune, "cusparseLtSpMMAPrune",                                                           \
    (const void *, const void *, const void *, void *, int, void *))                         \
  X(prune_check, "cusparseLtSpMMAPruneCheck",                                                \
    (const void *, const void *, const void *, int *, void *))                               \
  X(compress, "cusparseLtSpMMACompress",                                                     \
    (const void *, const void *, const void *, void *, void *, void *))                      \
  X(matmul, "cusparseLtMatmul",                                                              \
    (const void *, const void *, const void *, const void *, const void *, const void *,     \
     const void *, void *, void *, void **, int32_t))

#define DECLARE(field, symbol, args) cusparseStatus_t (*field) args;
static struct {
  SPARSE_SYMBOLS(DECLARE)
  /* Absent from some releases: COO AoS was removed in CUDA 12.0, BSR came in 12.1. */
  cusparseStatus_t (*create_coo_aos)(cusparseSpMatDescr_t *, int64_t, int64_t, int64_t, void *,
                                     void *, int, int, int);
  cusparseStatus_t (*create_bsr)(cusparseSpMatDescr_t *, int64_t, int64_t, int64_t, int64_t,
                                 int64_t, void *, void *, void *, int, int, int, int, int);
  const char *(*error_string)(cusparseStatus_t);
} sp;
static struct {
  SPARSELT_SYMBOLS(DECLARE)
  /* cusparseLtGetVersion (major * 1000 + minor * 100 + patch); cusparseLtAlgSelectionDestroy
   * (0.8 and later, where an algorithm selection holds resources). NULL when absent. */
  cusparseStatus_t (*get_version)(const void *, int *);
  cusparseStatus_t (*alg_destroy)(const void *);
} lt;
#undef DECLARE

/* Bytes MLIR's lowering reserves for each cuSPARSELt object (cusparseLtHandle_t,
 * ...MatDescriptor_t, ...MatmulAlgSelection_t, ...MatmulPlan_t, ...MatmulDescriptor_t): the
 * size of cuSPARSELt 0.4's objects; later releases' are smaller. */
#define LT_OBJECT_BYTES 11024

/* The memory MLIR's lowering allocates (16-byte aligned) for a 2:4 sparse matrix (44104 bytes)
 * and for a dense matrix (11032 bytes) and passes to the cuSPARSELt entry points. */
typedef struct {
  unsigned char mat[LT_OBJECT_BYTES];
  unsigned char alg_sel[LT_OBJECT_BYTES];
  unsigned char plan[LT_OBJECT_BYTES];
  unsigned char matmul[LT_OBJECT_BYTES];
  void *values;
} lt_sp_mat;
typedef struct {
  unsigned char mat[LT_OBJECT_BYTES];
  void *values;
} lt_dn_mat;
_Static_assert(sizeof(lt_sp_mat) == 44104, "MLIR's cuSPARSELt sparse matrix size");
_Static_assert(sizeof(lt_dn_mat) == 11032, "MLIR's cuSPARSELt dense matrix size");

/* ---- libraries --------------------------------------------------------------------------- */

typedef struct {
  const char *what;    /* "cuSPARSE", for messages */
  const char *library; /* "the cuSPARSE", for wavert__open_library's message */
  const char *env;
  const char *const *names;
  pthread_mutex_t mutex;
  int tried;
  wavert_status status; /* of the first (final) attempt */
  char message[768];
} sparse_library;

static const char *const sparse_names[] = {"libcusparse.so.12", "libcusparse.so.13",
                                           "libcusparse.so.11", "libcusparse.so", NULL};
static const char *const sparselt_names[] = {"libcusparseLt.so.0", "libcusparseLt.so", NULL};
static sparse_library sparse_lib = {"cuSPARSE", "the cuSPARSE", "WAVERT_CUSPARSE_LIBRARY",
                                    sparse_names, PTHREAD_MUTEX_INITIALIZER, 0, WAVERT_OK, ""};
static sparse_library sparselt_lib = {"cuSPARSELt", "the cuSPARSELt",
                                      "WAVERT_CUSPARSELT_LIBRARY", sparselt_names,
                                      PTHREAD_MUTEX_INITIALIZER, 0, WAVERT_OK, ""};

/* dlopen the first of `names` found in lib64/, lib/ or targets/x86_64-linux/lib/ of $CUDA_HOME,
 * $CUDA_PATH or /usr/local/cuda (in that order). */
static void *open_in_toolkits(const char *const *names) {
  const char *roots[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
  const char *folders[] = {"lib64", "lib", "targets/x86_64-linux/lib"};
  char path[4096];
  for (size_t r = 0; r < sizeof(roots) / sizeof(roots[0]); ++r) {
    if (roots[r] == NULL || roots[r][0] == '\0') continue;
    for (size_t f = 0; f < sizeof(folders) / sizeof(folders[0]); ++f)
      for (size_t n = 0; names[n] != NULL; ++n) {
        int length = snprintf(path, sizeof(path), "%s/%s/%s", roots[r], folders[f], names[n]);
        if (length <= 0 || (size_t)length >= sizeof(path)) continue;
        void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (handle != NULL) return handle;
      }
  }
  return NULL;
}

static wavert_status resolve_sparse(void *handle) {
#define RESOLVE(field, symbol, args)                                                        \
  if ((*(void **)&sp.field = dlsym(handle, symbol)) == NULL)                                \
    return wavert__error(WAVERT_ERROR_UNAVAILABLE,                                          \
                         "the cuSPARSE library has no symbol %s (cuSPARSE 11.2 or later is " \
                         "needed)",                                                         \
                         symbol);
  SPARSE_SYMBOLS(RESOLVE)
#undef RESOLVE
  *(void **)&sp.create_coo_aos = dlsym(handle, "cusparseCreateCooAoS");
  *(void **)&sp.create_bsr = dlsym(handle, "cusparseCreateBsr");
  *(void **)&sp.error_string = dlsym(handle, "cusparseGetErrorString");
  return WAVERT_OK;
}

static wavert_status resolve_sparselt(void *handle) {
#define RESOLVE(field, symbol, args)                                                        \
  if ((*(void **)&lt.field = dlsym(handle, symbol)) == NULL)                                \
    return wavert__error(WAVERT_ERROR_UNAVAILABLE,                                          \
                         "the cuSPARSELt library has no symbol %s (cuSPARSELt 0.5 or later " \
                         "is needed)",                                                      \
                         symbol);
  SPARSELT_SYMBOLS(RESOLVE)
#undef RESOLVE
  *(void **)&lt.get_version = dlsym(handle, "cusparseLtGetVersion");
  *(void **)&lt.alg_destroy = dlsym(handle, "cusparseLtAlgSelectionDestroy");
  return WAVERT_OK;
}

/* Open `library` and resolve its symbols, once; a failure is final and reported again (with
 * its first message) by every later call. */
static wavert_status library_open(sparse_library *library,
                                  wavert_status (*resolve)(void *handle)) {
  pthread_mutex_lock(&library->mutex);
  if (!library->tried) {
    library->tried = 1;
    void *handle = NULL;
    wavert_status status = wavert__open_library(library->library, library->env, library->names,
                                                &handle);
    const char *override = getenv(library->env);
    if (status != WAVERT_OK && (override == NULL || override[0] == '\0')) {
      if ((handle = open_in_toolkits(library->names)) != NULL) {
        status = WAVERT_OK;
      } else {
        char first[512];
        snprintf(first, sizeof(first), "%s", wavert_last_error());
        wavert__error(status, "%s; nor in lib64/ of $CUDA_HOME, $CUDA_PATH or /usr/local/cuda",
                      first);
      }
    }
    if (status == WAVERT_OK) status = resolve(handle);
    library->status = status;
    if (status != WAVERT_OK) {
      snprintf(library->message, sizeof(library->message), "%s", wavert_last_error());
      if (handle != NULL) dlclose(handle);
    }
  }
  wavert_status status = library->status;
  pthread_mutex_unlock(&library->mutex);
  if (status != WAVERT_OK) return wavert__error(status, "%s", library->message);
  return WAVERT_OK;
}

/* ---- one entry point's operation -------------------------------------------------------- */

typedef struct {
  const char *name; /* the mgpu* entry point, for messages */
  wavert__mgpu_scope scope;
  void *saved; /* the caller's context (entered is 1) */
  int entered;
  void *stream; /* the operation's stream: the argument, else the call's */
  int failed;
} operation;

#define OP_FAIL(o, status, ...) \
  ((o)->failed = 1, (void)wavert__call_record(wavert__error((status), __VA_ARGS__)))

static const char *const status_names[] = {
    "CUSPARSE_STATUS_SUCCESS",          "CUSPARSE_STATUS_NOT_INITIALIZED",
    "CUSPARSE_STATUS_ALLOC_FAILED",     "CUSPARSE_STATUS_INVALID_VALUE",
    "CUSPARSE_STATUS_ARCH_MISMATCH",    "CUSPARSE_STATUS_MAPPING_ERROR",
    "CUSPARSE_STATUS_EXECUTION_FAILED", "CUSPARSE_STATUS_INTERNAL_ERROR",
    "CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED", "CUSPARSE_STATUS_ZERO_PIVOT",
    "CUSPARSE_STATUS_NOT_SUPPORTED",    "CUSPARSE_STATUS_INSUFFICIENT_RESOURCES",
};

/* 1 when `result` is success; else the error "ENTRY: CALL: STATUS (code, text)" recorded. */
static int op_check(operation *o, const char *call, cusparseStatus_t result) {
  if (result == CUSPARSE_STATUS_SUCCESS) return 1;
  const char *name = result > 0 && (size_t)result < sizeof(status_names) / sizeof(status_names[0])
                         ? status_names[result]
                         : "CUSPARSE_STATUS_UNKNOWN";
  const char *text = sp.error_string != NULL ? sp.error_string(result) : NULL;
  OP_FAIL(o, result == CUSPARSE_STATUS_ALLOC_FAILED ? WAVERT_ERROR_OUT_OF_MEMORY
                                                    : WAVERT_ERROR_DRIVER,
          "%s: %s: %s (%d%s%s)", o->name, call, name, (int)result, text ? ", " : "",
          text ? text : "");
  return 0;
}

/* Begin entry point `name` on the scope's device (CUDA only), with `library` opened and the
 * device's context entered. 0 when it cannot run (error recorded; op_end not needed). */
static int op_begin(operation *o, const char *name, void *stream, sparse_library *library,
                    wavert_status (*resolve)(void *)) {
  memset(o, 0, sizeof(*o));
  o->name = name;
  if (!wavert__mgpu_scope_begin(&o->scope)) return 0;
  wavert_device *device = o->scope.device;
  wavert_status status = WAVERT_OK;
  if (device->backend_index != WAVERT__BACKEND_CUDA)
    status = wavert__error(WAVERT_ERROR_UNSUPPORTED,
                           "%s: %s runs on CUDA devices only; the device is a %s device", name,
                           library->what, device->backend->name);
  if (status == WAVERT_OK) status = library_open(library, resolve);
  if (status == WAVERT_OK && (status = wavert__enter(device, &o->saved)) == WAVERT_OK)
    o->entered = 1;
  if (status != WAVERT_OK) {
    if (strncmp(wavert_last_error(), name, strlen(name)) != 0) {
      char cause[900];
      snprintf(cause, sizeof(cause), "%s", wavert_last_error());
      wavert__error(status, "%s: %s", name, cause);
    }
    wavert__call_record(status);
    wavert__mgpu_scope_end(&o->scope);
    return 0;
  }
  o->stream = stream != NULL ? stream : o->scope.stream;
  return 1;
}

static void op_end(operation *o) {
  if (o->entered) wavert__leave(o->scope.device, o->saved);
  wavert__mgpu_scope_end(&o->scope);
}

static int sparse_begin(operation *o, const char *name, void *stream) {
  return op_begin(o, name, stream, &sparse_lib, resolve_sparse);
}

static int sparselt_begin(operation *o, const char *name, void *stream) {
  return op_begin(o, name, stream, &sparselt_lib, resolve_sparselt);
}

/* ---- argument checks --------------------------------------------------------------------- */

static int check_extent(operation *o, const char *what, intptr_t value) {
  if (value >= 0) return 1;
  OP_FAIL(o, WAVERT_ERROR_INVALID_ARGUMENT, "%s: %s is %lld; it must be >= 0", o->name, what,
          (long long)value);
  return 0;
}

static int check_index_type(operation *o, const char *what, int32_t type) {
  if (type >= CUSPARSE_INDEX_16U && type <= CUSPARSE_INDEX_64I) return 1;
  OP_FAIL(o, WAVERT_ERROR_INVALID_ARGUMENT,
          "%s: %s %d is not a cusparseIndexType_t (1: 16U, 2: 32I, 3: 64I)", o->name, what,
          (int)type);
  return 0;
}

static int check_mode(operation *o, const char *what, int32_t mode) {
  if (mode >= 0 && mode <= CUSPARSE_OPERATION_LAST) return 1;
  OP_FAIL(o, WAVERT_ERROR_INVALID_ARGUMENT,
          "%s: %s %d is not a cusparseOperation_t (0: non-transpose, 1: transpose, 2: "
          "conjugate transpose)",
          o->name, what, (int)mode);
  return 0;
}

static int check_handles(operation *o, const void *a, const void *b, const void *c) {
  if (a != NULL && b != NULL && c != NULL) return 1;
  OP_FAIL(o, WAVERT_ERROR_INVALID_ARGUMENT,
          "%s: a matrix or vector handle is NULL (did its creation fail?)", o->name);
  return 0;
}

/* The scalar 1 of compute type `type` (real part 1, imaginary part 0) in `out`, as the alpha and
 * beta that MLIR's sparse operations use (y = op(A) op(x) + y). */
static int scalar_one(operation *o, int32_t type, unsigned char out[16]) {
  memset(out, 0, 16);
  switch (type) {
    case CUDA_R_16F:
    case CUDA_C_16F: {
      const uint16_t one = 0x3C00; /* IEEE half 1.0 */
      memcpy(out, &one, sizeof(one));
      return 1;
    }
    case CUDA_R_16BF:
    case CUDA_C_16BF: {
      const uint16_t one = 0x3F80; /* bfloat16 1.0 */
      memcpy(out, &one, sizeof(one));
      return 1;
    }
    case CUDA_R_32F:
    case CUDA_C_32F: {
      const float one = 1.0f;
      memcpy(out, &one, sizeof(one));
      return 1;
    }
    case CUDA_R_64F:
    case CUDA_C_64F: {
      const double one = 1.0;
      memcpy(out, &one, sizeof(one));
      return 1;
    }
    case CUDA_R_32I:
    case CUDA_C_32I: {
      const int32_t one = 1;
      memcpy(out, &one, sizeof(one));
      return 1;
    }
    default:
      OP_FAIL(o, WAVERT_ERROR_INVALID_ARGUMENT,
              "%s: compute type %d is not a cudaDataType_t cuSPARSE computes in (0: R_32F, "
              "1: R_64F, 2: R_16F, 4: C_32F, 5: C_64F, 6: C_16F, 10: R_32I, 11: C_32I, "
              "14: R_16BF, 15: C_16BF)",
              o->name, (int)type);
      return 0;
  }
}

/* A size_t from the library as the intptr_t MLIR reads (0 and an error when it does not fit). */
static intptr_t to_intptr(operation *o, const char *what, size_t value) {
  if (value <= (size_t)INTPTR_MAX) return (intptr_t)value;
  OP_FAIL(o, WAVERT_ERROR_LIMIT_EXCEEDED, "%s: %s %zu bytes exceeds INTPTR_MAX", o->name, what,
          value);
  return 0;
}

/* ---- environments ------------------------------------------------------------------------ */

static pthread_mutex_t env_mutex = PTHREAD_MUTEX_INITIALIZER;
static cusparseHandle_t sparse_envs[WAVERT__MAX_DEVICES];
static void *sparselt_envs[WAVERT__MAX_DEVICES]; /* LT_OBJECT_BYTES each, initialised */

/* The device's cuSPARSE handle (created on first use) bound to the operation's stream, with
 * env_mutex held (release with env_unlock); NULL (error recorded, mutex not held) on failure. */
static cusparseHandle_t sparse_env_lock(operation *o) {
  pthread_mutex_lock(&env_mutex);
  cusparseHandle_t *slot = &sparse_envs[o->scope.device->dl.device_id];
  if (*slot == NULL) {
    cusparseHandle_t handle = NULL;
    if (!op_check(o, "cusparseCreate", sp.create(&handle))) {
      pthread_mutex_unlock(&env_mutex);
      return NULL;
    }
    *slot = handle;
  }
  if (!op_check(o, "cusparseSetStream", sp.set_stream(*slot, o->stream))) {
    pthread_mutex_unlock(&env_mutex);
    return NULL;
  }
  return *slot;
}

static void env_unlock(void) { pthread_mutex_unlock(&env_mutex); }

/* Unbind the operation's stream from `handle` (a stream the program destroys next must not stay
 * in the handle: cusparseDestroy may use it) and release env_mutex. Unbinding only sets a field
 * of the handle; its status is not an error of the operation. */
static void sparse_env_unlock(cusparseHandle_t handle) {
  (void)sp.set_stream(handle, NULL);
  env_unlock();
}

/* The device's cuSPARSELt handle (initialised on first use), env_mutex held as above. */
static void *sparselt_env_lock(operation *o) {
  pthread_mutex_lock(&env_mutex);
  void **slot = &sparselt_envs[o->scope.device->dl.device_id];
  if (*slot == NULL) {
    void *handle = aligned_alloc(16, LT_OBJECT_BYTES);
    if (handle == NULL) {
      OP_FAIL(o, WAVERT_ERROR_OUT_OF_MEMORY, "%s: out of host memory", o->name);
    } else if (!op_check(o, "cusparseLtInit", lt.init(handle))) {
      free(handle);
      handle = NULL;
    }
    if (handle == NULL) {
      pthread_mutex_unlock(&env_mutex);
      return NULL;
    }
    *slot = handle;
  }
  return *slot;
}

void mgpuCreateSparseEnv(void) {
  operation o;
  if (!sparse_begin(&o, "mgpuCreateSparseEnv", NULL)) return;
  cusparseHandle_t handle = sparse_env_lock(&o);
  if (handle != NULL) sparse_env_unlock(handle);
  op_end(&o);
}

void mgpuDestroySparseEnv(void) {
  operation o;
  if (!sparse_begin(&o, "mgpuDestroySparseEnv", NULL)) return;
  pthread_mutex_lock(&env_mutex);
  cusparseHandle_t *slot = &sparse_envs[o.scope.device->dl.device_id];
  if (*slot != NULL) {
    op_check(&o, "cusparseDestroy", sp.destroy(*slot));
    *slot = NULL; /* gone even if cusparseDestroy failed: it is not retried on a bad handle */
  }
  env_unlock();
  op_end(&o);
}

void mgpuCreateSparseLtEnv(void) {
  operation o;
  if (!sparselt_begin(&o, "mgpuCreateSparseLtEnv", NULL)) return;
  if (sparselt_env_lock(&o) != NULL) env_unlock();
  op_end(&o);
}

void mgpuDestroySparseLtEnv(void) {
  operation o;
  if (!sparselt_begin(&o, "mgpuDestroySparseLtEnv", NULL)) return;
  pthread_mutex_lock(&env_mutex);
  void **slot = &sparselt_envs[o.scope.device->dl.device_id];
  if (*slot != NULL) {
    op_check(&o, "cusparseLtDestroy", lt.destroy(*slot));
    free(*slot);
    *slot = NULL;
  }
  env_unlock();
  op_end(&o);
}

/* ---- dense descriptors -------------------------------------------------------------------- */

void *mgpuCreateDnVec(intptr_t size, void *values, int32_t dtp, void *stream) {
  operation o;
  if (!sparse_begin(&o, "mgpuCreateDnVec", stream)) return NULL;
  cusparseDnVecDescr_t vec = NULL;
  if (check_extent(&o, "size", size) &&
      !op_check(&o, "cusparseCreateDnVec", sp.create_dn_vec(&vec, size, values, dtp)))
    vec = NULL;
  op_end(&o);
  return vec;
}

void mgpuDestroyDnVec(void *vec, void *stream) {
  if (vec == NULL) return;
  operation o;
  if (!sparse_begin(&o, "mgpuDestroyDnVec", stream)) return;
  op_check(&o, "cusparseDestroyDnVec", sp.destroy_dn_vec(vec));
  op_end(&o);
}

void *mgpuCreateDnMat(intptr_t rows, intptr_t cols, void *values, int32_t dtp, void *stream) {
  operation o;
  if (!sparse_begin(&o, "mgpuCreateDnMat", stream)) return NULL;
  cusparseDnMatDescr_t mat = NULL;
  if (check_extent(&o, "rows", rows) && check_extent(&o, "cols", cols) &&
      !op_check(&o, "cusparseCreateDnMat",
                sp.create_dn_mat(&mat, rows, cols, /*ld=*/cols, values, dtp, CUSPARSE_ORDER_ROW)))
    mat = NULL;
  op_end(&o);
  return mat;
}

void mgpuDestroyDnMat(void *mat, void *stream) {
  if (mat == NULL) return;
  operation o;
  if (!sparse_begin(&o, "mgpuDestroyDnMat", stream)) return;
  op_check(&o, "cusparseDestroyDnMat", sp.destroy_dn_mat(mat));
  op_end(&o);
}

/* ---- sparse descriptors (zero-based indices) ----------------------------------------------- */

static int check_sparse_extents(operation *o, intptr_t rows, intptr_t cols, intptr_t nnz) {
  return check_extent(o, "rows", rows) && check_extent(o, "cols", cols) &&
         check_extent(o, "nnz", nnz);
}

void *mgpuCreateCoo(intptr_t rows, intptr_t cols, intptr_t nnz, void *row_idxs, void *col_idxs,
                    void *values, int32_t itp, int32_t dtp, void *stream) {
  operation o;
  if (!sparse_begin(&o, "mgpuCreateCoo", stream)) return NULL;
  cusparseSpMatDescr_t mat = NULL;
  if (check_sparse_extents(&o, rows, cols, nnz) && check_index_type(&o, "index type", itp) &&
      !op_check(&o, "cusparseCreateCoo",
                sp.create_coo(&mat, rows, cols, nnz, row_idxs, col_idxs, values, itp,
                              CUSPARSE_INDEX_BASE_ZERO, dtp)))
    mat = NULL;
  op_end(&o);
  return mat;
}

void *mgpuCreateCooAoS(intptr_t rows, intptr_t cols, intptr_t nnz, void *idxs, void *values,
                       int32_t itp, int32_t dtp, void *stream) {
  operation o;
  if (!sparse_begin(&o, "mgpuCreateCooAoS", stream)) return NULL;
  cusparseSpMatDescr_t mat = NULL;
  if (sp.create_coo_aos == NULL)
    OP_FAIL(&o, WAVERT_ERROR_UNSUPPORTED,
            "mgpuCreateCooAoS: this cuSPARSE has no cusparseCreateCooAoS (removed in CUDA "
            "12.0; use the COO layout with separate index arrays)");
  else if (check_sparse_extents(&o, rows, cols, nnz) &&
           check_index_type(&o, "index type", itp) &&
           !op_check(&o, "cusparseCreateCooAoS",
                     sp.create_coo_aos(&mat, rows, cols, nnz, idxs, values, itp,
                                       CUSPARSE_INDEX_BASE_ZERO, dtp)))
    mat = NULL;
  op_end(&o);
  return mat;
}

/* CSR (`csc` 0) or CSC (`csc` 1). */
static void *create_compressed(const char *name, int csc, intptr_t rows, intptr_t cols,
                               intptr_t nnz, void *positions, void *indices, void *values,
                               int32_t ptp, int32_t itp, int32_t dtp, void *stream) {
  operation o;
  if (!sparse_begin(&o, name, stream)) return NULL;
  cusparseSpMatDescr_t mat = NULL;
  if (check_sparse_extents(&o, rows, cols, nnz) &&
      check_index_type(&o, "position type", ptp) && check_index_type(&o, "index type", itp)) {
    cusparseStatus_t result =
        (csc ? sp.create_csc : sp.create_csr)(&mat, rows, cols, nnz, positions, indices, values,
                                              ptp, itp, CUSPARSE_INDEX_BASE_ZERO, dtp);
    if (!op_check(&o, csc ? "cusparseCreateCsc" : "cusparseCreateCsr", result)) mat = NULL;
  }
  op_end(&o);
  return mat;
}

void *mgpuCreateCsr(intptr_t rows, intptr_t cols, intptr_t nnz, void *row_pos, void *col_idxs,
                    void *values, int32_t ptp, int32_t itp, int32_t dtp, void *stream) {
  return create_compressed("mgpuCreateCsr", 0, rows, cols, nnz, row_pos, col_idxs, values, ptp,
                           itp, dtp, stream);
}

void *mgpuCreateCsc(intptr_t rows, intptr_t cols, intptr_t nnz, void *col_pos, void *row_idxs,
                    void *values, int32_t ptp, int32_t itp, int32_t dtp, void *stream) {
  return create_compressed("mgpuCreateCsc", 1, rows, cols, nnz, col_pos, row_idxs, values, ptp,
                           itp, dtp, stream);
}

void *mgpuCreateBsr(intptr_t brows, intptr_t bcols, intptr_t bnnz, intptr_t row_block,
                    intptr_t col_block, void *row_pos, void *col_idxs, void *values, int32_t ptp,
                    int32_t itp, int32_t dtp, void *stream) {
  operation o;
  if (!sparse_begin(&o, "mgpuCreateBsr", stream)) return NULL;
  cusparseSpMatDescr_t mat = NULL;
  if (sp.create_bsr == NULL)
    OP_FAIL(&o, WAVERT_ERROR_UNSUPPORTED,
            "mgpuCreateBsr: this cuSPARSE has no cusparseCreateBsr (CUDA 12.1 or later)");
  else if (check_sparse_extents(&o, brows, bcols, bnnz) &&
           check_extent(&o, "row block size", row_block) &&
           check_extent(&o, "column block size", col_block) &&
           check_index_type(&o, "position type", ptp) &&
           check_index_type(&o, "index type", itp) &&
           !op_check(&o, "cusparseCreateBsr",
                     sp.create_bsr(&mat, brows, bcols, bnnz, row_block, col_block, row_pos,
                                   col_idxs, values, ptp, itp, CUSPARSE_INDEX_BASE_ZERO, dtp,
                                   CUSPARSE_ORDER_ROW)))
    mat = NULL;
  op_end(&o);
  return mat;
}

void mgpuDestroySpMat(void *mat, void *stream) {
  if (mat == NULL) return;
  operation o;
  if (!sparse_begin(&o, "mgpuDestroySpMat", stream)) return;
  op_check(&o, "cusparseDestroySpMat", sp.destroy_sp_mat(mat));
  op_end(&o);
}

void mgpuSpMatGetSize(void *mat, void *rows, void *cols, void *nnz, void *stream) {
  operation o;
  if (!sparse_begin(&o, "mgpuSpMatGetSize", stream)) return;
  if (mat == NULL || rows == NULL || cols == NULL || nnz == NULL)
    OP_FAIL(&o, WAVERT_ERROR_INVALID_ARGUMENT,
            "mgpuSpMatGetSize: the matrix or an output pointer is NULL");
  else
    op_check(&o, "cusparseSpMatGetSize", sp.sp_mat_get_size(mat, rows, cols, nnz));
  op_end(&o);
}

void mgpuSetCsrPointers(void *mat, void *positions, void *indices, void *values, void *stream) {
  operation o;
  if (!sparse_begin(&o, "mgpuSetCsrPointers", stream)) return;
  if (mat == NULL)
    OP_FAIL(&o, WAVERT_ERROR_INVALID_ARGUMENT, "mgpuSetCsrPointers: the matrix is NULL");
  else
    op_check(&o, "cusparseCsrSetPointers", sp.csr_set_pointers(mat, positions, indices, values));
  op_end(&o);
}

/* ---- SpMV, SpMM, SDDMM --------------------------------------------------------------------- */

/* Kinds of the two-operand products below, which share their checks and handle use. */
typedef enum { PRODUCT_SPMV, PRODUCT_SPMM, PRODUCT_SDDMM } product_kind;

/* Run the product's buffer-size query (`buffer` NULL and out_size set) or the product itself
 * with `buffer`. Returns 1 on success. */
static int product(operation *o, product_kind kind, int32_t ma, int32_t mb, void *a, void *b,
                   void *c, int32_t ctp, void *buffer, size_t *out_size) {
  unsigned char alpha[16], beta[16];
  if (!check_mode(o, "mode of A", ma) ||
      (kind != PRODUCT_SPMV && !check_mode(o, "mode of B", mb)) ||
      !check_handles(o, a, b, c) || !scalar_one(o, ctp, alpha) || !scalar_one(o, ctp, beta))
    return 0;
  cusparseHandle_t handle = sparse_env_lock(o);
  if (handle == NULL) return 0;
  int ok = 0;
  switch (kind) {
    case PRODUCT_SPMV:
      ok = out_size != NULL
               ? op_check(o, "cusparseSpMV_bufferSize",
                          sp.spmv_buffer_size(handle, ma, alpha, a, b, beta, c, ctp,
                                              CUSPARSE_ALG_DEFAULT, out_size))
               : op_check(o, "cusparseSpMV",
                          sp.spmv(handle, ma, alpha, a, b, beta, c, ctp, CUSPARSE_ALG_DEFAULT,
                                  buffer));
      break;
    case PRODUCT_SPMM:
      ok = out_size != NULL
               ? op_check(o, "cusparseSpMM_bufferSize",
                          sp.spmm_buffer_size(handle, ma, mb, alpha, a, b, beta, c, ctp,
                                              CUSPARSE_ALG_DEFAULT, out_size))
               : op_check(o, "cusparseSpMM",
                          sp.spmm(handle, ma, mb, alpha, a, b, beta, c, ctp,
                                  CUSPARSE_ALG_DEFAULT, buffer));
      break;
    case PRODUCT_SDDMM:
      ok = out_size != NULL
               ? op_check(o, "cusparseSDDMM_bufferSize",
                          sp.sddmm_buffer_size(handle, ma, mb, alpha, a, b, beta, c, ctp,
                                               CUSPARSE_ALG_DEFAULT, out_size))
               : op_check(o, "cusparseSDDMM",
                          sp.sddmm(handle, ma, mb, alpha, a, b, beta, c, ctp,
                                   CUSPARSE_ALG_DEFAULT, buffer));
      break;
  }
  sparse_env_unlock(handle);
  return ok;
}

static intptr_t product_buffer_size(const char *name, product_kind kind, int32_t ma, int32_t mb,
                                    void *a, void *b, void *c, int32_t ctp, void *stream) {
  operation o;
  if (!sparse_begin(&o, name, stream)) return 0;
  size_t size = 0;
  intptr_t result = product(&o, kind, ma, mb, a, b, c, ctp, NULL, &size)
                        ? to_intptr(&o, "the buffer size", size)
                        : 0;
  op_end(&o);
  return result;
}

static void product_run(const char *name, product_kind kind, int32_t ma, int32_t mb, void *a,
                        void *b, void *c, int32_t ctp, void *buffer, void *stream) {
  operation o;
  if (!sparse_begin(&o, name, stream)) return;
  product(&o, kind, ma, mb, a, b, c, ctp, buffer, NULL);
  op_end(&o);
}

intptr_t mgpuSpMVBufferSize(int32_t ma, void *a, void *x, void *y, int32_t ctp, void *stream) {
  return product_buffer_size("mgpuSpMVBufferSize", PRODUCT_SPMV, ma, 0, a, x, y, ctp, stream);
}

void mgpuSpMV(int32_t ma, void *a, void *x, void *y, int32_t ctp, void *buffer, void *stream) {
  product_run("mgpuSpMV", PRODUCT_SPMV, ma, 0, a, x, y, ctp, buffer, stream);
}

intptr_t mgpuSpMMBufferSize(int32_t ma, int32_t mb, void *a, void *b, void *c, int32_t ctp,
                            void *stream) {
  return product_buffer_size("mgpuSpMMBufferSize", PRODUCT_SPMM, ma, mb, a, b, c, ctp, stream);
}

void mgpuSpMM(int32_t ma, int32_t mb, void *a, void *b, void *c, int32_t ctp, void *buffer,
              void *stream) {
  product_run("mgpuSpMM", PRODUCT_SPMM, ma, mb, a, b, c, ctp, buffer, stream);
}

intptr_t mgpuSDDMMBufferSize(int32_t ma, int32_t mb, void *a, void *b, void *c, int32_t ctp,
                             void *stream) {
  return product_buffer_size("mgpuSDDMMBufferSize", PRODUCT_SDDMM, ma, mb, a, b, c, ctp, stream);
}

void mgpuSDDMM(int32_t ma, int32_t mb, void *a, void *b, void *c, int32_t ctp, void *buffer,
               void *stream) {
  product_run("mgpuSDDMM", PRODUCT_SDDMM, ma, mb, a, b, c, ctp, buffer, stream);
}

/* ---- SpGEMM -------------------------------------------------------------------------------- */

void *mgpuSpGEMMCreateDescr(void *stream) {
  operation o;
  if (!sparse_begin(&o, "mgpuSpGEMMCreateDescr", stream)) return NULL;
  cusparseSpGEMMDescr_t descr = NULL;
  if (!op_check(&o, "cusparseSpGEMM_createDescr", sp.spgemm_create_descr(&descr))) descr = NULL;
  op_end(&o);
  return descr;
}

void mgpuSpGEMMDestroyDescr(void *descr, void *stream) {
  if (descr == NULL) return;
  operation o;
  if (!sparse_begin(&o, "mgpuSpGEMMDestroyDescr", stream)) return;
  op_check(&o, "cusparseSpGEMM_destroyDescr", sp.spgemm_destroy_descr(descr));
  op_end(&o);
}

/* SpGEMM's phases: work estimation and compute take a buffer and its size (0 and NULL to ask
 * for the size) and return the size needed; copy takes neither. */
typedef enum { SPGEMM_ESTIMATE, SPGEMM_COMPUTE, SPGEMM_COPY } spgemm_phase;

static intptr_t spgemm(const char *name, spgemm_phase phase, void *descr, int32_t ma, int32_t mb,
                       void *a, void *b, void *c, int32_t ctp, intptr_t size, void *buffer,
                       void *stream) {
  operation o;
  if (!sparse_begin(&o, name, stream)) return 0;
  unsigned char alpha[16], beta[16];
  size_t buffer_size = (size_t)size;
  intptr_t result = 0;
  if (descr == NULL)
    OP_FAIL(&o, WAVERT_ERROR_INVALID_ARGUMENT,
            "%s: the SpGEMM descriptor is NULL (did mgpuSpGEMMCreateDescr fail?)", name);
  else if ((phase == SPGEMM_COPY || check_extent(&o, "the buffer size", size)) &&
           check_mode(&o, "mode of A", ma) && check_mode(&o, "mode of B", mb) &&
           check_handles(&o, a, b, c) && scalar_one(&o, ctp, alpha) &&
           scalar_one(&o, ctp, beta)) {
    cusparseHandle_t handle = sparse_env_lock(&o);
    if (handle != NULL) {
      int ok = 0;
      if (phase == SPGEMM_ESTIMATE)
        ok = op_check(&o, "cusparseSpGEMM_workEstimation",
                      sp.spgemm_work_estimation(handle, ma, mb, alpha, a, b, beta, c, ctp,
                                                CUSPARSE_ALG_DEFAULT, descr, &buffer_size,
                                                buffer));
      else if (phase == SPGEMM_COMPUTE)
        ok = op_check(&o, "cusparseSpGEMM_compute",
                      sp.spgemm_compute(handle, ma, mb, alpha, a, b, beta, c, ctp,
                                        CUSPARSE_ALG_DEFAULT, descr, &buffer_size, buffer));
      else
        op_check(&o, "cusparseSpGEMM_copy",
                 sp.spgemm_copy(handle, ma, mb, alpha, a, b, beta, c, ctp, CUSPARSE_ALG_DEFAULT,
                                descr));
      sparse_env_unlock(handle);
      if (ok) result = to_intptr(&o, "the buffer size", buffer_size);
    }
  }
  op_end(&o);
  return result;
}

intptr_t mgpuSpGEMMWorkEstimation(void *descr, int32_t ma, int32_t mb, void *a, void *b, void *c,
                                  int32_t ctp, intptr_t size, void *buffer, void *stream) {
  return spgemm("mgpuSpGEMMWorkEstimation", SPGEMM_ESTIMATE, descr, ma, mb, a, b, c, ctp, size,
                buffer, stream);
}

intptr_t mgpuSpGEMMCompute(void *descr, int32_t ma, int32_t mb, void *a, void *b, void *c,
                           int32_t ctp, intptr_t size, void *buffer, void *stream) {
  return spgemm("mgpuSpGEMMCompute", SPGEMM_COMPUTE, descr, ma, mb, a, b, c, ctp, size, buffer,
                stream);
}

void mgpuSpGEMMCopy(void *descr, int32_t ma, int32_t mb, void *a, void *b, void *c, int32_t ctp,
                    void *stream) {
  spgemm("mgpuSpGEMMCopy", SPGEMM_COPY, descr, ma, mb, a, b, c, ctp, 0, NULL, stream);
}

/* ---- cuSPARSELt 2:4 SpMM ------------------------------------------------------------------- */

/* The cuSPARSELt matrices libwavert made and what it made inside each (keyed by address: MLIR
 * owns the memory), so that the destroy functions release exactly that. A record for an
 * address is reset when a new matrix is made there (a program that returned early never
 * destroyed the old one). */
typedef struct lt_record {
  struct lt_record *next;
  const void *matrix;
  int plan_live; /* plan initialised */
  int alg_live;  /* algorithm selection initialised */
} lt_record;
static pthread_mutex_t lt_records_mutex = PTHREAD_MUTEX_INITIALIZER;
static lt_record *lt_records;

/* The record of `matrix` (made when `create`), or NULL. */
static lt_record *lt_record_get(const void *matrix, int create) {
  pthread_mutex_lock(&lt_records_mutex);
  lt_record *record = lt_records;
  while (record != NULL && record->matrix != matrix) record = record->next;
  if (record == NULL && create && (record = calloc(1, sizeof(*record))) != NULL) {
    record->matrix = matrix;
    record->next = lt_records;
    lt_records = record;
  }
  if (record != NULL && create) record->plan_live = record->alg_live = 0;
  pthread_mutex_unlock(&lt_records_mutex);
  return record;
}

static void lt_record_drop(const void *matrix) {
  pthread_mutex_lock(&lt_records_mutex);
  for (lt_record **link = &lt_records; *link != NULL; link = &(*link)->next)
    if ((*link)->matrix == matrix) {
      lt_record *dead = *link;
      *link = dead->next;
      free(dead);
      break;
    }
  pthread_mutex_unlock(&lt_records_mutex);
}

/* A cuSPARSELt matrix in `memory` (16-byte aligned, as MLIR allocates it). */
static int lt_check_memory(operation *o, const void *memory) {
  if (memory != NULL && ((uintptr_t)memory % 16) == 0) return 1;
  OP_FAIL(o, WAVERT_ERROR_INVALID_ARGUMENT,
          "%s: the matrix memory %p is NULL or not 16-byte aligned", o->name, memory);
  return 0;
}

/* Release the plan and algorithm selection made in `mat` by mgpuCuSparseLtSpMMBufferSize. */
static void lt_release_plan(operation *o, lt_sp_mat *mat, lt_record *record) {
  if (record->plan_live)
    op_check(o, "cusparseLtMatmulPlanDestroy", lt.plan_destroy(mat->plan));
  if (record->alg_live && lt.alg_destroy != NULL)
    op_check(o, "cusparseLtAlgSelectionDestroy", lt.alg_destroy(mat->alg_sel));
  record->plan_live = record->alg_live = 0;
}

/* MLIR's cuSPARSELt compute type (0: 16-bit float, 1: 32-bit integer: cuSPARSELt 0.4/0.5's
 * cusparseComputeType values, which gpu-to-llvm emits) as the loaded library numbers it:
 * cuSPARSELt 0.6 and later order the enum 32I, 16F, 32F. */
static int lt_compute_type(operation *o, const void *handle, int32_t ctp, int *out) {
  if (ctp != 0 && ctp != 1) {
    OP_FAIL(o, WAVERT_ERROR_INVALID_ARGUMENT,
            "%s: compute type %d is not one MLIR emits (0: 16-bit float, 1: 32-bit integer)",
            o->name, (int)ctp);
    return 0;
  }
  int version = 0;
  if (lt.get_version != NULL &&
      !op_check(o, "cusparseLtGetVersion", lt.get_version(handle, &version)))
    return 0;
  *out = version >= 600 ? 1 - ctp : ctp;
  return 1;
}

/* Make a cuSPARSELt matrix descriptor in `memory` (`bytes` of it, zeroed first as cuSPARSELt
 * wants): a 2:4 structured one (`structured`) or a dense one, row-major, over `values`. Its
 * record is made first and dropped on failure. */
static void lt_matrix_create(operation *o, void *memory, size_t bytes, intptr_t rows,
                             intptr_t cols, void *values, int32_t dtp, int structured) {
  if (!lt_check_memory(o, memory) || !check_extent(o, "rows", rows) ||
      !check_extent(o, "cols", cols))
    return;
  if (lt_record_get(memory, 1) == NULL) {
    OP_FAIL(o, WAVERT_ERROR_OUT_OF_MEMORY, "%s: out of host memory", o->name);
    return;
  }
  void *handle = sparselt_env_lock(o);
  if (handle != NULL) {
    memset(memory, 0, bytes);
    void *mat = memory; /* the descriptor comes first in both layouts */
    if (structured) {
      ((lt_sp_mat *)memory)->values = values;
      op_check(o, "cusparseLtStructuredDescriptorInit",
               lt.structured_init(handle, mat, rows, cols, /*ld=*/cols, /*alignment=*/16, dtp,
                                  CUSPARSE_ORDER_ROW, CUSPARSELT_SPARSITY_50_PERCENT));
    } else {
      ((lt_dn_mat *)memory)->values = values;
      op_check(o, "cusparseLtDenseDescriptorInit",
               lt.dense_init(handle, mat, rows, cols, /*ld=*/cols, /*alignment=*/16, dtp,
                             CUSPARSE_ORDER_ROW));
    }
    env_unlock();
  }
  if (o->failed) lt_record_drop(memory);
}

/* Destroy the matrix in `memory` (and the plan and algorithm selection of a 2:4 one):
 * INVALID_ARGUMENT, the library not called, when libwavert did not make it or it was destroyed
 * already. */
static void lt_matrix_destroy(operation *o, void *memory, int structured) {
  lt_record *record = lt_record_get(memory, 0);
  if (record == NULL) {
    OP_FAIL(o, WAVERT_ERROR_INVALID_ARGUMENT,
            "%s: %p holds no live matrix (never made, or destroyed already)", o->name, memory);
    return;
  }
  if (structured) lt_release_plan(o, memory, record);
  op_check(o, "cusparseLtMatDescriptorDestroy", lt.mat_destroy(memory));
  lt_record_drop(memory);
}

void mgpuCreateCuSparseLtDnMat(void *dh, intptr_t rows, intptr_t cols, void *values, int32_t dtp,
                               void *stream) {
  operation o;
  if (!sparselt_begin(&o, "mgpuCreateCuSparseLtDnMat", stream)) return;
  lt_matrix_create(&o, dh, sizeof(lt_dn_mat), rows, cols, values, dtp, 0);
  op_end(&o);
}

void mgpuDestroyCuSparseLtDnMat(void *dh, void *stream) {
  if (dh == NULL) return;
  operation o;
  if (!sparselt_begin(&o, "mgpuDestroyCuSparseLtDnMat", stream)) return;
  lt_matrix_destroy(&o, dh, 0);
  op_end(&o);
}

void mgpuCusparseLtCreate2To4SpMat(void *sh, intptr_t rows, intptr_t cols, void *values,
                                   int32_t dtp, void *stream) {
  operation o;
  if (!sparselt_begin(&o, "mgpuCusparseLtCreate2To4SpMat", stream)) return;
  lt_matrix_create(&o, sh, sizeof(lt_sp_mat), rows, cols, values, dtp, 1);
  op_end(&o);
}

void mgpuDestroyCuSparseLtSpMat(void *sh, void *stream) {
  if (sh == NULL) return;
  operation o;
  if (!sparselt_begin(&o, "mgpuDestroyCuSparseLtSpMat", stream)) return;
  lt_matrix_destroy(&o, sh, 1);
  op_end(&o);
}

/* Prune check of A (prune_flag 2): INVALID_ARGUMENT when A is not 2:4 after pruning. The device
 * word the check writes is freed on every path. Called with env_mutex held. */
static void lt_prune_check(operation *o, void *handle, lt_sp_mat *a) {
  const wavert__backend *backend = o->scope.device->backend;
  void *flag = NULL;
  int valid = 1;
  if (backend->mem_alloc(sizeof(int), 0, &flag) != WAVERT_OK) {
    o->failed = 1;
    wavert__call_record(wavert_last_status());
    return;
  }
  if (op_check(o, "cusparseLtSpMMAPruneCheck",
               lt.prune_check(handle, a->matmul, a->values, flag, o->stream))) {
    wavert_status status = backend->memcpy(&valid, flag, sizeof(int), o->stream, 0);
    if (status == WAVERT_OK) status = backend->stream_synchronize(o->stream);
    if (status != WAVERT_OK) {
      o->failed = 1;
      wavert__call_record(status);
    } else if (valid != 0) {
      OP_FAIL(o, WAVERT_ERROR_INVALID_ARGUMENT,
              "%s: the sparse matrix is not 2:4 structured after pruning "
              "(cusparseLtSpMMAPruneCheck)",
              o->name);
    }
  }
  backend->mem_free(flag);
}

/* Matmul descriptor, algorithm selection (the default, configuration 0) and plan of
 * C = op(A) op(B) + C, kept in A's memory; `record` notes what was made. */
static int lt_plan(operation *o, const void *handle, lt_sp_mat *a, lt_dn_mat *b, lt_dn_mat *c,
                   int32_t ma, int32_t mb, int32_t ctp, lt_record *record) {
  const int algorithm = 0;
  int compute = 0;
  if (!lt_compute_type(o, handle, ctp, &compute) ||
      !op_check(o, "cusparseLtMatmulDescriptorInit",
                lt.matmul_init(handle, a->matmul, ma, mb, a->mat, b->mat, c->mat, c->mat,
                               compute)) ||
      !op_check(o, "cusparseLtMatmulAlgSelectionInit",
                lt.alg_init(handle, a->alg_sel, a->matmul, CUSPARSELT_MATMUL_ALG_DEFAULT)))
    return 0;
  record->alg_live = 1;
  if (!op_check(o, "cusparseLtMatmulAlgSetAttribute",
                lt.alg_set(handle, a->alg_sel, CUSPARSELT_MATMUL_ALG_CONFIG_ID, &algorithm,
                           sizeof(algorithm))) ||
      !op_check(o, "cusparseLtMatmulPlanInit",
                lt.plan_init(handle, a->plan, a->matmul, a->alg_sel)))
    return 0;
  record->plan_live = 1;
  return 1;
}

void mgpuCuSparseLtSpMMBufferSize(void *bs, int32_t ma, int32_t mb, void *a, void *b, void *c,
                                  int32_t ctp, int32_t prune_flag, void *stream) {
  operation o;
  if (!sparselt_begin(&o, "mgpuCuSparseLtSpMMBufferSize", stream)) return;
  lt_sp_mat *mat_a = a;
  lt_dn_mat *mat_b = b, *mat_c = c;
  int64_t *sizes = bs; /* workspace, compressed matrix, compression buffer */
  lt_record *record = NULL;
  if (bs == NULL)
    OP_FAIL(&o, WAVERT_ERROR_INVALID_ARGUMENT, "%s: the sizes pointer is NULL", o.name);
  else if (prune_flag < 0 || prune_flag > 2)
    OP_FAIL(&o, WAVERT_ERROR_INVALID_ARGUMENT,
            "%s: prune flag %d is not 0 (none), 1 (prune) or 2 (prune and check)", o.name,
            (int)prune_flag);
  else if (check_mode(&o, "mode of A", ma) && check_mode(&o, "mode of B", mb) &&
           check_handles(&o, a, b, c) &&
           ((record = lt_record_get(mat_a, 0)) == NULL || lt_record_get(b, 0) == NULL ||
            lt_record_get(c, 0) == NULL))
    OP_FAIL(&o, WAVERT_ERROR_INVALID_ARGUMENT,
            "%s: A (%p), B (%p) or C (%p) is not a live matrix made by "
            "mgpuCusparseLtCreate2To4SpMat / mgpuCreateCuSparseLtDnMat",
            o.name, a, b, c);
  void *handle = !o.failed ? sparselt_env_lock(&o) : NULL;
  if (handle != NULL) {
    lt_release_plan(&o, mat_a, record); /* asked again: the previous plan goes first */
    size_t workspace = 0, compressed = 0, compress_buffer = 0;
    if (!o.failed && lt_plan(&o, handle, mat_a, mat_b, mat_c, ma, mb, ctp, record)) {
      if (prune_flag > 0 &&
          op_check(&o, "cusparseLtSpMMAPrune",
                   lt.prune(handle, mat_a->matmul, mat_a->values, mat_a->values,
                            CUSPARSELT_PRUNE_SPMMA_STRIP, o.stream)) &&
          prune_flag == 2)
        lt_prune_check(&o, handle, mat_a);
      if (!o.failed &&
          op_check(&o, "cusparseLtMatmulGetWorkspace",
                   lt.get_workspace(handle, mat_a->plan, &workspace)) &&
          op_check(&o, "cusparseLtSpMMACompressedSize",
                   lt.compressed_size(handle, mat_a->plan, &compressed, &compress_buffer))) {
        sizes[0] = to_intptr(&o, "the workspace size", workspace);
        sizes[1] = to_intptr(&o, "the compressed size", compressed);
        sizes[2] = to_intptr(&o, "the compression buffer size", compress_buffer);
      }
    }
    env_unlock();
  }
  if (o.failed && bs != NULL) sizes[0] = sizes[1] = sizes[2] = 0;
  op_end(&o);
}

void mgpuCuSparseLtSpMM(void *a, void *b, void *c, void *workspace, void *compressed,
                        void *compress_buffer, void *stream) {
  operation o;
  if (!sparselt_begin(&o, "mgpuCuSparseLtSpMM", stream)) return;
  lt_sp_mat *mat_a = a;
  lt_dn_mat *mat_b = b, *mat_c = c;
  lt_record *record = NULL;
  if (check_handles(&o, a, b, c) &&
      ((record = lt_record_get(mat_a, 0)) == NULL || !record->plan_live))
    OP_FAIL(&o, WAVERT_ERROR_INVALID_ARGUMENT,
            "mgpuCuSparseLtSpMM: A (%p) has no plan (mgpuCuSparseLtSpMMBufferSize first)", a);
  void *handle = !o.failed ? sparselt_env_lock(&o) : NULL;
  if (handle != NULL) {
    const float alpha = 1.0f, beta = 1.0f; /* D = A B + C with D = C, as MLIR's lowering */
    void *streams[1] = {o.stream};
    if (op_check(&o, "cusparseLtSpMMACompress",
                 lt.compress(handle, mat_a->plan, mat_a->values, compressed, compress_buffer,
                             o.stream)))
      op_check(&o, "cusparseLtMatmul",
               lt.matmul(handle, mat_a->plan, &alpha, compressed, mat_b->values, &beta,
                         mat_c->values, mat_c->values, workspace, streams, 1));
    env_unlock();
  }
  op_end(&o);
}
