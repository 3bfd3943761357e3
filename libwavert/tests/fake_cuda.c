/*
 * fake_cuda.c — a recording stand-in for libcuda.so.1, built only for the tests. It exports
 * the cu* entry points libwavert uses, reports H200-like attributes, keeps "device" memory in
 * host memory, records calls and launches, and can fail a chosen call once.
 */
#define _DEFAULT_SOURCE /* usleep */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_cuda.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_LOG 4096
#define MAX_LAUNCHES 1024

typedef int CUresult;
typedef struct fake_context {
  int ordinal;
} fake_context;
typedef struct fake_function {
  struct fake_function *next;
  fake_context *context;
  char name[64];
  int attributes[16];
} fake_function;
typedef struct fake_module {
  fake_context *context;
  fake_function *functions;
} fake_module;

enum {
  OK = 0,
  INVALID_VALUE = 1,
  NOT_INITIALIZED = 3,
  NO_DEVICE = 100,
  INVALID_DEVICE = 101,
  INVALID_IMAGE = 200,
  INVALID_CONTEXT = 201,
  INVALID_PTX = 218,
  INVALID_HANDLE = 400,
  NOT_FOUND = 500,
};

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static const char *log_names[MAX_LOG];
static int log_count;
static fake_cuda_launch launches[MAX_LAUNCHES];
static int launch_count;
static int set_attribute_calls, set_attribute_last, set_attribute_value;
static char fail_name[64];
static int fail_result;
static int device_count = 2;
static int initialised;
static int function_attributes[16] = {1024, 0, 0, 0, 16, 0, 0, 0, 48 * 1024};
static int param_count;
/* Device attributes overridden by fake_cuda_set_device_attribute, per ordinal (0: not set). */
static int device_attribute_set[8][128];
static int device_attribute_value[8][128];
static size_t param_sizes[FAKE_CUDA_MAX_PARAMS];
static fake_context contexts[8] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static int live_streams, live_events;
static _Thread_local fake_context *current;

/* Record a call of `name`; returns the injected failure, if any. */
static CUresult note(const char *name) {
  CUresult result = OK;
  pthread_mutex_lock(&mutex);
  if (log_count < MAX_LOG) log_names[log_count++] = name;
  if (fail_name[0] != '\0' && strcmp(fail_name, name) == 0) {
    result = fail_result;
    fail_name[0] = '\0';
  }
  pthread_mutex_unlock(&mutex);
  return result;
}

#define NOTE(name)                        \
  do {                                    \
    CUresult injected_ = note(name);      \
    if (injected_ != OK) return injected_; \
  } while (0)

/* ---- test controls ---------------------------------------------------------------------- */

EXPORT void fake_cuda_reset(void) {
  pthread_mutex_lock(&mutex);
  log_count = 0;
  launch_count = 0;
  set_attribute_calls = 0;
  pthread_mutex_unlock(&mutex);
}

EXPORT int fake_cuda_calls(const char *name) {
  int n = 0;
  pthread_mutex_lock(&mutex);
  for (int i = 0; i < log_count; ++i) n += strcmp(log_names[i], name) == 0;
  pthread_mutex_unlock(&mutex);
  return n;
}

EXPORT const char *fake_cuda_call_at(int index) {
  pthread_mutex_lock(&mutex);
  const char *name = index >= 0 && index < log_count ? log_names[index] : NULL;
  pthread_mutex_unlock(&mutex);
  return name;
}

EXPORT int fake_cuda_launch_count(void) { return launch_count; }

EXPORT const fake_cuda_launch *fake_cuda_launch_at(int index) {
  return index >= 0 && index < launch_count ? &launches[index] : NULL;
}

EXPORT int fake_cuda_last_set_attribute(int *attribute, int *value) {
  *attribute = set_attribute_last;
  *value = set_attribute_value;
  return set_attribute_calls;
}

EXPORT void fake_cuda_fail_next(const char *name, int result) {
  pthread_mutex_lock(&mutex);
  snprintf(fail_name, sizeof(fail_name), "%s", name);
  fail_result = result;
  pthread_mutex_unlock(&mutex);
}

EXPORT void fake_cuda_set_device_count(int count) { device_count = count; }

EXPORT void fake_cuda_set_function_attribute(int attribute, int value) {
  function_attributes[attribute] = value;
}

EXPORT void fake_cuda_set_device_attribute(int ordinal, int attribute, int value) {
  device_attribute_set[ordinal][attribute] = 1;
  device_attribute_value[ordinal][attribute] = value;
}

EXPORT void fake_cuda_set_param_sizes(int count, const size_t *sizes) {
  param_count = count;
  memcpy(param_sizes, sizes, (size_t)count * sizeof(sizes[0]));
}

EXPORT void *fake_cuda_current_context(void) { return current; }
EXPORT void *fake_cuda_primary_context(int ordinal) { return &contexts[ordinal]; }
EXPORT int fake_cuda_live_streams(void) { return live_streams; }
EXPORT int fake_cuda_live_events(void) { return live_events; }

/* ---- driver API ------------------------------------------------------------------------- */

EXPORT CUresult cuGetErrorName(CUresult error, const char **out) {
  switch (error) {
    case INVALID_VALUE: *out = "CUDA_ERROR_INVALID_VALUE"; return OK;
    case NO_DEVICE: *out = "CUDA_ERROR_NO_DEVICE"; return OK;
    case INVALID_IMAGE: *out = "CUDA_ERROR_INVALID_IMAGE"; return OK;
    case INVALID_CONTEXT: *out = "CUDA_ERROR_INVALID_CONTEXT"; return OK;
    case INVALID_PTX: *out = "CUDA_ERROR_INVALID_PTX"; return OK;
    case NOT_FOUND: *out = "CUDA_ERROR_NOT_FOUND"; return OK;
    case 2: *out = "CUDA_ERROR_OUT_OF_MEMORY"; return OK;
    case 700: *out = "CUDA_ERROR_ILLEGAL_ADDRESS"; return OK;
    case 712: *out = "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"; return OK;
    case 713: *out = "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"; return OK;
    default: *out = NULL; return INVALID_VALUE;
  }
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **out) {
  switch (error) {
    case INVALID_VALUE: *out = "invalid argument"; return OK;
    case NO_DEVICE: *out = "no CUDA-capable device is detected"; return OK;
    case INVALID_IMAGE: *out = "device kernel image is invalid"; return OK;
    case INVALID_CONTEXT: *out = "invalid device context"; return OK;
    case INVALID_PTX: *out = "a PTX JIT compilation failed"; return OK;
    case NOT_FOUND: *out = "named symbol not found"; return OK;
    case 2: *out = "out of memory"; return OK;
    case 700: *out = "an illegal memory access was encountered"; return OK;
    case 712: *out = "part or all of the requested memory range is already mapped"; return OK;
    case 713: *out = "pointer does not correspond to a registered memory region"; return OK;
    default: *out = NULL; return INVALID_VALUE;
  }
}

EXPORT CUresult cuInit(unsigned flags) {
  NOTE("cuInit");
  if (flags != 0) return INVALID_VALUE;
  if (device_count == 0) return NO_DEVICE;
  initialised = 1;
  return OK;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
  NOTE("cuDeviceGetCount");
  if (!initialised) return NOT_INITIALIZED;
  *count = device_count;
  return OK;
}

EXPORT CUresult cuDeviceGet(int *device, int ordinal) {
  NOTE("cuDeviceGet");
  if (ordinal < 0 || ordinal >= device_count) return INVALID_DEVICE;
  *device = ordinal;
  return OK;
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attribute, int device) {
  NOTE("cuDeviceGetAttribute");
  if (device < 0 || device >= device_count) return INVALID_DEVICE;
  if (device < 8 && attribute >= 0 && attribute < 128 && device_attribute_set[device][attribute]) {
    *value = device_attribute_value[device][attribute];
    return OK;
  }
  switch (attribute) {
    case 1: *value = 1024; break;       /* MAX_THREADS_PER_BLOCK */
    case 2: case 3: *value = 1024; break; /* MAX_BLOCK_DIM_X/Y */
    case 4: *value = 64; break;           /* MAX_BLOCK_DIM_Z */
    case 5: *value = 2147483647; break;   /* MAX_GRID_DIM_X */
    case 6: case 7: *value = 65535; break;
    case 8: *value = 49152; break;        /* MAX_SHARED_MEMORY_PER_BLOCK */
    case 10: *value = 32; break;          /* WARP_SIZE */
    case 16: *value = 132; break;         /* MULTIPROCESSOR_COUNT */
    case 75: *value = 9; break;           /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *value = 0; break;
    case 97: *value = 232448; break;      /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    default: return INVALID_VALUE;
  }
  return OK;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(void **context, int device) {
  NOTE("cuDevicePrimaryCtxRetain");
  if (device < 0 || device >= device_count) return INVALID_DEVICE;
  *context = &contexts[device];
  return OK;
}

EXPORT CUresult cuCtxGetCurrent(void **context) {
  NOTE("cuCtxGetCurrent");
  *context = current;
  return OK;
}

EXPORT CUresult cuCtxSetCurrent(void *context) {
  NOTE("cuCtxSetCurrent");
  current = context;
  return OK;
}

EXPORT CUresult cuCtxSynchronize(void) {
  NOTE("cuCtxSynchronize");
  return current != NULL ? OK : INVALID_CONTEXT;
}

static int last_jit_opt_level = -1;
EXPORT int fake_cuda_last_jit_opt_level(void) { return last_jit_opt_level; }

EXPORT CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned count, int *options,
                                   void **values) {
  NOTE("cuModuleLoadDataEx");
  if (current == NULL) return INVALID_CONTEXT;
  usleep(20000); /* widen the window for racing first loads */
  if (strncmp(image, "BAD", 3) == 0) {
    for (unsigned i = 0; i < count; ++i)
      if (options[i] == 5) /* CU_JIT_ERROR_LOG_BUFFER */
        strcpy(values[i], "ptxas fatal : fake syntax error on line 1");
    return INVALID_PTX;
  }
  last_jit_opt_level = -1;
  for (unsigned i = 0; i < count; ++i)
    if (options[i] == 7) last_jit_opt_level = (int)(intptr_t)values[i]; /* OPTIMIZATION_LEVEL */
  fake_module *m = calloc(1, sizeof(*m));
  m->context = current;
  *module = m;
  return OK;
}

EXPORT CUresult cuModuleUnload(void *module) {
  NOTE("cuModuleUnload");
  fake_module *m = module;
  for (fake_function *f = m->functions; f != NULL;) {
    fake_function *next = f->next;
    free(f);
    f = next;
  }
  free(m);
  return OK;
}

EXPORT CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
  NOTE("cuModuleGetFunction");
  if (strncmp(name, "missing", 7) == 0) return NOT_FOUND;
  fake_module *m = module;
  fake_function *f = calloc(1, sizeof(*f));
  f->context = m->context;
  snprintf(f->name, sizeof(f->name), "%s", name);
  memcpy(f->attributes, function_attributes, sizeof(f->attributes));
  f->next = m->functions;
  m->functions = f;
  *function = f;
  return OK;
}

EXPORT CUresult cuFuncGetAttribute(int *value, int attribute, void *function) {
  NOTE("cuFuncGetAttribute");
  if (attribute < 0 || attribute >= 16) return INVALID_VALUE;
  *value = ((fake_function *)function)->attributes[attribute];
  return OK;
}

EXPORT CUresult cuFuncSetAttribute(void *function, int attribute, int value) {
  NOTE("cuFuncSetAttribute");
  fake_function *f = function;
  if (attribute == 8 && value + f->attributes[1] > 232448) return INVALID_VALUE;
  f->attributes[attribute] = value;
  pthread_mutex_lock(&mutex);
  set_attribute_calls += 1;
  set_attribute_last = attribute;
  set_attribute_value = value;
  pthread_mutex_unlock(&mutex);
  return OK;
}

EXPORT CUresult cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared, void *stream,
                               void **params, void **extra) {
  NOTE("cuLaunchKernel");
  fake_function *f = function;
  if (extra != NULL) return INVALID_VALUE;
  if (current != f->context) return INVALID_CONTEXT;
  /* As the driver: dynamic shared memory above the kernel's opt-in fails. */
  if (shared + (unsigned)f->attributes[1] > 49152 && shared > (unsigned)f->attributes[8])
    return INVALID_VALUE;
  pthread_mutex_lock(&mutex);
  if (launch_count < MAX_LAUNCHES) {
    fake_cuda_launch *l = &launches[launch_count++];
    memset(l, 0, sizeof(*l));
    l->function = f;
    snprintf(l->kernel, sizeof(l->kernel), "%s", f->name);
    l->grid[0] = gx, l->grid[1] = gy, l->grid[2] = gz;
    l->block[0] = bx, l->block[1] = by, l->block[2] = bz;
    l->shared_bytes = shared;
    l->stream = stream;
    l->context = current;
    l->cluster_policy = -1;
    for (int i = 0; i < param_count; ++i) memcpy(&l->params[i], params[i], param_sizes[i]);
  }
  pthread_mutex_unlock(&mutex);
  return OK;
}

/* A stream: its magic and the context current at creation (cuStreamGetCtx). */
typedef struct fake_stream {
  uint64_t magic;
  void *context;
} fake_stream;
#define FAKE_STREAM_MAGIC 0x53545245414d5f31ull

EXPORT CUresult cuStreamCreate(void **stream, unsigned flags) {
  NOTE("cuStreamCreate");
  (void)flags;
  fake_stream *s = malloc(sizeof *s);
  s->magic = FAKE_STREAM_MAGIC;
  s->context = current;
  *stream = s;
  __atomic_add_fetch(&live_streams, 1, __ATOMIC_RELAXED);
  return OK;
}

EXPORT CUresult cuStreamDestroy_v2(void *stream) {
  NOTE("cuStreamDestroy_v2");
  ((fake_stream *)stream)->magic = 0;
  free(stream);
  __atomic_sub_fetch(&live_streams, 1, __ATOMIC_RELAXED);
  return OK;
}

/* Trusts a readable handle, as a driver may: the magic tells streams from other memory. */
EXPORT CUresult cuStreamGetCtx(void *stream, void **context) {
  NOTE("cuStreamGetCtx");
  const fake_stream *s = stream;
  if (s->magic != FAKE_STREAM_MAGIC) return INVALID_HANDLE;
  *context = s->context;
  return OK;
}

EXPORT CUresult cuStreamSynchronize(void *stream) {
  (void)stream;
  NOTE("cuStreamSynchronize");
  return OK;
}

EXPORT CUresult cuStreamWaitEvent(void *stream, void *event, unsigned flags) {
  (void)stream;
  NOTE("cuStreamWaitEvent");
  return event != NULL && flags == 0 ? OK : INVALID_HANDLE;
}

EXPORT CUresult cuEventCreate(void **event, unsigned flags) {
  (void)flags;
  NOTE("cuEventCreate");
  *event = malloc(1);
  __atomic_add_fetch(&live_events, 1, __ATOMIC_RELAXED);
  return OK;
}

EXPORT CUresult cuEventDestroy_v2(void *event) {
  NOTE("cuEventDestroy_v2");
  free(event);
  __atomic_sub_fetch(&live_events, 1, __ATOMIC_RELAXED);
  return OK;
}

EXPORT CUresult cuEventRecord(void *event, void *stream) {
  (void)stream;
  NOTE("cuEventRecord");
  return event != NULL ? OK : INVALID_HANDLE;
}

EXPORT CUresult cuEventSynchronize(void *event) {
  NOTE("cuEventSynchronize");
  return event != NULL ? OK : INVALID_HANDLE;
}

#define MAX_REGISTERED 64
static struct {
  const void *ptr;
  size_t size;
} registered[MAX_REGISTERED];

/* Live "device" allocations (host memory underneath), for cuPointerGetAttributes and the
 * live count; an allocation the table cannot hold is still made, only not answered for. */
#define MAX_ALLOCATIONS 256
static struct {
  uintptr_t ptr;
  size_t size;
  int ordinal;
  int managed;
} allocations[MAX_ALLOCATIONS];
static int live_allocations;

static void note_allocation(uintptr_t ptr, size_t size, int managed) {
  pthread_mutex_lock(&mutex);
  live_allocations += 1;
  for (int i = 0; i < MAX_ALLOCATIONS; ++i)
    if (allocations[i].ptr == 0) {
      allocations[i].ptr = ptr;
      allocations[i].size = size;
      allocations[i].ordinal = current->ordinal;
      allocations[i].managed = managed;
      break;
    }
  pthread_mutex_unlock(&mutex);
}

EXPORT int fake_cuda_live_allocations(void) { return live_allocations; }

EXPORT CUresult cuMemAlloc_v2(uintptr_t *ptr, size_t size) {
  NOTE("cuMemAlloc_v2");
  if (current == NULL) return INVALID_CONTEXT;
  *ptr = (uintptr_t)malloc(size);
  note_allocation(*ptr, size, 0);
  return OK;
}

EXPORT CUresult cuMemAllocManaged(uintptr_t *ptr, size_t size, unsigned flags) {
  NOTE("cuMemAllocManaged");
  if (current == NULL || flags != 1) return INVALID_VALUE;
  *ptr = (uintptr_t)malloc(size);
  note_allocation(*ptr, size, 1);
  return OK;
}

EXPORT CUresult cuMemFree_v2(uintptr_t ptr) {
  NOTE("cuMemFree_v2");
  int found = ptr == 0;
  pthread_mutex_lock(&mutex);
  for (int i = 0; i < MAX_ALLOCATIONS && !found; ++i)
    if (allocations[i].ptr == ptr) {
      allocations[i].ptr = 0;
      found = 1;
    }
  /* As the driver: a pointer it did not allocate (freed already) is CUDA_ERROR_INVALID_VALUE. */
  if (!found) {
    pthread_mutex_unlock(&mutex);
    return INVALID_VALUE;
  }
  if (ptr != 0) live_allocations -= 1;
  pthread_mutex_unlock(&mutex);
  free((void *)ptr);
  return OK;
}

/* CU_POINTER_ATTRIBUTE_MEMORY_TYPE (2), IS_MANAGED (8), DEVICE_ORDINAL (9) of the allocation
 * holding `ptr`; registered host memory is CU_MEMORYTYPE_HOST; anything else unknown
 * (type 0), as the driver answers for memory it does not know. */
EXPORT CUresult cuPointerGetAttributes(unsigned count, const int *attributes, void **data,
                                       uintptr_t ptr) {
  NOTE("cuPointerGetAttributes");
  unsigned type = 0, managed = 0;
  int ordinal = -1;
  pthread_mutex_lock(&mutex);
  for (int i = 0; i < MAX_ALLOCATIONS; ++i)
    if (allocations[i].ptr != 0 && ptr >= allocations[i].ptr &&
        ptr - allocations[i].ptr < (allocations[i].size ? allocations[i].size : 1)) {
      type = 2; /* managed memory too: the driver tells it by IS_MANAGED */
      managed = (unsigned)allocations[i].managed;
      ordinal = allocations[i].ordinal;
    }
  for (int i = 0; i < MAX_REGISTERED; ++i)
    if (registered[i].ptr != NULL && ptr >= (uintptr_t)registered[i].ptr &&
        ptr - (uintptr_t)registered[i].ptr < registered[i].size) {
      type = 1;
      ordinal = 0;
    }
  pthread_mutex_unlock(&mutex);
  for (unsigned i = 0; i < count; ++i) {
    switch (attributes[i]) {
    case 2: *(unsigned *)data[i] = type; break;
    case 8: *(unsigned char *)data[i] = (unsigned char)managed; break;
    case 9: *(int *)data[i] = ordinal; break;
    default: return INVALID_VALUE;
    }
  }
  return OK;
}

EXPORT CUresult cuMemcpy(uintptr_t dst, uintptr_t src, size_t size) {
  NOTE("cuMemcpy");
  memcpy((void *)dst, (const void *)src, size);
  return OK;
}

EXPORT CUresult cuMemcpyAsync(uintptr_t dst, uintptr_t src, size_t size, void *stream) {
  (void)stream;
  NOTE("cuMemcpyAsync");
  memcpy((void *)dst, (const void *)src, size);
  return OK;
}

#define FAKE_MEMSET(name, type, async_args)                                      \
  EXPORT CUresult name(uintptr_t dst, type value, size_t count async_args) {     \
    NOTE(#name);                                                                 \
    for (size_t i = 0; i < count; ++i) ((type *)dst)[i] = value;                 \
    return OK;                                                                   \
  }
#define SYNC_ARGS
#define ASYNC_ARGS , void *stream __attribute__((unused))
FAKE_MEMSET(cuMemsetD8_v2, unsigned char, SYNC_ARGS)
FAKE_MEMSET(cuMemsetD16_v2, unsigned short, SYNC_ARGS)
FAKE_MEMSET(cuMemsetD32_v2, unsigned, SYNC_ARGS)
FAKE_MEMSET(cuMemsetD8Async, unsigned char, ASYNC_ARGS)
FAKE_MEMSET(cuMemsetD16Async, unsigned short, ASYNC_ARGS)
FAKE_MEMSET(cuMemsetD32Async, unsigned, ASYNC_ARGS)

/* ---- CUDA >= 12 launch, host registration, tensor maps ---------------------------------- */

typedef struct {
  int id;
  char pad[4];
  union {
    char bytes[64];
    struct {
      unsigned x, y, z;
    } cluster_dim;
    int scheduling_policy;
  } value;
} fake_launch_attribute;
typedef struct {
  unsigned grid[3], block[3], shared_bytes;
  void *stream;
  fake_launch_attribute *attributes;
  unsigned attribute_count;
} fake_launch_config;

EXPORT CUresult cuLaunchKernelEx(const fake_launch_config *config, void *function,
                                 void **params, void **extra) {
  NOTE("cuLaunchKernelEx");
  fake_function *f = function;
  if (extra != NULL) return INVALID_VALUE;
  if (current != f->context) return INVALID_CONTEXT;
  unsigned cluster[3] = {0, 0, 0};
  int policy = -1;
  for (unsigned i = 0; i < config->attribute_count; ++i) {
    const fake_launch_attribute *a = &config->attributes[i];
    if (a->id == 4) {
      cluster[0] = a->value.cluster_dim.x;
      cluster[1] = a->value.cluster_dim.y;
      cluster[2] = a->value.cluster_dim.z;
    } else if (a->id == 5) {
      policy = a->value.scheduling_policy;
    } else {
      return INVALID_VALUE;
    }
  }
  for (int i = 0; i < 3; ++i)
    if (cluster[i] == 0 || config->grid[i] % cluster[i] != 0) return INVALID_VALUE;
  /* As the driver: more than 8 blocks per cluster needs the non-portable opt-in (14). */
  if (cluster[0] * cluster[1] * cluster[2] > 8 && f->attributes[14] != 1) return INVALID_VALUE;
  pthread_mutex_lock(&mutex);
  if (launch_count < MAX_LAUNCHES) {
    fake_cuda_launch *l = &launches[launch_count++];
    memset(l, 0, sizeof(*l));
    l->function = f;
    snprintf(l->kernel, sizeof(l->kernel), "%s", f->name);
    memcpy(l->grid, config->grid, sizeof(l->grid));
    memcpy(l->block, config->block, sizeof(l->block));
    l->shared_bytes = config->shared_bytes;
    l->stream = config->stream;
    l->context = current;
    memcpy(l->cluster, cluster, sizeof(cluster));
    l->cluster_policy = policy;
    for (int i = 0; i < param_count; ++i) memcpy(&l->params[i], params[i], param_sizes[i]);
  }
  pthread_mutex_unlock(&mutex);
  return OK;
}

EXPORT size_t fake_cuda_registered(const void *ptr) {
  size_t size = 0;
  pthread_mutex_lock(&mutex);
  for (int i = 0; i < MAX_REGISTERED; ++i)
    if (registered[i].ptr == ptr) size = registered[i].size;
  pthread_mutex_unlock(&mutex);
  return size;
}

EXPORT CUresult cuMemHostRegister_v2(void *ptr, size_t size, unsigned flags) {
  NOTE("cuMemHostRegister_v2");
  if (current == NULL) return INVALID_CONTEXT;
  if (ptr == NULL || size == 0 || flags != 0) return INVALID_VALUE;
  CUresult result = INVALID_VALUE; /* table full */
  pthread_mutex_lock(&mutex);
  int free_slot = -1;
  for (int i = 0; i < MAX_REGISTERED; ++i) {
    if (registered[i].ptr == ptr) free_slot = -2;
    if (registered[i].ptr == NULL && free_slot == -1) free_slot = i;
  }
  if (free_slot == -2) {
    result = 712;
  } else if (free_slot >= 0) {
    registered[free_slot].ptr = ptr;
    registered[free_slot].size = size;
    result = OK;
  }
  pthread_mutex_unlock(&mutex);
  return result;
}

EXPORT CUresult cuMemHostUnregister(void *ptr) {
  NOTE("cuMemHostUnregister");
  if (current == NULL) return INVALID_CONTEXT;
  CUresult result = 713;
  pthread_mutex_lock(&mutex);
  for (int i = 0; i < MAX_REGISTERED; ++i)
    if (ptr != NULL && registered[i].ptr == ptr) {
      registered[i].ptr = NULL;
      result = OK;
    }
  pthread_mutex_unlock(&mutex);
  return result;
}

EXPORT CUresult cuMemHostGetDevicePointer_v2(uintptr_t *device_ptr, void *ptr, unsigned flags) {
  NOTE("cuMemHostGetDevicePointer_v2");
  if (flags != 0 || fake_cuda_registered(ptr) == 0) return INVALID_VALUE;
  *device_ptr = (uintptr_t)ptr + FAKE_CUDA_DEVICE_ALIAS;
  return OK;
}

static fake_cuda_tensor_map last_tensor_map;

EXPORT const fake_cuda_tensor_map *fake_cuda_last_tensor_map(void) { return &last_tensor_map; }

EXPORT CUresult cuTensorMapEncodeTiled(void *map, int data_type, unsigned rank, void *address,
                                       const uint64_t *dims, const uint64_t *strides,
                                       const unsigned *box, const unsigned *element_strides,
                                       int interleave, int swizzle, int l2_promotion,
                                       int oob_fill) {
  NOTE("cuTensorMapEncodeTiled");
  if (((uintptr_t)map & 63) != 0 || rank < 1 || rank > 5 || data_type < 0 || data_type > 12)
    return INVALID_VALUE;
  fake_cuda_tensor_map *t = &last_tensor_map;
  memset(t, 0, sizeof(*t));
  t->data_type = data_type;
  t->rank = rank;
  t->address = address;
  for (unsigned i = 0; i < rank; ++i) {
    t->dims[i] = dims[i];
    t->box[i] = box[i];
    t->element_strides[i] = element_strides[i];
    if (i + 1 < rank) t->strides[i] = strides[i];
  }
  t->interleave = interleave;
  t->swizzle = swizzle;
  t->l2_promotion = l2_promotion;
  t->oob_fill = oob_fill;
  t->map = map;
  /* The "encoding": the arguments themselves (without the map pointer), 128 bytes. */
  unsigned char bytes[128];
  memset(bytes, 0, sizeof(bytes));
  memcpy(bytes, &t->address, sizeof(t->address));
  memcpy(bytes + 8, t->dims, sizeof(t->dims));
  memcpy(bytes + 48, t->strides, sizeof(t->strides));
  memcpy(bytes + 80, t->box, sizeof(t->box));
  bytes[100] = (unsigned char)data_type;
  bytes[101] = (unsigned char)rank;
  bytes[102] = (unsigned char)interleave;
  bytes[103] = (unsigned char)swizzle;
  bytes[104] = (unsigned char)l2_promotion;
  bytes[105] = (unsigned char)oob_fill;
  memcpy(map, bytes, sizeof(bytes));
  return OK;
}
