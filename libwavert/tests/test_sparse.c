/* test_sparse.c — the cuSPARSE and cuSPARSELt entry points of wavert_mgpu.h against
 * fake_cusparse (and fake_cuda): arguments forwarded in order, alpha = beta = 1 in the compute
 * type, the operation's stream and device context, argument checks naming the value, library
 * statuses as recorded errors, handles and descriptors released, and (argument "missing") a
 * library that cannot be opened reported by name without a crash; (argument "toolkit") the
 * library found in lib64/ of $CUDA_HOME. */
#define _DEFAULT_SOURCE /* mkdtemp, symlink, setenv */
#include <dlfcn.h>
#include <sys/stat.h>
#include <stdalign.h>
#include <stdlib.h>
#include <unistd.h>

#include "fake_cuda.h"
#include "fake_cusparse.h"
#include "test_util.h"
#include "wavert_jit.h"
#include "wavert_mgpu.h"

enum { R_32F = 0, R_64F = 1, R_16F = 2, INDEX_32I = 2, INDEX_64I = 3 };

static wavert_device *device0, *device1;
static void *const call_stream = (void *)(uintptr_t)0x5100;
static void *const own_stream = (void *)(uintptr_t)0x5200;

/* MLIR's allocations for cuSPARSELt matrices (16-byte aligned). */
static alignas(16) unsigned char lt_a[44104];
static alignas(16) unsigned char lt_b[11032];
static alignas(16) unsigned char lt_c[11032];

static void test_spmv_csr(void) {
  /* A = [[1, 0, 2], [0, 3, 0]] in CSR; x = [1, 2, 3]; y = [10, 20] -> y = A x + y. */
  int32_t pos[] = {0, 2, 3}, idx[] = {0, 2, 1};
  double val[] = {1, 2, 3}, x[] = {1, 2, 3}, y[] = {10, 20};
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device1, call_stream, &state));
  mgpuCreateSparseEnv();
  CHECK(fake_cusparse_live_handles() == 1);
  CHECK(fake_cusparse_handle_context() == fake_cuda_primary_context(1));
  void *a = mgpuCreateCsr(2, 3, 3, pos, idx, val, INDEX_32I, INDEX_32I, R_64F, NULL);
  void *vx = mgpuCreateDnVec(3, x, R_64F, NULL);
  void *vy = mgpuCreateDnVec(2, y, R_64F, NULL);
  CHECK(a != NULL && vx != NULL && vy != NULL);
  const fake_cusparse_descr *d = fake_cusparse_descr_of(a);
  CHECK(d->kind == 'r' && d->rows == 2 && d->cols == 3 && d->nnz == 3);
  CHECK(d->positions == pos && d->indices == idx && d->values == val);
  CHECK(d->position_type == INDEX_32I && d->index_type == INDEX_32I && d->base == 0);
  CHECK(d->value_type == R_64F);
  fake_cusparse_set_buffer_size(96);
  intptr_t size = mgpuSpMVBufferSize(0, a, vx, vy, R_64F, NULL);
  CHECK(size == 96);
  char buffer[96];
  mgpuSpMV(0, a, vx, vy, R_64F, buffer, own_stream);
  const fake_cusparse_product *p = fake_cusparse_last_product();
  CHECK(strcmp(p->name, "cusparseSpMV") == 0 && p->buffer == buffer);
  CHECK(p->stream == own_stream && p->alpha == 1.0 && p->beta == 1.0 && p->algorithm == 0);
  CHECK(y[0] == 10 + 1 * 1 + 2 * 3 && y[1] == 20 + 3 * 2);
  CHECK(fake_cusparse_bound_stream() == NULL); /* unbound after the operation */
  /* NULL stream: the call's. */
  mgpuSpMVBufferSize(0, a, vx, vy, R_64F, NULL);
  CHECK(fake_cusparse_last_product()->stream == call_stream);
  mgpuDestroySpMat(a, NULL);
  mgpuDestroyDnVec(vx, NULL);
  mgpuDestroyDnVec(vy, NULL);
  mgpuDestroySpMat(NULL, NULL);
  mgpuDestroyDnVec(NULL, NULL);
  CHECK(fake_cusparse_live_descriptors() == 0);
  mgpuDestroySparseEnv();
  CHECK(fake_cusparse_live_handles() == 0);
  CHECK_OK(wavert_call_end(&state));
  CHECK(fake_cuda_current_context() == NULL); /* the caller's (no) context is restored */
}

static void test_spmm_sddmm_and_layouts(void) {
  float values[16] = {0};
  int64_t idx64[8] = {0};
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device0, call_stream, &state));
  /* No mgpuCreateSparseEnv: the first product makes the handle. */
  void *coo = mgpuCreateCoo(4, 5, 2, idx64, idx64 + 2, values, INDEX_64I, R_32F, NULL);
  void *csc = mgpuCreateCsc(4, 5, 2, idx64, idx64 + 6, values, INDEX_64I, INDEX_32I, R_32F, NULL);
  void *bsr = mgpuCreateBsr(2, 3, 1, 2, 4, idx64, idx64 + 3, values, INDEX_32I, INDEX_64I, R_32F,
                            NULL);
  void *b = mgpuCreateDnMat(5, 3, values, R_32F, NULL);
  void *c = mgpuCreateDnMat(4, 3, values, R_32F, NULL);
  CHECK(coo && csc && bsr && b && c);
  const fake_cusparse_descr *d = fake_cusparse_descr_of(coo);
  CHECK(d->kind == 'o' && d->positions == idx64 && d->indices == idx64 + 2 &&
        d->index_type == INDEX_64I && d->nnz == 2);
  d = fake_cusparse_descr_of(csc);
  CHECK(d->kind == 'c' && d->indices == idx64 + 6 && d->position_type == INDEX_64I &&
        d->index_type == INDEX_32I);
  d = fake_cusparse_descr_of(bsr);
  CHECK(d->kind == 'b' && d->rows == 2 && d->cols == 3 && d->nnz == 1 && d->row_block == 2 &&
        d->col_block == 4 && d->order == 2 /* row-major */);
  d = fake_cusparse_descr_of(b);
  CHECK(d->kind == 'd' && d->rows == 5 && d->cols == 3 && d->ld == 3 && d->order == 2);
  CHECK(mgpuSpMMBufferSize(1, 0, coo, b, c, R_32F, NULL) == 96);
  CHECK(fake_cusparse_live_handles() == 1);
  mgpuSpMM(1, 0, coo, b, c, R_32F, values, NULL);
  const fake_cusparse_product *p = fake_cusparse_last_product();
  CHECK(strcmp(p->name, "cusparseSpMM") == 0 && p->op_a == 1 && p->op_b == 0);
  CHECK(p->a == coo && p->b == b && p->c == c && p->alpha == 1.0 && p->beta == 1.0);
  /* SDDMM: A and B dense, C sparse; f16 compute scalars are half 1.0. */
  CHECK(mgpuSDDMMBufferSize(0, 1, b, c, csc, R_16F, NULL) == 96);
  mgpuSDDMM(0, 1, b, c, csc, R_16F, values, NULL);
  p = fake_cusparse_last_product();
  CHECK(strcmp(p->name, "cusparseSDDMM") == 0 && p->op_b == 1 && p->c == csc);
  CHECK(p->compute_type == R_16F && p->alpha == 1.0 && p->beta == 1.0);
  /* COO AoS: removed from cuSPARSE 12 (the fake lacks it). */
  CHECK(mgpuCreateCooAoS(4, 5, 2, idx64, values, INDEX_32I, R_32F, NULL) == NULL);
  CHECK(wavert_jit_failed());
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_UNSUPPORTED);
  CHECK_MESSAGE("mgpuCreateCooAoS: this cuSPARSE has no cusparseCreateCooAoS");
  /* Outside a call (default device 0): the same entry points work. */
  int64_t rows = 0, cols = 0, nnz = 0;
  mgpuSpMatGetSize(bsr, &rows, &cols, &nnz, NULL);
  CHECK(rows == 2 && cols == 3 && nnz == 1);
  mgpuDestroySpMat(coo, NULL);
  mgpuDestroySpMat(csc, NULL);
  mgpuDestroySpMat(bsr, NULL);
  mgpuDestroyDnMat(b, NULL);
  mgpuDestroyDnMat(c, NULL);
  CHECK(fake_cusparse_live_descriptors() == 0);
  mgpuDestroySparseEnv();
  CHECK(fake_cusparse_live_handles() == 0);
  CHECK(wavert_last_status() == WAVERT_ERROR_UNSUPPORTED); /* the thread's first error stays */
  wavert_clear_error();
}

static void test_spgemm(void) {
  float values[4] = {0};
  int32_t idx[4] = {0};
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device0, call_stream, &state));
  void *a = mgpuCreateCsr(3, 3, 2, idx, idx, values, INDEX_32I, INDEX_32I, R_32F, NULL);
  void *c = mgpuCreateCsr(3, 3, 0, NULL, NULL, NULL, INDEX_32I, INDEX_32I, R_32F, NULL);
  void *descr = mgpuSpGEMMCreateDescr(NULL);
  CHECK(a && c && descr && fake_cusparse_live_spgemm() == 1);
  fake_cusparse_set_buffer_size(4096);
  CHECK(mgpuSpGEMMWorkEstimation(descr, 0, 0, a, a, c, R_32F, 0, NULL, NULL) == 4096);
  char buffer[16];
  CHECK(mgpuSpGEMMWorkEstimation(descr, 0, 0, a, a, c, R_32F, 4096, buffer, NULL) == 4096);
  CHECK(fake_cusparse_last_product()->buffer == buffer);
  CHECK(fake_cusparse_last_product()->buffer_size == 4096);
  CHECK(mgpuSpGEMMCompute(descr, 0, 0, a, a, c, R_32F, 0, NULL, NULL) == 4096);
  int64_t rows = 0, cols = 0, nnz = -1;
  mgpuSpMatGetSize(c, &rows, &cols, &nnz, NULL);
  CHECK(rows == 3 && cols == 3 && nnz == 0);
  mgpuSetCsrPointers(c, idx, idx + 1, values, NULL);
  CHECK(fake_cusparse_descr_of(c)->indices == idx + 1);
  mgpuSpGEMMCopy(descr, 0, 0, a, a, c, R_32F, NULL);
  CHECK(strcmp(fake_cusparse_last_product()->name, "cusparseSpGEMM_copy") == 0);
  mgpuSpGEMMDestroyDescr(descr, NULL);
  CHECK(fake_cusparse_live_spgemm() == 0);
  /* A NULL descriptor (a failed create) is an error, not a crash. */
  CHECK(mgpuSpGEMMCompute(NULL, 0, 0, a, a, c, R_32F, 0, NULL, NULL) == 0);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("mgpuSpGEMMCompute: the SpGEMM descriptor is NULL");
  mgpuDestroySpMat(a, NULL);
  mgpuDestroySpMat(c, NULL);
  mgpuDestroySparseEnv();
  CHECK(fake_cusparse_live_descriptors() == 0 && fake_cusparse_live_handles() == 0);
  fake_cusparse_set_buffer_size(96);
  wavert_clear_error();
}

static void test_argument_errors(void) {
  double val[2] = {0};
  wavert_call_state state;
  /* Each case in its own call: the message is the call's first error. */
  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  CHECK(mgpuCreateDnVec(-1, val, R_64F, NULL) == NULL);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("mgpuCreateDnVec: size is -1; it must be >= 0");

  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  CHECK(mgpuCreateCsr(2, 2, 1, val, val, val, 7, INDEX_32I, R_64F, NULL) == NULL);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("mgpuCreateCsr: position type 7 is not a cusparseIndexType_t");

  void *a = mgpuCreateCoo(2, 2, 1, val, val, val, INDEX_32I, R_64F, NULL);
  void *x = mgpuCreateDnVec(2, val, R_64F, NULL);
  CHECK(a != NULL && x != NULL);
  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  CHECK(mgpuSpMVBufferSize(0, a, x, x, 42, NULL) == 0);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("mgpuSpMVBufferSize: compute type 42 is not a cudaDataType_t");

  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  mgpuSpMV(3, a, x, x, R_64F, NULL, NULL);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("mgpuSpMV: mode of A 3 is not a cusparseOperation_t");

  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  mgpuSpMM(0, 0, a, NULL, x, R_64F, NULL, NULL);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("mgpuSpMM: a matrix or vector handle is NULL");

  /* Library statuses: named, with the entry point; an allocation failure is OUT_OF_MEMORY. */
  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  fake_cusparse_fail_next("cusparseSpMV", 3);
  mgpuSpMV(0, a, x, x, R_64F, NULL, NULL);
  CHECK(wavert_jit_failed());
  mgpuSpMV(0, a, x, x, R_64F, NULL, NULL); /* a later error does not replace the first */
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_DRIVER);
  CHECK_MESSAGE("mgpuSpMV: cusparseSpMV: CUSPARSE_STATUS_INVALID_VALUE (3, invalid value (fake))");

  mgpuDestroySparseEnv();
  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  fake_cusparse_fail_next("cusparseCreate", 2);
  CHECK(mgpuSpMVBufferSize(0, a, x, x, R_64F, NULL) == 0);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_OUT_OF_MEMORY);
  CHECK_MESSAGE("mgpuSpMVBufferSize: cusparseCreate: CUSPARSE_STATUS_ALLOC_FAILED");
  CHECK(fake_cusparse_live_handles() == 0);
  /* The next use creates the handle again. */
  CHECK(mgpuSpMVBufferSize(0, a, x, x, R_64F, NULL) == 96 && fake_cusparse_live_handles() == 1);

  /* A buffer size past INTPTR_MAX cannot be returned. */
  fake_cusparse_set_buffer_size((size_t)INTPTR_MAX + 1);
  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  CHECK(mgpuSpMVBufferSize(0, a, x, x, R_64F, NULL) == 0);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_LIMIT_EXCEEDED);
  CHECK_MESSAGE("the buffer size 9223372036854775808 bytes exceeds INTPTR_MAX");
  fake_cusparse_set_buffer_size(96);

  /* A failed destroy (a stale handle) is reported, not a crash. */
  mgpuDestroySpMat(a, NULL);
  mgpuDestroyDnVec(x, NULL);
  wavert_clear_error();
  mgpuDestroyDnVec(x, NULL);
  CHECK(wavert_last_status() == WAVERT_ERROR_DRIVER);
  CHECK_MESSAGE("mgpuDestroyDnVec: cusparseDestroyDnVec: CUSPARSE_STATUS_INVALID_VALUE");
  wavert_clear_error();
  mgpuDestroySparseEnv();
  CHECK(fake_cusparse_live_descriptors() == 0 && fake_cusparse_live_handles() == 0);
}

static void test_sparselt(void) {
  uint16_t a_values[64], b_values[64], c_values[64];
  int64_t sizes[3] = {-1, -1, -1};
  wavert_call_state state;
  memset(lt_a, 0xee, sizeof(lt_a)); /* garbage: libwavert zeroes before cuSPARSELt sees it */
  memset(lt_b, 0xee, sizeof(lt_b));
  memset(lt_c, 0xee, sizeof(lt_c));
  CHECK_OK(wavert_call_begin(device1, call_stream, &state));
  mgpuCreateSparseLtEnv();
  CHECK(fake_cusparselt_live_handles() == 1);
  CHECK(fake_cusparse_handle_context() == fake_cuda_primary_context(1));
  mgpuCusparseLtCreate2To4SpMat(lt_a, 8, 8, a_values, R_16F, NULL);
  mgpuCreateCuSparseLtDnMat(lt_b, 8, 8, b_values, R_16F, NULL);
  mgpuCreateCuSparseLtDnMat(lt_c, 8, 8, c_values, R_16F, NULL);
  CHECK(!wavert_jit_failed());
  const fake_cusparse_descr *d = fake_cusparselt_matrix_of(lt_a);
  CHECK(d != NULL && d->kind == 's' && d->rows == 8 && d->ld == 8 && d->value_type == R_16F);
  CHECK(d->order == 2);
  CHECK(fake_cusparselt_live_matrices() == 3);
  int allocations = fake_cuda_live_allocations();
  mgpuCuSparseLtSpMMBufferSize(sizes, 0, 0, lt_a, lt_b, lt_c, 0, 2, NULL);
  CHECK(!wavert_jit_failed());
  CHECK(sizes[0] == 96 && sizes[1] == 97 && sizes[2] == 98);
  CHECK(fake_cusparse_calls("cusparseLtSpMMAPrune") == 1);
  CHECK(fake_cusparse_calls("cusparseLtSpMMAPruneCheck") == 1);
  CHECK(fake_cuda_live_allocations() == allocations); /* the check's device word is freed */
  CHECK(fake_cusparselt_live_plans() == 1 && fake_cusparselt_live_algs() == 1);
  /* MLIR's compute type 0 (16-bit float) is CUSPARSE_COMPUTE_16F = 1 in cuSPARSELt 0.7. */
  const fake_cusparse_descr *matmul = fake_cusparselt_matrix_of(lt_a + 3 * 11024);
  CHECK(matmul != NULL && matmul->kind == 'm' && matmul->value_type == 1);
  char workspace[8], compressed[8], buffer[8];
  mgpuCuSparseLtSpMM(lt_a, lt_b, lt_c, workspace, compressed, buffer, own_stream);
  const fake_cusparse_product *p = fake_cusparse_last_product();
  CHECK(strcmp(p->name, "cusparseLtMatmul") == 0 && p->stream == own_stream);
  CHECK(p->a == compressed && p->b == b_values && p->c == c_values && p->buffer == workspace);
  CHECK(p->alpha == 1.0 && p->beta == 1.0);
  /* Sizes asked again: the old plan is released first. cuSPARSELt 0.5 numbers 16F 0. */
  fake_cusparselt_set_version(503);
  mgpuCuSparseLtSpMMBufferSize(sizes, 0, 0, lt_a, lt_b, lt_c, 0, 0, NULL);
  fake_cusparselt_set_version(700);
  CHECK(fake_cusparselt_live_plans() == 1 && fake_cusparselt_live_algs() == 1);
  CHECK(matmul->value_type == 0);
  mgpuDestroyCuSparseLtSpMat(lt_a, NULL);
  mgpuDestroyCuSparseLtDnMat(lt_b, NULL);
  mgpuDestroyCuSparseLtDnMat(lt_c, NULL);
  CHECK(fake_cusparselt_live_plans() == 0 && fake_cusparselt_live_matrices() == 0);
  CHECK(fake_cusparselt_live_algs() == 0);
  CHECK_OK(wavert_call_end(&state));

  /* A second destroy, or sizes for destroyed matrices: errors, the library not called. */
  CHECK_OK(wavert_call_begin(device1, call_stream, &state));
  int destroys = fake_cusparse_calls("cusparseLtMatDescriptorDestroy");
  mgpuDestroyCuSparseLtDnMat(lt_b, NULL);
  CHECK(fake_cusparse_calls("cusparseLtMatDescriptorDestroy") == destroys);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("mgpuDestroyCuSparseLtDnMat: ");
  CHECK_MESSAGE(" holds no live matrix (never made, or destroyed already)");
  CHECK_OK(wavert_call_begin(device1, call_stream, &state));
  mgpuCuSparseLtSpMMBufferSize(sizes, 0, 0, lt_a, lt_b, lt_c, 0, 0, NULL);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("is not a live matrix made by mgpuCusparseLtCreate2To4SpMat");

  /* A matrix that is not 2:4 after pruning: an error; the plan is still released. */
  CHECK_OK(wavert_call_begin(device1, call_stream, &state));
  mgpuCusparseLtCreate2To4SpMat(lt_a, 8, 8, a_values, R_16F, NULL);
  mgpuCreateCuSparseLtDnMat(lt_b, 8, 8, b_values, R_16F, NULL);
  fake_cusparselt_set_prune_valid(1);
  mgpuCuSparseLtSpMMBufferSize(sizes, 0, 0, lt_a, lt_b, lt_b, 0, 2, NULL);
  fake_cusparselt_set_prune_valid(0);
  CHECK(sizes[0] == 0 && sizes[1] == 0 && sizes[2] == 0);
  CHECK(fake_cuda_live_allocations() == allocations);
  mgpuDestroyCuSparseLtSpMat(lt_a, NULL);
  mgpuDestroyCuSparseLtDnMat(lt_b, NULL);
  CHECK(fake_cusparselt_live_plans() == 0 && fake_cusparselt_live_matrices() == 0);
  CHECK(fake_cusparselt_live_algs() == 0);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("mgpuCuSparseLtSpMMBufferSize: the sparse matrix is not 2:4 structured");

  /* Argument errors. */
  CHECK_OK(wavert_call_begin(device1, NULL, &state));
  mgpuCusparseLtCreate2To4SpMat(lt_a, 8, 8, a_values, R_16F, NULL);
  mgpuCreateCuSparseLtDnMat(lt_b, 8, 8, b_values, R_16F, NULL);
  mgpuCuSparseLtSpMMBufferSize(sizes, 0, 0, lt_a, lt_b, lt_b, 2, 0, NULL);
  mgpuDestroyCuSparseLtSpMat(lt_a, NULL);
  mgpuDestroyCuSparseLtDnMat(lt_b, NULL);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("mgpuCuSparseLtSpMMBufferSize: compute type 2 is not one MLIR emits");
  CHECK(fake_cusparselt_live_matrices() == 0);
  CHECK_OK(wavert_call_begin(device1, NULL, &state));
  mgpuCuSparseLtSpMMBufferSize(sizes, 0, 0, lt_a, lt_b, lt_c, 0, 3, NULL);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("prune flag 3 is not 0 (none), 1 (prune) or 2 (prune and check)");
  CHECK_OK(wavert_call_begin(device1, NULL, &state));
  mgpuCuSparseLtSpMM(lt_a, lt_b, lt_c, workspace, compressed, buffer, NULL);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("has no plan (mgpuCuSparseLtSpMMBufferSize first)");
  CHECK_OK(wavert_call_begin(device1, NULL, &state));
  mgpuCusparseLtCreate2To4SpMat(lt_a + 8, 8, 8, a_values, R_16F, NULL);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("is NULL or not 16-byte aligned");

  /* The environment is per device: destroyed on device 1, where it was made. */
  CHECK_OK(wavert_call_begin(device1, NULL, &state));
  mgpuDestroySparseLtEnv();
  CHECK_OK(wavert_call_end(&state));
  CHECK(fake_cusparselt_live_handles() == 0);
  wavert_clear_error();
}

/* $WAVERT_CUSPARSE_LIBRARY names a file that does not exist: every entry point reports it. */
static int run_missing(void) {
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  CHECK(mgpuCreateDnVec(4, NULL, R_64F, NULL) == NULL);
  CHECK(wavert_jit_failed());
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_UNAVAILABLE);
  CHECK_MESSAGE("mgpuCreateDnVec: cannot open the cuSPARSE library "
                "'/nonexistent/libcusparse.so.12' (from $WAVERT_CUSPARSE_LIBRARY)");
  wavert_clear_error();
  mgpuCreateSparseEnv(); /* outside a call: the thread's last error */
  CHECK(wavert_last_status() == WAVERT_ERROR_UNAVAILABLE);
  CHECK_MESSAGE("mgpuCreateSparseEnv: cannot open the cuSPARSE library");
  wavert_clear_error();
  mgpuCreateSparseLtEnv();
  CHECK(wavert_last_status() == WAVERT_ERROR_UNAVAILABLE);
  CHECK_MESSAGE("mgpuCreateSparseLtEnv: cannot open the cuSPARSELt library");
  return 0;
}

/* No override: libcusparse.so.12 in lib64/ of $CUDA_HOME (a link to the stand-in, $FAKE_CUSPARSE)
 * is found. Skipped (77) where the loader finds a real libcusparse by soname. */
static int run_toolkit(void) {
  const char *sonames[] = {"libcusparse.so.12", "libcusparse.so.13", "libcusparse.so.11",
                           "libcusparse.so"};
  for (size_t i = 0; i < sizeof(sonames) / sizeof(sonames[0]); ++i)
    if (dlopen(sonames[i], RTLD_NOW | RTLD_NOLOAD) != NULL ||
        dlopen(sonames[i], RTLD_LAZY | RTLD_LOCAL) != NULL) {
      printf("test_sparse toolkit: the loader finds a real %s; skipped\n", sonames[i]);
      return TEST_SKIP;
    }
  char root[] = "/tmp/wavert-sparse-XXXXXX";
  char folder[64], link[96];
  CHECK(mkdtemp(root) != NULL);
  snprintf(folder, sizeof(folder), "%s/lib64", root);
  snprintf(link, sizeof(link), "%s/libcusparse.so.12", folder);
  CHECK(mkdir(folder, 0700) == 0);
  CHECK(getenv("FAKE_CUSPARSE") != NULL && symlink(getenv("FAKE_CUSPARSE"), link) == 0);
  CHECK(unsetenv("WAVERT_CUSPARSE_LIBRARY") == 0 && setenv("CUDA_HOME", root, 1) == 0);
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device0, NULL, &state));
  mgpuCreateSparseEnv();
  CHECK_OK(wavert_call_end(&state));
  CHECK(fake_cusparse_live_handles() == 1);
  mgpuDestroySparseEnv();
  CHECK(fake_cusparse_live_handles() == 0);
  unlink(link);
  rmdir(folder);
  rmdir(root);
  return 0;
}

int main(int argc, char **argv) {
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device0));
  CHECK_OK(wavert_device_get(kDLCUDA, 1, &device1));
  if (argc > 1 && strcmp(argv[1], "missing") == 0) return run_missing();
  if (argc > 1 && strcmp(argv[1], "toolkit") == 0) return run_toolkit();
  test_spmv_csr();
  test_spmm_sddmm_and_layouts();
  test_spgemm();
  test_argument_errors();
  test_sparselt();
  printf("test_sparse: ok\n");
  return 0;
}
