/*
 * wavert_jit.h — ABI for generated code: the entry points that host code compiled by pywave
 * calls, and the call bracket around it. Not a general-purpose API; see wavert.h for that.
 *
 * Generated host code (pywave's JIT modules and the C libraries `pywave.export` writes) calls
 * wavert_jit_launch for each gpu.launch_func, MLIR's mgpu* runtime functions under their
 * upstream names (declared once, in wavert_mgpu.h) and Wave's runtime (below), and checks
 * wavert_jit_failed after every one of these calls. They take no device: the device and the
 * default stream come from the calling thread's current call, set by wavert_call_begin and
 * cleared by wavert_call_end (thread-local state in libwavert: the one hidden channel between
 * the caller and the generated code). Outside a call the wavert_jit_* functions fail
 * (wavert_jit_failed is non-zero); the mgpu* ones work on a default device (wavert_mgpu.h). Errors are recorded, not returned through the caller's stack: the first one is
 * what wavert_call_end returns. Conventions (status codes, per-thread messages, ownership
 * verbs) are those of wavert.h.
 */
#ifndef WAVERT_JIT_H
#define WAVERT_JIT_H

#include "wavert.h"

#ifdef __cplusplus
extern "C" {
#endif

/* pywave (or a C caller of exported host code) brackets each call of compiled host code with
 * wavert_call_begin / wavert_call_end. In between, the calling thread has a current device
 * and stream that the wavert_jit_* functions use; each makes the device's context current if
 * it is not (launches keep it so until wavert_call_end, which restores the caller's). Begin
 * and end make no driver call: a call whose launch finds the device's context current makes
 * one driver call, the launch. `state` is caller-provided storage (opaque,
 * WAVERT_CALL_STATE_WORDS words). */
#define WAVERT_CALL_STATE_WORDS 8
typedef struct wavert_call_state {
  void *words[WAVERT_CALL_STATE_WORDS];
} wavert_call_state;

/* Make `device` current for this thread's host call (saving the previous call in `state`);
 * launches without an explicit stream go to `stream` (NULL = legacy default). The device's
 * context is entered by the first operation that needs it (a driver failure to do so is that
 * operation's error). Calls nest: a begin inside a begun call saves the outer call in its own
 * `state`, and the matching end restores it. Begin and its end must run on the same thread,
 * innermost first. `device` NULL begins a host-only call: no device is opened or entered,
 * the runtime functions of host code (sparse tensors, the runner utilities) record their
 * errors as in any call, and a launch fails with INVALID_ARGUMENT (mgpu* functions, which
 * take no device, open GPU 0 as they do outside a call). Errors: INVALID_ARGUMENT (NULL
 * state). On failure nothing is begun and wavert_call_end must not be called. */
WAVERT_EXPORT wavert_status wavert_call_begin(wavert_device *device, void *stream,
                                              wavert_call_state *state);

/* End the call begun with `state` on this thread: restore the caller's context (if the call
 * switched it) and the previous call, and
 * return the first error raised by generated code during the call (WAVERT_OK if none; the
 * message is in wavert_last_error). INVALID_ARGUMENT for a `state` not begun or already
 * ended. */
WAVERT_EXPORT wavert_status wavert_call_end(wavert_call_state *state);

/* Launch from generated code: `*slot` is a wavert_kernel* owned by the generated module,
 * created on first use from (image, image_size, name) and released by the module's owner
 * with wavert_kernel_release(*slot). The device is the call's device; stream NULL means
 * the call's stream. On failure the error is recorded for wavert_call_end and the status
 * is returned so generated code can return early. */
WAVERT_EXPORT int32_t wavert_jit_launch(wavert_kernel **slot, const void *image,
                                        int64_t image_size, const char *name, int64_t gx,
                                        int64_t gy, int64_t gz, int64_t bx, int64_t by,
                                        int64_t bz, int32_t dynamic_shared_bytes, void *stream,
                                        void **params);

/* wavert_jit_launch with thread-block clusters of cx x cy x cz blocks (gpu.launch_func
 * `clusters in`): each grid extent must be a multiple of the cluster's; more than 8 blocks
 * per cluster is allowed as a non-portable size. Errors, recorded and returned like
 * wavert_jit_launch's: UNSUPPORTED on a backend without clusters (HIP) or a CUDA driver
 * without cuLaunchKernelEx (CUDA < 12.0); INVALID_ARGUMENT for a cluster extent outside
 * [1, UINT32_MAX] or a grid extent it does not divide; the driver's error for a size the
 * kernel or chip cannot run (clusters need sm_90 or newer). */
WAVERT_EXPORT int32_t wavert_jit_launch_cluster(wavert_kernel **slot, const void *image,
                                                int64_t image_size, const char *name,
                                                int64_t cx, int64_t cy, int64_t cz, int64_t gx,
                                                int64_t gy, int64_t gz, int64_t bx, int64_t by,
                                                int64_t bz, int32_t dynamic_shared_bytes,
                                                void *stream, void **params);

/* ---- Wave's host-wrapper convention ---------------------------------------------------
 * Host functions in Wave's convention take (stream, object 1, ..., object n), each object a
 * pointer that only the wave_get_* helpers below read. pywave passes, for each Python object,
 * a wavert_object it filled while holding the GIL (the tensor taken through DLPack and its
 * device checked, or the number read), and registers the array with wavert_call_set_objects:
 * the helpers never touch Python objects, so they run without the GIL and nothing can throw
 * through generated code. A pointer that is not one of the call's registered objects is an
 * error, never dereferenced. */
typedef enum wavert_object_kind {
  WAVERT_OBJECT_TENSOR = 1, /* `tensor` is set */
  WAVERT_OBJECT_INT = 2,    /* `int_value` holds it when `int_fits`; else `text` shows it */
  WAVERT_OBJECT_FLOAT = 3,  /* `float_value` holds it */
  WAVERT_OBJECT_OTHER = 4   /* anything else: `text` shows it */
} wavert_object_kind;

typedef struct wavert_object {
  int32_t kind;           /* a wavert_object_kind */
  int32_t position;       /* the object's index among the call's objects (the stream is not
                             one), for messages */
  const char *name;       /* the argument's name, or NULL: borrowed, for messages */
  const char *type_name;  /* the object's type ("Tensor", "int"): borrowed, for messages */
  const DLTensor *tensor; /* TENSOR: borrowed; valid until wavert_call_end */
  int64_t int_value;      /* INT */
  double float_value;     /* FLOAT */
  int32_t int_fits;       /* INT: the value is in int64's range */
  char text[68];          /* INT that does not fit, OTHER: the value as text (truncated) */
} wavert_object;

/* Register `objects[0..count)` (borrowed: they must outlive the call) as the Wave objects of
 * the current call on this thread; wavert_call_end forgets them (an enclosing call's are
 * restored). Errors: INVALID_ARGUMENT outside a call, for count < 0 or objects NULL with
 * count > 0. */
WAVERT_EXPORT wavert_status wavert_call_set_objects(const wavert_object *objects, int32_t count);

/* Wave's helpers (`_mlir_ciface_wave_get_*`; pywave's host stage renames the calls). Each
 * takes one of the call's registered objects; on an error it records it for wavert_call_end
 * (INVALID_ARGUMENT, naming the helper, the argument, its position and value) and returns a
 * harmless value (a NULL buffer of size 0, 0, 0.0); generated code checks wavert_jit_failed
 * after each call.
 * - get_buffer: into `*out`, a memref<?xi8> of a tensor: its first element (data +
 *   byte_offset) as base and aligned pointer, offset 0, size = the tensor's bytes, stride 1. The tensor must be compact row-major (the
 *   host views it as a flat array; strides of size-1 dimensions are ignored), of whole-byte
 *   elements, its first element aligned to the element size, on the call's device.
 * - get_dim: size `index` (0 <= index < rank) of a tensor.
 * - get_int64: an int in int64's range.
 * - get_float64: a float, or an int of magnitude <= 2^53 (exactly representable). */
WAVERT_EXPORT void wavert_jit_wave_get_buffer(wavert_memref_1d *out, const void *object);
WAVERT_EXPORT int64_t wavert_jit_wave_get_dim(const void *object, int32_t index);
WAVERT_EXPORT int64_t wavert_jit_wave_get_int64(const void *object);
WAVERT_EXPORT double wavert_jit_wave_get_float64(const void *object);

/* Wave's gpu-to-gpu-runtime lowering (`wave_load_kernel` / `wave_launch_kernel`; pywave
 * renames the calls). load_kernel: `*handle` is a wavert_kernel* slot owned by the generated
 * module (created from image, image_size, name on first use, thread-safe; released with
 * wavert_kernel_release(*handle) by the module's owner); returns the kernel's function on the
 * call's device (a wavert_function*, valid while *handle lives), NULL after an error.
 * launch_kernel: launch `function` (from load_kernel) on `stream` (NULL: the call's stream)
 * with grid, block and cluster extents (a 1x1x1 cluster is a plain launch) and `args`, the
 * array of `nargs` pointers to each kernel argument. Nothing is launched once the call has
 * recorded an error. Errors are recorded as wavert_jit_launch's. */
WAVERT_EXPORT void *wavert_jit_wave_load_kernel(void *stream, void **handle, const void *image,
                                                int64_t image_size, const char *name);
WAVERT_EXPORT void wavert_jit_wave_launch_kernel(void *stream, void *function,
                                                 int32_t dynamic_shared_bytes, int64_t gx,
                                                 int64_t gy, int64_t gz, int64_t bx, int64_t by,
                                                 int64_t bz, int64_t cx, int64_t cy, int64_t cz,
                                                 void **args, int32_t nargs);

/* Non-zero if generated code has recorded an error during the current call (and outside a
 * call). Generated host code returns early when it is, after every runtime call. */
WAVERT_EXPORT int32_t wavert_jit_failed(void);

#ifdef __cplusplus
}
#endif
#endif /* WAVERT_JIT_H */
