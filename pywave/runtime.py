"""The libwavert binding (cffi, ABI mode) and its one gate for C calls.

Every call into libwavert goes through :func:`check`, which raises the typed pywave
exception with libwavert's per-thread message on failure.
"""

from __future__ import annotations

import functools
import os
import threading

from .errors import ArgumentError, DeviceError, Error

LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libwavert.so")

_CDEF = """
typedef int wavert_status;
typedef struct wavert_device wavert_device;
typedef struct wavert_kernel wavert_kernel;
typedef struct { int device_type; int32_t device_id; } DLDevice;
const char *wavert_status_string(wavert_status status);
const char *wavert_last_error(void);
void wavert_clear_error(void);
int32_t wavert_version(void);
wavert_status wavert_device_count(int32_t device_type, int32_t *out_count);
wavert_status wavert_device_get(int32_t device_type, int32_t ordinal, wavert_device **out_device);
wavert_status wavert_device_attribute_get(wavert_device *device, int attribute, int64_t *out_value);
wavert_status wavert_device_chip(wavert_device *device, char *buf, size_t size);
wavert_status wavert_device_synchronize(wavert_device *device);
void wavert_kernel_release(wavert_kernel *kernel);
"""


class _LazyFFI:
    """The cffi FFI, built on first use: parsing the declarations imports pycparser, which
    a compile-cache hit with an explicit target never needs."""

    _ffi = None
    _lock = threading.Lock()

    def __getattr__(self, name: str):
        if _LazyFFI._ffi is None:
            with _LazyFFI._lock:
                if _LazyFFI._ffi is None:
                    import cffi
                    made = cffi.FFI()
                    made.cdef(_CDEF)
                    _LazyFFI._ffi = made
        return getattr(_LazyFFI._ffi, name)


ffi = _LazyFFI()

# Status codes (wavert.h).
OK = 0
INVALID_ARGUMENT = 1
LIMIT_EXCEEDED = 2
NOT_FOUND = 3
UNAVAILABLE = 4
DRIVER = 5
OUT_OF_MEMORY = 6
UNSUPPORTED = 7

KDLCUDA = 2
KDLROCM = 10


@functools.cache
def lib():
    """The loaded libwavert (the copy shipped inside the pywave package)."""
    if not os.path.exists(LIBRARY):
        raise Error(f"libwavert is missing from the pywave package ({LIBRARY}); reinstall "
                    "pywave with `pip install .`")
    return ffi.dlopen(LIBRARY)


def error_for(status: int, message: str) -> Error:
    """The pywave exception for a libwavert status."""
    if status in (INVALID_ARGUMENT, LIMIT_EXCEEDED):
        return ArgumentError(message)
    if status in (NOT_FOUND, UNSUPPORTED):
        return Error(message)
    return DeviceError(message)


def check(status: int) -> None:
    """Raise the matching pywave exception if ``status`` is not WAVERT_OK."""
    if status != OK:
        message = ffi.string(lib().wavert_last_error()).decode(errors="replace")
        name = ffi.string(lib().wavert_status_string(status)).decode()
        raise error_for(status, message or name)


def device_count(device_type: int = KDLCUDA) -> int:
    """Number of GPUs of a backend; 0 when its driver is missing."""
    out = ffi.new("int32_t *")
    status = lib().wavert_device_count(device_type, out)
    if status == UNAVAILABLE:
        return 0
    check(status)
    return int(out[0])


def device(device_type: int, ordinal: int):
    out = ffi.new("wavert_device **")
    check(lib().wavert_device_get(device_type, ordinal, out))
    return out[0]


def device_chip(device_type: int = KDLCUDA, ordinal: int = 0) -> str:
    """Target chip of a device: ``"sm_90"``, ``"gfx942"``."""
    buf = ffi.new("char[64]")
    check(lib().wavert_device_chip(device(device_type, ordinal), buf, 64))
    return ffi.string(buf).decode()


def synchronize(device_type: int = KDLCUDA, ordinal: int = 0) -> None:
    """Wait for all work on a device; raises DeviceError for an earlier kernel fault."""
    check(lib().wavert_device_synchronize(device(device_type, ordinal)))

