/*
 * device.c — the backend registry (driver opened once per backend, device count) and the
 * device handles: process-lifetime singletons per (backend, ordinal), created under the
 * registry mutex and published with an atomic pointer; context entry/exit; stream/event pools.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

typedef struct {
  const wavert__backend *backend;
  pthread_mutex_t mutex;
  atomic_int initialised; /* 0: not tried, 1: tried (status below, final) */
  wavert_status status;
  char message[512];
  int32_t count;
  _Atomic(wavert_device *) devices[WAVERT__MAX_DEVICES];
} registry_entry;

static registry_entry registry[WAVERT__BACKEND_COUNT] = {
    {.backend = &wavert__cuda_backend, .mutex = PTHREAD_MUTEX_INITIALIZER},
    {.backend = &wavert__hip_backend, .mutex = PTHREAD_MUTEX_INITIALIZER},
    {.backend = &wavert__cpu_backend, .mutex = PTHREAD_MUTEX_INITIALIZER},
};

wavert_status wavert__open_library(const char *what, const char *env, const char *const *names,
                                   void **out_handle) {
  const char *override = getenv(env);
  if (override != NULL && override[0] != '\0') {
    void *handle = dlopen(override, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL)
      return wavert__error(WAVERT_ERROR_UNAVAILABLE, "cannot open %s library '%s' (from $%s): %s",
                           what, override, env, dlerror());
    *out_handle = handle;
    return WAVERT_OK;
  }
  char tried[256] = "";
  size_t used = 0;
  for (size_t i = 0; names[i] != NULL; ++i) {
    void *handle = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (handle != NULL) {
      *out_handle = handle;
      return WAVERT_OK;
    }
    int n = snprintf(tried + used, sizeof(tried) - used, "%s'%s'", i ? ", " : "", names[i]);
    if (n > 0 && (size_t)n < sizeof(tried) - used) used += (size_t)n;
  }
  return wavert__error(WAVERT_ERROR_UNAVAILABLE,
                       "cannot open %s library (tried %s; set $%s to its path): %s", what, tried,
                       env, dlerror());
}

static wavert_status backend_index(int32_t device_type, int32_t *out_index) {
  switch (device_type) {
    case kDLCUDA:
      *out_index = WAVERT__BACKEND_CUDA;
      return WAVERT_OK;
    case kDLROCM:
      *out_index = WAVERT__BACKEND_HIP;
      return WAVERT_OK;
    case kDLCPU:
      *out_index = WAVERT__BACKEND_CPU;
      return WAVERT_OK;
    default:
      return wavert__error(WAVERT_ERROR_UNSUPPORTED,
                           "device type %d is not supported (kDLCUDA = 2, kDLROCM = 10 or "
                           "kDLCPU = 1)",
                           (int)device_type);
  }
}

/* The registry entry of `device_type`, its driver initialised (once; a failure is final and
 * reported again by every later call). */
static wavert_status registry_get(int32_t device_type, registry_entry **out_entry) {
  int32_t index = 0;
  wavert_status status = backend_index(device_type, &index);
  if (status != WAVERT_OK) return status;
  registry_entry *entry = &registry[index];
  if (!atomic_load_explicit(&entry->initialised, memory_order_acquire)) {
    pthread_mutex_lock(&entry->mutex);
    if (!atomic_load_explicit(&entry->initialised, memory_order_relaxed)) {
      int32_t count = 0;
      entry->status = entry->backend->init(&count);
      if (entry->status == WAVERT_OK)
        entry->count = count;
      else
        snprintf(entry->message, sizeof(entry->message), "%s", wavert_last_error());
      atomic_store_explicit(&entry->initialised, 1, memory_order_release);
    }
    pthread_mutex_unlock(&entry->mutex);
  }
  if (entry->status != WAVERT_OK) return wavert__error(entry->status, "%s", entry->message);
  *out_entry = entry;
  return WAVERT_OK;
}

wavert_status wavert_device_count(int32_t device_type, int32_t *out_count) {
  if (out_count == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "wavert_device_count: out_count is NULL");
  registry_entry *entry = NULL;
  wavert_status status = registry_get(device_type, &entry);
  if (status != WAVERT_OK) return status;
  *out_count = entry->count;
  return WAVERT_OK;
}

static wavert_status device_create(registry_entry *entry, int32_t device_type, int32_t ordinal,
                                   wavert_device **out_device) {
  wavert_device *device = calloc(1, sizeof(*device));
  if (device == NULL) return wavert__error(WAVERT_ERROR_OUT_OF_MEMORY, "out of host memory");
  device->backend = entry->backend;
  device->backend_index = (int32_t)(entry - registry);
  device->dl.device_type = (DLDeviceType)device_type;
  device->dl.device_id = ordinal;
  wavert_status status = entry->backend->device_open(device);
  if (status != WAVERT_OK) {
    free(device);
    return status;
  }
  int64_t *attributes = device->attributes;
  if (attributes[WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN] <
      attributes[WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK])
    attributes[WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN] =
        attributes[WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK];
  for (int i = 0; i < 6; ++i) {
    const int64_t limit = i < 3 ? attributes[WAVERT_DEVICE_MAX_GRID_DIM_X + i]
                                : attributes[WAVERT_DEVICE_MAX_BLOCK_DIM_X + i - 3];
    device->extent_limits[i] = limit > 0 ? (uint64_t)limit : 0;
  }
  pthread_mutex_init(&device->pool_mutex, NULL);
  *out_device = device;
  return WAVERT_OK;
}

wavert_status wavert_device_get(int32_t device_type, int32_t ordinal, wavert_device **out_device) {
  if (out_device == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "wavert_device_get: out_device is NULL");
  registry_entry *entry = NULL;
  wavert_status status = registry_get(device_type, &entry);
  if (status != WAVERT_OK) return status;
  if (entry->count == 0)
    return wavert__error(WAVERT_ERROR_UNAVAILABLE, "no %s device: the %s driver reports none",
                         entry->backend->devices, entry->backend->name);
  if (ordinal < 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "device ordinal %d is negative",
                         (int)ordinal);
  if (ordinal >= entry->count)
    return wavert__error(WAVERT_ERROR_NOT_FOUND, "no %s device %d: there are %d", 
                         entry->backend->devices, (int)ordinal, (int)entry->count);
  if (ordinal >= WAVERT__MAX_DEVICES)
    return wavert__error(WAVERT_ERROR_UNSUPPORTED, "%s device %d: libwavert handles %d devices",
                         entry->backend->name, (int)ordinal, WAVERT__MAX_DEVICES);
  wavert_device *device = atomic_load_explicit(&entry->devices[ordinal], memory_order_acquire);
  if (device == NULL) {
    pthread_mutex_lock(&entry->mutex);
    device = atomic_load_explicit(&entry->devices[ordinal], memory_order_relaxed);
    if (device == NULL) {
      status = device_create(entry, device_type, ordinal, &device);
      if (status == WAVERT_OK)
        atomic_store_explicit(&entry->devices[ordinal], device, memory_order_release);
    }
    pthread_mutex_unlock(&entry->mutex);
    if (status != WAVERT_OK) return status;
  }
  *out_device = device;
  return WAVERT_OK;
}

wavert_status wavert_device_dl(const wavert_device *device, DLDevice *out_device) {
  if (device == NULL || out_device == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_device_dl: device or out_device is NULL");
  *out_device = device->dl;
  return WAVERT_OK;
}

wavert_status wavert_device_attribute_get(wavert_device *device, wavert_device_attribute attribute,
                                          int64_t *out_value) {
  if (device == NULL || out_value == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_device_attribute_get: device or out_value is NULL");
  if (attribute < WAVERT_DEVICE_MAX_THREADS_PER_BLOCK || attribute > WAVERT_DEVICE_WARP_SIZE)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "unknown device attribute %d",
                         (int)attribute);
  *out_value = device->attributes[attribute];
  return WAVERT_OK;
}

wavert_status wavert_device_chip(wavert_device *device, char *buf, size_t size) {
  if (device == NULL || buf == NULL || size == 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_device_chip: device or buf is NULL, or size is 0");
  if (device->chip[0] == '\0')
    return wavert__error(WAVERT_ERROR_UNSUPPORTED, "the %s backend cannot name device %d's chip",
                         device->backend->name, (int)device->dl.device_id);
  snprintf(buf, size, "%s", device->chip);
  return WAVERT_OK;
}

wavert_status wavert_device_synchronize(wavert_device *device) {
  if (device == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "wavert_device_synchronize: device is NULL");
  void *saved = NULL;
  wavert_status status = wavert__enter(device, &saved);
  if (status != WAVERT_OK) return status;
  status = device->backend->synchronize(device);
  wavert__leave(device, saved);
  return status;
}

/* The context this thread last made current (wavert__enter) or restored (wavert__leave) on a
 * backend with launch_checks_context; NULL at first. */
_Thread_local void *wavert__context_hint;

wavert_status wavert__enter(wavert_device *device, void **out_saved) {
  wavert_status status = device->backend->enter(device, out_saved);
  if (status == WAVERT_OK && device->backend->launch_checks_context)
    wavert__context_hint = device->context;
  return status;
}

void wavert__leave(wavert_device *device, void *saved) {
  device->backend->leave(device, saved);
  if (device->backend->launch_checks_context) wavert__context_hint = saved;
}

int wavert__context_hint_current(const wavert_device *device) {
  return device->backend->launch_checks_context && wavert__context_hint == device->context;
}

wavert_status wavert__stream_acquire(wavert_device *device, void **out_stream) {
  void *stream = NULL;
  pthread_mutex_lock(&device->pool_mutex);
  if (device->stream_count > 0) stream = device->streams[--device->stream_count];
  pthread_mutex_unlock(&device->pool_mutex);
  if (stream == NULL) return device->backend->stream_create(out_stream);
  *out_stream = stream;
  return WAVERT_OK;
}

void wavert__stream_recycle(wavert_device *device, void *stream) {
  pthread_mutex_lock(&device->pool_mutex);
  int kept = device->stream_count < WAVERT__POOL_SIZE;
  if (kept) device->streams[device->stream_count++] = stream;
  pthread_mutex_unlock(&device->pool_mutex);
  if (!kept) device->backend->stream_destroy(stream);
}

wavert_status wavert__event_acquire(wavert_device *device, void **out_event) {
  void *event = NULL;
  pthread_mutex_lock(&device->pool_mutex);
  if (device->event_count > 0) event = device->events[--device->event_count];
  pthread_mutex_unlock(&device->pool_mutex);
  if (event == NULL) return device->backend->event_create(out_event);
  *out_event = event;
  return WAVERT_OK;
}

void wavert__event_recycle(wavert_device *device, void *event) {
  pthread_mutex_lock(&device->pool_mutex);
  int kept = device->event_count < WAVERT__POOL_SIZE;
  if (kept) device->events[device->event_count++] = event;
  pthread_mutex_unlock(&device->pool_mutex);
  if (!kept) device->backend->event_destroy(event);
}

wavert_status wavert__stream_order(wavert_device *device, void *waiting, void *stream) {
  void *event = NULL;
  wavert_status status = wavert__event_acquire(device, &event);
  if (status != WAVERT_OK) return status;
  status = device->backend->event_record(event, stream);
  if (status == WAVERT_OK) status = device->backend->stream_wait_event(waiting, event);
  wavert__event_recycle(device, event);
  return status;
}
