/* test_launch_floor.c — the driver calls of a launch against fake_cuda, call by call: a host
 * call (wavert_call_begin, wavert_jit_launch, wavert_call_end) whose caller already has the
 * device's context current makes exactly one driver call, cuLaunchKernel; when the caller's
 * current context is another (another device's, none, changed behind libwavert's back between
 * calls as torch's set_device does) the launch still runs in the device's context and the
 * caller's is restored, with the fewest calls the case allows; a launch failure with the
 * context current is reported, not retried; nested calls and wavert_function_launch keep the
 * same rules. */
#include "fake_cuda.h"
#include "test_util.h"
#include "wavert_jit.h"

/* The stand-in's own entry point: what torch's cudaSetDevice does to the thread. */
int cuCtxSetCurrent(void *context);

static const char image[] = "// fake ptx for generated code";
static wavert_device *device0, *device1;
static wavert_kernel *slot0, *slot1;

static int32_t jit_launch(wavert_kernel **slot) {
  return wavert_jit_launch(slot, image, sizeof(image), "scale", 2, 1, 1, 64, 1, 1, 0, NULL,
                           NULL);
}

/* One host call on `device` with `launches` launches; returns wavert_call_end's status. */
static wavert_status host_call(wavert_device *device, int launches) {
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  for (int i = 0; i < launches; ++i) jit_launch(device == device0 ? &slot0 : &slot1);
  return wavert_call_end(&state);
}

/* The driver calls recorded since the last fake_cuda_reset are exactly `expected` (NULL-
 * terminated); prints both sequences otherwise. */
static void check_calls(int line, const char *const *expected) {
  int i = 0;
  while (expected[i] != NULL && fake_cuda_call_at(i) != NULL &&
         strcmp(expected[i], fake_cuda_call_at(i)) == 0)
    ++i;
  if (expected[i] == NULL && fake_cuda_call_at(i) == NULL) return;
  fprintf(stderr, "test_launch_floor.c:%d: driver calls differ at %d\n  expected:", line, i);
  for (int j = 0; expected[j] != NULL; ++j) fprintf(stderr, " %s", expected[j]);
  fprintf(stderr, "\n  recorded:");
  for (int j = 0; fake_cuda_call_at(j) != NULL; ++j) fprintf(stderr, " %s", fake_cuda_call_at(j));
  fprintf(stderr, "\n");
  exit(1);
}
#define CHECK_CALLS(...) check_calls(__LINE__, (const char *const[]){__VA_ARGS__, NULL})

static void *ctx(int ordinal) { return fake_cuda_primary_context(ordinal); }

/* The launch recorded last ran in `context`. */
static void check_last_launch(void *context) {
  CHECK(fake_cuda_launch_count() > 0);
  CHECK(fake_cuda_launch_at(fake_cuda_launch_count() - 1)->context == context);
}

static void test_steady_state(void) {
  CHECK(cuCtxSetCurrent(ctx(0)) == 0);
  CHECK_OK(host_call(device0, 1)); /* first use: module load, context hint */
  CHECK_OK(host_call(device0, 1));
  fake_cuda_reset();
  CHECK_OK(host_call(device0, 1));
  CHECK_CALLS("cuLaunchKernel");
  check_last_launch(ctx(0));
  CHECK(fake_cuda_current_context() == ctx(0));

  fake_cuda_reset();
  CHECK_OK(host_call(device0, 2));
  CHECK_CALLS("cuLaunchKernel", "cuLaunchKernel");

  /* The public launch: the same single call. */
  wavert_function *function = NULL;
  CHECK_OK(wavert_kernel_get_function(slot0, device0, &function));
  fake_cuda_reset();
  CHECK_OK(wavert_function_launch(function, 1, 1, 1, 32, 1, 1, 0, NULL, NULL));
  CHECK_CALLS("cuLaunchKernel");
  check_last_launch(ctx(0));
}

/* The caller's current context is `caller` (another device's, or none): every launch runs in
 * device 0's context and the caller's is back after each call. */
static void check_switched_calls(void *caller) {
  CHECK(cuCtxSetCurrent(ctx(0)) == 0);
  CHECK_OK(host_call(device0, 1)); /* the hint: device 0's context */
  CHECK(cuCtxSetCurrent(caller) == 0); /* changed behind libwavert's back */
  fake_cuda_reset();
  CHECK_OK(host_call(device0, 1));
  /* The tried launch fails (another context is current), the context is entered, the launch
   * retried, the caller's restored. */
  CHECK_CALLS("cuLaunchKernel", "cuCtxGetCurrent", "cuCtxSetCurrent", "cuLaunchKernel",
              "cuCtxSetCurrent");
  CHECK(fake_cuda_launch_count() == 1);
  check_last_launch(ctx(0));
  CHECK(fake_cuda_current_context() == caller);

  /* The hint now says the caller's context: entered first, no failed launch. */
  fake_cuda_reset();
  CHECK_OK(host_call(device0, 1));
  CHECK_CALLS("cuCtxGetCurrent", "cuCtxSetCurrent", "cuLaunchKernel", "cuCtxSetCurrent");
  check_last_launch(ctx(0));
  CHECK(fake_cuda_current_context() == caller);

  /* Several launches of one call switch once. */
  fake_cuda_reset();
  CHECK_OK(host_call(device0, 3));
  CHECK_CALLS("cuCtxGetCurrent", "cuCtxSetCurrent", "cuLaunchKernel", "cuLaunchKernel",
              "cuLaunchKernel", "cuCtxSetCurrent");
  CHECK(fake_cuda_current_context() == caller);

  /* The caller makes device 0's context current again: one check, then the floor. */
  CHECK(cuCtxSetCurrent(ctx(0)) == 0);
  fake_cuda_reset();
  CHECK_OK(host_call(device0, 1));
  CHECK_CALLS("cuCtxGetCurrent", "cuLaunchKernel");
  fake_cuda_reset();
  CHECK_OK(host_call(device0, 1));
  CHECK_CALLS("cuLaunchKernel");
  CHECK(fake_cuda_current_context() == ctx(0));
}

static void test_context_switches(void) {
  check_switched_calls(ctx(1)); /* torch.cuda.set_device(1) with tensors on cuda:0 */
  check_switched_calls(NULL);   /* a fresh thread: no context at all */

  /* The public launch restores the caller's context at once. */
  wavert_function *function = NULL;
  CHECK_OK(wavert_kernel_get_function(slot0, device0, &function));
  CHECK(cuCtxSetCurrent(ctx(1)) == 0);
  for (int i = 0; i < 2; ++i) {
    fake_cuda_reset();
    CHECK_OK(wavert_function_launch(function, 1, 1, 1, 32, 1, 1, 0, NULL, NULL));
    check_last_launch(ctx(0));
    CHECK(fake_cuda_current_context() == ctx(1));
  }
  CHECK_CALLS("cuCtxGetCurrent", "cuCtxSetCurrent", "cuLaunchKernel", "cuCtxSetCurrent");
}

static void test_failures(void) {
  /* A launch that fails with the context current is the launch's own error: checked once,
   * not retried, reported with the driver's message. */
  CHECK(cuCtxSetCurrent(ctx(0)) == 0);
  CHECK_OK(host_call(device0, 1));
  fake_cuda_reset();
  fake_cuda_fail_next("cuLaunchKernel", 700);
  CHECK_STATUS(host_call(device0, 1), WAVERT_ERROR_DRIVER);
  CHECK_MESSAGE("cuLaunchKernel: CUDA_ERROR_ILLEGAL_ADDRESS");
  CHECK_CALLS("cuLaunchKernel", "cuCtxGetCurrent");
  CHECK(fake_cuda_launch_count() == 0);
  CHECK(fake_cuda_current_context() == ctx(0));

  /* Failing after a switch: the caller's context is still restored. */
  CHECK(cuCtxSetCurrent(ctx(1)) == 0);
  CHECK_OK(host_call(device0, 1)); /* hint: device 1's context */
  fake_cuda_reset();
  fake_cuda_fail_next("cuLaunchKernel", 700);
  CHECK_STATUS(host_call(device0, 1), WAVERT_ERROR_DRIVER);
  CHECK_MESSAGE("cuLaunchKernel: CUDA_ERROR_ILLEGAL_ADDRESS");
  CHECK(fake_cuda_current_context() == ctx(1));

  /* Entering fails: the error names the driver call, nothing is launched or left switched. */
  fake_cuda_reset();
  fake_cuda_fail_next("cuCtxSetCurrent", 201);
  CHECK_STATUS(host_call(device0, 1), WAVERT_ERROR_DRIVER);
  CHECK_MESSAGE("cuCtxSetCurrent: CUDA_ERROR_INVALID_CONTEXT");
  CHECK(fake_cuda_launch_count() == 0);
  CHECK(fake_cuda_current_context() == ctx(1));
}

static void test_nested(void) {
  /* The outer call switched to device 0; an inner call on device 1 switches from there and
   * restores device 0's context, which the outer call's next launch uses without a check. */
  CHECK(cuCtxSetCurrent(NULL) == 0);
  wavert_call_state outer, inner;
  CHECK_OK(wavert_call_begin(device0, NULL, &outer));
  CHECK(jit_launch(&slot0) == WAVERT_OK);
  CHECK(fake_cuda_current_context() == ctx(0));
  CHECK_OK(wavert_call_begin(device1, NULL, &inner));
  CHECK(jit_launch(&slot1) == WAVERT_OK);
  check_last_launch(ctx(1));
  CHECK_OK(wavert_call_end(&inner));
  CHECK(fake_cuda_current_context() == ctx(0));
  fake_cuda_reset();
  CHECK(jit_launch(&slot0) == WAVERT_OK);
  CHECK_CALLS("cuLaunchKernel");
  check_last_launch(ctx(0));
  CHECK_OK(wavert_call_end(&outer));
  CHECK(fake_cuda_current_context() == NULL);
}

int main(void) {
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device0));
  CHECK_OK(wavert_device_get(kDLCUDA, 1, &device1));
  test_steady_state();
  test_context_switches();
  test_failures();
  test_nested();
  wavert_kernel_release(slot0);
  wavert_kernel_release(slot1);
  puts("test_launch_floor: ok");
  return 0;
}
