/*
 * launch.c — wavert_function_launch: validation against the cached device and kernel limits,
 * the dynamic shared memory opt-in, and the driver launch. The hot path takes no lock and
 * queries nothing: when this thread's context hint says the device's context is current and
 * the backend's launch checks the context itself (backend.h), the launch is the only driver
 * call; otherwise, or when that launch fails, the context is entered (and the launch retried
 * if entering switched it), kept in a lease until the caller ends it.
 */
#include "backend.h"
#include "internal.h"

static const char *const extent_names[6] = {"grid x",  "grid y",  "grid z",
                                            "block x", "block y", "block z"};

/* Raise the function's MAX_DYNAMIC_SHARED_SIZE_BYTES to `bytes` if it is lower (context
 * current). Serialised per module so concurrent raises end at the largest value. */
static wavert_status opt_in_shared(wavert_function *function, int64_t bytes) {
  wavert_status status = WAVERT_OK;
  pthread_mutex_lock(&function->module->mutex);
  if (atomic_load_explicit(&function->dynamic_shared_opt_in, memory_order_relaxed) < bytes) {
    status = function->device->backend->function_opt_in_shared(function->handle, bytes);
    if (status == WAVERT_OK)
      atomic_store_explicit(&function->dynamic_shared_opt_in, bytes, memory_order_release);
  }
  pthread_mutex_unlock(&function->module->mutex);
  return status;
}

/* The launch with the device's context current: the shared memory opt-in if needed, then the
 * plain or cluster launch. */
static wavert_status launch_entered(wavert_function *function, const uint32_t *cluster,
                                    const uint32_t grid[3], const uint32_t block[3],
                                    int64_t dynamic_shared_bytes, int opt_in, void *stream,
                                    void **params) {
  const wavert__backend *backend = function->device->backend;
  wavert_status status = opt_in ? opt_in_shared(function, dynamic_shared_bytes) : WAVERT_OK;
  if (status != WAVERT_OK) return status;
  if (cluster != NULL)
    return backend->launch_cluster(function->handle, cluster, grid, block,
                                   (uint32_t)dynamic_shared_bytes, stream, params);
  return backend->launch(function->handle, grid, block, (uint32_t)dynamic_shared_bytes, stream,
                         params);
}

void wavert__context_lease_end(wavert__context_lease *lease) {
  if (lease->device == NULL) return;
  wavert__leave(lease->device, lease->saved);
  lease->device = NULL;
  lease->saved = NULL;
}

wavert_status wavert_function_launch(wavert_function *function, int64_t gx, int64_t gy,
                                     int64_t gz, int64_t bx, int64_t by, int64_t bz,
                                     int64_t dynamic_shared_bytes, void *stream, void **params) {
  wavert__context_lease lease = {NULL, NULL, NULL};
  wavert_status status = wavert__function_launch_leased(function, NULL, gx, gy, gz, bx, by, bz,
                                                        dynamic_shared_bytes, stream, params,
                                                        &lease);
  wavert__context_lease_end(&lease);
  return status;
}

wavert_status wavert__cluster_extents(const wavert__backend *backend, const char *caller,
                                      const char *kernel, const int64_t cluster[3],
                                      const int64_t grid[3], uint32_t out[3]) {
  static const char axes[3] = {'x', 'y', 'z'};
  if (backend->launch_cluster == NULL)
    return wavert__error(WAVERT_ERROR_UNSUPPORTED,
                         "%s of kernel '%s': the %s backend has no thread-block clusters", caller,
                         kernel, backend->name);
  for (int i = 0; i < 3; ++i) {
    if (cluster[i] < 1 || cluster[i] > (int64_t)UINT32_MAX)
      return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                           "%s of kernel '%s': cluster %c = %lld is not a positive 32-bit count",
                           caller, kernel, axes[i], (long long)cluster[i]);
    if (grid[i] > 0 && grid[i] % cluster[i] != 0)
      return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                           "%s of kernel '%s': grid %c = %lld is not a multiple of cluster %c = %lld",
                           caller, kernel, axes[i], (long long)grid[i], axes[i],
                           (long long)cluster[i]);
    out[i] = (uint32_t)cluster[i];
  }
  return WAVERT_OK;
}

wavert_status wavert__function_launch_leased(wavert_function *function, const uint32_t *cluster,
                                             int64_t gx, int64_t gy, int64_t gz, int64_t bx,
                                             int64_t by, int64_t bz,
                                             int64_t dynamic_shared_bytes, void *stream,
                                             void **params, wavert__context_lease *lease) {
  if (function == NULL)
    return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT, "wavert_function_launch: function is NULL");
  const int64_t extents[6] = {gx, gy, gz, bx, by, bz};
  wavert_device *device = function->device;
  const int64_t *attributes = device->attributes;
  /* The common case first, one unsigned compare an extent: every extent in [1, limit] (a 0 or
   * negative extent wraps past every limit; extent_limits has no negative one). Anything else
   * takes the checks below, in their order, for the error or the launch of nothing. */
  const uint64_t *const lim = device->extent_limits;
  if (!(dynamic_shared_bytes >= 0 && (uint64_t)gx - 1u < lim[0] && (uint64_t)gy - 1u < lim[1] &&
        (uint64_t)gz - 1u < lim[2] && (uint64_t)bx - 1u < lim[3] && (uint64_t)by - 1u < lim[4] &&
        (uint64_t)bz - 1u < lim[5])) {
    for (int i = 0; i < 6; ++i)
      if (extents[i] < 0)
        return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                             "launch of kernel '%s': %s = %lld is negative", function->name,
                             extent_names[i], (long long)extents[i]);
    if (dynamic_shared_bytes < 0)
      return wavert__error(WAVERT_ERROR_INVALID_ARGUMENT,
                           "launch of kernel '%s': dynamic shared memory %lld bytes is negative",
                           function->name, (long long)dynamic_shared_bytes);
    for (int i = 0; i < 6; ++i)
      if (extents[i] == 0) return WAVERT_OK;
    for (int i = 0; i < 6; ++i) {
      int64_t limit = i < 3 ? attributes[WAVERT_DEVICE_MAX_GRID_DIM_X + i]
                            : attributes[WAVERT_DEVICE_MAX_BLOCK_DIM_X + i - 3];
      if (extents[i] > limit)
        return wavert__error(WAVERT_ERROR_LIMIT_EXCEEDED,
                             "launch of kernel '%s': %s = %lld exceeds the device limit %lld",
                             function->name, extent_names[i], (long long)extents[i],
                             (long long)limit);
    }
  }
  /* Each extent is within a limit the driver reported as an int, but three of them can still
   * multiply past int64. */
  int64_t threads = 0;
  if (__builtin_mul_overflow(bx, by, &threads) || __builtin_mul_overflow(threads, bz, &threads))
    return wavert__error(WAVERT_ERROR_LIMIT_EXCEEDED,
                         "launch of kernel '%s': threads per block (%lld x %lld x %lld) overflows "
                         "int64 (the device limit is %lld)",
                         function->name, (long long)bx, (long long)by, (long long)bz,
                         (long long)attributes[WAVERT_DEVICE_MAX_THREADS_PER_BLOCK]);
  if (threads > attributes[WAVERT_DEVICE_MAX_THREADS_PER_BLOCK])
    return wavert__error(WAVERT_ERROR_LIMIT_EXCEEDED,
                         "launch of kernel '%s': %lld threads per block (%lld x %lld x %lld) "
                         "exceeds the device limit %lld",
                         function->name, (long long)threads, (long long)bx, (long long)by,
                         (long long)bz, (long long)attributes[WAVERT_DEVICE_MAX_THREADS_PER_BLOCK]);
  if (threads > function->max_threads)
    return wavert__error(WAVERT_ERROR_LIMIT_EXCEEDED,
                         "launch of kernel '%s': %lld threads per block (%lld x %lld x %lld) "
                         "exceeds the kernel's limit %lld",
                         function->name, (long long)threads, (long long)bx, (long long)by,
                         (long long)bz, (long long)function->max_threads);
  int64_t shared_total = 0;
  if (__builtin_add_overflow(function->static_shared, dynamic_shared_bytes, &shared_total))
    return wavert__error(WAVERT_ERROR_LIMIT_EXCEEDED,
                         "launch of kernel '%s': dynamic shared memory %lld bytes + static %lld "
                         "bytes overflows int64 (the device maximum is %lld bytes)",
                         function->name, (long long)dynamic_shared_bytes,
                         (long long)function->static_shared,
                         (long long)attributes[WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN]);
  int64_t shared_max = attributes[WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN];
  if (shared_total > shared_max)
    return wavert__error(WAVERT_ERROR_LIMIT_EXCEEDED,
                         "launch of kernel '%s': dynamic shared memory %lld bytes + static %lld "
                         "bytes exceeds the device maximum %lld bytes",
                         function->name, (long long)dynamic_shared_bytes,
                         (long long)function->static_shared, (long long)shared_max);
  int opt_in = shared_total > attributes[WAVERT_DEVICE_MAX_SHARED_MEMORY_PER_BLOCK] &&
               atomic_load_explicit(&function->dynamic_shared_opt_in, memory_order_acquire) <
                   dynamic_shared_bytes;

  /* Every extent and the shared memory are now within limits the driver reported as ints, so
   * the narrowing below (and the backends' int opt-in) keeps their values. */
  const uint32_t grid[3] = {(uint32_t)gx, (uint32_t)gy, (uint32_t)gz};
  const uint32_t block[3] = {(uint32_t)bx, (uint32_t)by, (uint32_t)bz};
  if (lease->device == device)
    return launch_entered(function, cluster, grid, block, dynamic_shared_bytes, opt_in, stream,
                          params);
  wavert__context_lease_end(lease); /* another device's context: restore the caller's first */
  wavert_status tried = WAVERT_OK;
  const int hinted = lease->hint != NULL ? device->backend->launch_checks_context &&
                                              *lease->hint == device->context
                                        : wavert__context_hint_current(device);
  if (cluster == NULL && !opt_in && hinted) {
    tried = device->backend->launch(function->handle, grid, block,
                                    (uint32_t)dynamic_shared_bytes, stream, params);
    if (tried == WAVERT_OK) return WAVERT_OK;
  }
  void *saved = NULL;
  wavert_status status = wavert__enter(device, &saved);
  if (status != WAVERT_OK) return status;
  lease->device = device;
  lease->saved = saved;
  /* The context was current all along: the failure was the launch's own, and its message is
   * still this thread's last error (entering reports nothing on success). */
  if (tried != WAVERT_OK && saved == device->context) return tried;
  return launch_entered(function, cluster, grid, block, dynamic_shared_bytes, opt_in, stream,
                        params);
}
