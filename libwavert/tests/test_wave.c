/* test_wave.c — Wave's host-wrapper ABI (wave.c) against fake_cuda: the wave_get_* helpers on
 * registered objects (values, layouts, devices, every refusal recorded with the argument's
 * name, position and value, harmless results), pointers that are not registered objects,
 * calls without objects, nested calls, and wave_load_kernel / wave_launch_kernel (one load
 * per handle across threads, the call's stream, clusters, nothing launched after an error). */
#include <math.h>
#include <pthread.h>

#include "fake_cuda.h"
#include "test_util.h"
#include "wavert_jit.h"

static const char image[] = "// fake ptx for Wave's lowered launches";
static wavert_device *device;

static wavert_object tensor(const DLTensor *t, const char *name, int32_t position) {
  return (wavert_object){.kind = WAVERT_OBJECT_TENSOR, .position = position, .name = name,
                         .type_name = "Tensor", .tensor = t};
}

static void test_helpers(void) {
  int64_t shape[2] = {16, 8}, transposed[2] = {1, 16}, one_row[2] = {1, 8};
  DLTensor t = {(void *)0x10000, {kDLCUDA, 0}, 2, {kDLFloat, 16, 1}, shape, NULL, 64};
  DLTensor strided = t, row = t, misaligned = t, other = t, subbyte = t, shapeless = t;
  shapeless.shape = NULL;
  strided.strides = transposed;
  row.shape = one_row; /* a stride on a size-1 dimension is ignored */
  row.strides = (int64_t[2]){999, 1};
  misaligned.byte_offset = 1;
  other.device.device_id = 1;
  subbyte.dtype.bits = 4;
  wavert_object objects[] = {
      tensor(&t, "a", 0),
      {.kind = WAVERT_OBJECT_INT, .position = 1, .name = "n", .type_name = "int",
       .int_value = 7, .int_fits = 1},
      {.kind = WAVERT_OBJECT_FLOAT, .position = 2, .name = "x", .type_name = "float",
       .float_value = 2.5},
      {.kind = WAVERT_OBJECT_INT, .position = 3, .name = "big", .type_name = "int",
       .text = "1180591620717411303424"},
      {.kind = WAVERT_OBJECT_OTHER, .position = 4, .name = "s", .type_name = "str",
       .text = "'abc'"},
      tensor(&strided, "t", 5),
      tensor(&row, "row", 6),
      tensor(&misaligned, "mis", 7),
      tensor(&other, "dev1", 8),
      tensor(&subbyte, "nib", 9),
      {.kind = WAVERT_OBJECT_INT, .position = 10, .name = "huge53", .type_name = "int",
       .int_value = (INT64_C(1) << 53) + 1, .int_fits = 1},
      tensor(&shapeless, "noshape", 11),
  };
  wavert_call_state state;
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  CHECK_OK(wavert_call_set_objects(objects, (int32_t)(sizeof objects / sizeof *objects)));
  wavert_memref_1d m;
  wavert_jit_wave_get_buffer(&m, &objects[0]);
  CHECK(m.allocated == (void *)0x10040 && m.aligned == (void *)0x10040 && m.offset == 0 &&
        m.sizes[0] == 16 * 8 * 2 && m.strides[0] == 1);
  CHECK(wavert_jit_wave_get_dim(&objects[0], 0) == 16);
  CHECK(wavert_jit_wave_get_dim(&objects[0], 1) == 8);
  CHECK(wavert_jit_wave_get_int64(&objects[1]) == 7);
  CHECK(wavert_jit_wave_get_float64(&objects[1]) == 7.0);
  CHECK(wavert_jit_wave_get_float64(&objects[2]) == 2.5);
  wavert_jit_wave_get_buffer(&m, &objects[6]);
  CHECK(m.aligned == (void *)0x10040 && m.sizes[0] == 8 * 2);
  CHECK(!wavert_jit_failed());
  CHECK_OK(wavert_call_end(&state));

  /* Each refusal: recorded, named, a harmless value; the call reports the first. */
  struct {
    int helper; /* 0 buffer, 1 dim(index 2), 2 int64, 3 float64 */
    int object;
    const char *message;
  } refusals[] = {
      {1, 0, "wave_get_dim: argument 'a' (#0, Tensor of rank 2) has no "
              "dimension 2 (0 <= index < 2)"},
      {2, 2, "wave_get_int64: argument 'x' (#2, float 2.5) is not an int"},
      {2, 3, "wave_get_int64: argument 'big' (#3, int "
              "1180591620717411303424) does not fit in int64"},
      {3, 4, "wave_get_float64: argument 's' (#4, str 'abc') is not a float or an int"},
      {3, 10, "wave_get_float64: argument 'huge53' (#10, int "
              "9007199254740993) is not exactly representable"},
      {0, 1, "wave_get_buffer: argument 'n' (#1, int 7) is not a tensor"},
      {0, 5, "wave_get_buffer: argument 't' (#5, Tensor of rank 2) is not compact row-major"},
      {0, 7, "wave_get_buffer: argument 'mis' (#7, Tensor of rank 2) has "
              "a first element that is not aligned"},
      {0, 8, "wave_get_buffer: argument 'dev1' (#8, Tensor of rank 2) is "
              "on device (2, 1), but the call runs on (2, 0)"},
      {0, 9, "wave_get_buffer: argument 'nib' (#9, Tensor of rank 2) has sub-byte elements"},
      {1, 11, "wave_get_dim: argument 'noshape' (#11, Tensor of rank 2) is "
              "a DLTensor with a negative rank or without a shape"},
  };
  for (size_t i = 0; i < sizeof refusals / sizeof *refusals; ++i) {
    CHECK_OK(wavert_call_begin(device, NULL, &state));
    CHECK_OK(wavert_call_set_objects(objects, (int32_t)(sizeof objects / sizeof *objects)));
    const wavert_object *o = &objects[refusals[i].object];
    switch (refusals[i].helper) {
    case 0:
      m.allocated = (void *)1;
      wavert_jit_wave_get_buffer(&m, o);
      CHECK(m.allocated == NULL && m.aligned == NULL && m.sizes[0] == 0);
      break;
    case 1: CHECK(wavert_jit_wave_get_dim(o, 2) == 0); break;
    case 2: CHECK(wavert_jit_wave_get_int64(o) == 0); break;
    default: CHECK(wavert_jit_wave_get_float64(o) == 0.0); break;
    }
    CHECK(wavert_jit_failed());
    CHECK(wavert_jit_wave_get_int64(&objects[1]) == 7); /* later helpers still answer */
    CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
    if (strstr(wavert_last_error(), refusals[i].message) == NULL) {
      fprintf(stderr, "refusal %zu: got '%s'\n  want '%s'\n", i, wavert_last_error(),
              refusals[i].message);
      exit(1);
    }
  }
  CHECK(wavert_jit_wave_get_dim(&objects[0], -1) == 0); /* outside a call: set, not recorded */
  CHECK_MESSAGE("no host call in progress");
}

static void test_pointers_not_registered(void) {
  int64_t shape[1] = {4};
  DLTensor t = {(void *)0x10000, {kDLCUDA, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  wavert_object objects[2] = {tensor(&t, "a", 0), tensor(&t, "b", 1)};
  wavert_call_state state;
  const void *stray[] = {NULL, (const char *)&objects[0] + 8, &objects[2], (void *)0x5100};
  for (size_t i = 0; i < sizeof stray / sizeof *stray; ++i) {
    CHECK_OK(wavert_call_begin(device, (void *)0x5100, &state));
    CHECK_OK(wavert_call_set_objects(objects, 2));
    CHECK(wavert_jit_wave_get_dim(stray[i], 0) == 0);
    CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
    CHECK_MESSAGE("is not one of the call's 2 object arguments");
  }
  /* A call without objects, and nested calls: the inner call's objects only, the outer's
   * back after it ends. */
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  CHECK(wavert_jit_wave_get_dim(&objects[0], 0) == 0);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  CHECK_OK(wavert_call_set_objects(objects, 1));
  wavert_call_state inner;
  CHECK_OK(wavert_call_begin(device, NULL, &inner));
  CHECK_OK(wavert_call_set_objects(objects + 1, 1));
  CHECK(wavert_jit_wave_get_dim(&objects[1], 0) == 4);
  CHECK_OK(wavert_call_end(&inner));
  CHECK(wavert_jit_wave_get_dim(&objects[0], 0) == 4);
  CHECK_OK(wavert_call_end(&state));
  CHECK_STATUS(wavert_call_set_objects(objects, 1), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  CHECK_STATUS(wavert_call_set_objects(NULL, 1), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_STATUS(wavert_call_set_objects(objects, -1), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_OK(wavert_call_end(&state));
}

static void *handle; /* a generated module's kernel handle */

static void launch(void *stream, int64_t cx) {
  void *fn = wavert_jit_wave_load_kernel(stream, &handle, image, sizeof image, "read_write");
  wavert_jit_wave_launch_kernel(stream, fn, 0, 2, 2, 1, 64, 1, 1, cx, cx, 1, NULL, 0);
}

static void *launch_thread(void *unused) {
  (void)unused;
  wavert_call_state state;
  for (int i = 0; i < 50; ++i) {
    CHECK_OK(wavert_call_begin(device, NULL, &state));
    launch(NULL, 1);
    CHECK_OK(wavert_call_end(&state));
  }
  return NULL;
}

static void test_lowered_launches(void) {
  wavert_call_state state;
  fake_cuda_reset();
  CHECK(wavert_jit_wave_load_kernel(NULL, &handle, image, sizeof image, "k") == NULL);
  CHECK_MESSAGE("wave_load_kernel: no host call in progress");
  CHECK(handle == NULL);
  pthread_t threads[4];
  for (int i = 0; i < 4; ++i) CHECK(pthread_create(&threads[i], NULL, launch_thread, NULL) == 0);
  for (int i = 0; i < 4; ++i) CHECK(pthread_join(threads[i], NULL) == 0);
  CHECK(handle != NULL);
  CHECK(fake_cuda_calls("cuModuleLoadDataEx") == 1); /* one load per handle, whatever the race */
  CHECK(fake_cuda_launch_count() == 200);
  CHECK(fake_cuda_launch_at(0)->grid[0] == 2 && fake_cuda_launch_at(0)->block[0] == 64);
  CHECK(fake_cuda_launch_at(0)->cluster[0] == 0); /* a 1x1x1 cluster is a plain launch */

  void *call_stream = (void *)(uintptr_t)0x5100, *own = (void *)(uintptr_t)0x5200;
  fake_cuda_reset();
  CHECK_OK(wavert_call_begin(device, call_stream, &state));
  launch(NULL, 1);
  launch(own, 2);
  CHECK_OK(wavert_call_end(&state));
  CHECK(fake_cuda_launch_count() == 2);
  CHECK(fake_cuda_launch_at(0)->stream == call_stream && fake_cuda_launch_at(1)->stream == own);
  CHECK(fake_cuda_launch_at(1)->cluster[0] == 2 && fake_cuda_launch_at(1)->cluster[1] == 2);

  /* A cluster that does not divide the grid, then a load and a launch: nothing launched. */
  fake_cuda_reset();
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  launch(NULL, 4);
  CHECK(wavert_jit_failed());
  launch(NULL, 1);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("grid x = 2 is not a multiple of cluster x = 4");
  CHECK(fake_cuda_launch_count() == 0);

  /* A helper's error stops the lowered launch after it too. */
  int64_t shape[1] = {4};
  DLTensor t = {(void *)0x10000, {kDLCUDA, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  wavert_object objects[1] = {tensor(&t, "a", 0)};
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  CHECK_OK(wavert_call_set_objects(objects, 1));
  CHECK(wavert_jit_wave_get_int64(&objects[0]) == 0);
  launch(NULL, 1);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("wave_get_int64: argument 'a' (#0, Tensor of rank 1) is not an int");
  CHECK(fake_cuda_launch_count() == 0);

  /* Bad launch arguments are recorded, never passed to the driver. */
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  wavert_jit_wave_launch_kernel(NULL, NULL, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, NULL, 0);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("wave_launch_kernel: function is NULL");
  CHECK_OK(wavert_call_begin(device, NULL, &state));
  CHECK(wavert_jit_wave_load_kernel(NULL, &handle, image, 0, "k") == NULL);
  CHECK_STATUS(wavert_call_end(&state), WAVERT_ERROR_INVALID_ARGUMENT);
  CHECK_MESSAGE("image_size = 0 is not positive");
  CHECK(fake_cuda_launch_count() == 0);
  wavert_kernel_release(handle);
  handle = NULL;
}

int main(void) {
  CHECK_OK(wavert_device_get(kDLCUDA, 0, &device));
  test_helpers();
  test_pointers_not_registered();
  test_lowered_launches();
  puts("test_wave: ok");
  return 0;
}
