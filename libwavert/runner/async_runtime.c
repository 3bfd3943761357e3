/*
 * async_runtime.c — MLIR's async runtime (wavert_async_runtime.h): reference-counted tokens,
 * values and groups guarded by a mutex each, with a list of continuations, and a process-wide
 * pool of worker threads (online CPUs) for mlirAsyncRuntimeExecute.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wavert_async_runtime.h"

/* A continuation: resume a coroutine, or count one ready token of a group. */
typedef struct awaiter {
  struct awaiter *next;
  void *handle;
  wavert_coro_resume resume;
  struct wavert_async_group *group; /* non-NULL: a group member became ready */
  struct wavert_async_token *token; /* ... this one */
} awaiter;

enum { UNAVAILABLE = 0, AVAILABLE = 1, ERROR = 2 };
enum { KIND_TOKEN, KIND_VALUE, KIND_GROUP };

/* What tokens, values and groups share; the first member of each. */
typedef struct {
  _Atomic int64_t references;
  int kind;
  pthread_mutex_t mutex;
  pthread_cond_t ready;
  awaiter *first, *last; /* continuations, in registration order */
} object;

struct wavert_async_token {
  object base;
  _Atomic int state;
};

struct wavert_async_value {
  object base;
  _Atomic int state;
  max_align_t storage[]; /* size bytes */
};

struct wavert_async_group {
  object base;
  _Atomic int64_t pending, errors, rank;
};

static int object_init(object *o, int kind, int64_t references) {
  atomic_init(&o->references, references);
  o->kind = kind;
  o->first = o->last = NULL;
  if (pthread_mutex_init(&o->mutex, NULL) != 0) return -1;
  if (pthread_cond_init(&o->ready, NULL) != 0) {
    pthread_mutex_destroy(&o->mutex);
    return -1;
  }
  return 0;
}

static void object_destroy(object *o) {
  pthread_cond_destroy(&o->ready);
  pthread_mutex_destroy(&o->mutex);
  for (awaiter *a = o->first, *next; a != NULL; a = next) { /* never resumed: a leak upstream */
    next = a->next;
    free(a);
  }
  free(o);
}

void mlirAsyncRuntimeAddRef(void *pointer, int64_t count) {
  atomic_fetch_add(&((object *)pointer)->references, count);
}

void mlirAsyncRuntimeDropRef(void *pointer, int64_t count) {
  object *o = pointer;
  if (atomic_fetch_sub(&o->references, count) == count) object_destroy(o);
}

wavert_async_token *mlirAsyncRuntimeCreateToken(void) {
  wavert_async_token *token = malloc(sizeof(*token));
  if (token == NULL || object_init(&token->base, KIND_TOKEN, 2) != 0) {
    free(token);
    return NULL;
  }
  atomic_init(&token->state, UNAVAILABLE);
  return token;
}

wavert_async_value *mlirAsyncRuntimeCreateValue(int64_t size) {
  if (size < 0 || (uint64_t)size > SIZE_MAX - sizeof(wavert_async_value)) return NULL;
  wavert_async_value *value = calloc(1, sizeof(*value) + (size_t)size);
  if (value == NULL || object_init(&value->base, KIND_VALUE, 2) != 0) {
    free(value);
    return NULL;
  }
  atomic_init(&value->state, UNAVAILABLE);
  return value;
}

wavert_async_group *mlirAsyncRuntimeCreateGroup(int64_t size) {
  wavert_async_group *group = malloc(sizeof(*group));
  if (group == NULL || object_init(&group->base, KIND_GROUP, 1) != 0) {
    free(group);
    return NULL;
  }
  atomic_init(&group->pending, size);
  atomic_init(&group->errors, 0);
  atomic_init(&group->rank, 0);
  return group;
}

/* Append a continuation (the object's mutex held). */
static int push_awaiter(object *o, void *handle, wavert_coro_resume resume,
                        wavert_async_group *group, wavert_async_token *token) {
  awaiter *a = malloc(sizeof(*a));
  if (a == NULL) return -1;
  *a = (awaiter){NULL, handle, resume, group, token};
  if (o->last) o->last->next = a;
  else o->first = a;
  o->last = a;
  return 0;
}

static void run_awaiters(awaiter *list);

/* One member of `group` is ready (`failed`: in error); the last one makes the group ready. */
static void group_member_ready(wavert_async_group *group, int failed) {
  awaiter *list = NULL;
  pthread_mutex_lock(&group->base.mutex);
  if (failed) atomic_fetch_add(&group->errors, 1);
  if (atomic_fetch_sub(&group->pending, 1) == 1) {
    pthread_cond_broadcast(&group->base.ready);
    list = group->base.first;
    group->base.first = group->base.last = NULL;
  }
  pthread_mutex_unlock(&group->base.mutex);
  run_awaiters(list);
}

static void run_awaiters(awaiter *list) {
  while (list != NULL) {
    awaiter *next = list->next;
    if (list->group != NULL) {
      group_member_ready(list->group, atomic_load(&list->token->state) == ERROR);
      mlirAsyncRuntimeDropRef(list->group, 1);
    } else {
      list->resume(list->handle);
    }
    free(list);
    list = next;
  }
}

int64_t mlirAsyncRuntimeAddTokenToGroup(wavert_async_token *token, wavert_async_group *group) {
  int64_t rank = atomic_fetch_add(&group->rank, 1);
  pthread_mutex_lock(&token->base.mutex);
  int state = atomic_load(&token->state);
  if (state == UNAVAILABLE) {
    mlirAsyncRuntimeAddRef(group, 1); /* alive until the token is ready */
    if (push_awaiter(&token->base, NULL, NULL, group, token) == 0) {
      pthread_mutex_unlock(&token->base.mutex);
      return rank;
    }
    mlirAsyncRuntimeDropRef(group, 1);
    pthread_mutex_unlock(&token->base.mutex);
    mlirAsyncRuntimeAwaitToken(token); /* out of memory: wait here instead */
    state = atomic_load(&token->state);
  } else {
    pthread_mutex_unlock(&token->base.mutex);
  }
  group_member_ready(group, state == ERROR);
  return rank;
}

/* Token or value: set the terminal state, wake waiters, run continuations, drop the
 * producer's reference. */
static void set_state(object *o, _Atomic int *state, int terminal) {
  pthread_mutex_lock(&o->mutex);
  atomic_store(state, terminal);
  pthread_cond_broadcast(&o->ready);
  awaiter *list = o->first;
  o->first = o->last = NULL;
  pthread_mutex_unlock(&o->mutex);
  run_awaiters(list);
  mlirAsyncRuntimeDropRef(o, 1);
}

void mlirAsyncRuntimeEmplaceToken(wavert_async_token *token) {
  set_state(&token->base, &token->state, AVAILABLE);
}
void mlirAsyncRuntimeEmplaceValue(wavert_async_value *value) {
  set_state(&value->base, &value->state, AVAILABLE);
}
void mlirAsyncRuntimeSetTokenError(wavert_async_token *token) {
  set_state(&token->base, &token->state, ERROR);
}
void mlirAsyncRuntimeSetValueError(wavert_async_value *value) {
  set_state(&value->base, &value->state, ERROR);
}
bool mlirAsyncRuntimeIsTokenError(wavert_async_token *token) {
  return atomic_load(&token->state) == ERROR;
}
bool mlirAsyncRuntimeIsValueError(wavert_async_value *value) {
  return atomic_load(&value->state) == ERROR;
}
bool mlirAsyncRuntimeIsGroupError(wavert_async_group *group) {
  return atomic_load(&group->errors) > 0;
}

static void await_state(object *o, _Atomic int *state) {
  pthread_mutex_lock(&o->mutex);
  while (atomic_load(state) == UNAVAILABLE) pthread_cond_wait(&o->ready, &o->mutex);
  pthread_mutex_unlock(&o->mutex);
}

void mlirAsyncRuntimeAwaitToken(wavert_async_token *token) {
  await_state(&token->base, &token->state);
}
void mlirAsyncRuntimeAwaitValue(wavert_async_value *value) {
  await_state(&value->base, &value->state);
}
void mlirAsyncRuntimeAwaitAllInGroup(wavert_async_group *group) {
  pthread_mutex_lock(&group->base.mutex);
  while (atomic_load(&group->pending) != 0)
    pthread_cond_wait(&group->base.ready, &group->base.mutex);
  pthread_mutex_unlock(&group->base.mutex);
}

void *mlirAsyncRuntimeGetValueStorage(wavert_async_value *value) { return value->storage; }

/* resume(handle) now if `ready` says so under the lock, else as a continuation. */
static void await_and_execute(object *o, int (*ready)(object *), void *handle,
                              wavert_coro_resume resume) {
  pthread_mutex_lock(&o->mutex);
  if (!ready(o) && push_awaiter(o, handle, resume, NULL, NULL) == 0) {
    pthread_mutex_unlock(&o->mutex);
    return;
  }
  pthread_mutex_unlock(&o->mutex);
  if (!ready(o)) { /* out of memory: wait on this thread */
    if (o->kind == KIND_GROUP) mlirAsyncRuntimeAwaitAllInGroup((wavert_async_group *)o);
    else await_state(o, o->kind == KIND_TOKEN ? &((wavert_async_token *)o)->state
                                              : &((wavert_async_value *)o)->state);
  }
  resume(handle);
}

static int token_ready(object *o) {
  return atomic_load(&((wavert_async_token *)o)->state) != UNAVAILABLE;
}
static int value_ready(object *o) {
  return atomic_load(&((wavert_async_value *)o)->state) != UNAVAILABLE;
}
static int group_ready(object *o) { return atomic_load(&((wavert_async_group *)o)->pending) == 0; }

void mlirAsyncRuntimeAwaitTokenAndExecute(wavert_async_token *token, void *handle,
                                          wavert_coro_resume resume) {
  await_and_execute(&token->base, token_ready, handle, resume);
}
void mlirAsyncRuntimeAwaitValueAndExecute(wavert_async_value *value, void *handle,
                                          wavert_coro_resume resume) {
  await_and_execute(&value->base, value_ready, handle, resume);
}
void mlirAsyncRuntimeAwaitAllInGroupAndExecute(wavert_async_group *group, void *handle,
                                               wavert_coro_resume resume) {
  await_and_execute(&group->base, group_ready, handle, resume);
}

/* ---- the worker pool ------------------------------------------------------------------------- */

typedef struct task {
  struct task *next;
  void *handle;
  wavert_coro_resume resume;
} task;

static struct {
  pthread_mutex_t mutex;
  pthread_cond_t work, quiet;
  task *first, *last;
  int64_t size, started, idle, running;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
          NULL, NULL, 0, 0, 0, 0};

static int64_t pool_size_locked(void) {
  if (pool.size == 0) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    pool.size = cpus > 0 ? cpus : 1;
  }
  return pool.size;
}

static void *worker(void *unused) {
  (void)unused;
  pthread_mutex_lock(&pool.mutex);
  for (;;) {
    while (pool.first == NULL) {
      pool.idle += 1;
      pthread_cond_wait(&pool.work, &pool.mutex);
      pool.idle -= 1;
    }
    task *t = pool.first;
    pool.first = t->next;
    if (pool.first == NULL) pool.last = NULL;
    pool.running += 1;
    pthread_mutex_unlock(&pool.mutex);
    t->resume(t->handle);
    free(t);
    pthread_mutex_lock(&pool.mutex);
    pool.running -= 1;
    if (pool.running == 0 && pool.first == NULL) pthread_cond_broadcast(&pool.quiet);
  }
  return NULL;
}

void mlirAsyncRuntimeExecute(void *handle, wavert_coro_resume resume) {
  task *t = malloc(sizeof(*t));
  if (t == NULL) { /* out of memory: run it here */
    resume(handle);
    return;
  }
  *t = (task){NULL, handle, resume};
  pthread_mutex_lock(&pool.mutex);
  if (pool.last) pool.last->next = t;
  else pool.first = t;
  pool.last = t;
  /* A new worker when none is idle and the pool is not full (threads start on demand). */
  if (pool.idle == 0 && pool.started < pool_size_locked()) {
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&thread, &attr, worker, NULL) == 0) pool.started += 1;
    pthread_attr_destroy(&attr);
  }
  int none = pool.started == 0;
  if (!none) pthread_cond_signal(&pool.work);
  pthread_mutex_unlock(&pool.mutex);
  if (none) { /* no thread could be started: run the queue here */
    pthread_mutex_lock(&pool.mutex);
    task *queued = pool.first;
    pool.first = pool.last = NULL;
    pthread_mutex_unlock(&pool.mutex);
    while (queued != NULL) {
      task *next = queued->next;
      queued->resume(queued->handle);
      free(queued);
      queued = next;
    }
  }
}

int64_t mlirAsyncRuntimGetNumWorkerThreads(void) {
  pthread_mutex_lock(&pool.mutex);
  int64_t size = pool_size_locked();
  pthread_mutex_unlock(&pool.mutex);
  return size;
}

void wavert_async_wait_quiet(void) {
  pthread_mutex_lock(&pool.mutex);
  while (pool.running != 0 || pool.first != NULL) pthread_cond_wait(&pool.quiet, &pool.mutex);
  pthread_mutex_unlock(&pool.mutex);
}

int64_t wavert_async_started_workers(void) {
  pthread_mutex_lock(&pool.mutex);
  int64_t started = pool.started;
  pthread_mutex_unlock(&pool.mutex);
  return started;
}

void mlirAsyncRuntimePrintCurrentThreadId(void) {
  printf("Current thread id: %" PRIu64 "\n", (uint64_t)pthread_self());
  fflush(stdout);
}
