/*
 * backend_cpu.c — the CPU device (DLPack kDLCPU, ordinal 0): kernels compiled for the host
 * by pywave (pywave/kernels/cpu.py) run on a pool of host threads. Host memory is device
 * memory: allocation is an aligned malloc, copies are memcpy, every operation is synchronous
 * (streams and events are placeholders that order nothing, since nothing is ever pending).
 *
 * The image is an ELF shared object for the host (what `cc -shared` makes of the kernels'
 * object code). module_load writes it into a sealed memfd and dlopens that (RTLD_LOCAL), so
 * two loads of the same bytes are two modules and nothing touches the file system. The image
 * ABI (WAVERT_CPU_ABI, checked at load through the symbol `__wavert_cpu_abi`):
 *   - per kernel K, `void __wavert_cpu_thread_K(void **params, wavert__cpu_thread *thread)`
 *     runs one GPU thread of K, and, only when K's gpu.module has no gpu.barrier,
 *     `void __wavert_cpu_block_K(void **params, wavert__cpu_thread *thread)` runs every
 *     thread of one block (x fastest), writing thread->thread_id itself;
 *   - `params` is the launch's array of pointers to each kernel argument (MLIR's launch
 *     ABI, exactly what the GPU backends pass to the driver);
 *   - the generated code reads ids and dims from `thread` (through a thread-local pointer it
 *     sets on entry) and calls thread->barrier(thread) for gpu.barrier;
 *   - workgroup memory is thread-local storage of the image: one copy per pool thread, and
 *     a pool thread runs one block at a time, so each running block has its own.
 *
 * Blocks: spread over the pool (the calling thread included) by an atomic block counter.
 * Threads of a block: with a block function, its loop; otherwise one fiber per GPU thread
 * (ucontext, WAVERT_CPU_STACK_BYTES of stack each, a guard page below), run round-robin on
 * the pool thread: a fiber runs until its next barrier or its end, so a round of the block's
 * fibers brings every live thread to the same barrier before any passes it (threads that
 * returned no longer take part, as on the GPU). Fibers run in thread order: a block's
 * execution is deterministic. $WAVERT_CPU_THREADS sets the pool size (1: every block on the
 * calling thread, in order, a deterministic run); default: the online CPUs.
 */
#define _GNU_SOURCE /* memfd_create, MAP_ANONYMOUS */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "backend.h"

/* Version of the image ABI above; pywave/kernels/cpu.py's CPU_ABI must equal it. */
#define WAVERT_CPU_ABI 1
/* Stack of one GPU thread run as a fiber (kernels with barriers). */
#define WAVERT_CPU_STACK_BYTES (128 * 1024)
/* Threads per block: as on CUDA GPUs (a block's fibers need this many stacks). */
#define WAVERT_CPU_MAX_THREADS 1024
/* Dynamic workgroup memory per block: the size of the image's thread-local array that
 * gpu.dynamic_shared_memory addresses (pywave/kernels/cpu.py DYNAMIC_SHARED_BYTES). */
#define WAVERT_CPU_DYNAMIC_SHARED 65536
#define WAVERT_CPU_STATIC_SHARED 49152

/* One GPU thread as generated code sees it; the layout is the image ABI (cpu.py). */
typedef struct wavert__cpu_thread wavert__cpu_thread;
struct wavert__cpu_thread {
  int64_t thread_id[3];
  int64_t block_id[3];
  int64_t block_dim[3];
  int64_t grid_dim[3];
  void (*barrier)(wavert__cpu_thread *thread);
  void *fibers; /* the block's fiber set while it runs */
};
_Static_assert(sizeof(wavert__cpu_thread) == 14 * 8, "wavert__cpu_thread layout");

typedef void (*cpu_kernel)(void **params, wavert__cpu_thread *thread);

typedef struct cpu_function {
  struct cpu_function *next; /* the module's list, freed with it */
  cpu_kernel block;          /* NULL: the kernel needs fibers */
  cpu_kernel thread;
} cpu_function;

typedef struct {
  void *handle; /* dlopen's */
  int fd;
  cpu_function *functions; /* appended under the wavert_module's mutex */
} cpu_module;

/* ---- pool --------------------------------------------------------------------------------- */

typedef struct {
  const cpu_function *function;
  void **params;
  int64_t grid[3], block[3];
  int64_t blocks; /* grid x * y * z */
  atomic_llong next;
  int active; /* pool threads still working on this job (under pool.mutex) */
} cpu_job;

static struct {
  pthread_mutex_t mutex;
  pthread_cond_t wake, idle;
  pthread_mutex_t launch; /* one launch at a time */
  int size;               /* threads running blocks, the caller included */
  int started;            /* pool threads created */
  cpu_job *job;
  unsigned long generation;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
          PTHREAD_MUTEX_INITIALIZER, 0, 0, NULL, 0};

/* Fibers of the block a pool thread is running (per thread, grown on demand). */
typedef struct {
  ucontext_t scheduler;
  ucontext_t *contexts;
  wavert__cpu_thread *threads;
  unsigned char *done;
  char *stacks; /* count * (guard page + stack) */
  size_t stride;
  int capacity, count, current;
  const cpu_function *function;
  void **params;
} fiber_set;

static _Thread_local fiber_set fibers;

static void fiber_barrier(wavert__cpu_thread *thread) {
  fiber_set *set = thread->fibers;
  swapcontext(&set->contexts[set->current], &set->scheduler);
}

static void fiber_main(void) {
  fiber_set *set = &fibers;
  int index = set->current;
  set->function->thread(set->params, &set->threads[index]);
  set->done[index] = 1; /* uc_link returns to the scheduler */
}

static int fibers_reserve(fiber_set *set, int count) {
  if (count <= set->capacity) return 0;
  long page = sysconf(_SC_PAGESIZE);
  size_t stride = (size_t)page + WAVERT_CPU_STACK_BYTES;
  ucontext_t *contexts = calloc((size_t)count, sizeof(*contexts));
  wavert__cpu_thread *threads = calloc((size_t)count, sizeof(*threads));
  unsigned char *done = calloc((size_t)count, 1);
  void *stacks = mmap(NULL, stride * (size_t)count, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (contexts == NULL || threads == NULL || done == NULL || stacks == MAP_FAILED) {
    free(contexts);
    free(threads);
    free(done);
    if (stacks != MAP_FAILED) munmap(stacks, stride * (size_t)count);
    return -1;
  }
  for (int i = 0; i < count; ++i) /* a guard page below each stack: an overflow faults */
    mprotect((char *)stacks + stride * (size_t)i, (size_t)page, PROT_NONE);
  if (set->stacks != NULL) munmap(set->stacks, set->stride * (size_t)set->capacity);
  free(set->contexts);
  free(set->threads);
  free(set->done);
  set->contexts = contexts;
  set->threads = threads;
  set->done = done;
  set->stacks = stacks;
  set->stride = stride;
  set->capacity = count;
  return 0;
}

/* Run block `linear` of `job` on this thread. Returns -1 when the fibers cannot be made. */
static int run_block(const cpu_job *job, int64_t linear) {
  wavert__cpu_thread thread;
  memset(&thread, 0, sizeof(thread));
  thread.block_id[0] = linear % job->grid[0];
  thread.block_id[1] = (linear / job->grid[0]) % job->grid[1];
  thread.block_id[2] = linear / (job->grid[0] * job->grid[1]);
  for (int i = 0; i < 3; ++i) {
    thread.block_dim[i] = job->block[i];
    thread.grid_dim[i] = job->grid[i];
  }
  if (job->function->block != NULL) {
    job->function->block(job->params, &thread);
    return 0;
  }
  fiber_set *set = &fibers;
  int count = (int)(job->block[0] * job->block[1] * job->block[2]);
  if (fibers_reserve(set, count) != 0) return -1;
  set->count = count;
  set->function = job->function;
  set->params = job->params;
  for (int i = 0; i < count; ++i) {
    wavert__cpu_thread *t = &set->threads[i];
    *t = thread;
    t->thread_id[0] = i % job->block[0];
    t->thread_id[1] = (i / job->block[0]) % job->block[1];
    t->thread_id[2] = i / (job->block[0] * job->block[1]);
    t->barrier = fiber_barrier;
    t->fibers = set;
    set->done[i] = 0;
    ucontext_t *c = &set->contexts[i];
    if (getcontext(c) != 0) return -1;
    c->uc_stack.ss_sp = set->stacks + set->stride * (size_t)i + (set->stride - WAVERT_CPU_STACK_BYTES);
    c->uc_stack.ss_size = WAVERT_CPU_STACK_BYTES;
    c->uc_link = &set->scheduler;
    makecontext(c, fiber_main, 0);
  }
  for (int live = count; live > 0;) {
    live = 0;
    for (int i = 0; i < count; ++i) {
      if (set->done[i]) continue;
      set->current = i;
      swapcontext(&set->scheduler, &set->contexts[i]);
      live += !set->done[i];
    }
  }
  return 0;
}

/* Take blocks of `job` until none is left; returns -1 if a block could not run. */
static int work(cpu_job *job) {
  int failed = 0;
  for (;;) {
    int64_t linear = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
    if (linear >= job->blocks) break;
    if (run_block(job, linear) != 0) failed = 1;
  }
  return failed ? -1 : 0;
}

static atomic_int pool_failed;

/* `generation`: pool.generation when the thread was made, before the launch that made it
 * published its job. */
static void *pool_main(void *generation) {
  unsigned long seen = (unsigned long)(uintptr_t)generation;
  pthread_mutex_lock(&pool.mutex);
  for (;;) {
    while (pool.generation == seen) pthread_cond_wait(&pool.wake, &pool.mutex);
    seen = pool.generation;
    cpu_job *job = pool.job;
    pthread_mutex_unlock(&pool.mutex);
    if (work(job) != 0) atomic_store(&pool_failed, 1);
    pthread_mutex_lock(&pool.mutex);
    if (--job->active == 0) pthread_cond_signal(&pool.idle);
  }
  return NULL;
}

static int pool_size(void) {
  const char *env = getenv("WAVERT_CPU_THREADS");
  if (env != NULL && env[0] != '\0') {
    char *end = NULL;
    long n = strtol(env, &end, 10);
    if (*end == '\0' && n >= 1 && n <= 1024) return (int)n;
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online >= 1 && online <= 1024 ? (int)online : 1;
}

/* ---- backend entries ---------------------------------------------------------------------- */

static wavert_status cpu_init(int32_t *out_count) {
  pool.size = pool_size();
  *out_count = 1;
  return WAVERT_OK;
}

static wavert_status cpu_device_open(wavert_device *device) {
  int64_t *a = device->attributes;
  a[WAVERT_DEVICE_MAX_THREADS_PER_BLOCK] = WAVERT_CPU_MAX_THREADS;
  a[WAVERT_DEVICE_MAX_BLOCK_DIM_X] = WAVERT_CPU_MAX_THREADS;
  a[WAVERT_DEVICE_MAX_BLOCK_DIM_Y] = WAVERT_CPU_MAX_THREADS;
  a[WAVERT_DEVICE_MAX_BLOCK_DIM_Z] = 64;
  a[WAVERT_DEVICE_MAX_GRID_DIM_X] = 2147483647;
  a[WAVERT_DEVICE_MAX_GRID_DIM_Y] = 65535;
  a[WAVERT_DEVICE_MAX_GRID_DIM_Z] = 65535;
  a[WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK] = WAVERT_CPU_STATIC_SHARED;
  a[WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN] = WAVERT_CPU_DYNAMIC_SHARED;
  a[WAVERT_DEVICE_COMPUTE_CAPABILITY_MAJOR] = 0;
  a[WAVERT_DEVICE_COMPUTE_CAPABILITY_MINOR] = 0;
  a[WAVERT_DEVICE_MULTIPROCESSOR_COUNT] = pool.size;
  a[WAVERT_DEVICE_WARP_SIZE] = 1; /* a subgroup is one thread (cpu.py) */
  snprintf(device->chip, sizeof(device->chip), "cpu");
  return WAVERT_OK;
}

static wavert_status cpu_enter(wavert_device *device, void **out_saved) {
  (void)device;
  *out_saved = NULL;
  return WAVERT_OK;
}

static void cpu_leave(wavert_device *device, void *saved) {
  (void)device;
  (void)saved;
}

static wavert_status cpu_nothing_pending(void) { return WAVERT_OK; }
static wavert_status cpu_synchronize(wavert_device *device) {
  (void)device;
  return cpu_nothing_pending();
}

static wavert_status cpu_module_load(wavert_device *device, const void *image, size_t size,
                                     void **out_module) {
  (void)device;
  static const unsigned char elf[4] = {0x7f, 'E', 'L', 'F'};
  if (size < 4 || memcmp(image, elf, 4) != 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "CPU module load: the image (%zu bytes) is not an ELF shared object "
                         "(compile the module with target='cpu')", size);
  int fd = memfd_create("wavert-cpu-kernels", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return wavert__error(WAVERT_ERROR_UNAVAILABLE, "CPU module load: memfd_create: %s",
                         strerror(errno));
  for (size_t done = 0; done < size;) {
    ssize_t n = write(fd, (const char *)image + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      close(fd);
      return wavert__error(WAVERT_ERROR_UNAVAILABLE, "CPU module load: writing the image: %s",
                           strerror(err));
    }
    done += (size_t)n;
  }
  fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    const char *why = dlerror();
    close(fd);
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "CPU module load: dlopen: %s",
                         why != NULL ? why : "unknown error");
  }
  const int32_t *abi = dlsym(handle, "__wavert_cpu_abi");
  if (abi == NULL || *abi != WAVERT_CPU_ABI) {
    dlclose(handle);
    close(fd);
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "CPU module load: the image's kernel ABI is %d, libwavert's is %d "
                         "(compile it again with this pywave)",
                         abi != NULL ? (int)*abi : -1, WAVERT_CPU_ABI);
  }
  cpu_module *module = malloc(sizeof(*module));
  if (module == NULL) {
    dlclose(handle);
    close(fd);
    return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  module->handle = handle;
  module->fd = fd;
  module->functions = NULL;
  *out_module = module;
  return WAVERT_OK;
}

static void cpu_module_unload(void *opaque) {
  cpu_module *module = opaque;
  if (module == NULL) return;
  for (cpu_function *f = module->functions; f != NULL;) {
    cpu_function *next = f->next;
    free(f);
    f = next;
  }
  dlclose(module->handle);
  close(module->fd);
  free(module);
}

static wavert_status cpu_module_get_function(void *opaque, const char *name, void **out_function) {
  cpu_module *module = opaque;
  size_t length = strlen(name);
  char *symbol = malloc(length + 32);
  if (symbol == NULL) return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
  snprintf(symbol, length + 32, "__wavert_cpu_thread_%s", name);
  cpu_kernel thread = (cpu_kernel)(uintptr_t)dlsym(module->handle, symbol);
  snprintf(symbol, length + 32, "__wavert_cpu_block_%s", name);
  cpu_kernel block = (cpu_kernel)(uintptr_t)dlsym(module->handle, symbol);
  free(symbol);
  if (thread == NULL)
    return wavert__error(WAVERT_ERROR_NOT_FOUND, "the CPU module has no kernel '%s'", name);
  cpu_function *function = malloc(sizeof(*function));
  if (function == NULL) return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
  function->thread = thread;
  function->block = block;
  function->next = module->functions;
  module->functions = function;
  *out_function = function;
  return WAVERT_OK;
}

static wavert_status cpu_function_attribute(void *function, wavert_function_attribute attribute,
                                            int64_t *out_value) {
  (void)function;
  switch (attribute) {
    case WAVERT_FUNCTION_MAX_THREADS_PER_BLOCK:
      *out_value = WAVERT_CPU_MAX_THREADS;
      return WAVERT_OK;
    case WAVERT_FUNCTION_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *out_value = WAVERT_CPU_DYNAMIC_SHARED;
      return WAVERT_OK;
    case WAVERT_FUNCTION_SHARED_SIZE_BYTES: /* static workgroup memory is thread-local data */
    case WAVERT_FUNCTION_NUM_REGS:
    case WAVERT_FUNCTION_LOCAL_SIZE_BYTES:
    case WAVERT_FUNCTION_CONST_SIZE_BYTES:
    case WAVERT_FUNCTION_PTX_VERSION:
    case WAVERT_FUNCTION_BINARY_VERSION:
      *out_value = 0;
      return WAVERT_OK;
  }
  return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "unknown function attribute %d",
                       (int)attribute);
}

static wavert_status cpu_function_opt_in_shared(void *function, int64_t bytes) {
  (void)function;
  (void)bytes; /* the whole WAVERT_CPU_DYNAMIC_SHARED array is always there */
  return WAVERT_OK;
}

static wavert_status cpu_launch(void *opaque, const uint32_t grid[3], const uint32_t block[3],
                                uint32_t dynamic_shared_bytes, void *stream, void **params) {
  (void)dynamic_shared_bytes; /* checked by launch.c against the OPTIN attribute */
  (void)stream;               /* synchronous: the launch returns when every block has run */
  cpu_job job;
  job.function = opaque;
  job.params = params;
  job.blocks = 1;
  for (int i = 0; i < 3; ++i) {
    job.grid[i] = grid[i];
    job.block[i] = block[i];
    job.blocks *= grid[i]; /* < 2^31 * 2^16 * 2^16: no overflow */
  }
  atomic_init(&job.next, 0);
  pthread_mutex_lock(&pool.launch);
  int helpers = pool.size - 1;
  if (helpers > job.blocks - 1) helpers = (int)(job.blocks - 1);
  atomic_store(&pool_failed, 0);
  if (helpers > 0) {
    pthread_mutex_lock(&pool.mutex);
    while (pool.started < pool.size - 1) {
      pthread_t t;
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      int err = pthread_create(&t, &attr, pool_main, (void *)(uintptr_t)pool.generation);
      pthread_attr_destroy(&attr);
      if (err != 0) break;
      pool.started += 1;
    }
    if (pool.started == 0) helpers = 0;
    job.active = pool.started;
    if (helpers > 0) {
      pool.job = &job;
      pool.generation += 1;
      pthread_cond_broadcast(&pool.wake);
    }
    pthread_mutex_unlock(&pool.mutex);
  }
  int failed = work(&job);
  if (helpers > 0) {
    pthread_mutex_lock(&pool.mutex);
    while (job.active > 0) pthread_cond_wait(&pool.idle, &pool.mutex);
    pool.job = NULL;
    pthread_mutex_unlock(&pool.mutex);
  }
  if (atomic_load(&pool_failed)) failed = 1;
  pthread_mutex_unlock(&pool.launch);
  if (failed)
    return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY,
                         "CPU launch: no memory for the fibers of a %u x %u x %u block (%d KiB of "
                         "stack per thread)", block[0], block[1], block[2],
                         WAVERT_CPU_STACK_BYTES / 1024);
  return WAVERT_OK;
}

/* Streams and events: distinct non-NULL handles that order nothing (all work is synchronous). */
static wavert_status cpu_handle_create(void **out_handle) {
  void *handle = malloc(1);
  if (handle == NULL) return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
  *out_handle = handle;
  return WAVERT_OK;
}

static wavert_status cpu_handle_destroy(void *handle) {
  free(handle);
  return WAVERT_OK;
}

static wavert_status cpu_stream_check(wavert_device *device, void *stream) {
  (void)device;
  (void)stream;
  return WAVERT_OK;
}

static wavert_status cpu_handle_nothing(void *handle) {
  (void)handle;
  return WAVERT_OK;
}

static wavert_status cpu_stream_wait_event(void *stream, void *event) {
  (void)stream;
  (void)event;
  return WAVERT_OK;
}

static wavert_status cpu_event_record(void *event, void *stream) {
  (void)event;
  (void)stream;
  return WAVERT_OK;
}

static wavert_status cpu_mem_alloc(size_t size, int managed, void **out_ptr) {
  (void)managed; /* host memory is reachable from both sides */
  void *ptr = NULL;
  int err = posix_memalign(&ptr, 64, size != 0 ? size : 1);
  if (err != 0)
    return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY,
                         "CPU allocation of %zu bytes failed: %s", size, strerror(err));
  *out_ptr = ptr;
  return WAVERT_OK;
}

static wavert_status cpu_mem_free(void *ptr) {
  free(ptr);
  return WAVERT_OK;
}

static wavert_status cpu_memory_kind(const void *ptr, wavert_memory_type *out_kind,
                                     int32_t *out_ordinal) {
  (void)ptr;
  *out_kind = WAVERT_MEMORY_HOST; /* all memory of this device is host memory */
  *out_ordinal = 0;
  return WAVERT_OK;
}

static wavert_status cpu_memcpy(void *dst, const void *src, size_t size, void *stream, int sync) {
  (void)stream;
  (void)sync;
  if (size != 0) memmove(dst, src, size);
  return WAVERT_OK;
}

static wavert_status cpu_memset(void *ptr, uint32_t value, size_t element_bytes, size_t count,
                                void *stream, int sync) {
  (void)stream;
  (void)sync;
  if (element_bytes == 1) {
    memset(ptr, (int)(value & 0xff), count);
  } else if (element_bytes == 2) {
    uint16_t v = (uint16_t)value, *p = ptr;
    for (size_t i = 0; i < count; ++i) p[i] = v;
  } else {
    uint32_t *p = ptr;
    for (size_t i = 0; i < count; ++i) p[i] = value;
  }
  return WAVERT_OK;
}

static wavert_status cpu_host_register(void *ptr, size_t size) {
  (void)ptr;
  (void)size;
  return WAVERT_OK;
}

static wavert_status cpu_host_device_pointer(void *ptr, void **out_device_ptr) {
  *out_device_ptr = ptr;
  return WAVERT_OK;
}

const wavert__backend wavert__cpu_backend = {
    .name = "CPU",
    .devices = "CPU",
    .init = cpu_init,
    .device_open = cpu_device_open,
    .enter = cpu_enter,
    .leave = cpu_leave,
    .synchronize = cpu_synchronize,
    .module_load = cpu_module_load,
    .module_unload = cpu_module_unload,
    .module_get_function = cpu_module_get_function,
    .function_attribute = cpu_function_attribute,
    .function_opt_in_shared = cpu_function_opt_in_shared,
    .launch = cpu_launch,
    .stream_create = cpu_handle_create,
    .stream_check = cpu_stream_check,
    .stream_destroy = cpu_handle_destroy,
    .stream_synchronize = cpu_handle_nothing,
    .stream_wait_event = cpu_stream_wait_event,
    .event_create = cpu_handle_create,
    .event_destroy = cpu_handle_destroy,
    .event_record = cpu_event_record,
    .event_synchronize = cpu_handle_nothing,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .memcpy = cpu_memcpy,
    .memset = cpu_memset,
    .host_register = cpu_host_register,
    .host_unregister = cpu_handle_nothing,
    .host_device_pointer = cpu_host_device_pointer,
    .memory_kind = cpu_memory_kind,
};
