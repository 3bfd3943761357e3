/*
 * module.c — code objects loaded from memory (reference counted), their functions (one
 * wavert_function per kernel name, with the per-kernel limits read once) and wavert_kernel,
 * the lazily filled per-device (image, name) -> function cache.
 */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "mgpu_internal.h"

wavert_status wavert_module_load(wavert_device *device, const void *image, size_t size,
                                 wavert_module **out_module) {
  return wavert__module_load(device, image, size, -1, out_module);
}

wavert_status wavert__module_load(wavert_device *device, const void *image, size_t size,
                                  int jit_opt_level, wavert_module **out_module) {
  if (device == NULL || image == NULL || out_module == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_module_load: device, image or out_module is NULL");
  if (size == 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "wavert_module_load: the image is empty");
  /* The CUDA backend copies PTX with a terminating NUL: size + 1 must not wrap. */
  wavert_status status = wavert__check_bytes("wavert_module_load", "size", size);
  if (status != WAVERT_OK) return status;
  wavert_module *module = calloc(1, sizeof(*module));
  if (module == NULL) return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
  void *saved = NULL;
  status = wavert__enter(device, &saved);
  if (status == WAVERT_OK) {
    if (jit_opt_level < 0)
      status = device->backend->module_load(device, image, size, &module->handle);
    else if (device->backend->module_load_jit != NULL)
      status = device->backend->module_load_jit(device, image, size, jit_opt_level,
                                                &module->handle);
    else
      status = wavert__error(WAVERT_ERROR_UNSUPPORTED,
                             "the %s backend has no JIT for code objects (load a binary)",
                             device->backend->name);
    wavert__leave(device, saved);
  }
  if (status == WAVERT_OK) {
    status = wavert__handle_add(module, WAVERT__HANDLE_MODULE);
    if (status != WAVERT_OK && wavert__enter(device, &saved) == WAVERT_OK) {
      device->backend->module_unload(module->handle);
      wavert__leave(device, saved);
    }
  }
  if (status != WAVERT_OK) {
    free(module);
    return status;
  }
  atomic_init(&module->refcount, 1);
  module->device = device;
  pthread_mutex_init(&module->mutex, NULL);
  *out_module = module;
  return WAVERT_OK;
}

void wavert_module_retain(wavert_module *module) {
  if (module != NULL) atomic_fetch_add_explicit(&module->refcount, 1, memory_order_relaxed);
}

wavert_status wavert_module_release(wavert_module *module) {
  if (module == NULL) return WAVERT_OK;
  int last = wavert__handle_drop(module, WAVERT__HANDLE_MODULE, &module->refcount);
  if (last < 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_module_release: module %p is not a live module (released "
                         "already, or not from wavert_module_load)",
                         (void *)module);
  if (last == 0) return WAVERT_OK;
  wavert_device *device = module->device;
  void *saved = NULL;
  if (wavert__enter(device, &saved) == WAVERT_OK) {
    /* Kernels of this module may still be queued; unloading under them is undefined. */
    device->backend->synchronize(device);
    device->backend->module_unload(module->handle);
    wavert__leave(device, saved);
  }
  for (wavert_function *function = module->functions; function != NULL;) {
    wavert_function *next = function->next;
    free(function);
    function = next;
  }
  pthread_mutex_destroy(&module->mutex);
  free(module);
  return WAVERT_OK;
}

/* A new wavert_function for `name`, its limits read from the driver (context current). */
static wavert_status function_create(wavert_module *module, const char *name,
                                     wavert_function **out_function) {
  const wavert__backend *backend = module->device->backend;
  size_t length = strlen(name);
  wavert_function *function = calloc(1, sizeof(*function) + length + 1);
  if (function == NULL) return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
  memcpy(function->name, name, length + 1);
  function->module = module;
  function->device = module->device;
  wavert_status status = backend->module_get_function(module->handle, name, &function->handle);
  if (status == WAVERT_OK)
    status = backend->function_attribute(function->handle, WAVERT_FUNCTION_MAX_THREADS_PER_BLOCK,
                                         &function->max_threads);
  if (status == WAVERT_OK)
    status = backend->function_attribute(function->handle, WAVERT_FUNCTION_SHARED_SIZE_BYTES,
                                         &function->static_shared);
  if (status != WAVERT_OK) {
    free(function);
    return status;
  }
  atomic_init(&function->dynamic_shared_opt_in, 0);
  *out_function = function;
  return WAVERT_OK;
}

wavert_status wavert_module_get_function(wavert_module *module, const char *name,
                                         wavert_function **out_function) {
  if (module == NULL || name == NULL || out_function == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_module_get_function: module, name or out_function is NULL");
  wavert_status status = WAVERT_OK;
  pthread_mutex_lock(&module->mutex);
  wavert_function *function = module->functions;
  while (function != NULL && strcmp(function->name, name) != 0) function = function->next;
  if (function == NULL) {
    void *saved = NULL;
    status = wavert__enter(module->device, &saved);
    if (status == WAVERT_OK) {
      status = function_create(module, name, &function);
      wavert__leave(module->device, saved);
    }
    if (status == WAVERT_OK) {
      function->next = module->functions;
      module->functions = function;
    }
  }
  pthread_mutex_unlock(&module->mutex);
  if (status != WAVERT_OK) return status;
  *out_function = function;
  return WAVERT_OK;
}

wavert_status wavert_function_attribute_get(wavert_function *function,
                                            wavert_function_attribute attribute,
                                            int64_t *out_value) {
  if (function == NULL || out_value == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_function_attribute_get: function or out_value is NULL");
  wavert_device *device = function->device;
  void *saved = NULL;
  wavert_status status = wavert__enter(device, &saved);
  if (status != WAVERT_OK) return status;
  int64_t value = 0;
  status = device->backend->function_attribute(function->handle, attribute, &value);
  wavert__leave(device, saved);
  if (status != WAVERT_OK) return status;
  *out_value = value;
  return WAVERT_OK;
}

/* ---------------------------------------------------------------------------------------- */

wavert_status wavert_kernel_create(const void *image, size_t size, const char *name,
                                   wavert_kernel **out_kernel) {
  if (image == NULL || name == NULL || out_kernel == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_kernel_create: image, name or out_kernel is NULL");
  if (size == 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "wavert_kernel_create: the image is empty");
  wavert_status status = wavert__check_bytes("wavert_kernel_create", "size", size);
  if (status != WAVERT_OK) return status;
  size_t length = strlen(name);
  wavert_kernel *kernel = calloc(1, sizeof(*kernel));
  char *copy = malloc(length + 1);
  if (kernel == NULL || copy == NULL) {
    free(kernel);
    free(copy);
    return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
  }
  status = wavert__handle_add(kernel, WAVERT__HANDLE_KERNEL);
  if (status != WAVERT_OK) {
    free(kernel);
    free(copy);
    return status;
  }
  memcpy(copy, name, length + 1);
  kernel->image = image;
  kernel->size = size;
  kernel->name = copy;
  pthread_mutex_init(&kernel->mutex, NULL);
  *out_kernel = kernel;
  return WAVERT_OK;
}

wavert_status wavert_kernel_release(wavert_kernel *kernel) {
  if (kernel == NULL) return WAVERT_OK;
  if (wavert__handle_drop(kernel, WAVERT__HANDLE_KERNEL, NULL) < 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_kernel_release: kernel %p is not a live kernel object "
                         "(released already, or not from wavert_kernel_create)",
                         (void *)kernel);
  for (int b = 0; b < WAVERT__BACKEND_COUNT; ++b)
    for (int d = 0; d < WAVERT__MAX_DEVICES; ++d) wavert_module_release(kernel->modules[b][d]);
  pthread_mutex_destroy(&kernel->mutex);
  free(kernel->name);
  free(kernel);
  return WAVERT_OK;
}

wavert_status wavert_kernel_get_function(wavert_kernel *kernel, wavert_device *device,
                                         wavert_function **out_function) {
  if (kernel == NULL || device == NULL || out_function == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_kernel_get_function: kernel, device or out_function is NULL");
  _Atomic(wavert_function *) *slot =
      &kernel->functions[device->backend_index][device->dl.device_id];
  wavert_function *function = atomic_load_explicit(slot, memory_order_acquire);
  if (function != NULL) {
    *out_function = function;
    return WAVERT_OK;
  }
  wavert_status status = WAVERT_OK;
  pthread_mutex_lock(&kernel->mutex);
  function = atomic_load_explicit(slot, memory_order_relaxed);
  if (function == NULL) {
    wavert_module *module = NULL;
    status = wavert_module_load(device, kernel->image, kernel->size, &module);
    if (status == WAVERT_OK) status = wavert_module_get_function(module, kernel->name, &function);
    if (status == WAVERT_OK) {
      kernel->modules[device->backend_index][device->dl.device_id] = module;
      atomic_store_explicit(slot, function, memory_order_release);
    } else {
      wavert_module_release(module);
    }
  }
  pthread_mutex_unlock(&kernel->mutex);
  if (status != WAVERT_OK) return status;
  *out_function = function;
  return WAVERT_OK;
}
