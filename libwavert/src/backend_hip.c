/*
 * backend_hip.c — the HIP backend: libamdhip64.so (.so.6, .so.5, or $WAVERT_HIP_LIBRARY)
 * opened with dlopen, the few HIP types and enums it needs declared here. HIP contexts are
 * deprecated, so "entering" a device is hipSetDevice on the calling thread (restored after).
 */
#define _GNU_SOURCE /* dladdr */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "hip_probe.h"

typedef int hipError_t;
typedef struct ihipModule_t *hipModule_t;
typedef struct ihipModuleSymbol_t *hipFunction_t;
typedef struct ihipStream_t *hipStream_t;
typedef struct ihipEvent_t *hipEvent_t;

enum { hipSuccess = 0, hipErrorOutOfMemory = 2, hipErrorNoDevice = 100, hipErrorNotFound = 500 };
/* hipDeviceAttribute_t (HIP >= 5.x numbering). */
enum {
  hipDeviceAttributeComputeCapabilityMajor = 23,
  hipDeviceAttributeMaxBlockDimX = 26,
  hipDeviceAttributeMaxBlockDimY = 27,
  hipDeviceAttributeMaxBlockDimZ = 28,
  hipDeviceAttributeMaxGridDimX = 29,
  hipDeviceAttributeMaxGridDimY = 30,
  hipDeviceAttributeMaxGridDimZ = 31,
  hipDeviceAttributeMaxThreadsPerBlock = 56,
  hipDeviceAttributeComputeCapabilityMinor = 61,
  hipDeviceAttributeMultiprocessorCount = 63,
  hipDeviceAttributeMaxSharedMemoryPerBlock = 74,
  hipDeviceAttributeSharedMemPerBlockOptin = 75,
  hipDeviceAttributeWarpSize = 87,
};
/* hipFunction_attribute matches CUfunction_attribute. */
enum {
  HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
  HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
  HIP_FUNC_ATTRIBUTE_CONST_SIZE_BYTES = 2,
  HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
  HIP_FUNC_ATTRIBUTE_NUM_REGS = 4,
  HIP_FUNC_ATTRIBUTE_PTX_VERSION = 5,
  HIP_FUNC_ATTRIBUTE_BINARY_VERSION = 6,
  HIP_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};
enum { hipFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum { hipMemcpyDefault = 4, hipStreamNonBlocking = 1, hipEventDisableTiming = 2 };
enum { hipMemAttachGlobal = 1 };
/* hipPointer_attribute, and hipMemoryType as HIP >= 6 numbers it. */
enum {
  HIP_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  HIP_POINTER_ATTRIBUTE_IS_MANAGED = 8,
  HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
  hipErrorInvalidValue = 1,
  hipMemoryTypeHost = 1,
  hipMemoryTypeDevice = 2,
  hipMemoryTypeManaged = 3,
  hipMemoryTypeUnified = 11,
};

/* The leading members of hipDeviceProp_tR0600 (hip_runtime_api.h, HIP 6.x) up to gcnArchName,
 * so that the compiler places gcnArchName at the driver's offset. Only gcnArchName is read;
 * the buffer passed to the driver is larger than the whole structure. */
typedef struct {
  char name[256];
  char uuid[16];
  char luid[8];
  unsigned int luidDeviceNodeMask;
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int regsPerBlock;
  int warpSize;
  size_t memPitch;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int clockRate;
  size_t totalConstMem;
  int major;
  int minor;
  size_t textureAlignment;
  size_t texturePitchAlignment;
  int deviceOverlap_to_maxTexture1DLinear[9]; /* deviceOverlap ... maxTexture1DLinear */
  int maxTexture2D[2];
  int maxTexture2DMipmap[2];
  int maxTexture2DLinear[3];
  int maxTexture2DGather[2];
  int maxTexture3D[3];
  int maxTexture3DAlt[3];
  int maxTextureCubemap;
  int maxTexture1DLayered[2];
  int maxTexture2DLayered[3];
  int maxTextureCubemapLayered[2];
  int maxSurface1D;
  int maxSurface2D[2];
  int maxSurface3D[3];
  int maxSurface1DLayered[2];
  int maxSurface2DLayered[3];
  int maxSurfaceCubemap;
  int maxSurfaceCubemapLayered[2];
  size_t surfaceAlignment;
  int concurrentKernels_to_localL1CacheSupported[16];
  size_t sharedMemPerMultiprocessor;
  int regsPerMultiprocessor_to_cooperativeMultiDeviceLaunch[12];
  size_t sharedMemPerBlockOptin;
  int pageableMemoryAccessUsesHostPageTables_to_accessPolicyMaxWindowSize[4];
  size_t reservedSharedMemPerBlock;
  int hostRegisterSupported_to_gpuDirectRDMASupported[6];
  unsigned int gpuDirectRDMAFlushWritesOptions;
  int gpuDirectRDMAWritesOrdering;
  unsigned int memoryPoolSupportedHandleTypes;
  int deferredMappingHipArraySupported_to_unifiedFunctionPointers[4];
  int reserved[63];
  int hipReserved[32];
  char gcnArchName[256];
} hip_device_prop_r0600_head;

#define WAVERT__HIP_SYMBOLS(X)                                                                \
  X(hipGetErrorName, const char *, (hipError_t))                                             \
  X(hipGetErrorString, const char *, (hipError_t))                                           \
  X(hipInit, hipError_t, (unsigned))                                                         \
  X(hipGetDeviceCount, hipError_t, (int *))                                                  \
  X(hipDeviceGetAttribute, hipError_t, (int *, int, int))                                    \
  X(hipGetDevice, hipError_t, (int *))                                                       \
  X(hipSetDevice, hipError_t, (int))                                                         \
  X(hipDeviceSynchronize, hipError_t, (void))                                                \
  X(hipModuleLoadData, hipError_t, (hipModule_t *, const void *))                            \
  X(hipModuleUnload, hipError_t, (hipModule_t))                                              \
  X(hipModuleGetFunction, hipError_t, (hipFunction_t *, hipModule_t, const char *))          \
  X(hipFuncGetAttribute, hipError_t, (int *, int, hipFunction_t))                            \
  X(hipFuncSetAttribute, hipError_t, (const void *, int, int))                               \
  X(hipModuleLaunchKernel, hipError_t,                                                       \
    (hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,    \
     hipStream_t, void **, void **))                                                         \
  X(hipStreamCreateWithFlags, hipError_t, (hipStream_t *, unsigned))                         \
  X(hipStreamDestroy, hipError_t, (hipStream_t))                                             \
  X(hipStreamSynchronize, hipError_t, (hipStream_t))                                         \
  X(hipStreamWaitEvent, hipError_t, (hipStream_t, hipEvent_t, unsigned))                     \
  X(hipEventCreateWithFlags, hipError_t, (hipEvent_t *, unsigned))                           \
  X(hipEventDestroy, hipError_t, (hipEvent_t))                                               \
  X(hipEventRecord, hipError_t, (hipEvent_t, hipStream_t))                                   \
  X(hipEventSynchronize, hipError_t, (hipEvent_t))                                           \
  X(hipMalloc, hipError_t, (void **, size_t))                                                \
  X(hipMallocManaged, hipError_t, (void **, size_t, unsigned))                               \
  X(hipFree, hipError_t, (void *))                                                           \
  X(hipMemcpy, hipError_t, (void *, const void *, size_t, int))                              \
  X(hipMemcpyAsync, hipError_t, (void *, const void *, size_t, int, hipStream_t))            \
  X(hipMemsetD8, hipError_t, (void *, unsigned char, size_t))                                \
  X(hipMemsetD16, hipError_t, (void *, unsigned short, size_t))                              \
  X(hipMemsetD32, hipError_t, (void *, int, size_t))                                         \
  X(hipMemsetD8Async, hipError_t, (void *, unsigned char, size_t, hipStream_t))              \
  X(hipMemsetD16Async, hipError_t, (void *, unsigned short, size_t, hipStream_t))            \
  X(hipMemsetD32Async, hipError_t, (void *, int, size_t, hipStream_t))                      \
  X(hipHostRegister, hipError_t, (void *, size_t, unsigned))                                 \
  X(hipHostUnregister, hipError_t, (void *))                                                 \
  X(hipHostGetDevicePointer, hipError_t, (void **, void *, unsigned))

#define WAVERT__DECLARE(field, ret, args) ret(*field) args;
static struct {
  WAVERT__HIP_SYMBOLS(WAVERT__DECLARE)
  /* Optional (HIP >= 6): used only to name the chip. */
  hipError_t (*hipGetDevicePropertiesR0600)(void *, int);
  hipError_t (*hipStreamGetDevice)(hipStream_t, int *); /* ROCm >= 5.x; NULL when absent */
  hipError_t (*hipPointerGetAttribute)(void *, int, void *); /* NULL when absent */
} hip;
#undef WAVERT__DECLARE

static wavert_status hip_error(const char *call, hipError_t result) {
  const char *name = hip.hipGetErrorName(result);
  const char *text = hip.hipGetErrorString(result);
  return wavert__error(result == hipErrorOutOfMemory ? WAVERT_ERROR_OUT_OF_MEMORY
                                                     : WAVERT_ERROR_DRIVER,
                       "%s: %s (%s)", call, name != NULL ? name : "hipError",
                       text != NULL ? text : "unknown error");
}

#define HIP_CHECK(call, args)                                              \
  do {                                                                     \
    hipError_t hip_result_ = hip.call args;                                \
    if (hip_result_ != hipSuccess) return hip_error(#call, hip_result_);   \
  } while (0)

/* The HIP runtime is opened and its devices counted in another process first: some HIP
 * runtimes abort while loading (e.g. two copies of LLVM registering the same command-line
 * option, seen with libamdhip64.so.5 on a machine without an AMD GPU), and an abort cannot be
 * caught in this process. A probe that finds no usable device sets *out_skip, so the library
 * is never loaded here; a probe that crashes makes the backend UNAVAILABLE.
 *
 * How the probe process is made: posix_spawn of wavert-hip-probe (hip_probe.c), a helper
 * program installed next to libwavert. Not fork() alone: libwavert lives in threaded programs
 * (Python, user code), and after fork() in a multi-threaded process the child may only call
 * async-signal-safe functions until it execs — another thread may have held the dynamic
 * loader's, malloc's or stdio's locks at the fork, and dlopen in the child then deadlocks.
 * posix_spawn only execs in the child, which is safe from any thread. Not /proc/self/exe: the
 * host program is Python or the user's, with no probe mode to run.
 * Without the helper ($WAVERT_HIP_PROBE_HELPER names another path; libwavert copied alone): a
 * single-threaded process forks and probes in the child, which is safe with no other thread
 * to hold a lock; a multi-threaded one loads the runtime here without a probe, as with
 * $WAVERT_HIP_PROBE=0, rather than risk the deadlock. */

/* Where wavert-hip-probe is: $WAVERT_HIP_PROBE_HELPER, else the folder libwavert was loaded
 * from. 0 when neither gives a path. */
static int probe_helper_path(char *buf, size_t size) {
  static const char marker = 0; /* an address inside libwavert, for dladdr */
  const char *override = getenv("WAVERT_HIP_PROBE_HELPER");
  int n = -1;
  if (override != NULL && override[0] != '\0') {
    n = snprintf(buf, size, "%s", override);
  } else {
    Dl_info info;
    const char *slash = NULL;
    if (dladdr(&marker, &info) != 0 && info.dli_fname != NULL)
      slash = strrchr(info.dli_fname, '/');
    if (slash != NULL)
      n = snprintf(buf, size, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname,
                   WAVERT__HIP_PROBE_NAME);
  }
  return n > 0 && (size_t)n < size;
}

/* 1 when this process has one thread (Linux: the entries of /proc/self/task), 0 when it has
 * more or they cannot be counted. Only the calling thread could start another, so a 1 stays
 * true until it forks. */
static int single_threaded(void) {
  DIR *tasks = opendir("/proc/self/task");
  if (tasks == NULL) return 0;
  int threads = 0;
  for (struct dirent *entry = readdir(tasks); entry != NULL; entry = readdir(tasks))
    threads += entry->d_name[0] != '.';
  closedir(tasks);
  return threads == 1;
}

/* Start the probe process for `args` (args[0] = the helper path, then the libraries to try,
 * then NULL); *out_pid is 0 when none could be started. */
static void probe_start(char **args, int count, pid_t *out_pid) {
  *out_pid = 0;
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  sigset_t none;
  sigemptyset(&none);
  int ready = args[0] != NULL && posix_spawn_file_actions_init(&actions) == 0;
  if (ready && posix_spawnattr_init(&attributes) != 0) {
    posix_spawn_file_actions_destroy(&actions);
    ready = 0;
  }
  if (ready) {
    /* stdout stays clean for the host program's own output (pipes); stderr is inherited. */
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
    pid_t pid = 0;
    if (posix_spawn(&pid, args[0], &actions, &attributes, args, environ) == 0) *out_pid = pid;
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    if (*out_pid != 0) return;
  }
  if (!single_threaded()) return;
  pid_t pid = fork();
  if (pid == 0) _exit(wavert__hip_probe_run(count, args + 1));
  if (pid > 0) *out_pid = pid;
}

static wavert_status hip_probe(const char *const *names, int *out_skip) {
  *out_skip = 0;
  const char *probe = getenv("WAVERT_HIP_PROBE");
  if (probe != NULL && strcmp(probe, "0") == 0) return WAVERT_OK;
  char helper[4096];
  char *args[8] = {NULL};
  int count = 0;
  const char *override = getenv("WAVERT_HIP_LIBRARY");
  if (override != NULL && override[0] != '\0') {
    args[1 + count++] = (char *)override;
  } else {
    for (; names[count] != NULL && count < 6; ++count) args[1 + count] = (char *)names[count];
  }
  args[0] = probe_helper_path(helper, sizeof(helper)) ? helper : NULL;
  pid_t pid = 0;
  probe_start(args, count, &pid);
  if (pid == 0) return WAVERT_OK; /* no probe possible: load in-process as usual */
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0)
    if (errno != EINTR) return WAVERT_OK;
  if (WIFSIGNALED(wstatus))
    return wavert__error(WAVERT_ERROR_UNAVAILABLE,
                         "the HIP runtime library crashed while loading (signal %d in a probe "
                         "process); it cannot be used in this process, so there is no AMD "
                         "device", WTERMSIG(wstatus));
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == WAVERT__PROBE_NO_DEVICE) *out_skip = 1;
  return WAVERT_OK;
}

static wavert_status hip_init(int32_t *out_count) {
  static const char *const names[] = {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5",
                                      NULL};
  int skip = 0;
  wavert_status status = hip_probe(names, &skip);
  if (status != WAVERT_OK) return status;
  if (skip) {
    *out_count = 0;
    return WAVERT_OK;
  }
  void *library = NULL;
  status = wavert__open_library("the HIP runtime", "WAVERT_HIP_LIBRARY", names, &library);
  if (status != WAVERT_OK) return status;
#define WAVERT__RESOLVE(field, ret, args)                                                    \
  *(void **)&hip.field = dlsym(library, #field);                                             \
  if (hip.field == NULL)                                                                     \
    return wavert__error(WAVERT_ERROR_UNAVAILABLE,                                           \
                         "the HIP runtime library has no symbol %s (too old?)", #field);
  WAVERT__HIP_SYMBOLS(WAVERT__RESOLVE)
#undef WAVERT__RESOLVE
  *(void **)&hip.hipGetDevicePropertiesR0600 = dlsym(library, "hipGetDevicePropertiesR0600");
  *(void **)&hip.hipStreamGetDevice = dlsym(library, "hipStreamGetDevice");
  *(void **)&hip.hipPointerGetAttribute = dlsym(library, "hipPointerGetAttribute");
  hipError_t result = hip.hipInit(0);
  int count = 0;
  if (result == hipSuccess) result = hip.hipGetDeviceCount(&count);
  if (result == hipErrorNoDevice) {
    *out_count = 0;
    return WAVERT_OK;
  }
  if (result != hipSuccess) {
    char cause[256];
    hip_error("hipInit", result);
    snprintf(cause, sizeof(cause), "%s", wavert_last_error());
    return wavert__error(WAVERT_ERROR_UNAVAILABLE, "the HIP runtime cannot be initialised: %s",
                         cause);
  }
  *out_count = count;
  return WAVERT_OK;
}

/* gcnArchName without its feature suffix ("gfx942:sramecc+:xnack-" -> "gfx942"), or "" when
 * the runtime has no hipGetDevicePropertiesR0600. */
static wavert_status hip_chip(int ordinal, char *chip, size_t size) {
  if (hip.hipGetDevicePropertiesR0600 == NULL) return WAVERT_OK;
  /* Twice the declared head: room for the members after gcnArchName. */
  void *props = calloc(2, sizeof(hip_device_prop_r0600_head));
  if (props == NULL) return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
  hipError_t result = hip.hipGetDevicePropertiesR0600(props, ordinal);
  if (result == hipSuccess) {
    char *arch = ((hip_device_prop_r0600_head *)props)->gcnArchName;
    arch[sizeof(((hip_device_prop_r0600_head *)props)->gcnArchName) - 1] = '\0';
    snprintf(chip, size, "%.*s", (int)strcspn(arch, ":"), arch);
  }
  free(props);
  return result == hipSuccess ? WAVERT_OK : hip_error("hipGetDevicePropertiesR0600", result);
}

static wavert_status hip_device_open(wavert_device *device) {
  static const struct {
    wavert_device_attribute attribute;
    int hip_attribute;
  } map[] = {
      {WAVERT_DEVICE_MAX_THREADS_PER_BLOCK, hipDeviceAttributeMaxThreadsPerBlock},
      {WAVERT_DEVICE_MAX_BLOCK_DIM_X, hipDeviceAttributeMaxBlockDimX},
      {WAVERT_DEVICE_MAX_BLOCK_DIM_Y, hipDeviceAttributeMaxBlockDimY},
      {WAVERT_DEVICE_MAX_BLOCK_DIM_Z, hipDeviceAttributeMaxBlockDimZ},
      {WAVERT_DEVICE_MAX_GRID_DIM_X, hipDeviceAttributeMaxGridDimX},
      {WAVERT_DEVICE_MAX_GRID_DIM_Y, hipDeviceAttributeMaxGridDimY},
      {WAVERT_DEVICE_MAX_GRID_DIM_Z, hipDeviceAttributeMaxGridDimZ},
      {WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK, hipDeviceAttributeMaxSharedMemoryPerBlock},
      {WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, hipDeviceAttributeSharedMemPerBlockOptin},
      {WAVERT_DEVICE_COMPUTE_CAPABILITY_MAJOR, hipDeviceAttributeComputeCapabilityMajor},
      {WAVERT_DEVICE_COMPUTE_CAPABILITY_MINOR, hipDeviceAttributeComputeCapabilityMinor},
      {WAVERT_DEVICE_MULTIPROCESSOR_COUNT, hipDeviceAttributeMultiprocessorCount},
      {WAVERT_DEVICE_WARP_SIZE, hipDeviceAttributeWarpSize},
  };
  int ordinal = device->dl.device_id;
  for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); ++i) {
    int value = 0;
    HIP_CHECK(hipDeviceGetAttribute, (&value, map[i].hip_attribute, ordinal));
    device->attributes[map[i].attribute] = value;
  }
  device->handle = ordinal;
  device->context = NULL;
  return hip_chip(ordinal, device->chip, sizeof(device->chip));
}

static wavert_status hip_enter(wavert_device *device, void **out_saved) {
  int current = 0;
  HIP_CHECK(hipGetDevice, (&current));
  if (current != (int)device->handle) HIP_CHECK(hipSetDevice, ((int)device->handle));
  *out_saved = (void *)(intptr_t)current;
  return WAVERT_OK;
}

static void hip_leave(wavert_device *device, void *saved) {
  if ((int)(intptr_t)saved != (int)device->handle) hip.hipSetDevice((int)(intptr_t)saved);
}

static wavert_status hip_synchronize(wavert_device *device) {
  (void)device;
  HIP_CHECK(hipDeviceSynchronize, ());
  return WAVERT_OK;
}

static wavert_status hip_module_load(wavert_device *device, const void *image, size_t size,
                                     void **out_module) {
  (void)device;
  (void)size; /* an hsaco is an ELF file: the runtime reads its size from the headers */
  hipModule_t module = NULL;
  HIP_CHECK(hipModuleLoadData, (&module, image));
  *out_module = module;
  return WAVERT_OK;
}

static void hip_module_unload(void *module) { hip.hipModuleUnload((hipModule_t)module); }

static wavert_status hip_module_get_function(void *module, const char *name, void **out_function) {
  hipFunction_t function = NULL;
  hipError_t result = hip.hipModuleGetFunction(&function, (hipModule_t)module, name);
  if (result == hipErrorNotFound)
    return wavert__error(WAVERT_ERROR_NOT_FOUND, "the module has no kernel named '%s'", name);
  if (result != hipSuccess) return hip_error("hipModuleGetFunction", result);
  *out_function = function;
  return WAVERT_OK;
}

static wavert_status hip_function_attribute(void *function, wavert_function_attribute attribute,
                                            int64_t *out_value) {
  int hip_attribute;
  switch (attribute) {
    case WAVERT_FUNCTION_MAX_THREADS_PER_BLOCK:
      hip_attribute = HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
      break;
    case WAVERT_FUNCTION_SHARED_SIZE_BYTES:
      hip_attribute = HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES;
      break;
    case WAVERT_FUNCTION_NUM_REGS:
      hip_attribute = HIP_FUNC_ATTRIBUTE_NUM_REGS;
      break;
    case WAVERT_FUNCTION_LOCAL_SIZE_BYTES:
      hip_attribute = HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES;
      break;
    case WAVERT_FUNCTION_CONST_SIZE_BYTES:
      hip_attribute = HIP_FUNC_ATTRIBUTE_CONST_SIZE_BYTES;
      break;
    case WAVERT_FUNCTION_PTX_VERSION:
      hip_attribute = HIP_FUNC_ATTRIBUTE_PTX_VERSION;
      break;
    case WAVERT_FUNCTION_BINARY_VERSION:
      hip_attribute = HIP_FUNC_ATTRIBUTE_BINARY_VERSION;
      break;
    case WAVERT_FUNCTION_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      hip_attribute = HIP_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
      break;
    default:
      return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "unknown function attribute %d",
                           (int)attribute);
  }
  int value = 0;
  HIP_CHECK(hipFuncGetAttribute, (&value, hip_attribute, (hipFunction_t)function));
  *out_value = value;
  return WAVERT_OK;
}

static wavert_status hip_function_opt_in_shared(void *function, int64_t dynamic_shared_bytes) {
  HIP_CHECK(hipFuncSetAttribute,
            (function, hipFuncAttributeMaxDynamicSharedMemorySize, (int)dynamic_shared_bytes));
  return WAVERT_OK;
}

static wavert_status hip_launch(void *function, const uint32_t grid[3], const uint32_t block[3],
                                uint32_t dynamic_shared_bytes, void *stream, void **params) {
  HIP_CHECK(hipModuleLaunchKernel, ((hipFunction_t)function, grid[0], grid[1], grid[2], block[0],
                                    block[1], block[2], dynamic_shared_bytes, (hipStream_t)stream,
                                    params, NULL));
  return WAVERT_OK;
}

static wavert_status hip_stream_create(void **out_stream) {
  hipStream_t stream = NULL;
  HIP_CHECK(hipStreamCreateWithFlags, (&stream, hipStreamNonBlocking));
  *out_stream = stream;
  return WAVERT_OK;
}

/* hipStreamPerThread is taken before this; hipStreamGetDevice names the stream's device. */
static wavert_status hip_stream_check(wavert_device *device, void *stream) {
  if (hip.hipStreamGetDevice == NULL) return WAVERT_OK;
  int ordinal = -1;
  hipError_t result = hip.hipStreamGetDevice((hipStream_t)stream, &ordinal);
  if (result != hipSuccess) {
    hip_error("hipStreamGetDevice", result);
    char cause[512];
    snprintf(cause, sizeof(cause), "%s", wavert_last_error());
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "stream handle %p is not a HIP stream the runtime knows: %s", stream,
                         cause);
  }
  if (ordinal != (int)device->handle)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "stream handle %p belongs to AMD device %d, not to device %d", stream,
                         ordinal, (int)device->handle);
  return WAVERT_OK;
}

static wavert_status hip_stream_destroy(void *stream) {
  HIP_CHECK(hipStreamDestroy, ((hipStream_t)stream));
  return WAVERT_OK;
}

static wavert_status hip_stream_synchronize(void *stream) {
  HIP_CHECK(hipStreamSynchronize, ((hipStream_t)stream));
  return WAVERT_OK;
}

static wavert_status hip_stream_wait_event(void *stream, void *event) {
  HIP_CHECK(hipStreamWaitEvent, ((hipStream_t)stream, (hipEvent_t)event, 0));
  return WAVERT_OK;
}

static wavert_status hip_event_create(void **out_event) {
  hipEvent_t event = NULL;
  HIP_CHECK(hipEventCreateWithFlags, (&event, hipEventDisableTiming));
  *out_event = event;
  return WAVERT_OK;
}

static wavert_status hip_event_destroy(void *event) {
  HIP_CHECK(hipEventDestroy, ((hipEvent_t)event));
  return WAVERT_OK;
}

static wavert_status hip_event_record(void *event, void *stream) {
  HIP_CHECK(hipEventRecord, ((hipEvent_t)event, (hipStream_t)stream));
  return WAVERT_OK;
}

static wavert_status hip_event_synchronize(void *event) {
  HIP_CHECK(hipEventSynchronize, ((hipEvent_t)event));
  return WAVERT_OK;
}

static wavert_status hip_mem_alloc(size_t size, int managed, void **out_ptr) {
  void *ptr = NULL;
  if (managed)
    HIP_CHECK(hipMallocManaged, (&ptr, size, hipMemAttachGlobal));
  else
    HIP_CHECK(hipMalloc, (&ptr, size));
  *out_ptr = ptr;
  return WAVERT_OK;
}

static wavert_status hip_mem_free(void *ptr) {
  HIP_CHECK(hipFree, (ptr));
  return WAVERT_OK;
}

static wavert_status hip_memcpy(void *dst, const void *src, size_t size, void *stream, int sync) {
  if (sync)
    HIP_CHECK(hipMemcpy, (dst, src, size, hipMemcpyDefault));
  else
    HIP_CHECK(hipMemcpyAsync, (dst, src, size, hipMemcpyDefault, (hipStream_t)stream));
  return WAVERT_OK;
}

static wavert_status hip_memset(void *ptr, uint32_t value, size_t element_bytes, size_t count,
                                void *stream, int sync) {
  hipStream_t s = (hipStream_t)stream;
  switch (element_bytes) {
    case 1:
      if (sync) HIP_CHECK(hipMemsetD8, (ptr, (unsigned char)value, count));
      else HIP_CHECK(hipMemsetD8Async, (ptr, (unsigned char)value, count, s));
      break;
    case 2:
      if (sync) HIP_CHECK(hipMemsetD16, (ptr, (unsigned short)value, count));
      else HIP_CHECK(hipMemsetD16Async, (ptr, (unsigned short)value, count, s));
      break;
    default:
      if (sync) HIP_CHECK(hipMemsetD32, (ptr, (int)value, count));
      else HIP_CHECK(hipMemsetD32Async, (ptr, (int)value, count, s));
      break;
  }
  return WAVERT_OK;
}

static wavert_status hip_host_register(void *ptr, size_t size) {
  HIP_CHECK(hipHostRegister, (ptr, size, 0));
  return WAVERT_OK;
}

static wavert_status hip_host_unregister(void *ptr) {
  HIP_CHECK(hipHostUnregister, (ptr));
  return WAVERT_OK;
}

/* hipPointerGetAttribute fails with hipErrorInvalidValue for memory HIP does not know. Each
 * answer lands in a zeroed 8-byte word (the field width does not matter, little-endian). */
static wavert_status hip_memory_kind(const void *ptr, wavert_memory_type *out_kind,
                                     int32_t *out_ordinal) {
  if (hip.hipPointerGetAttribute == NULL)
    return wavert__error(WAVERT_ERROR_UNSUPPORTED,
                         "wavert_memory_kind: the HIP runtime has no hipPointerGetAttribute");
  int64_t type = 0, managed = 0, ordinal = -1;
  hipError_t result = hip.hipPointerGetAttribute(&type, HIP_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                 (void *)(uintptr_t)ptr);
  if (result == hipErrorInvalidValue) {
    *out_kind = WAVERT_MEMORY_UNREGISTERED;
    *out_ordinal = -1;
    return WAVERT_OK;
  }
  if (result != hipSuccess) return hip_error("hipPointerGetAttribute", result);
  HIP_CHECK(hipPointerGetAttribute,
            (&managed, HIP_POINTER_ATTRIBUTE_IS_MANAGED, (void *)(uintptr_t)ptr));
  HIP_CHECK(hipPointerGetAttribute,
            (&ordinal, HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (void *)(uintptr_t)ptr));
  const int32_t t = (int32_t)type;
  if ((int32_t)managed != 0 || t == hipMemoryTypeManaged || t == hipMemoryTypeUnified)
    *out_kind = WAVERT_MEMORY_MANAGED;
  else if (t == hipMemoryTypeDevice)
    *out_kind = WAVERT_MEMORY_DEVICE;
  else if (t == hipMemoryTypeHost)
    *out_kind = WAVERT_MEMORY_HOST;
  else
    *out_kind = WAVERT_MEMORY_UNREGISTERED;
  *out_ordinal = *out_kind == WAVERT_MEMORY_UNREGISTERED ? -1 : (int32_t)ordinal;
  return WAVERT_OK;
}

static wavert_status hip_host_device_pointer(void *ptr, void **out_device_ptr) {
  void *device_ptr = NULL;
  HIP_CHECK(hipHostGetDevicePointer, (&device_ptr, ptr, 0));
  *out_device_ptr = device_ptr;
  return WAVERT_OK;
}

/* No JIT (code objects are final), no thread-block clusters, no TMA on HIP: those entries
 * stay NULL. */
const wavert__backend wavert__hip_backend = {
    .name = "HIP",
    .devices = "AMD",
    .init = hip_init,
    .device_open = hip_device_open,
    .enter = hip_enter,
    .leave = hip_leave,
    .synchronize = hip_synchronize,
    .module_load = hip_module_load,
    .module_unload = hip_module_unload,
    .module_get_function = hip_module_get_function,
    .function_attribute = hip_function_attribute,
    .function_opt_in_shared = hip_function_opt_in_shared,
    .launch = hip_launch,
    .stream_create = hip_stream_create,
    .stream_check = hip_stream_check,
    .stream_destroy = hip_stream_destroy,
    .stream_synchronize = hip_stream_synchronize,
    .stream_wait_event = hip_stream_wait_event,
    .event_create = hip_event_create,
    .event_destroy = hip_event_destroy,
    .event_record = hip_event_record,
    .event_synchronize = hip_event_synchronize,
    .mem_alloc = hip_mem_alloc,
    .mem_free = hip_mem_free,
    .memcpy = hip_memcpy,
    .memset = hip_memset,
    .host_register = hip_host_register,
    .host_unregister = hip_host_unregister,
    .host_device_pointer = hip_host_device_pointer,
    .memory_kind = hip_memory_kind,
};
