"""pywave.runtime, the cffi (API mode) binding of libwavert: its constants come from wavert.h,
its one status table covers every status, and the native call path raises by that table."""

from __future__ import annotations

import pytest

import pywave
from pywave import _native, runtime
from pywave._libwavert import ffi, lib


def test_status_table_covers_every_failure_status_of_the_header():
    statuses = ffi.typeof("wavert_status").relements   # enumerator name -> value, from C
    assert statuses.pop("WAVERT_OK") == runtime.OK == 0
    assert set(runtime.STATUS_ERRORS) == set(statuses.values())
    assert all(issubclass(c, pywave.Error) for c in runtime.STATUS_ERRORS.values())


@pytest.mark.parametrize("status, cls", [
    (lib.WAVERT_ERROR_INVALID_ARGUMENT, pywave.ArgumentError),
    (lib.WAVERT_ERROR_LIMIT_EXCEEDED, pywave.ArgumentError),
    (lib.WAVERT_ERROR_NOT_FOUND, pywave.DeviceError),
    (lib.WAVERT_ERROR_UNSUPPORTED, pywave.DeviceError),
    (lib.WAVERT_ERROR_DRIVER, pywave.DeviceError),
    (99, pywave.DeviceError),   # a status newer than this table
])
def test_error_for(status, cls):
    exc = runtime.error_for(status, "why")
    assert type(exc) is cls and str(exc) == "why"


def test_constants_come_from_the_header():
    assert runtime.DYNAMIC == _native.DYNAMIC == -(2 ** 63)
    assert (runtime.SIGNLESS, runtime.STRIDED) == (_native.MEMREF_SIGNLESS,
                                                   _native.MEMREF_STRIDED)
    assert (runtime.KDLCUDA, runtime.KDLROCM) == (2, 10)   # the DLPack specification's values


def test_loaded_library_is_the_version_built_against():
    assert lib.wavert_version() == runtime.BUILT_VERSION
    major, minor, patch = (int(x) for x in pywave.__version__.split("."))
    assert runtime.BUILT_VERSION == major * 10000 + minor * 100 + patch


def test_unsupported_device_type_is_a_device_error():
    with pytest.raises(pywave.DeviceError, match="device type"):
        runtime.device_count(4)   # kDLOpenCL: UNSUPPORTED (kDLCPU = 1 is the CPU device)
