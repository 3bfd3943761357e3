/* test_launch_context_gpu.c — what launch.c's tried launch relies on, on the real CUDA driver:
 * a host-call launch whose device context is not current (a context of the caller's own on
 * the same device, no context at all, another GPU's primary context) still runs exactly once
 * on the device, and the caller's context is current again afterwards. A kernel that adds 1
 * to a counter counts the runs: a launch that ran in the wrong context and again after the
 * switch would count 2. Exits 77 (skipped) without libcuda.so.1 or a device. */
#include <dlfcn.h>

#include "test_util.h"
#include "wavert_jit.h"

static const char ptx[] =
    ".version 6.0\n.target sm_52\n.address_size 64\n"
    ".visible .entry bump(.param .u64 counter)\n{\n"
    "  .reg .b64 %rd<2>;\n  .reg .b32 %r<2>;\n"
    "  ld.param.u64 %rd1, [counter];\n  atom.add.u32 %r1, [%rd1], 1;\n  ret;\n}\n";

typedef int (*ctx_create_fn)(void **, unsigned, int);
typedef int (*ctx_destroy_fn)(void *);
typedef int (*ctx_set_fn)(void *);
typedef int (*ctx_get_fn)(void **);
static ctx_set_fn set_current;
static ctx_get_fn get_current;

static wavert_device *device;
static wavert_kernel *slot;
static void *counter;

/* One host call on the device launching bump once on the legacy default stream. */
static void bump_call(void) {
  wavert_call_state state;
  void *params[] = {&counter};
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  CHECK(wavert_jit_launch(&slot, ptx, sizeof(ptx), "bump", 1, 1, 1, 1, 1, 1, 0, NULL, params) ==
        WAVERT_OK);
  CHECK_OK(wavert_call_end(&state));
}

static uint32_t read_counter(void) {
  uint32_t value = 0;
  CHECK_OK(wavert_device_synchronize(device));
  CHECK_OK(wavert_memory_copy(device, &value, counter, sizeof(value), NULL));
  return value;
}

/* With `caller` current (after a call that left the context hint on the device's own
 * context), a call runs bump once and leaves `caller` current. */
static void check_from(const char *what, void *primary, void *caller) {
  uint32_t before = read_counter();
  CHECK(set_current(primary) == 0);
  bump_call(); /* hint: the device's context */
  CHECK(set_current(caller) == 0);
  bump_call(); /* tried with `caller` current */
  bump_call(); /* entered first */
  void *now = (void *)(uintptr_t)1;
  CHECK(get_current(&now) == 0);
  if (now != caller) {
    fprintf(stderr, "%s: the caller's context was not restored\n", what);
    exit(1);
  }
  uint32_t after = read_counter();
  if (after != before + 3) {
    fprintf(stderr, "%s: %u runs for 3 launches\n", what, after - before);
    exit(1);
  }
}

int main(void) {
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == NULL || wavert_device_get(kDLCUDA, 0, &device) != WAVERT_OK) {
    printf("skipped: no CUDA driver or device\n");
    return TEST_SKIP;
  }
  ctx_create_fn create = (ctx_create_fn)dlsym(cuda, "cuCtxCreate_v2");
  ctx_destroy_fn destroy = (ctx_destroy_fn)dlsym(cuda, "cuCtxDestroy_v2");
  set_current = (ctx_set_fn)dlsym(cuda, "cuCtxSetCurrent");
  get_current = (ctx_get_fn)dlsym(cuda, "cuCtxGetCurrent");
  CHECK(create != NULL && destroy != NULL && set_current != NULL && get_current != NULL);
  CHECK_OK(wavert_memory_alloc(device, sizeof(uint32_t), &counter));
  CHECK_OK(wavert_memory_set(device, counter, 0, 4, 1, NULL));

  /* The device's primary context, as torch and CuPy leave it current. */
  void *primary = NULL;
  CHECK(set_current(NULL) == 0);
  bump_call(); /* enters the primary context and restores "none" */
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  void *params[] = {&counter};
  CHECK(wavert_jit_launch(&slot, ptx, sizeof(ptx), "bump", 1, 1, 1, 1, 1, 1, 0, NULL, params) ==
        WAVERT_OK);
  CHECK(get_current(&primary) == 0 && primary != NULL); /* kept entered until the call ends */
  CHECK_OK(wavert_call_end(&state));
  CHECK(read_counter() == 2);

  check_from("no current context", primary, NULL);

  void *own = NULL; /* a context of the caller's own on the same device */
  CHECK(create(&own, 0, 0) == 0);
  check_from("the caller's own context", primary, own);
  CHECK(set_current(NULL) == 0);
  CHECK(destroy(own) == 0);

  int32_t count = 0;
  CHECK_OK(wavert_device_count(kDLCUDA, &count));
  if (count >= 2) { /* torch.cuda.set_device(1) with tensors on cuda:0 */
    void *other = NULL;
    typedef int (*retain_fn)(void **, int);
    retain_fn retain = (retain_fn)dlsym(cuda, "cuDevicePrimaryCtxRetain");
    CHECK(retain != NULL && retain(&other, 1) == 0);
    check_from("another GPU's primary context", primary, other);
  } else {
    printf("one GPU: the other-GPU case is not run\n");
  }
  CHECK(set_current(NULL) == 0);
  wavert_kernel_release(slot);
  CHECK_OK(wavert_memory_free(device, counter));
  puts("test_launch_context_gpu: ok");
  return 0;
}
