/*
 * hip_over_cuda.c — a test-only stand-in for libamdhip64.so that runs libwavert's HIP backend
 * on an NVIDIA GPU: it exports the hip* entry points backend_hip.c resolves and implements
 * them over the CUDA driver (libcuda.so.1, opened with dlopen). Code objects are whatever the
 * CUDA driver loads (PTX, cubin), so the HIP code path of libwavert — device query, module
 * load (cuModuleLoadDataEx), argument packing, launch, dynamic shared memory opt-in,
 * streams, events, memory, error messages — runs real kernels without an AMD GPU.
 *
 * HIP's error codes share CUDA's numbering for every code used here (hipErrorInvalidImage =
 * CUDA_ERROR_INVALID_IMAGE = 200, ...), so a CUresult is returned as the hipError_t of the
 * same value and named with HIP's name. The chip reported by hipGetDevicePropertiesR0600 is
 * $WAVERT_HIP_OVER_CUDA_ARCH, default "gfx942:sramecc+:xnack-".
 *
 * HIP has no current context: each entry point makes the primary context of the thread's
 * current device (hipSetDevice, default 0) current before calling the driver.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int hipError_t;
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;

enum {
  hipSuccess = 0,
  hipErrorInvalidValue = 1,
  hipErrorNotInitialized = 3,
  hipErrorNoDevice = 100,
  hipErrorInvalidDevice = 101,
  hipErrorUnknown = 999,
};

#define CU_SYMBOLS(X)                                                                      \
  X(cuInit, (unsigned))                                                                    \
  X(cuDeviceGetCount, (int *))                                                             \
  X(cuDeviceGet, (CUdevice *, int))                                                        \
  X(cuDeviceGetAttribute, (int *, int, CUdevice))                                          \
  X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                     \
  X(cuCtxSetCurrent, (CUcontext))                                                          \
  X(cuCtxSynchronize, (void))                                                              \
  X(cuGetErrorName, (CUresult, const char **))                                             \
  X(cuGetErrorString, (CUresult, const char **))                                           \
  X(cuModuleLoadDataEx, (void **, const void *, unsigned, int *, void **))                 \
  X(cuModuleUnload, (void *))                                                              \
  X(cuModuleGetFunction, (void **, void *, const char *))                                  \
  X(cuFuncGetAttribute, (int *, int, void *))                                              \
  X(cuFuncSetAttribute, (void *, int, int))                                                \
  X(cuLaunchKernel, (void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,   \
                     unsigned, void *, void **, void **))                                  \
  X(cuStreamCreate, (void **, unsigned))                                                   \
  X(cuStreamDestroy_v2, (void *))                                                          \
  X(cuStreamSynchronize, (void *))                                                         \
  X(cuStreamWaitEvent, (void *, void *, unsigned))                                         \
  X(cuEventCreate, (void **, unsigned))                                                    \
  X(cuEventDestroy_v2, (void *))                                                           \
  X(cuEventRecord, (void *, void *))                                                       \
  X(cuEventSynchronize, (void *))                                                          \
  X(cuMemAlloc_v2, (void **, size_t))                                                      \
  X(cuMemAllocManaged, (void **, size_t, unsigned))                                        \
  X(cuMemFree_v2, (void *))                                                                \
  X(cuMemcpy, (void *, const void *, size_t))                                              \
  X(cuMemcpyAsync, (void *, const void *, size_t, void *))                                 \
  X(cuMemsetD8_v2, (void *, unsigned char, size_t))                                        \
  X(cuMemsetD16_v2, (void *, unsigned short, size_t))                                      \
  X(cuMemsetD32_v2, (void *, unsigned, size_t))                                            \
  X(cuMemsetD8Async, (void *, unsigned char, size_t, void *))                              \
  X(cuMemsetD16Async, (void *, unsigned short, size_t, void *))                            \
  X(cuMemsetD32Async, (void *, unsigned, size_t, void *))                                  \
  X(cuMemHostRegister_v2, (void *, size_t, unsigned))                                      \
  X(cuMemHostUnregister, (void *))                                                         \
  X(cuMemHostGetDevicePointer_v2, (void **, void *, unsigned))

#define DECLARE(name, args) CUresult(*name) args;
static struct {
  CU_SYMBOLS(DECLARE)
} cu;
#undef DECLARE

#define MAX_DEVICES 64
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static hipError_t init_result = hipErrorNotInitialized;
static int device_count;
static CUcontext contexts[MAX_DEVICES];
static pthread_mutex_t context_mutex = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int current_device;

static void init(void) {
  /* $WAVERT_HIP_OVER_CUDA_DRIVER: another libcuda (e.g. the recording stand-in) for debugging. */
  const char *path = getenv("WAVERT_HIP_OVER_CUDA_DRIVER");
  void *library = dlopen(path != NULL && path[0] != '\0' ? path : "libcuda.so.1",
                         RTLD_NOW | RTLD_LOCAL);
  if (library == NULL) {
    init_result = hipErrorNoDevice; /* no NVIDIA driver: no device behind this "HIP" */
    return;
  }
#define RESOLVE(name, args)                                                                \
  *(void **)&cu.name = dlsym(library, #name);                                              \
  if (cu.name == NULL) {                                                                   \
    init_result = hipErrorNotInitialized;                                                  \
    return;                                                                                \
  }
  CU_SYMBOLS(RESOLVE)
#undef RESOLVE
  CUresult result = cu.cuInit(0);
  if (result == 0) result = cu.cuDeviceGetCount(&device_count);
  init_result = result;
}

/* Primary context of `ordinal`, made current on this thread. */
static hipError_t enter_device(int ordinal) {
  if (init_result != hipSuccess) return init_result;
  if (ordinal < 0 || ordinal >= device_count || ordinal >= MAX_DEVICES)
    return hipErrorInvalidDevice;
  pthread_mutex_lock(&context_mutex);
  CUresult result = 0;
  if (contexts[ordinal] == NULL) {
    CUdevice device = 0;
    result = cu.cuDeviceGet(&device, ordinal);
    if (result == 0) result = cu.cuDevicePrimaryCtxRetain(&contexts[ordinal], device);
  }
  CUcontext context = contexts[ordinal];
  pthread_mutex_unlock(&context_mutex);
  return result != 0 ? result : cu.cuCtxSetCurrent(context);
}

#define ENTER()                                                                            \
  do {                                                                                     \
    hipError_t enter_result_ = enter_device(current_device);                               \
    if (enter_result_ != hipSuccess) return enter_result_;                                 \
  } while (0)

/* ---------------------------------------------------------------------------------------- */
/* Errors                                                                                   */
/* ---------------------------------------------------------------------------------------- */
EXPORT const char *hipGetErrorName(hipError_t error) {
  static const struct {
    int code;
    const char *name;
  } names[] = {
      {0, "hipSuccess"},
      {1, "hipErrorInvalidValue"},
      {2, "hipErrorOutOfMemory"},
      {3, "hipErrorNotInitialized"},
      {4, "hipErrorDeinitialized"},
      {100, "hipErrorNoDevice"},
      {101, "hipErrorInvalidDevice"},
      {200, "hipErrorInvalidImage"},
      {201, "hipErrorInvalidContext"},
      {209, "hipErrorNoBinaryForGpu"},
      {218, "hipErrorInvalidKernelFile"},
      {400, "hipErrorInvalidHandle"},
      {500, "hipErrorNotFound"},
      {700, "hipErrorIllegalAddress"},
      {701, "hipErrorLaunchOutOfResources"},
      {719, "hipErrorLaunchFailure"},
      {999, "hipErrorUnknown"},
  };
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i)
    if (names[i].code == error) return names[i].name;
  return "hipErrorUnknown";
}

EXPORT const char *hipGetErrorString(hipError_t error) {
  const char *text = NULL;
  if (cu.cuGetErrorString != NULL && cu.cuGetErrorString(error, &text) == 0 && text != NULL)
    return text;
  return "unknown error";
}

/* ---------------------------------------------------------------------------------------- */
/* Devices                                                                                  */
/* ---------------------------------------------------------------------------------------- */
EXPORT hipError_t hipInit(unsigned flags) {
  if (flags != 0) return hipErrorInvalidValue;
  pthread_once(&init_once, init);
  return init_result;
}

EXPORT hipError_t hipGetDeviceCount(int *count) {
  pthread_once(&init_once, init);
  if (count == NULL) return hipErrorInvalidValue;
  if (init_result != hipSuccess) return init_result;
  if (device_count == 0) return hipErrorNoDevice;
  *count = device_count;
  return hipSuccess;
}

EXPORT hipError_t hipDeviceGetAttribute(int *value, int attribute, int ordinal) {
  /* hipDeviceAttribute_t (HIP >= 5) -> CUdevice_attribute. */
  static const int map[][2] = {
      {23, 75}, /* ComputeCapabilityMajor */
      {26, 2},  /* MaxBlockDimX */
      {27, 3},  {28, 4},
      {29, 5}, /* MaxGridDimX */
      {30, 6},  {31, 7},
      {56, 1},  /* MaxThreadsPerBlock */
      {61, 76}, /* ComputeCapabilityMinor */
      {63, 16}, /* MultiprocessorCount */
      {74, 8},  /* MaxSharedMemoryPerBlock */
      {75, 97}, /* SharedMemPerBlockOptin */
      {87, 10}, /* WarpSize */
  };
  if (value == NULL) return hipErrorInvalidValue;
  if (init_result != hipSuccess) return init_result;
  if (ordinal < 0 || ordinal >= device_count) return hipErrorInvalidDevice;
  for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); ++i) {
    if (map[i][0] != attribute) continue;
    CUdevice device = 0;
    CUresult result = cu.cuDeviceGet(&device, ordinal);
    return result != 0 ? result : cu.cuDeviceGetAttribute(value, map[i][1], device);
  }
  return hipErrorInvalidValue;
}

/* The leading members of hipDeviceProp_tR0600 up to gcnArchName, as backend_hip.c declares
 * them (this stand-in writes gcnArchName where libwavert reads it). */
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
  int ints_a[9];
  int textures[37];
  size_t surfaceAlignment;
  int ints_b[16];
  size_t sharedMemPerMultiprocessor;
  int ints_c[12];
  size_t sharedMemPerBlockOptin;
  int ints_d[4];
  size_t reservedSharedMemPerBlock;
  int ints_e[6];
  unsigned int gpuDirectRDMAFlushWritesOptions;
  int gpuDirectRDMAWritesOrdering;
  unsigned int memoryPoolSupportedHandleTypes;
  int ints_f[4];
  int reserved[63];
  int hipReserved[32];
  char gcnArchName[256];
} device_prop_head;

EXPORT hipError_t hipGetDevicePropertiesR0600(void *props, int ordinal) {
  if (props == NULL) return hipErrorInvalidValue;
  if (init_result != hipSuccess) return init_result;
  if (ordinal < 0 || ordinal >= device_count) return hipErrorInvalidDevice;
  device_prop_head *head = props;
  memset(head, 0, sizeof(*head));
  CUdevice device = 0;
  CUresult result = cu.cuDeviceGet(&device, ordinal);
  if (result != 0) return result;
  snprintf(head->name, sizeof(head->name), "CUDA device %d (HIP over CUDA)", (int)device);
  const char *arch = getenv("WAVERT_HIP_OVER_CUDA_ARCH");
  snprintf(head->gcnArchName, sizeof(head->gcnArchName), "%s",
           arch != NULL && arch[0] != '\0' ? arch : "gfx942:sramecc+:xnack-");
  return hipSuccess;
}

EXPORT hipError_t hipGetDevice(int *ordinal) {
  if (ordinal == NULL) return hipErrorInvalidValue;
  if (init_result != hipSuccess) return init_result;
  *ordinal = current_device;
  return hipSuccess;
}

EXPORT hipError_t hipSetDevice(int ordinal) {
  hipError_t result = enter_device(ordinal);
  if (result == hipSuccess) current_device = ordinal;
  return result;
}

EXPORT hipError_t hipDeviceSynchronize(void) {
  ENTER();
  return cu.cuCtxSynchronize();
}

/* ---------------------------------------------------------------------------------------- */
/* Modules and launches                                                                     */
/* ---------------------------------------------------------------------------------------- */
EXPORT hipError_t hipModuleLoadData(void **module, const void *image) {
  ENTER();
  return cu.cuModuleLoadDataEx(module, image, 0, NULL, NULL);
}

EXPORT hipError_t hipModuleUnload(void *module) {
  ENTER();
  return cu.cuModuleUnload(module);
}

EXPORT hipError_t hipModuleGetFunction(void **function, void *module, const char *name) {
  ENTER();
  return cu.cuModuleGetFunction(function, module, name);
}

/* hipFunction_attribute has CUfunction_attribute's numbering. */
EXPORT hipError_t hipFuncGetAttribute(int *value, int attribute, void *function) {
  ENTER();
  return cu.cuFuncGetAttribute(value, attribute, function);
}

/* hipFuncAttributeMaxDynamicSharedMemorySize (8) -> CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
 * (8); libwavert passes the module function it got from hipModuleGetFunction. */
EXPORT hipError_t hipFuncSetAttribute(const void *function, int attribute, int value) {
  if (attribute != 8) return hipErrorInvalidValue;
  ENTER();
  return cu.cuFuncSetAttribute((void *)function, 8, value);
}

EXPORT hipError_t hipModuleLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz,
                                        unsigned shared_bytes, void *stream, void **params,
                                        void **extra) {
  ENTER();
  return cu.cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params,
                           extra);
}

/* ---------------------------------------------------------------------------------------- */
/* Streams and events (hipStreamNonBlocking = CU_STREAM_NON_BLOCKING = 1,                   */
/* hipEventDisableTiming = CU_EVENT_DISABLE_TIMING = 2)                                     */
/* ---------------------------------------------------------------------------------------- */
EXPORT hipError_t hipStreamCreateWithFlags(void **stream, unsigned flags) {
  ENTER();
  return cu.cuStreamCreate(stream, flags);
}

EXPORT hipError_t hipStreamDestroy(void *stream) {
  ENTER();
  return cu.cuStreamDestroy_v2(stream);
}

EXPORT hipError_t hipStreamSynchronize(void *stream) {
  ENTER();
  return cu.cuStreamSynchronize(stream);
}

EXPORT hipError_t hipStreamWaitEvent(void *stream, void *event, unsigned flags) {
  ENTER();
  return cu.cuStreamWaitEvent(stream, event, flags);
}

EXPORT hipError_t hipEventCreateWithFlags(void **event, unsigned flags) {
  ENTER();
  return cu.cuEventCreate(event, flags);
}

EXPORT hipError_t hipEventDestroy(void *event) {
  ENTER();
  return cu.cuEventDestroy_v2(event);
}

EXPORT hipError_t hipEventRecord(void *event, void *stream) {
  ENTER();
  return cu.cuEventRecord(event, stream);
}

EXPORT hipError_t hipEventSynchronize(void *event) {
  ENTER();
  return cu.cuEventSynchronize(event);
}

/* ---------------------------------------------------------------------------------------- */
/* Memory (hipMemcpyDefault: unified addressing picks the direction, as cuMemcpy does)      */
/* ---------------------------------------------------------------------------------------- */
EXPORT hipError_t hipMalloc(void **ptr, size_t size) {
  ENTER();
  return cu.cuMemAlloc_v2(ptr, size);
}

EXPORT hipError_t hipMallocManaged(void **ptr, size_t size, unsigned flags) {
  ENTER();
  return cu.cuMemAllocManaged(ptr, size, flags);
}

EXPORT hipError_t hipFree(void *ptr) {
  ENTER();
  return ptr == NULL ? hipSuccess : cu.cuMemFree_v2(ptr);
}

EXPORT hipError_t hipMemcpy(void *dst, const void *src, size_t size, int kind) {
  if (kind != 4) return hipErrorInvalidValue;
  ENTER();
  return cu.cuMemcpy(dst, src, size);
}

EXPORT hipError_t hipMemcpyAsync(void *dst, const void *src, size_t size, int kind,
                                 void *stream) {
  if (kind != 4) return hipErrorInvalidValue;
  ENTER();
  return cu.cuMemcpyAsync(dst, src, size, stream);
}

EXPORT hipError_t hipMemsetD8(void *ptr, unsigned char value, size_t count) {
  ENTER();
  return cu.cuMemsetD8_v2(ptr, value, count);
}

EXPORT hipError_t hipMemsetD16(void *ptr, unsigned short value, size_t count) {
  ENTER();
  return cu.cuMemsetD16_v2(ptr, value, count);
}

EXPORT hipError_t hipMemsetD32(void *ptr, int value, size_t count) {
  ENTER();
  return cu.cuMemsetD32_v2(ptr, (unsigned)value, count);
}

EXPORT hipError_t hipMemsetD8Async(void *ptr, unsigned char value, size_t count, void *stream) {
  ENTER();
  return cu.cuMemsetD8Async(ptr, value, count, stream);
}

EXPORT hipError_t hipMemsetD16Async(void *ptr, unsigned short value, size_t count,
                                    void *stream) {
  ENTER();
  return cu.cuMemsetD16Async(ptr, value, count, stream);
}

EXPORT hipError_t hipMemsetD32Async(void *ptr, int value, size_t count, void *stream) {
  ENTER();
  return cu.cuMemsetD32Async(ptr, (unsigned)value, count, stream);
}

/* ---------------------------------------------------------------------------------------- */
/* Page-locked host memory                                                                  */
/* ---------------------------------------------------------------------------------------- */
EXPORT hipError_t hipHostRegister(void *ptr, size_t size, unsigned flags) {
  ENTER();
  return cu.cuMemHostRegister_v2(ptr, size, flags);
}

EXPORT hipError_t hipHostUnregister(void *ptr) {
  ENTER();
  return cu.cuMemHostUnregister(ptr);
}

EXPORT hipError_t hipHostGetDevicePointer(void **device_ptr, void *ptr, unsigned flags) {
  ENTER();
  return cu.cuMemHostGetDevicePointer_v2(device_ptr, ptr, flags);
}
