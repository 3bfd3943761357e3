/*
 * backend_cuda.c — the CUDA driver API backend: libcuda.so.1 (or $WAVERT_CUDA_LIBRARY) opened
 * with dlopen, the few driver types and enums it needs declared here, one primary context per
 * device.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef uintptr_t CUdeviceptr;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_NOT_FOUND = 500,
};
enum {
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2,
  CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y = 3,
  CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 4,
  CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5,
  CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6,
  CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};
enum {
  CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
  CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
  CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES = 2,
  CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
  CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
  CU_FUNC_ATTRIBUTE_PTX_VERSION = 5,
  CU_FUNC_ATTRIBUTE_BINARY_VERSION = 6,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};
enum { CU_JIT_OPTIMIZATION_LEVEL = 7, CU_JIT_ERROR_LOG_BUFFER = 5, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6 };
enum { CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14 };
/* CUlaunchAttributeID, CUclusterSchedulingPolicy (cuda.h, CUDA >= 12.0). */
enum {
  CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
  CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5,
  CU_CLUSTER_SCHEDULING_POLICY_SPREAD = 1,
};
/* CUlaunchAttribute and CUlaunchConfig (cuda.h, CUDA >= 12.0): the value is a 64-byte union
 * after an 8-byte id slot. */
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
} CUlaunchAttribute;
typedef struct {
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
  CUstream stream;
  CUlaunchAttribute *attributes;
  unsigned attribute_count;
} CUlaunchConfig;
_Static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute layout");
/* CUpointer_attribute and CUmemorytype (cuda.h). */
enum {
  CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
  CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
  CU_MEMORYTYPE_HOST = 1,
  CU_MEMORYTYPE_DEVICE = 2,
  CU_MEMORYTYPE_UNIFIED = 4,
};
enum { CU_STREAM_NON_BLOCKING = 1, CU_EVENT_DISABLE_TIMING = 2, CU_MEM_ATTACH_GLOBAL = 1 };

/* The driver entry points used, with their exported (versioned) names. */
#define WAVERT__CUDA_SYMBOLS(X)                                                               \
  X(cuGetErrorName, "cuGetErrorName", CUresult, (CUresult, const char **))                   \
  X(cuGetErrorString, "cuGetErrorString", CUresult, (CUresult, const char **))               \
  X(cuInit, "cuInit", CUresult, (unsigned))                                                  \
  X(cuDeviceGetCount, "cuDeviceGetCount", CUresult, (int *))                                 \
  X(cuDeviceGet, "cuDeviceGet", CUresult, (CUdevice *, int))                                 \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", CUresult, (int *, int, CUdevice))          \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult, (CUcontext *, CUdevice)) \
  X(cuCtxGetCurrent, "cuCtxGetCurrent", CUresult, (CUcontext *))                             \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", CUresult, (CUcontext))                               \
  X(cuCtxSynchronize, "cuCtxSynchronize", CUresult, (void))                                  \
  X(cuModuleLoadDataEx, "cuModuleLoadDataEx", CUresult,                                      \
    (CUmodule *, const void *, unsigned, int *, void **))                                    \
  X(cuModuleUnload, "cuModuleUnload", CUresult, (CUmodule))                                  \
  X(cuModuleGetFunction, "cuModuleGetFunction", CUresult, (CUfunction *, CUmodule, const char *)) \
  X(cuFuncGetAttribute, "cuFuncGetAttribute", CUresult, (int *, int, CUfunction))            \
  X(cuFuncSetAttribute, "cuFuncSetAttribute", CUresult, (CUfunction, int, int))              \
  X(cuLaunchKernel, "cuLaunchKernel", CUresult,                                              \
    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,       \
     CUstream, void **, void **))                                                            \
  X(cuStreamCreate, "cuStreamCreate", CUresult, (CUstream *, unsigned))                      \
  X(cuStreamDestroy, "cuStreamDestroy_v2", CUresult, (CUstream))                             \
  X(cuStreamSynchronize, "cuStreamSynchronize", CUresult, (CUstream))                        \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", CUresult, (CUstream, CUevent, unsigned))         \
  X(cuEventCreate, "cuEventCreate", CUresult, (CUevent *, unsigned))                         \
  X(cuEventDestroy, "cuEventDestroy_v2", CUresult, (CUevent))                                \
  X(cuEventRecord, "cuEventRecord", CUresult, (CUevent, CUstream))                           \
  X(cuEventSynchronize, "cuEventSynchronize", CUresult, (CUevent))                           \
  X(cuMemAlloc, "cuMemAlloc_v2", CUresult, (CUdeviceptr *, size_t))                          \
  X(cuMemAllocManaged, "cuMemAllocManaged", CUresult, (CUdeviceptr *, size_t, unsigned))     \
  X(cuMemFree, "cuMemFree_v2", CUresult, (CUdeviceptr))                                      \
  X(cuMemcpy, "cuMemcpy", CUresult, (CUdeviceptr, CUdeviceptr, size_t))                      \
  X(cuMemcpyAsync, "cuMemcpyAsync", CUresult, (CUdeviceptr, CUdeviceptr, size_t, CUstream))  \
  X(cuMemsetD8, "cuMemsetD8_v2", CUresult, (CUdeviceptr, unsigned char, size_t))             \
  X(cuMemsetD16, "cuMemsetD16_v2", CUresult, (CUdeviceptr, unsigned short, size_t))          \
  X(cuMemsetD32, "cuMemsetD32_v2", CUresult, (CUdeviceptr, unsigned, size_t))                \
  X(cuMemsetD8Async, "cuMemsetD8Async", CUresult, (CUdeviceptr, unsigned char, size_t, CUstream)) \
  X(cuMemsetD16Async, "cuMemsetD16Async", CUresult,                                          \
    (CUdeviceptr, unsigned short, size_t, CUstream))                                         \
  X(cuMemsetD32Async, "cuMemsetD32Async", CUresult, (CUdeviceptr, unsigned, size_t, CUstream)) \
  X(cuMemHostRegister, "cuMemHostRegister_v2", CUresult, (void *, size_t, unsigned))         \
  X(cuMemHostUnregister, "cuMemHostUnregister", CUresult, (void *))                          \
  X(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", CUresult,                     \
    (CUdeviceptr *, void *, unsigned))

/* Entry points of newer drivers (CUDA >= 12.0): NULL when the driver lacks them. */
#define WAVERT__CUDA_OPTIONAL_SYMBOLS(X)                                                      \
  X(cuStreamGetCtx, "cuStreamGetCtx", CUresult, (CUstream, CUcontext *))                     \
  X(cuLaunchKernelEx, "cuLaunchKernelEx", CUresult,                                          \
    (const CUlaunchConfig *, CUfunction, void **, void **))                                  \
  X(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled", CUresult,                              \
    (void *, int, unsigned, void *, const uint64_t *, const uint64_t *, const unsigned *,    \
     const unsigned *, int, int, int, int))                                                 \
  X(cuPointerGetAttributes, "cuPointerGetAttributes", CUresult,                              \
    (unsigned, const int *, void **, CUdeviceptr))

#define WAVERT__DECLARE(field, symbol, ret, args) ret(*field) args;
static struct {
  WAVERT__CUDA_SYMBOLS(WAVERT__DECLARE)
  WAVERT__CUDA_OPTIONAL_SYMBOLS(WAVERT__DECLARE)
} cu;
#undef WAVERT__DECLARE

/* "call: NAME (text)", the status DRIVER (OUT_OF_MEMORY for an allocation failure). */
static wavert_status cuda_error(const char *call, CUresult result) {
  const char *name = NULL;
  const char *text = NULL;
  if (cu.cuGetErrorName(result, &name) != CUDA_SUCCESS || name == NULL) name = "CUDA_ERROR";
  if (cu.cuGetErrorString(result, &text) != CUDA_SUCCESS || text == NULL) text = "unknown error";
  return wavert__error(result == CUDA_ERROR_OUT_OF_MEMORY ? WAVERT_ERROR_OUT_OF_MEMORY
                                                          : WAVERT_ERROR_DRIVER,
                       "%s: %s (%s)", call, name, text);
}

#define CU_CHECK(call, args)                       \
  do {                                             \
    CUresult cu_result_ = cu.call args;            \
    if (cu_result_ != CUDA_SUCCESS) return cuda_error(#call, cu_result_); \
  } while (0)

static wavert_status cuda_init(int32_t *out_count) {
  static const char *const names[] = {"libcuda.so.1", "libcuda.so", NULL};
  void *library = NULL;
  wavert_status status =
      wavert__open_library("the CUDA driver", "WAVERT_CUDA_LIBRARY", names, &library);
  if (status != WAVERT_OK) return status;
#define WAVERT__RESOLVE(field, symbol, ret, args)                                            \
  *(void **)&cu.field = dlsym(library, symbol);                                              \
  if (cu.field == NULL)                                                                      \
    return wavert__error(WAVERT_ERROR_UNAVAILABLE,                                           \
                         "the CUDA driver library has no symbol %s (driver too old?)", symbol);
  WAVERT__CUDA_SYMBOLS(WAVERT__RESOLVE)
#undef WAVERT__RESOLVE
#define WAVERT__RESOLVE_OPTIONAL(field, symbol, ret, args) *(void **)&cu.field = dlsym(library, symbol);
  WAVERT__CUDA_OPTIONAL_SYMBOLS(WAVERT__RESOLVE_OPTIONAL)
#undef WAVERT__RESOLVE_OPTIONAL
  CUresult result = cu.cuInit(0);
  int count = 0;
  if (result == CUDA_SUCCESS) result = cu.cuDeviceGetCount(&count);
  if (result == CUDA_ERROR_NO_DEVICE) {
    *out_count = 0;
    return WAVERT_OK;
  }
  if (result != CUDA_SUCCESS) {
    char cause[256];
    cuda_error("cuInit", result);
    snprintf(cause, sizeof(cause), "%s", wavert_last_error());
    return wavert__error(WAVERT_ERROR_UNAVAILABLE, "the CUDA driver cannot be initialised: %s",
                         cause);
  }
  *out_count = count;
  return WAVERT_OK;
}

static wavert_status cuda_device_open(wavert_device *device) {
  static const struct {
    wavert_device_attribute attribute;
    int cu_attribute;
  } map[] = {
      {WAVERT_DEVICE_MAX_THREADS_PER_BLOCK, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
      {WAVERT_DEVICE_MAX_BLOCK_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X},
      {WAVERT_DEVICE_MAX_BLOCK_DIM_Y, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y},
      {WAVERT_DEVICE_MAX_BLOCK_DIM_Z, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z},
      {WAVERT_DEVICE_MAX_GRID_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X},
      {WAVERT_DEVICE_MAX_GRID_DIM_Y, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y},
      {WAVERT_DEVICE_MAX_GRID_DIM_Z, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z},
      {WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK},
      {WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
       CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN},
      {WAVERT_DEVICE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
      {WAVERT_DEVICE_COMPUTE_CAPABILITY_MINOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
      {WAVERT_DEVICE_MULTIPROCESSOR_COUNT, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
      {WAVERT_DEVICE_WARP_SIZE, CU_DEVICE_ATTRIBUTE_WARP_SIZE},
  };
  CUdevice handle = 0;
  CU_CHECK(cuDeviceGet, (&handle, device->dl.device_id));
  for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); ++i) {
    int value = 0;
    CU_CHECK(cuDeviceGetAttribute, (&value, map[i].cu_attribute, handle));
    device->attributes[map[i].attribute] = value;
  }
  CUcontext context = NULL;
  CU_CHECK(cuDevicePrimaryCtxRetain, (&context, handle));
  device->handle = handle;
  device->context = context;
  snprintf(device->chip, sizeof(device->chip), "sm_%d%d",
           (int)device->attributes[WAVERT_DEVICE_COMPUTE_CAPABILITY_MAJOR],
           (int)device->attributes[WAVERT_DEVICE_COMPUTE_CAPABILITY_MINOR]);
  return WAVERT_OK;
}

static wavert_status cuda_enter(wavert_device *device, void **out_saved) {
  CUcontext current = NULL;
  CU_CHECK(cuCtxGetCurrent, (&current));
  if (current != (CUcontext)device->context) CU_CHECK(cuCtxSetCurrent, ((CUcontext)device->context));
  *out_saved = current;
  return WAVERT_OK;
}

static void cuda_leave(wavert_device *device, void *saved) {
  if (saved != device->context) cu.cuCtxSetCurrent((CUcontext)saved);
}

static wavert_status cuda_synchronize(wavert_device *device) {
  (void)device;
  CU_CHECK(cuCtxSynchronize, ());
  return WAVERT_OK;
}

/* cuModuleLoadDataEx with the JIT error log, and the JIT optimisation level if >= 0. */
static wavert_status cuda_load(const void *image, size_t size, int opt_level, void **out_module) {
  /* PTX must be NUL-terminated for the driver; copying a binary image is harmless. */
  char *copy = NULL;
  if (((const char *)image)[size - 1] != '\0') {
    copy = malloc(size + 1);
    if (copy == NULL) return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
    memcpy(copy, image, size);
    copy[size] = '\0';
    image = copy;
  }
  char log[768] = "";
  int options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                   CU_JIT_OPTIMIZATION_LEVEL};
  void *values[] = {log, (void *)(uintptr_t)sizeof(log), (void *)(intptr_t)opt_level};
  CUmodule module = NULL;
  CUresult result =
      cu.cuModuleLoadDataEx(&module, image, opt_level >= 0 ? 3 : 2, options, values);
  free(copy);
  if (result != CUDA_SUCCESS) {
    wavert_status status = cuda_error("cuModuleLoadDataEx", result);
    if (log[0] != '\0') {
      log[sizeof(log) - 1] = '\0';
      char first[256];
      snprintf(first, sizeof(first), "%s", wavert_last_error());
      return wavert__error(status, "%s; JIT log: %s", first, log);
    }
    return status;
  }
  *out_module = module;
  return WAVERT_OK;
}

static wavert_status cuda_module_load(wavert_device *device, const void *image, size_t size,
                                      void **out_module) {
  (void)device;
  return cuda_load(image, size, -1, out_module);
}

static wavert_status cuda_module_load_jit(wavert_device *device, const void *image, size_t size,
                                          int opt_level, void **out_module) {
  (void)device;
  return cuda_load(image, size, opt_level, out_module);
}

static void cuda_module_unload(void *module) { cu.cuModuleUnload((CUmodule)module); }

static wavert_status cuda_module_get_function(void *module, const char *name,
                                              void **out_function) {
  CUfunction function = NULL;
  CUresult result = cu.cuModuleGetFunction(&function, (CUmodule)module, name);
  if (result == CUDA_ERROR_NOT_FOUND)
    return wavert__error(WAVERT_ERROR_NOT_FOUND, "the module has no kernel named '%s'", name);
  if (result != CUDA_SUCCESS) return cuda_error("cuModuleGetFunction", result);
  *out_function = function;
  return WAVERT_OK;
}

static wavert_status cuda_function_attribute(void *function, wavert_function_attribute attribute,
                                             int64_t *out_value) {
  int cu_attribute;
  switch (attribute) {
    case WAVERT_FUNCTION_MAX_THREADS_PER_BLOCK:
      cu_attribute = CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
      break;
    case WAVERT_FUNCTION_SHARED_SIZE_BYTES:
      cu_attribute = CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES;
      break;
    case WAVERT_FUNCTION_NUM_REGS:
      cu_attribute = CU_FUNC_ATTRIBUTE_NUM_REGS;
      break;
    case WAVERT_FUNCTION_LOCAL_SIZE_BYTES:
      cu_attribute = CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES;
      break;
    case WAVERT_FUNCTION_CONST_SIZE_BYTES:
      cu_attribute = CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES;
      break;
    case WAVERT_FUNCTION_PTX_VERSION:
      cu_attribute = CU_FUNC_ATTRIBUTE_PTX_VERSION;
      break;
    case WAVERT_FUNCTION_BINARY_VERSION:
      cu_attribute = CU_FUNC_ATTRIBUTE_BINARY_VERSION;
      break;
    case WAVERT_FUNCTION_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      cu_attribute = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
      break;
    default:
      return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "unknown function attribute %d",
                           (int)attribute);
  }
  int value = 0;
  CU_CHECK(cuFuncGetAttribute, (&value, cu_attribute, (CUfunction)function));
  *out_value = value;
  return WAVERT_OK;
}

static wavert_status cuda_function_opt_in_shared(void *function, int64_t dynamic_shared_bytes) {
  CU_CHECK(cuFuncSetAttribute, ((CUfunction)function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                (int)dynamic_shared_bytes));
  return WAVERT_OK;
}

static wavert_status cuda_launch(void *function, const uint32_t grid[3], const uint32_t block[3],
                                 uint32_t dynamic_shared_bytes, void *stream, void **params) {
  CU_CHECK(cuLaunchKernel, ((CUfunction)function, grid[0], grid[1], grid[2], block[0], block[1],
                            block[2], dynamic_shared_bytes, (CUstream)stream, params, NULL));
  return WAVERT_OK;
}

static wavert_status cuda_stream_create(void **out_stream) {
  CUstream stream = NULL;
  CU_CHECK(cuStreamCreate, (&stream, CU_STREAM_NON_BLOCKING));
  *out_stream = stream;
  return WAVERT_OK;
}

/* CU_STREAM_LEGACY / CU_STREAM_PER_THREAD are taken before this; cuStreamGetCtx (CUDA 9.2)
 * names the stream's context, which must be the device's primary context. */
static wavert_status cuda_stream_check(wavert_device *device, void *stream) {
  if (cu.cuStreamGetCtx == NULL) return WAVERT_OK;
  CUcontext context = NULL;
  CUresult result = cu.cuStreamGetCtx((CUstream)stream, &context);
  if (result != CUDA_SUCCESS) {
    cuda_error("cuStreamGetCtx", result);
    char cause[512];
    snprintf(cause, sizeof(cause), "%s", wavert_last_error());
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "stream handle %p is not a CUDA stream the driver knows: %s", stream,
                         cause);
  }
  if (context != (CUcontext)device->context)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "stream handle %p belongs to CUDA context %p, not to the primary "
                         "context %p of CUDA device %d",
                         stream, (void *)context, device->context, (int)device->dl.device_id);
  return WAVERT_OK;
}

static wavert_status cuda_stream_destroy(void *stream) {
  CU_CHECK(cuStreamDestroy, ((CUstream)stream));
  return WAVERT_OK;
}

static wavert_status cuda_stream_synchronize(void *stream) {
  CU_CHECK(cuStreamSynchronize, ((CUstream)stream));
  return WAVERT_OK;
}

static wavert_status cuda_stream_wait_event(void *stream, void *event) {
  CU_CHECK(cuStreamWaitEvent, ((CUstream)stream, (CUevent)event, 0));
  return WAVERT_OK;
}

static wavert_status cuda_event_create(void **out_event) {
  CUevent event = NULL;
  CU_CHECK(cuEventCreate, (&event, CU_EVENT_DISABLE_TIMING));
  *out_event = event;
  return WAVERT_OK;
}

static wavert_status cuda_event_destroy(void *event) {
  CU_CHECK(cuEventDestroy, ((CUevent)event));
  return WAVERT_OK;
}

static wavert_status cuda_event_record(void *event, void *stream) {
  CU_CHECK(cuEventRecord, ((CUevent)event, (CUstream)stream));
  return WAVERT_OK;
}

static wavert_status cuda_event_synchronize(void *event) {
  CU_CHECK(cuEventSynchronize, ((CUevent)event));
  return WAVERT_OK;
}

static wavert_status cuda_mem_alloc(size_t size, int managed, void **out_ptr) {
  CUdeviceptr ptr = 0;
  if (managed)
    CU_CHECK(cuMemAllocManaged, (&ptr, size, CU_MEM_ATTACH_GLOBAL));
  else
    CU_CHECK(cuMemAlloc, (&ptr, size));
  *out_ptr = (void *)ptr;
  return WAVERT_OK;
}

static wavert_status cuda_mem_free(void *ptr) {
  CU_CHECK(cuMemFree, ((CUdeviceptr)ptr));
  return WAVERT_OK;
}

static wavert_status cuda_memcpy(void *dst, const void *src, size_t size, void *stream, int sync) {
  if (sync)
    CU_CHECK(cuMemcpy, ((CUdeviceptr)dst, (CUdeviceptr)src, size));
  else
    CU_CHECK(cuMemcpyAsync, ((CUdeviceptr)dst, (CUdeviceptr)src, size, (CUstream)stream));
  return WAVERT_OK;
}

static wavert_status cuda_memset(void *ptr, uint32_t value, size_t element_bytes, size_t count,
                                 void *stream, int sync) {
  CUdeviceptr p = (CUdeviceptr)ptr;
  CUstream s = (CUstream)stream;
  switch (element_bytes) {
    case 1:
      if (sync) CU_CHECK(cuMemsetD8, (p, (unsigned char)value, count));
      else CU_CHECK(cuMemsetD8Async, (p, (unsigned char)value, count, s));
      break;
    case 2:
      if (sync) CU_CHECK(cuMemsetD16, (p, (unsigned short)value, count));
      else CU_CHECK(cuMemsetD16Async, (p, (unsigned short)value, count, s));
      break;
    default:
      if (sync) CU_CHECK(cuMemsetD32, (p, value, count));
      else CU_CHECK(cuMemsetD32Async, (p, value, count, s));
      break;
  }
  return WAVERT_OK;
}

static wavert_status cuda_launch_cluster(void *function, const uint32_t cluster[3],
                                         const uint32_t grid[3], const uint32_t block[3],
                                         uint32_t dynamic_shared_bytes, void *stream,
                                         void **params) {
  if (cu.cuLaunchKernelEx == NULL)
    return wavert__error(WAVERT_ERROR_UNSUPPORTED,
                         "cluster launch: the CUDA driver has no cuLaunchKernelEx (CUDA >= 12.0)");
  if ((uint64_t)cluster[0] * cluster[1] * cluster[2] > 8)
    CU_CHECK(cuFuncSetAttribute,
             ((CUfunction)function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
  CUlaunchAttribute attributes[2];
  memset(attributes, 0, sizeof(attributes));
  attributes[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attributes[0].value.cluster_dim.x = cluster[0];
  attributes[0].value.cluster_dim.y = cluster[1];
  attributes[0].value.cluster_dim.z = cluster[2];
  attributes[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
  attributes[1].value.scheduling_policy = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
  CUlaunchConfig config = {grid[0],  grid[1],  grid[2], block[0], block[1],
                           block[2], dynamic_shared_bytes, (CUstream)stream, attributes, 2};
  CU_CHECK(cuLaunchKernelEx, (&config, (CUfunction)function, params, NULL));
  return WAVERT_OK;
}

static wavert_status cuda_host_register(void *ptr, size_t size) {
  CU_CHECK(cuMemHostRegister, (ptr, size, 0));
  return WAVERT_OK;
}

static wavert_status cuda_host_unregister(void *ptr) {
  CU_CHECK(cuMemHostUnregister, (ptr));
  return WAVERT_OK;
}

/* cuPointerGetAttributes, unlike cuPointerGetAttribute, answers for memory the driver does
 * not know (memory type 0) instead of failing. Each answer lands in a zeroed 8-byte word, so
 * the driver's field width (bool, unsigned, int) does not matter on a little-endian host. */
static wavert_status cuda_memory_kind(const void *ptr, wavert_memory_type *out_kind,
                                      int32_t *out_ordinal) {
  const int attributes[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                             CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  int64_t answers[3] = {0, 0, -1};
  void *data[3] = {&answers[0], &answers[1], &answers[2]};
  CU_CHECK(cuPointerGetAttributes, (3, attributes, data, (CUdeviceptr)ptr));
  const int32_t type = (int32_t)answers[0];
  const int managed = (int32_t)answers[1] != 0;
  if (managed || type == CU_MEMORYTYPE_UNIFIED)
    *out_kind = WAVERT_MEMORY_MANAGED;
  else if (type == CU_MEMORYTYPE_DEVICE)
    *out_kind = WAVERT_MEMORY_DEVICE;
  else if (type == CU_MEMORYTYPE_HOST)
    *out_kind = WAVERT_MEMORY_HOST;
  else
    *out_kind = WAVERT_MEMORY_UNREGISTERED;
  *out_ordinal = *out_kind == WAVERT_MEMORY_UNREGISTERED ? -1 : (int32_t)answers[2];
  return WAVERT_OK;
}

static wavert_status cuda_memory_kind_entry(const void *ptr, wavert_memory_type *out_kind,
                                            int32_t *out_ordinal) {
  if (cu.cuPointerGetAttributes == NULL)
    return wavert__error(WAVERT_ERROR_UNSUPPORTED,
                         "wavert_memory_kind: the CUDA driver has no cuPointerGetAttributes");
  return cuda_memory_kind(ptr, out_kind, out_ordinal);
}

static wavert_status cuda_host_device_pointer(void *ptr, void **out_device_ptr) {
  CUdeviceptr device_ptr = 0;
  CU_CHECK(cuMemHostGetDevicePointer, (&device_ptr, ptr, 0));
  *out_device_ptr = (void *)device_ptr;
  return WAVERT_OK;
}

static wavert_status cuda_tensor_map_encode_tiled(void *out_map, int32_t data_type, uint32_t rank,
                                                  void *address, const uint64_t *dims,
                                                  const uint64_t *strides, const uint32_t *box,
                                                  const uint32_t *element_strides,
                                                  int32_t interleave, int32_t swizzle,
                                                  int32_t l2_promotion, int32_t oob_fill) {
  if (cu.cuTensorMapEncodeTiled == NULL)
    return wavert__error(WAVERT_ERROR_UNSUPPORTED,
                         "TMA descriptor: the CUDA driver has no cuTensorMapEncodeTiled "
                         "(CUDA >= 12.0)");
  CU_CHECK(cuTensorMapEncodeTiled, (out_map, data_type, rank, address, dims, strides, box,
                                    element_strides, interleave, swizzle, l2_promotion, oob_fill));
  return WAVERT_OK;
}

const wavert__backend wavert__cuda_backend = {
    .name = "CUDA",
    .devices = "CUDA",
    .init = cuda_init,
    .device_open = cuda_device_open,
    .launch_checks_context = 1,
    .enter = cuda_enter,
    .leave = cuda_leave,
    .synchronize = cuda_synchronize,
    .module_load = cuda_module_load,
    .module_unload = cuda_module_unload,
    .module_get_function = cuda_module_get_function,
    .function_attribute = cuda_function_attribute,
    .function_opt_in_shared = cuda_function_opt_in_shared,
    .launch = cuda_launch,
    .stream_create = cuda_stream_create,
    .stream_check = cuda_stream_check,
    .stream_destroy = cuda_stream_destroy,
    .stream_synchronize = cuda_stream_synchronize,
    .stream_wait_event = cuda_stream_wait_event,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_synchronize = cuda_event_synchronize,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .memory_kind = cuda_memory_kind_entry,
    .memcpy = cuda_memcpy,
    .memset = cuda_memset,
    .module_load_jit = cuda_module_load_jit,
    .launch_cluster = cuda_launch_cluster,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .host_device_pointer = cuda_host_device_pointer,
    .tensor_map_encode_tiled = cuda_tensor_map_encode_tiled,
};
