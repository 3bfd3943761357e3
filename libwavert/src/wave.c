/*
 * wave.c — Wave's host-wrapper convention on libwavert (wavert_jit.h): the wave_get_* helpers,
 * which read the objects registered for the current call (wavert_call_set_objects), and Wave's
 * lowered launch ABI (wave_load_kernel / wave_launch_kernel) on the call's device, CUDA or HIP.
 * Every error is recorded in the call (call.c) and a harmless value returned: nothing is
 * thrown through generated code, and generated code returns at its next wavert_jit_failed
 * check, before any launch.
 */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>

#include "mgpu_internal.h"

/* "int 5", "float 2.5", "str 'abc'", "torch.Tensor float16 of rank 2": the object for messages. */
static void describe(const wavert_object *o, char *buf, size_t size) {
  const char *type = o->type_name != NULL ? o->type_name : "object";
  switch (o->kind) {
  case WAVERT_OBJECT_INT:
    if (o->int_fits)
      snprintf(buf, size, "%s %" PRId64, type, o->int_value);
    else
      snprintf(buf, size, "%s %s", type, o->text);
    break;
  case WAVERT_OBJECT_FLOAT: snprintf(buf, size, "%s %.17g", type, o->float_value); break;
  case WAVERT_OBJECT_TENSOR:
    snprintf(buf, size, "%s of rank %d", type, o->tensor != NULL ? (int)o->tensor->ndim : -1);
    break;
  default: snprintf(buf, size, "%s %s", type, o->text); break;
  }
}

/* Record INVALID_ARGUMENT "<helper>: argument '<name>' (#<position>, <object>) <what>". */
static void refuse(const char *helper, const wavert_object *o, const char *what) {
  char seen[160];
  describe(o, seen, sizeof seen);
  wavert__call_record(wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                                    "%s: argument '%s' (#%d, %s) %s", helper,
                                    o->name != NULL ? o->name : "?", (int)o->position, seen,
                                    what));
}

/* The registered tensor `object`, or NULL (error recorded). */
static const DLTensor *tensor_of(const char *helper, const void *object) {
  const wavert_object *o = wavert__call_object(helper, object);
  if (o == NULL) return NULL;
  if (o->kind != WAVERT_OBJECT_TENSOR || o->tensor == NULL) {
    refuse(helper, o, "is not a tensor (an object with __dlpack__)");
    return NULL;
  }
  if (o->tensor->ndim < 0 || (o->tensor->ndim > 0 && o->tensor->shape == NULL)) {
    refuse(helper, o, "is a DLTensor with a negative rank or without a shape");
    return NULL;
  }
  return o->tensor;
}

/* Whether `t` is compact row-major (strides of size-1 dimensions ignored); its element count
 * in *out_count when its shape is valid (checked multiplication). */
static bool compact_row_major(const DLTensor *t, int64_t *out_count, bool *out_valid) {
  int64_t count = 1;
  *out_valid = true;
  for (int32_t d = 0; d < t->ndim; ++d) {
    if (t->shape[d] < 0 || (t->shape[d] > 0 && count > INT64_MAX / t->shape[d])) {
      *out_valid = false;
      return false;
    }
    count *= t->shape[d];
  }
  *out_count = count;
  if (t->strides == NULL || count == 0) return true;
  int64_t expected = 1;
  for (int32_t d = t->ndim - 1; d >= 0; --d) {
    if (t->shape[d] != 1 && t->strides[d] != expected) return false;
    expected *= t->shape[d];
  }
  return true;
}

static bool same_device(DLDevice tensor, DLDevice call) {
  bool type_fits = tensor.device_type == call.device_type ||
                   (call.device_type == kDLCUDA && tensor.device_type == kDLCUDAManaged);
  return type_fits && tensor.device_id == call.device_id;
}

void wavert_jit_wave_get_buffer(wavert_memref_1d *out, const void *object) {
  static const char helper[] = "wave_get_buffer";
  if (out == NULL) {
    wavert__call_record(wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "%s: no result", helper));
    return;
  }
  *out = (wavert_memref_1d){NULL, NULL, 0, {0}, {1}};
  const DLTensor *t = tensor_of(helper, object);
  if (t == NULL) return;
  const wavert_object *o = object;
  wavert_device *device = wavert__call_current(NULL);
  DLDevice call = {kDLCPU, 0};
  if (wavert_device_dl(device, &call) != WAVERT_OK) {
    refuse(helper, o, "is read outside a call of a compiled function (no call device)");
    return;
  }
  if (!same_device(t->device, call)) {
    char what[96];
    snprintf(what, sizeof what, "is on device (%d, %d), but the call runs on (%d, %d)",
             (int)t->device.device_type, (int)t->device.device_id, (int)call.device_type,
             (int)call.device_id);
    refuse(helper, o, what);
    return;
  }
  const uint64_t bits = (uint64_t)t->dtype.bits * t->dtype.lanes;
  if (bits == 0 || bits % 8 != 0) {
    refuse(helper, o, "has sub-byte elements, which a byte buffer cannot address");
    return;
  }
  int64_t count = 0;
  bool valid;
  if (!compact_row_major(t, &count, &valid)) {
    refuse(helper, o, valid ? "is not compact row-major (the host code reads it as a flat "
                              "array): pass a contiguous tensor (.contiguous())"
                            : "has a negative size or more elements than int64 holds");
    return;
  }
  const int64_t item = (int64_t)(bits / 8);
  if (count > INT64_MAX / item) {
    refuse(helper, o, "has more bytes than int64 holds");
    return;
  }
  const uintptr_t first = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
  if (first < (uintptr_t)t->data || (count > 0 && first % (uintptr_t)item != 0)) {
    refuse(helper, o, "has a first element that is not aligned to its element size "
                      "(data + byte_offset)");
    return;
  }
  out->allocated = (void *)first;
  out->aligned = (void *)first;
  out->sizes[0] = count * item;
}

int64_t wavert_jit_wave_get_dim(const void *object, int32_t index) {
  static const char helper[] = "wave_get_dim";
  const DLTensor *t = tensor_of(helper, object);
  if (t == NULL) return 0;
  if (index < 0 || index >= t->ndim) {
    char what[96];
    snprintf(what, sizeof what, "has no dimension %d (0 <= index < %d)", (int)index,
             (int)t->ndim);
    refuse(helper, object, what);
    return 0;
  }
  return t->shape[index];
}

int64_t wavert_jit_wave_get_int64(const void *object) {
  static const char helper[] = "wave_get_int64";
  const wavert_object *o = wavert__call_object(helper, object);
  if (o == NULL) return 0;
  if (o->kind != WAVERT_OBJECT_INT) {
    refuse(helper, o, "is not an int");
    return 0;
  }
  if (!o->int_fits) {
    refuse(helper, o, "does not fit in int64 [-2^63, 2^63 - 1]");
    return 0;
  }
  return o->int_value;
}

double wavert_jit_wave_get_float64(const void *object) {
  static const char helper[] = "wave_get_float64";
  const wavert_object *o = wavert__call_object(helper, object);
  if (o == NULL) return 0.0;
  if (o->kind == WAVERT_OBJECT_FLOAT) return o->float_value;
  if (o->kind != WAVERT_OBJECT_INT) {
    refuse(helper, o, "is not a float or an int");
    return 0.0;
  }
  const int64_t exact = INT64_C(1) << 53;
  if (!o->int_fits || o->int_value < -exact || o->int_value > exact) {
    refuse(helper, o, "is not exactly representable as float64 (|value| <= 2^53)");
    return 0.0;
  }
  return (double)o->int_value;
}

void *wavert_jit_wave_load_kernel(void *stream, void **handle, const void *image,
                                  int64_t image_size, const char *name) {
  (void)stream; /* loading is not stream-ordered */
  if (wavert__call_current(NULL) == NULL) {
    wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                  "wave_load_kernel: no host call in progress (wavert_call_begin)");
    return NULL;
  }
  if (wavert_jit_failed()) return NULL;
  if (handle == NULL || image == NULL || image_size <= 0 || name == NULL) {
    wavert__call_record(wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                                      "wave_load_kernel: handle, image or name is NULL, or "
                                      "image_size = %" PRId64 " is not positive",
                                      image_size));
    return NULL;
  }
  wavert_function *function = NULL;
  if (wavert__call_record(wavert__call_function((wavert_kernel **)handle, image, image_size,
                                                name, &function)) != WAVERT_OK)
    return NULL;
  return function;
}

void wavert_jit_wave_launch_kernel(void *stream, void *function, int32_t dynamic_shared_bytes,
                                   int64_t gx, int64_t gy, int64_t gz, int64_t bx, int64_t by,
                                   int64_t bz, int64_t cx, int64_t cy, int64_t cz, void **args,
                                   int32_t nargs) {
  static const char helper[] = "wave_launch_kernel";
  void *call_stream = NULL;
  wavert_device *device = wavert__call_current(&call_stream);
  if (device == NULL) {
    wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "%s: no host call in progress", helper);
    return;
  }
  if (wavert_jit_failed()) return; /* nothing is launched after an error */
  if (function == NULL || nargs < 0 || (nargs > 0 && args == NULL)) {
    wavert__call_record(wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                                      "%s: function is NULL, or %d arguments at %p", helper,
                                      (int)nargs, (void *)args));
    return;
  }
  const int64_t cluster[3] = {cx, cy, cz}, grid[3] = {gx, gy, gz};
  uint32_t cluster32[3] = {1, 1, 1};
  const bool clustered = cx != 1 || cy != 1 || cz != 1;
  if (clustered &&
      wavert__call_record(wavert__cluster_extents(device->backend, helper, "(loaded kernel)",
                                                  cluster, grid, cluster32)) != WAVERT_OK)
    return;
  wavert__call_record(wavert__function_launch_leased(
      function, clustered ? cluster32 : NULL, gx, gy, gz, bx, by, bz, dynamic_shared_bytes,
      stream != NULL ? stream : call_stream, args, wavert__call_lease()));
}
