"""A CuPy stand-in for tests without a GPU: `install()` puts a fake `cupy` module in
sys.modules, whose arrays pywave._native can read in place either way it reads real CuPy:

* route "api": CuPy >= 14.3's public C API, the capsule `cupy._public_c_api` (a table of
  ctypes callbacks filling the metadata from the array's fields);
* route "layout": CuPy 8..14.2, whose arrays are read through the object layout of
  `_ndarray_base` / `MemoryPointer`; here heap types of that layout made with PyType_FromSpec,
  the fields written with ctypes, and Python attributes that agree with them (or, with
  lie=True, do not: the one-time check must then refuse the type).

Every array also speaks the DLPack protocol (the fallback route) with FakeTensor capsules of
the same fields, recording its __dlpack__ calls in `.calls`. Used in subprocesses (pywave
remembers what it found of CuPy for the process).
"""

from __future__ import annotations

import ctypes
import sys
import types

import numpy as np

from test_args import FakeTensor

kDLCUDA = 2
_CODES = {"b": 6, "i": 0, "u": 1, "f": 2, "c": 5}
_keep: list = []  # ctypes objects that must outlive the process's calls


class Metadata(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("ndim", ctypes.c_int), ("device_id", ctypes.c_int),
                ("size", ctypes.c_size_t), ("itemsize", ctypes.c_ssize_t),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("dtype", ctypes.c_void_p)]


class Api(ctypes.Structure):
    _fields_ = [("version_major", ctypes.c_int), ("version_minor", ctypes.c_int),
                ("ndarray_type", ctypes.c_void_p), ("get_ndarray_ptr", ctypes.c_void_p),
                ("get_ndarray_metadata", ctypes.c_void_p),
                ("get_current_stream_ptr", ctypes.c_void_p)]


class Vector(ctypes.Structure):  # std::vector<Py_ssize_t>
    _fields_ = [("begin", ctypes.c_void_p), ("end", ctypes.c_void_p),
                ("end_of_storage", ctypes.c_void_p)]


class ArrayLayout(ctypes.Structure):  # cupy._core.core._ndarray_base, CuPy 8..14.2
    _fields_ = [("ob_refcnt", ctypes.c_ssize_t), ("ob_type", ctypes.c_void_p),
                ("vtab", ctypes.c_void_p), ("weakreflist", ctypes.c_void_p),
                ("size", ctypes.c_ssize_t), ("shape", Vector), ("strides", Vector),
                ("c_contiguous", ctypes.c_int), ("f_contiguous", ctypes.c_int),
                ("index_32_bits", ctypes.c_int), ("dtype", ctypes.c_void_p),
                ("data", ctypes.c_void_p), ("base", ctypes.c_void_p)]


class MemptrLayout(ctypes.Structure):  # cupy.cuda.memory.MemoryPointer
    _fields_ = [("ob_refcnt", ctypes.c_ssize_t), ("ob_type", ctypes.c_void_p),
                ("vtab", ctypes.c_void_p), ("ptr", ctypes.c_ssize_t),
                ("device_id", ctypes.c_int), ("mem", ctypes.c_void_p)]


class _Slot(ctypes.Structure):
    _fields_ = [("slot", ctypes.c_int), ("pfunc", ctypes.c_void_p)]


class _Spec(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("basicsize", ctypes.c_int),
                ("itemsize", ctypes.c_int), ("flags", ctypes.c_uint),
                ("slots", ctypes.POINTER(_Slot))]


def _layout_type(name: str, size: int) -> type:
    """A heap type of `size` bytes (fields zeroed), subclassable from Python."""
    from_spec = ctypes.pythonapi.PyType_FromSpec
    from_spec.restype = ctypes.py_object
    from_spec.argtypes = [ctypes.POINTER(_Spec)]
    slots = (_Slot * 1)()
    spec = _Spec(name.encode(), size, 0, (1 << 18) | (1 << 10), slots)  # DEFAULT | BASETYPE
    _keep.append((slots, spec))
    return from_spec(ctypes.byref(spec))


def _fields(self, shape, dtype, strides, ptr, device):
    self.dtype = np.dtype(dtype)
    n = self.dtype.itemsize
    if strides is None:
        strides, step = [], n
        for s in reversed(shape):
            strides.insert(0, step)
            step *= max(s, 1)
    self.shape, self.strides = tuple(shape), tuple(strides)
    self.size = int(np.prod(shape, dtype=np.int64))
    self.ptr, self.device_id = ptr, device
    self.calls = []
    self._cshape = (ctypes.c_ssize_t * max(len(shape), 1))(*shape)
    self._cstrides = (ctypes.c_ssize_t * max(len(shape), 1))(*strides)


class _Protocol:
    """The DLPack protocol of a fake array (CuPy's export: strides in elements)."""

    def __dlpack_device__(self):
        return (kDLCUDA, self.device_id)

    def __dlpack__(self, **kw):
        self.calls.append(kw)
        n = self.dtype.itemsize
        code = _CODES.get(self.dtype.kind, 7)  # 7 (opaque): pywave refuses it
        t = FakeTensor(shape=self.shape, dtype=(code, 8 * n, 1), device=(kDLCUDA, self.device_id),
                       data=self.ptr, strides=[s // n for s in self.strides] or None)
        self.tensors = getattr(self, "tensors", []) + [t]
        return t.capsule()


def _module(version: str, stream_ptr: int) -> types.ModuleType:
    cupy = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    runtime = types.ModuleType("cupy.cuda.runtime")
    runtime.is_hip = False
    cupy.__version__ = version
    cupy.stream_asked = []

    class Stream:
        ptr = stream_ptr

    def get_current_stream(device_id=-1):
        cupy.stream_asked.append(device_id)
        return Stream()

    cuda.get_current_stream = get_current_stream
    cuda.runtime = runtime
    cupy.cuda = cuda
    sys.modules.update({"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.runtime": runtime})
    return cupy


def install(route: str, version: str = "", stream_ptr: int = 0x4242, lie: bool = False):
    """The fake `cupy` module (in sys.modules) with `ndarray(shape, dtype, strides=None,
    ptr=0x10000, device=0)` (strides in bytes) readable through `route` ("api", "layout",
    or "none": neither, e.g. an unknown version)."""
    cupy = _module(version or {"api": "14.3.0", "layout": "14.0.0"}.get(route, "99.0"),
                   stream_ptr)
    if route == "layout":
        base = _layout_type("cupy._core.core._ndarray_base", ctypes.sizeof(ArrayLayout))
        memptr_base = _layout_type("cupy.cuda.memory.MemoryPointer", ctypes.sizeof(MemptrLayout))

        class MemoryPointer(memptr_base):
            pass

        class ndarray(_Protocol, base):
            def __init__(self, shape, dtype="float32", strides=None, ptr=0x10000, device=0):
                _fields(self, shape, dtype, strides, ptr, device)
                self.data = MemoryPointer()
                self.data.ptr, self.data.device_id = ptr, device
                m = MemptrLayout.from_address(id(self.data))
                m.ptr, m.device_id = ptr, device
                a = ArrayLayout.from_address(id(self))
                a.size = self.size
                a.dtype, a.data = id(self.dtype), id(self.data)  # kept alive by __dict__
                for vec, arr in ((a.shape, self._cshape), (a.strides, self._cstrides)):
                    vec.begin = ctypes.addressof(arr)
                    vec.end = vec.end_of_storage = vec.begin + 8 * len(shape)
                if lie:
                    self.size += 1

        ndarray.__module__ = "cupy"
        cupy.ndarray = ndarray
        return cupy

    class ndarray(_Protocol):
        def __init__(self, shape, dtype="float32", strides=None, ptr=0x10000, device=0):
            _fields(self, shape, dtype, strides, ptr, device)

    ndarray.__module__ = "cupy"
    cupy.ndarray = ndarray
    if route != "api":
        return cupy

    def metadata(arr, out):
        m = out.contents
        m.ptr, m.ndim, m.device_id = arr.ptr, len(arr.shape), arr.device_id
        m.size, m.itemsize = arr.size, arr.dtype.itemsize
        m.shape, m.strides = ctypes.addressof(arr._cshape), ctypes.addressof(arr._cstrides)
        m.dtype = id(arr.dtype)
        return 0

    def stream(device_id, out):
        cupy.stream_asked.append(("api", device_id))
        out[0] = stream_ptr
        return 0

    callbacks = (ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object,
                                  ctypes.POINTER(Metadata))(metadata),
                 ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int,
                                  ctypes.POINTER(ctypes.c_void_p))(stream))
    major, minor = map(int, cupy.__version__.split(".")[:2])
    api = Api(major, minor, id(ndarray), None,
              ctypes.cast(callbacks[0], ctypes.c_void_p).value,
              ctypes.cast(callbacks[1], ctypes.c_void_p).value)
    _keep.append((callbacks, api))
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    cupy._public_c_api = new(ctypes.addressof(api), b"cupy._public_c_api", None)
    return cupy
