/*
 * memory.c — streams, stream ordering and device memory on a device handle: each call makes
 * the device's context current for its duration.
 */
#include "backend.h"

#define CHECK_DEVICE(function)                                                               \
  if (device == NULL)                                                                        \
  return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, function ": device is NULL")

wavert_status wavert_stream_create(wavert_device *device, void **out_stream) {
  CHECK_DEVICE("wavert_stream_create");
  if (out_stream == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "wavert_stream_create: out_stream is NULL");
  void *saved = NULL;
  wavert_status status = wavert__enter(device, &saved);
  if (status != WAVERT_OK) return status;
  void *stream = NULL;
  status = device->backend->stream_create(&stream);
  wavert__leave(device, saved);
  if (status != WAVERT_OK) return status;
  *out_stream = stream;
  return WAVERT_OK;
}

wavert_status wavert_stream_release(wavert_device *device, void *stream) {
  CHECK_DEVICE("wavert_stream_release");
  if (stream == NULL) return WAVERT_OK;
  void *saved = NULL;
  wavert_status status = wavert__enter(device, &saved);
  if (status != WAVERT_OK) return status;
  status = device->backend->stream_destroy(stream);
  wavert__leave(device, saved);
  return status;
}

wavert_status wavert_stream_synchronize(wavert_device *device, void *stream) {
  CHECK_DEVICE("wavert_stream_synchronize");
  void *saved = NULL;
  wavert_status status = wavert__enter(device, &saved);
  if (status != WAVERT_OK) return status;
  status = device->backend->stream_synchronize(stream);
  wavert__leave(device, saved);
  return status;
}

wavert_status wavert_stream_wait_stream(wavert_device *device, void *waiting, void *stream) {
  CHECK_DEVICE("wavert_stream_wait_stream");
  if (waiting == stream) return WAVERT_OK;
  void *saved = NULL;
  wavert_status status = wavert__enter(device, &saved);
  if (status != WAVERT_OK) return status;
  status = wavert__stream_order(device, waiting, stream);
  wavert__leave(device, saved);
  return status;
}

wavert_status wavert_memory_alloc(wavert_device *device, size_t size, void **out_ptr) {
  CHECK_DEVICE("wavert_memory_alloc");
  if (out_ptr == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "wavert_memory_alloc: out_ptr is NULL");
  if (size == 0) {
    *out_ptr = NULL;
    return WAVERT_OK;
  }
  void *saved = NULL;
  wavert_status status = wavert__enter(device, &saved);
  if (status != WAVERT_OK) return status;
  void *ptr = NULL;
  status = device->backend->mem_alloc(size, 0, &ptr);
  wavert__leave(device, saved);
  if (status != WAVERT_OK) return status;
  *out_ptr = ptr;
  return WAVERT_OK;
}

wavert_status wavert_memory_free(wavert_device *device, void *ptr) {
  CHECK_DEVICE("wavert_memory_free");
  if (ptr == NULL) return WAVERT_OK;
  void *saved = NULL;
  wavert_status status = wavert__enter(device, &saved);
  if (status != WAVERT_OK) return status;
  status = device->backend->mem_free(ptr);
  wavert__leave(device, saved);
  return status;
}

wavert_status wavert_memory_copy(wavert_device *device, void *dst, const void *src, size_t size,
                                 void *stream) {
  CHECK_DEVICE("wavert_memory_copy");
  if (size == 0) return WAVERT_OK;
  if (dst == NULL || src == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "wavert_memory_copy: dst or src is NULL");
  void *saved = NULL;
  wavert_status status = wavert__enter(device, &saved);
  if (status != WAVERT_OK) return status;
  status = device->backend->memcpy(dst, src, size, stream, stream == NULL);
  wavert__leave(device, saved);
  return status;
}

wavert_status wavert_memory_set(wavert_device *device, void *ptr, uint32_t value,
                                size_t element_bytes, size_t count, void *stream) {
  CHECK_DEVICE("wavert_memory_set");
  if (element_bytes != 1 && element_bytes != 2 && element_bytes != 4)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_memory_set: element_bytes = %zu (1, 2 or 4 expected)",
                         element_bytes);
  if (count == 0) return WAVERT_OK;
  if (ptr == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "wavert_memory_set: ptr is NULL");
  void *saved = NULL;
  wavert_status status = wavert__enter(device, &saved);
  if (status != WAVERT_OK) return status;
  status = device->backend->memset(ptr, value, element_bytes, count, stream, stream == NULL);
  wavert__leave(device, saved);
  return status;
}
