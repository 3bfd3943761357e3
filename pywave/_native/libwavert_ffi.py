"""Build script of ``pywave._libwavert``, the cffi binding (API mode) of libwavert.

Run by Meson: ``python libwavert_ffi.py OUTPUT.c`` writes the C source of the extension, which
Meson compiles against ``wavert.h``. The declarations below are the part of ``wavert.h`` that
Python's control plane uses; because the generated source calls each function and reads
each constant through the real header, the C compiler checks every declaration (a mismatch
is a build error), and every value written ``...`` here is taken from C, not copied.
"""

from __future__ import annotations

import sys

import cffi

CDEF = """
#define WAVERT_VERSION_MAJOR ...
#define WAVERT_VERSION_MINOR ...
#define WAVERT_VERSION_PATCH ...
#define WAVERT_DYNAMIC ...
#define WAVERT_MEMREF_SIGNLESS ...
#define WAVERT_MEMREF_STRIDED ...

typedef enum wavert_status {
    WAVERT_OK, WAVERT_ERROR_INVALID_ARGUMENT, WAVERT_ERROR_LIMIT_EXCEEDED,
    WAVERT_ERROR_NOT_FOUND, WAVERT_ERROR_UNAVAILABLE, WAVERT_ERROR_DRIVER,
    WAVERT_ERROR_OUT_OF_MEMORY, WAVERT_ERROR_UNSUPPORTED, WAVERT_ERROR_KERNEL_FAULT, ...
} wavert_status;

typedef enum { kDLCPU, kDLCUDA, kDLROCM, ... } DLDeviceType;

typedef struct wavert_device wavert_device;
typedef struct wavert_kernel wavert_kernel;
typedef struct wavert_module wavert_module;
typedef struct wavert_function wavert_function;

typedef enum wavert_function_attribute {
    WAVERT_FUNCTION_MAX_THREADS_PER_BLOCK, WAVERT_FUNCTION_SHARED_SIZE_BYTES,
    WAVERT_FUNCTION_NUM_REGS, WAVERT_FUNCTION_LOCAL_SIZE_BYTES,
    WAVERT_FUNCTION_CONST_SIZE_BYTES, WAVERT_FUNCTION_PTX_VERSION,
    WAVERT_FUNCTION_BINARY_VERSION, WAVERT_FUNCTION_MAX_DYNAMIC_SHARED_SIZE_BYTES, ...
} wavert_function_attribute;

const char *wavert_status_string(wavert_status status);
const char *wavert_last_error(void);
wavert_status wavert_last_status(void);
void wavert_clear_error(void);
int32_t wavert_version(void);
wavert_status wavert_device_count(int32_t device_type, int32_t *out_count);
wavert_status wavert_device_get(int32_t device_type, int32_t ordinal,
                                wavert_device **out_device);
wavert_status wavert_device_chip(wavert_device *device, char *buf, size_t size);
wavert_status wavert_device_synchronize(wavert_device *device);
wavert_status wavert_kernel_release(wavert_kernel *kernel);
wavert_status wavert_module_load(wavert_device *device, const void *image, size_t size,
                                 wavert_module **out_module);
wavert_status wavert_module_release(wavert_module *module);
wavert_status wavert_module_get_function(wavert_module *module, const char *name,
                                         wavert_function **out_function);
wavert_status wavert_function_attribute_get(wavert_function *function,
                                            wavert_function_attribute attribute,
                                            int64_t *out_value);
"""


def builder() -> cffi.FFI:
    ffi = cffi.FFI()
    ffi.cdef(CDEF)
    ffi.set_source("pywave._libwavert", '#include "wavert.h"')
    return ffi


if __name__ == "__main__":
    builder().emit_c_code(sys.argv[1])
