/*
 * wavert_jit.h — ABI for generated code: the entry points that host code compiled by pywave
 * calls, and the call bracket around it. Not a general-purpose API; see wavert.h for that.
 *
 * Generated host code (pywave's JIT modules and the C libraries `pywave.export` writes) calls
 * wavert_jit_launch for each gpu.launch_func and the wavert_jit_* replacements of MLIR's mgpu*
 * runtime wrappers. They take no device: the device and the default stream come from the
 * calling thread's current call, set by wavert_call_begin and cleared by wavert_call_end
 * (thread-local state in libwavert: the one hidden channel between the caller and the
 * generated code). Outside a call the wavert_jit_* functions fail (wavert_jit_failed is
 * non-zero). Errors are recorded, not returned through the caller's stack: the first one is
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
 * innermost first. Errors: INVALID_ARGUMENT (NULL device or state). On failure nothing is
 * begun and wavert_call_end must not be called. */
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

/* Non-zero if generated code has recorded an error during the current call. */
WAVERT_EXPORT int32_t wavert_jit_failed(void);

/* Runtime functions of MLIR's gpu-to-llvm lowering (the mgpu* wrappers), on the call's
 * device. Each records failures for wavert_call_end and returns a harmless value; generated
 * code checks wavert_jit_failed after each. Streams created here wait for the call's stream
 * at creation; a synchronised stream is made to order the call's stream after it. A NULL
 * dst/src of memcpy or memset with a non-zero size is INVALID_ARGUMENT (recorded; the driver
 * is not called), as are sizes past PTRDIFF_MAX and ranges that wrap around. */
WAVERT_EXPORT void *wavert_jit_stream_create(void);
WAVERT_EXPORT void wavert_jit_stream_destroy(void *stream);
WAVERT_EXPORT void wavert_jit_stream_synchronize(void *stream);
WAVERT_EXPORT void wavert_jit_stream_wait_event(void *stream, void *event);
WAVERT_EXPORT void *wavert_jit_event_create(void);
WAVERT_EXPORT void wavert_jit_event_destroy(void *event);
WAVERT_EXPORT void wavert_jit_event_synchronize(void *event);
WAVERT_EXPORT void wavert_jit_event_record(void *event, void *stream);
WAVERT_EXPORT void *wavert_jit_mem_alloc(uint64_t size, void *stream, int8_t host_shared);
WAVERT_EXPORT void wavert_jit_mem_free(void *ptr, void *stream);
WAVERT_EXPORT void wavert_jit_memcpy(void *dst, void *src, uint64_t size, void *stream);
WAVERT_EXPORT void wavert_jit_memset32(void *dst, uint32_t value, uint64_t count, void *stream);
WAVERT_EXPORT void wavert_jit_memset16(void *dst, uint16_t value, uint64_t count, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* WAVERT_JIT_H */
