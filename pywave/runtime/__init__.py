"""The libwavert binding for Python's control plane, and its one gate for C calls.

``pywave._libwavert`` is a cffi extension built out of line (API mode) by Meson against
``wavert.h`` (see ``pywave/_native/libwavert_ffi.py``): the C compiler checks its declarations,
and the status codes and constants below are read from C, not copied. Importing it is an
extension import (no C parser). The per-call path does not go through here: it is
``pywave._native``.

Every call into libwavert goes through :func:`check`, which raises the pywave exception of
:data:`STATUS_ERRORS` with libwavert's per-thread message on failure.
"""

from __future__ import annotations

from .. import layout
from .._libwavert import ffi, lib
from ..errors import ArgumentError, DeviceError, Error, KernelFaultError

#: The libwavert.so this binding links (in the package folder, or Meson's build folder for an
#: editable install: :mod:`pywave.layout`).
LIBRARY = layout.libwavert()

# Status codes and constants of wavert.h.
OK = lib.WAVERT_OK
INVALID_ARGUMENT = lib.WAVERT_ERROR_INVALID_ARGUMENT
LIMIT_EXCEEDED = lib.WAVERT_ERROR_LIMIT_EXCEEDED
NOT_FOUND = lib.WAVERT_ERROR_NOT_FOUND
UNAVAILABLE = lib.WAVERT_ERROR_UNAVAILABLE
DRIVER = lib.WAVERT_ERROR_DRIVER
OUT_OF_MEMORY = lib.WAVERT_ERROR_OUT_OF_MEMORY
UNSUPPORTED = lib.WAVERT_ERROR_UNSUPPORTED
KERNEL_FAULT = lib.WAVERT_ERROR_KERNEL_FAULT

DYNAMIC = lib.WAVERT_DYNAMIC                  # MLIR's `?` in sizes, strides and offsets
SIGNLESS = lib.WAVERT_MEMREF_SIGNLESS         # wavert_memref_type.flags
STRIDED = lib.WAVERT_MEMREF_STRIDED

KDLCUDA = lib.kDLCUDA
KDLROCM = lib.kDLROCM

#: The exception class of each libwavert failure status: the one table, used by :func:`check`
#: and, through ``_native.set_exceptions``, by calls of compiled host functions. A status the
#: caller can fix by changing an argument (a bad value, a launch beyond a device limit) is an
#: ArgumentError; everything about the GPU, its driver or the loaded code is a DeviceError:
#: NOT_FOUND (no such device ordinal, no such kernel in a code object) and UNSUPPORTED (the
#: backend or driver cannot do it) included, since DeviceError covers "missing driver or
#: device" and the caller's arguments were valid.
STATUS_ERRORS: dict[int, type[Error]] = {
    INVALID_ARGUMENT: ArgumentError,
    LIMIT_EXCEEDED: ArgumentError,
    NOT_FOUND: DeviceError,
    UNAVAILABLE: DeviceError,
    DRIVER: DeviceError,
    OUT_OF_MEMORY: DeviceError,
    UNSUPPORTED: DeviceError,
    KERNEL_FAULT: KernelFaultError,
}

#: The libwavert version this binding was built against (wavert_version()'s encoding).
BUILT_VERSION = (lib.WAVERT_VERSION_MAJOR * 10000 + lib.WAVERT_VERSION_MINOR * 100
                 + lib.WAVERT_VERSION_PATCH)


def _check_version() -> None:
    loaded = lib.wavert_version()
    if loaded != BUILT_VERSION:
        raise ImportError(f"pywave was built against libwavert {BUILT_VERSION} but loaded "
                          f"libwavert {loaded} (MAJOR*10000 + MINOR*100 + PATCH); another "
                          "libwavert.so is found first (LD_LIBRARY_PATH?) — reinstall pywave")


_check_version()


def error_for(status: int, message: str) -> Error:
    """The pywave exception for a libwavert failure status (:data:`STATUS_ERRORS`)."""
    return STATUS_ERRORS.get(status, DeviceError)(message)


def check(status: int) -> None:
    """Raise the matching pywave exception if ``status`` is not WAVERT_OK."""
    if status != OK:
        message = ffi.string(lib.wavert_last_error()).decode(errors="replace")
        name = ffi.string(lib.wavert_status_string(status)).decode()
        raise error_for(status, message or name)


def clear_error() -> None:
    """Forget this thread's last libwavert error (``wavert_clear_error``)."""
    lib.wavert_clear_error()


def recorded_error(what: str) -> Error | None:
    """The pywave exception for this thread's first libwavert error since
    :func:`clear_error` (``wavert_last_status``: what ``mgpu*`` functions called outside a
    host call record), prefixed with ``what``, and the record cleared; None when there is
    none."""
    status = lib.wavert_last_status()
    if status == OK:
        return None
    message = ffi.string(lib.wavert_last_error()).decode(errors="replace")
    lib.wavert_clear_error()
    return error_for(status, f"{what}: {message}")


def device_count(device_type: int = KDLCUDA) -> int:
    """Number of GPUs of a backend; 0 when its driver is missing."""
    out = ffi.new("int32_t *")
    status = lib.wavert_device_count(device_type, out)
    if status == UNAVAILABLE:
        return 0
    check(status)
    return int(out[0])


def device(device_type: int, ordinal: int):
    out = ffi.new("wavert_device **")
    check(lib.wavert_device_get(device_type, ordinal, out))
    return out[0]


def device_chip(device_type: int = KDLCUDA, ordinal: int = 0) -> str:
    """Target chip of a device: ``"sm_90"``, ``"gfx942"``."""
    buf = ffi.new("char[64]")
    check(lib.wavert_device_chip(device(device_type, ordinal), buf, 64))
    return ffi.string(buf).decode()


def synchronize(device_type: int = KDLCUDA, ordinal: int = 0) -> None:
    """Wait for all work on a device; raises DeviceError for an earlier kernel fault."""
    check(lib.wavert_device_synchronize(device(device_type, ordinal)))



#: The kernel attributes :func:`function_attributes` reads, by their name in
#: :class:`pywave.runtime.kernel_api.KernelAttributes`.
FUNCTION_ATTRIBUTES = {
    "registers": lib.WAVERT_FUNCTION_NUM_REGS,
    "local_bytes": lib.WAVERT_FUNCTION_LOCAL_SIZE_BYTES,
    "shared_bytes": lib.WAVERT_FUNCTION_SHARED_SIZE_BYTES,
    "constant_bytes": lib.WAVERT_FUNCTION_CONST_SIZE_BYTES,
    "max_threads_per_block": lib.WAVERT_FUNCTION_MAX_THREADS_PER_BLOCK,
    "max_dynamic_shared_bytes": lib.WAVERT_FUNCTION_MAX_DYNAMIC_SHARED_SIZE_BYTES,
    "ptx_version": lib.WAVERT_FUNCTION_PTX_VERSION,
    "binary_version": lib.WAVERT_FUNCTION_BINARY_VERSION,
}


def function_attributes(device_type: int, ordinal: int, image: bytes,
                        kernel: str) -> dict[str, int]:
    """The driver's attributes (:data:`FUNCTION_ATTRIBUTES`) of kernel ``kernel`` in
    ``image`` loaded on GPU ``ordinal`` of a backend: a module of its own, loaded for the
    query and released after it (its release waits for the device's pending work).
    DeviceError without the device or the kernel (NOT_FOUND), or when the driver fails."""
    module = ffi.new("wavert_module **")
    check(lib.wavert_module_load(device(device_type, ordinal), image, len(image), module))
    try:
        function = ffi.new("wavert_function **")
        check(lib.wavert_module_get_function(module[0], kernel.encode(), function))
        value = ffi.new("int64_t *")
        out = {}
        for name, attribute in FUNCTION_ATTRIBUTES.items():
            check(lib.wavert_function_attribute_get(function[0], attribute, value))
            out[name] = int(value[0])
        return out
    finally:
        check(lib.wavert_module_release(module[0]))
