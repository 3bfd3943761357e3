/*
 * memory.c — streams, stream ordering and device memory on a device handle: each call makes
 * the device's context current for its duration.
 */
#define _GNU_SOURCE /* process_vm_readv */
#include <errno.h>
#include <stdint.h>
#include <sys/uio.h>
#include <unistd.h>

#include "backend.h"

#define CHECK_DEVICE(function)                                                               \
  if (device == NULL)                                                                        \
  return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, function ": device is NULL")

wavert_status wavert__check_bytes(const char *function, const char *what, uint64_t bytes) {
  if (bytes > (uint64_t)PTRDIFF_MAX)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "%s: %s = %llu bytes exceeds the limit PTRDIFF_MAX = %lld (a negative "
                         "size converted to unsigned?)",
                         function, what, (unsigned long long)bytes, (long long)PTRDIFF_MAX);
  return WAVERT_OK;
}

wavert_status wavert__check_range(const char *function, const char *what, const void *ptr,
                                  uint64_t bytes) {
  uint64_t end = 0;
  if (__builtin_add_overflow((uint64_t)(uintptr_t)ptr, bytes, &end))
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "%s: %s = %p + %llu bytes wraps around the 64-bit address space",
                         function, what, ptr, (unsigned long long)bytes);
  return WAVERT_OK;
}

wavert_status wavert__check_elements(const char *function, const void *ptr,
                                     uint64_t element_bytes, uint64_t count) {
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, element_bytes, &bytes))
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "%s: %llu elements of %llu bytes overflow a 64-bit byte count", function,
                         (unsigned long long)count, (unsigned long long)element_bytes);
  wavert_status status = wavert__check_bytes(function, "count x element size", bytes);
  return status == WAVERT_OK ? wavert__check_range(function, "ptr", ptr, bytes) : status;
}

wavert_status wavert_stream_create(wavert_device *device, void **out_stream) {
  CHECK_DEVICE("wavert_stream_create");
  if (out_stream == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "wavert_stream_create: out_stream is NULL");
  void *saved = NULL;
  wavert_status status = wavert__enter(device, &saved);
  if (status != WAVERT_OK) return status;
  void *stream = NULL;
  status = device->backend->stream_create(&stream);
  if (status == WAVERT_OK) {
    status = wavert__handle_add(stream, WAVERT__HANDLE_STREAM);
    if (status != WAVERT_OK) device->backend->stream_destroy(stream);
  }
  wavert__leave(device, saved);
  if (status != WAVERT_OK) return status;
  *out_stream = stream;
  return WAVERT_OK;
}

/* 1: `bytes` at `ptr` are readable in this process; 0: not (EFAULT); -1: cannot tell. Read
 * through the kernel (process_vm_readv on this process, else a write into a pipe), so a bad
 * address is an error code, never a fault. */
static int readable(const void *ptr, size_t bytes) {
  unsigned char copy[64];
  if (bytes > sizeof copy) bytes = sizeof copy;
  struct iovec local = {copy, bytes};
  struct iovec remote = {(void *)(uintptr_t)ptr, bytes};
  ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
  if (n == (ssize_t)bytes) return 1;
  if (n < 0 && errno == EFAULT) return 0;
  int fds[2];
  if (pipe(fds) != 0) return -1;
  n = write(fds[1], ptr, bytes);
  int error = errno;
  close(fds[0]);
  close(fds[1]);
  if (n == (ssize_t)bytes) return 1;
  return n < 0 && error == EFAULT ? 0 : -1;
}

wavert_status wavert_stream_check(wavert_device *device, void *stream) {
  CHECK_DEVICE("wavert_stream_check");
  const uintptr_t handle = (uintptr_t)stream;
  if (handle == 0 || handle == 2 || (handle == 1 && device->backend == &wavert__cuda_backend))
    return WAVERT_OK;
  if (handle % 8 != 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_stream_check: stream handle %p is not a %s stream (not 8-byte "
                         "aligned)",
                         stream, device->backend->name);
  if (readable(stream, 8) == 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_stream_check: stream handle %p is not a %s stream (it points "
                         "to no readable memory)",
                         stream, device->backend->name);
  return device->backend->stream_check(device, stream); /* needs no current context */
}

wavert_status wavert_stream_release(wavert_device *device, void *stream) {
  CHECK_DEVICE("wavert_stream_release");
  if (stream == NULL) return WAVERT_OK;
  if (wavert__handle_drop(stream, WAVERT__HANDLE_STREAM, NULL) < 0)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_stream_release: stream %p is not a live stream of "
                         "wavert_stream_create (released already, or made elsewhere)",
                         stream);
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
  wavert_status status = wavert__check_bytes("wavert_memory_alloc", "size", size);
  if (status == WAVERT_OK) status = wavert__enter(device, &saved);
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

wavert_status wavert_memory_kind(wavert_device *device, const void *ptr,
                                 wavert_memory_type *out_kind, int32_t *out_ordinal) {
  CHECK_DEVICE("wavert_memory_kind");
  if (out_kind == NULL || out_ordinal == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                         "wavert_memory_kind: out_kind or out_ordinal is NULL");
  if (ptr == NULL) {
    *out_kind = WAVERT_MEMORY_UNREGISTERED;
    *out_ordinal = -1;
    return WAVERT_OK;
  }
  if (device->backend->memory_kind == NULL)
    return wavert__error(WAVERT_ERROR_UNSUPPORTED,
                         "wavert_memory_kind: the %s driver has no pointer query",
                         device->backend->name);
  return device->backend->memory_kind(ptr, out_kind, out_ordinal);
}

wavert_status wavert_memory_copy(wavert_device *device, void *dst, const void *src, size_t size,
                                 void *stream) {
  CHECK_DEVICE("wavert_memory_copy");
  if (size == 0) return WAVERT_OK;
  if (dst == NULL || src == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "wavert_memory_copy: dst or src is NULL");
  void *saved = NULL;
  wavert_status status = wavert__check_bytes("wavert_memory_copy", "size", size);
  if (status == WAVERT_OK) status = wavert__check_range("wavert_memory_copy", "dst", dst, size);
  if (status == WAVERT_OK) status = wavert__check_range("wavert_memory_copy", "src", src, size);
  if (status == WAVERT_OK) status = wavert__enter(device, &saved);
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
  wavert_status status = wavert__check_elements("wavert_memory_set", ptr, element_bytes, count);
  if (status == WAVERT_OK) status = wavert__enter(device, &saved);
  if (status != WAVERT_OK) return status;
  status = device->backend->memset(ptr, value, element_bytes, count, stream, stream == NULL);
  wavert__leave(device, saved);
  return status;
}
