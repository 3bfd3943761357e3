/*
 * error.c — status strings, the per-thread last error and the library version.
 */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

static _Thread_local wavert_status last_status = WAVERT_OK;
static _Thread_local char last_message[1024];

wavert_status wavert__error(wavert_status status, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(last_message, sizeof(last_message), format, args);
  va_end(args);
  last_status = status;
  return status;
}

const char *wavert_status_string(wavert_status status) {
  switch (status) {
    case WAVERT_OK:
      return "ok";
    case WAVERT_ERROR_INVALID_ARGUMENT:
      return "invalid argument";
    case WAVERT_ERROR_LIMIT_EXCEEDED:
      return "limit exceeded";
    case WAVERT_ERROR_NOT_FOUND:
      return "not found";
    case WAVERT_ERROR_UNAVAILABLE:
      return "unavailable";
    case WAVERT_ERROR_DRIVER:
      return "driver error";
    case WAVERT_ERROR_OUT_OF_MEMORY:
      return "out of memory";
    case WAVERT_ERROR_UNSUPPORTED:
      return "unsupported";
    case WAVERT_ERROR_KERNEL_FAULT:
      return "kernel fault";
  }
  return "unknown status";
}

const char *wavert_last_error(void) { return last_message; }

wavert_status wavert_last_status(void) { return last_status; }

void wavert_clear_error(void) {
  last_status = WAVERT_OK;
  last_message[0] = '\0';
}

int32_t wavert_version(void) {
  return WAVERT_VERSION_MAJOR * 10000 + WAVERT_VERSION_MINOR * 100 + WAVERT_VERSION_PATCH;
}
