/*
 * wavert_async_runtime.h — MLIR's async runtime (the mlirAsyncRuntime* C ABI that the async
 * dialect's LLVM lowering calls: tokens, values, groups, awaiting, tasks on a thread pool,
 * reference counting), in libwavert_runner. Names, signatures and semantics follow MLIR
 * release 22 (mlir/include/mlir/ExecutionEngine/AsyncRuntime.h).
 *
 * Objects (tokens, values, groups) are reference counted. A token or value starts with two
 * references, one for the caller of async.execute and one dropped by Emplace/SetError; a
 * group starts with one. An object is freed when its count reaches zero.
 *
 * Tasks (a coroutine handle and its resume function) given to mlirAsyncRuntimeExecute run on
 * a process-wide pool of worker threads, as many as online CPUs, started on first use and
 * kept for the life of the process (idle workers sleep on a condition variable). A
 * continuation registered with an Await*AndExecute call runs on the thread that makes the
 * awaited object ready (or at once on the caller's thread when it is ready already), as
 * upstream; unlike upstream, awaiters run after the object's lock is released.
 *
 * Thread-safe: every function may be called from any thread.
 */
#ifndef WAVERT_ASYNC_RUNTIME_H
#define WAVERT_ASYNC_RUNTIME_H

#include <stdbool.h>
#include <stdint.h>

#include "wavert_runner.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wavert_async_token wavert_async_token;
typedef struct wavert_async_value wavert_async_value;
typedef struct wavert_async_group wavert_async_group;
/* A coroutine's resume function, called with its handle. */
typedef void (*wavert_coro_resume)(void *handle);

/* Add / drop `count` references of a token, value or group (freed at zero). */
WAVERT_RUNNER_EXPORT void mlirAsyncRuntimeAddRef(void *object, int64_t count);
WAVERT_RUNNER_EXPORT void mlirAsyncRuntimeDropRef(void *object, int64_t count);

/* New objects, not ready; a value owns `size` bytes of storage (aligned for any type). NULL
 * when out of memory (upstream aborts). */
WAVERT_RUNNER_EXPORT wavert_async_token *mlirAsyncRuntimeCreateToken(void);
WAVERT_RUNNER_EXPORT wavert_async_value *mlirAsyncRuntimeCreateValue(int64_t size);
/* A group that becomes ready when `size` tokens added to it are ready (ready at once for 0). */
WAVERT_RUNNER_EXPORT wavert_async_group *mlirAsyncRuntimeCreateGroup(int64_t size);
/* Add `token` to `group`; returns its rank in the group (0, 1, ...). */
WAVERT_RUNNER_EXPORT int64_t mlirAsyncRuntimeAddTokenToGroup(wavert_async_token *token,
                                                             wavert_async_group *group);

/* Make ready (available or in error), wake blocked waiters, run continuations, then drop
 * the reference the object was created with for its producer. */
WAVERT_RUNNER_EXPORT void mlirAsyncRuntimeEmplaceToken(wavert_async_token *token);
WAVERT_RUNNER_EXPORT void mlirAsyncRuntimeEmplaceValue(wavert_async_value *value);
WAVERT_RUNNER_EXPORT void mlirAsyncRuntimeSetTokenError(wavert_async_token *token);
WAVERT_RUNNER_EXPORT void mlirAsyncRuntimeSetValueError(wavert_async_value *value);
WAVERT_RUNNER_EXPORT bool mlirAsyncRuntimeIsTokenError(wavert_async_token *token);
WAVERT_RUNNER_EXPORT bool mlirAsyncRuntimeIsValueError(wavert_async_value *value);
/* Whether any token of the group ended in error. */
WAVERT_RUNNER_EXPORT bool mlirAsyncRuntimeIsGroupError(wavert_async_group *group);

/* Block the calling thread until the object is ready. */
WAVERT_RUNNER_EXPORT void mlirAsyncRuntimeAwaitToken(wavert_async_token *token);
WAVERT_RUNNER_EXPORT void mlirAsyncRuntimeAwaitValue(wavert_async_value *value);
WAVERT_RUNNER_EXPORT void mlirAsyncRuntimeAwaitAllInGroup(wavert_async_group *group);

/* The value's storage (valid while the value lives). */
WAVERT_RUNNER_EXPORT void *mlirAsyncRuntimeGetValueStorage(wavert_async_value *value);

/* Run resume(handle) on a worker thread. */
WAVERT_RUNNER_EXPORT void mlirAsyncRuntimeExecute(void *handle, wavert_coro_resume resume);
/* Run resume(handle) once the object is ready. */
WAVERT_RUNNER_EXPORT void mlirAsyncRuntimeAwaitTokenAndExecute(wavert_async_token *token,
                                                               void *handle,
                                                               wavert_coro_resume resume);
WAVERT_RUNNER_EXPORT void mlirAsyncRuntimeAwaitValueAndExecute(wavert_async_value *value,
                                                               void *handle,
                                                               wavert_coro_resume resume);
WAVERT_RUNNER_EXPORT void mlirAsyncRuntimeAwaitAllInGroupAndExecute(wavert_async_group *group,
                                                                    void *handle,
                                                                    wavert_coro_resume resume);

/* The number of worker threads of the pool (online CPUs; upstream's misspelt name). */
WAVERT_RUNNER_EXPORT int64_t mlirAsyncRuntimGetNumWorkerThreads(void);
/* "Current thread id: N" and a newline on stdout, N the thread's pthread_t as an unsigned
 * integer (what libstdc++ prints for a std::thread::id). */
WAVERT_RUNNER_EXPORT void mlirAsyncRuntimePrintCurrentThreadId(void);

/* Not upstream: block until no task is queued or running on the pool (what upstream's
 * runtime does at exit). A runner calls it after the entry returns and before it frees the
 * program's code, which a worker may still be running (the tail of a task after it made its
 * token ready). Tasks started meanwhile from other threads are waited for too. */
WAVERT_RUNNER_EXPORT void wavert_async_wait_quiet(void);

/* Not upstream: the number of worker threads started so far (at most the pool size), for
 * tests of the pool's bound. */
WAVERT_RUNNER_EXPORT int64_t wavert_async_started_workers(void);

#ifdef __cplusplus
}
#endif
#endif /* WAVERT_ASYNC_RUNTIME_H */
