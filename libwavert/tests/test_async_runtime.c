/* test_async_runtime.c — MLIR's async runtime in libwavert_runner (wavert_async_runtime.h):
 * tokens, values and groups (ready, in error, reference counts), blocking awaits from another
 * thread, Await*AndExecute continuations (run at once when ready, else by the thread that
 * makes the object ready), mlirAsyncRuntimeExecute on the worker pool (tasks on threads other
 * than the caller's, at most online-CPU threads, no new threads after many rounds of tasks),
 * wavert_async_wait_quiet. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wavert_async_runtime.h"

#define CHECK(condition)                                                                  \
  do {                                                                                    \
    if (!(condition)) {                                                                   \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition);      \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* Threads of this process (entries of /proc/self/task). */
static int thread_count(void) {
  DIR *dir = opendir("/proc/self/task");
  CHECK(dir != NULL);
  int n = 0;
  for (struct dirent *e; (e = readdir(dir)) != NULL;)
    if (e->d_name[0] != '.') n += 1;
  closedir(dir);
  return n;
}

/* ---- continuations: record the thread and count the calls ------------------------------ */
typedef struct {
  _Atomic int calls;
  pthread_t thread;
} record;

static void note(void *handle) {
  record *r = handle;
  r->thread = pthread_self();
  atomic_fetch_add(&r->calls, 1);
}

/* A thread that emplaces a token (or sets its error) after a delay. */
typedef struct {
  wavert_async_token *token;
  int error;
  pthread_t thread;
} producer;

static void *produce(void *arg) {
  producer *p = arg;
  p->thread = pthread_self();
  sleep_ms(20);
  if (p->error) mlirAsyncRuntimeSetTokenError(p->token);
  else mlirAsyncRuntimeEmplaceToken(p->token);
  return NULL;
}

static void test_tokens(void) {
  /* Ready at once, then awaited (no blocking), then the caller's reference dropped. */
  wavert_async_token *t = mlirAsyncRuntimeCreateToken();
  CHECK(t != NULL);
  CHECK(!mlirAsyncRuntimeIsTokenError(t));
  mlirAsyncRuntimeEmplaceToken(t);
  mlirAsyncRuntimeAwaitToken(t);
  CHECK(!mlirAsyncRuntimeIsTokenError(t));
  mlirAsyncRuntimeDropRef(t, 1);

  /* A blocking await woken by another thread; a continuation registered before runs on that
   * thread, one registered after runs at once on ours. */
  record before = {0}, after = {0};
  producer p = {mlirAsyncRuntimeCreateToken(), 0, 0};
  mlirAsyncRuntimeAwaitTokenAndExecute(p.token, &before, note);
  CHECK(atomic_load(&before.calls) == 0);
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, produce, &p) == 0);
  mlirAsyncRuntimeAwaitToken(p.token);
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK(atomic_load(&before.calls) == 1);
  CHECK(pthread_equal(before.thread, p.thread));
  mlirAsyncRuntimeAwaitTokenAndExecute(p.token, &after, note);
  CHECK(atomic_load(&after.calls) == 1);
  CHECK(pthread_equal(after.thread, pthread_self()));
  mlirAsyncRuntimeDropRef(p.token, 1);

  /* Errors. */
  producer e = {mlirAsyncRuntimeCreateToken(), 1, 0};
  CHECK(pthread_create(&thread, NULL, produce, &e) == 0);
  mlirAsyncRuntimeAwaitToken(e.token);
  CHECK(pthread_join(thread, NULL) == 0);
  CHECK(mlirAsyncRuntimeIsTokenError(e.token));
  mlirAsyncRuntimeDropRef(e.token, 1);

  /* Counted references: 2 at creation, +3, -4 (one left for the producer), then the
   * emplace frees it (ASan/valgrind would see a leak or a double free otherwise). */
  wavert_async_token *c = mlirAsyncRuntimeCreateToken();
  mlirAsyncRuntimeAddRef(c, 3);
  mlirAsyncRuntimeDropRef(c, 4);
  mlirAsyncRuntimeEmplaceToken(c);
}

static void test_values(void) {
  wavert_async_value *v = mlirAsyncRuntimeCreateValue(24);
  CHECK(v != NULL);
  void *storage = mlirAsyncRuntimeGetValueStorage(v);
  CHECK(storage != NULL && (uintptr_t)storage % sizeof(double) == 0);
  const int64_t words[3] = {-7, 1 << 30, INT64_MAX};
  memcpy(storage, words, sizeof(words));
  record r = {0};
  mlirAsyncRuntimeAwaitValueAndExecute(v, &r, note);
  CHECK(atomic_load(&r.calls) == 0);
  mlirAsyncRuntimeEmplaceValue(v);
  CHECK(atomic_load(&r.calls) == 1);
  mlirAsyncRuntimeAwaitValue(v);
  CHECK(!mlirAsyncRuntimeIsValueError(v));
  CHECK(memcmp(mlirAsyncRuntimeGetValueStorage(v), words, sizeof(words)) == 0);
  mlirAsyncRuntimeDropRef(v, 1);

  wavert_async_value *bad = mlirAsyncRuntimeCreateValue(4);
  mlirAsyncRuntimeSetValueError(bad);
  mlirAsyncRuntimeAwaitValue(bad);
  CHECK(mlirAsyncRuntimeIsValueError(bad));
  mlirAsyncRuntimeDropRef(bad, 1);

  CHECK(mlirAsyncRuntimeCreateValue(-1) == NULL);
}

static void test_groups(void) {
  /* Size 0: ready at once. */
  wavert_async_group *empty = mlirAsyncRuntimeCreateGroup(0);
  mlirAsyncRuntimeAwaitAllInGroup(empty);
  CHECK(!mlirAsyncRuntimeIsGroupError(empty));
  record now = {0};
  mlirAsyncRuntimeAwaitAllInGroupAndExecute(empty, &now, note);
  CHECK(atomic_load(&now.calls) == 1);
  mlirAsyncRuntimeDropRef(empty, 1);

  /* Three tokens: one ready before it is added, two made ready by other threads (one in
   * error); the ranks are 0, 1, 2; the continuation runs once, after the last. */
  wavert_async_group *g = mlirAsyncRuntimeCreateGroup(3);
  wavert_async_token *ready = mlirAsyncRuntimeCreateToken();
  mlirAsyncRuntimeEmplaceToken(ready);
  CHECK(mlirAsyncRuntimeAddTokenToGroup(ready, g) == 0);
  mlirAsyncRuntimeDropRef(ready, 1);
  producer p[2] = {{mlirAsyncRuntimeCreateToken(), 0, 0}, {mlirAsyncRuntimeCreateToken(), 1, 0}};
  CHECK(mlirAsyncRuntimeAddTokenToGroup(p[0].token, g) == 1);
  CHECK(mlirAsyncRuntimeAddTokenToGroup(p[1].token, g) == 2);
  record r = {0};
  mlirAsyncRuntimeAwaitAllInGroupAndExecute(g, &r, note);
  CHECK(atomic_load(&r.calls) == 0);
  pthread_t threads[2];
  for (int i = 0; i < 2; i++) {
    mlirAsyncRuntimeDropRef(p[i].token, 1);   /* the group keeps what it needs */
    CHECK(pthread_create(&threads[i], NULL, produce, &p[i]) == 0);
  }
  mlirAsyncRuntimeAwaitAllInGroup(g);
  for (int i = 0; i < 2; i++) CHECK(pthread_join(threads[i], NULL) == 0);
  CHECK(atomic_load(&r.calls) == 1);
  CHECK(mlirAsyncRuntimeIsGroupError(g));
  mlirAsyncRuntimeDropRef(g, 1);

  /* The group's only reference dropped while its member is pending: still counted. */
  wavert_async_group *h = mlirAsyncRuntimeCreateGroup(1);
  wavert_async_token *late = mlirAsyncRuntimeCreateToken();
  mlirAsyncRuntimeAddTokenToGroup(late, h);
  mlirAsyncRuntimeDropRef(h, 1);
  mlirAsyncRuntimeEmplaceToken(late);
  mlirAsyncRuntimeDropRef(late, 1);
}

/* ---- tasks on the pool ------------------------------------------------------------------ */
#define MAX_THREADS 1024

static struct {
  pthread_mutex_t mutex;
  pthread_t seen[MAX_THREADS];
  int nseen;
  _Atomic int64_t done;
} tasks = {PTHREAD_MUTEX_INITIALIZER, {0}, 0, 0};

static void task(void *handle) {
  wavert_async_token *token = handle;
  pthread_t self = pthread_self();
  pthread_mutex_lock(&tasks.mutex);
  int known = 0;
  for (int i = 0; i < tasks.nseen; i++) known |= pthread_equal(tasks.seen[i], self);
  if (!known && tasks.nseen < MAX_THREADS) tasks.seen[tasks.nseen++] = self;
  pthread_mutex_unlock(&tasks.mutex);
  atomic_fetch_add(&tasks.done, 1);
  mlirAsyncRuntimeEmplaceToken(token);
}

/* A task that queues another one from a worker (as a dispatch tree does). */
static void spawning_task(void *handle) {
  wavert_async_token **pair = handle;
  mlirAsyncRuntimeExecute(pair[1], task);
  task(pair[0]);
}

static void test_pool(void) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  int64_t size = mlirAsyncRuntimGetNumWorkerThreads();
  CHECK(size == (cpus > 0 ? cpus : 1));
  int threads_before = thread_count();
  enum { ROUNDS = 200, PER_ROUND = 40 };
  for (int round = 0; round < ROUNDS; round++) {
    wavert_async_group *g = mlirAsyncRuntimeCreateGroup(PER_ROUND);
    wavert_async_token *pair[PER_ROUND / 2][2];
    for (int i = 0; i < PER_ROUND / 2; i++) {
      for (int k = 0; k < 2; k++) {
        pair[i][k] = mlirAsyncRuntimeCreateToken();
        mlirAsyncRuntimeAddTokenToGroup(pair[i][k], g);
      }
      mlirAsyncRuntimeExecute(pair[i], spawning_task);
    }
    mlirAsyncRuntimeAwaitAllInGroup(g);
    CHECK(!mlirAsyncRuntimeIsGroupError(g));
    mlirAsyncRuntimeDropRef(g, 1);
    for (int i = 0; i < PER_ROUND / 2; i++)
      for (int k = 0; k < 2; k++) mlirAsyncRuntimeDropRef(pair[i][k], 1);
    wavert_async_wait_quiet();
  }
  CHECK(atomic_load(&tasks.done) == (int64_t)ROUNDS * PER_ROUND);
  CHECK(tasks.nseen >= 1 && tasks.nseen <= size);
  for (int i = 0; i < tasks.nseen; i++) CHECK(!pthread_equal(tasks.seen[i], pthread_self()));
  CHECK(wavert_async_started_workers() >= 1 && wavert_async_started_workers() <= size);
  int threads_after = thread_count();
  /* No pool thread before the first Execute; the producers above were joined. */
  CHECK(threads_after == threads_before + wavert_async_started_workers());

  /* More rounds start no thread. */
  int64_t started = wavert_async_started_workers();
  for (int round = 0; round < 50; round++) {
    wavert_async_token *t = mlirAsyncRuntimeCreateToken();
    mlirAsyncRuntimeExecute(t, task);
    mlirAsyncRuntimeAwaitToken(t);
    mlirAsyncRuntimeDropRef(t, 1);
  }
  wavert_async_wait_quiet();
  CHECK(wavert_async_started_workers() == started);
  CHECK(thread_count() == threads_after);
}

int main(void) {
  test_tokens();
  test_values();
  test_groups();
  test_pool();
  printf("ok\n");
  return 0;
}
