/* test_sparse_gpu.c — the sparse mgpu* entry points on a real GPU with the real libraries, as
 * MLIR's lowered host code calls them: SpMV on CSR (cuSPARSE) and a 2:4 SpMM pruned, checked
 * and compressed (cuSPARSELt), results compared with what the host computes. Exits 77 without
 * libcuda.so.1, a CUDA device or cuSPARSE (the cuSPARSELt part is skipped, with a line saying
 * so, without cuSPARSELt). */
#include <stdalign.h>

#include "test_util.h"
#include "wavert_jit.h"
#include "wavert_mgpu.h"

enum { R_64F = 1, R_16F = 2, INDEX_32I = 2 };

static void *to_device(const void *host, size_t bytes) {
  void *ptr = mgpuMemAlloc(bytes, NULL, 0);
  CHECK(ptr != NULL);
  mgpuMemcpy(ptr, (void *)host, bytes, NULL);
  return ptr;
}

/* y = A x + y for A = [[1, 0, 2, 0], [0, 0, 0, 0], [0, 3, 0, 4]] in CSR. */
static void spmv(void) {
  const int32_t pos[] = {0, 2, 2, 4}, idx[] = {0, 2, 1, 3};
  const double val[] = {1, 2, 3, 4}, x[] = {1, 2, 3, 4};
  double y[] = {10, 20, 30};
  void *d_pos = to_device(pos, sizeof(pos)), *d_idx = to_device(idx, sizeof(idx));
  void *d_val = to_device(val, sizeof(val)), *d_x = to_device(x, sizeof(x));
  void *d_y = to_device(y, sizeof(y));
  void *a = mgpuCreateCsr(3, 4, 4, d_pos, d_idx, d_val, INDEX_32I, INDEX_32I, R_64F, NULL);
  void *vx = mgpuCreateDnVec(4, d_x, R_64F, NULL);
  void *vy = mgpuCreateDnVec(3, d_y, R_64F, NULL);
  CHECK(a != NULL && vx != NULL && vy != NULL);
  intptr_t size = mgpuSpMVBufferSize(0, a, vx, vy, R_64F, NULL);
  CHECK(size >= 0 && !wavert_jit_failed());
  void *buffer = size > 0 ? mgpuMemAlloc((uint64_t)size, NULL, 0) : NULL;
  mgpuSpMV(0, a, vx, vy, R_64F, buffer, NULL);
  mgpuDestroySpMat(a, NULL);
  mgpuDestroyDnVec(vx, NULL);
  mgpuDestroyDnVec(vy, NULL);
  mgpuMemcpy(y, d_y, sizeof(y), NULL);
  mgpuStreamSynchronize(NULL);
  CHECK(!wavert_jit_failed());
  CHECK(y[0] == 10 + 1 * 1 + 2 * 3 && y[1] == 20 && y[2] == 30 + 3 * 2 + 4 * 4);
  void *buffers[] = {d_pos, d_idx, d_val, d_x, d_y, buffer};
  for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); ++i) mgpuMemFree(buffers[i], NULL);
  printf("test_sparse_gpu: SpMV on CSR: ok\n");
}

/* MLIR's allocations for the cuSPARSELt matrices. */
static alignas(16) unsigned char lt_a[44104], lt_b[11032], lt_c[11032];

/* C = A B + C, 32x32 f16: A keeps columns 4q, 4q+1 (1.0), B = 1.0, C = 0, so C = 16. */
static void spmm_2_4(void) {
  enum { N = 32 };
  static uint16_t a[N * N], b[N * N], c[N * N];
  for (int i = 0; i < N * N; ++i) {
    a[i] = (i % N) % 4 < 2 ? 0x3C00 : 0; /* 1.0 */
    b[i] = 0x3C00;
    c[i] = 0;
  }
  mgpuCreateSparseLtEnv();
  if (wavert_jit_failed()) return; /* reported by the caller */
  void *d_a = to_device(a, sizeof(a)), *d_b = to_device(b, sizeof(b));
  void *d_c = to_device(c, sizeof(c));
  mgpuCusparseLtCreate2To4SpMat(lt_a, N, N, d_a, R_16F, NULL);
  mgpuCreateCuSparseLtDnMat(lt_b, N, N, d_b, R_16F, NULL);
  mgpuCreateCuSparseLtDnMat(lt_c, N, N, d_c, R_16F, NULL);
  int64_t sizes[3] = {0, 0, 0};
  mgpuCuSparseLtSpMMBufferSize(sizes, 0, 0, lt_a, lt_b, lt_c, /*16-bit float*/ 0,
                               /*prune and check*/ 2, NULL);
  CHECK(!wavert_jit_failed());
  void *w[3] = {NULL, NULL, NULL};
  for (int i = 0; i < 3; ++i)
    if (sizes[i] > 0) w[i] = mgpuMemAlloc((uint64_t)sizes[i], NULL, 0);
  mgpuCuSparseLtSpMM(lt_a, lt_b, lt_c, w[0], w[1], w[2], NULL);
  mgpuDestroyCuSparseLtSpMat(lt_a, NULL);
  mgpuDestroyCuSparseLtDnMat(lt_b, NULL);
  mgpuDestroyCuSparseLtDnMat(lt_c, NULL);
  mgpuMemcpy(c, d_c, sizeof(c), NULL);
  mgpuStreamSynchronize(NULL);
  mgpuDestroySparseLtEnv();
  CHECK(!wavert_jit_failed());
  for (int i = 0; i < N * N; ++i) CHECK(c[i] == 0x4C00); /* 16.0 */
  void *buffers[] = {d_a, d_b, d_c, w[0], w[1], w[2]};
  for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); ++i) mgpuMemFree(buffers[i], NULL);
  printf("test_sparse_gpu: 2:4 SpMM on cuSPARSELt: ok\n");
}

int main(void) {
  wavert_device *device = NULL;
  int32_t count = 0;
  if (wavert_device_count(kDLCUDA, &count) != WAVERT_OK || count == 0 ||
      wavert_device_get(kDLCUDA, 0, &device) != WAVERT_OK) {
    printf("test_sparse_gpu: no CUDA device (%s); skipped\n", wavert_last_error());
    return TEST_SKIP;
  }
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  mgpuCreateSparseEnv();
  wavert_status status = wavert_call_end(&state);
  if (status == WAVERT_ERROR_UNAVAILABLE) {
    printf("test_sparse_gpu: %s; skipped\n", wavert_last_error());
    return TEST_SKIP;
  }
  CHECK_OK(status);
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  spmv();
  mgpuDestroySparseEnv();
  CHECK_OK(wavert_call_end(&state));
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  spmm_2_4();
  status = wavert_call_end(&state);
  if (status == WAVERT_ERROR_UNAVAILABLE && strstr(wavert_last_error(), "cuSPARSELt") != NULL)
    printf("test_sparse_gpu: 2:4 SpMM not run: %s\n", wavert_last_error());
  else
    CHECK_OK(status);
  return 0;
}
