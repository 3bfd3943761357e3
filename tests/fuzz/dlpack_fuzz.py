"""Malformed DLPack producers into ``pywave._native.HostFunction`` calls, without a GPU.

The host function's entry is a ctypes callback that records the call: nothing is launched and
no tensor data is touched, so every case runs here. A case ends ``typed`` (pywave's
ArgumentError/DeviceError: without a GPU a well-formed tensor stops at the device lookup),
``accepted`` (the entry ran: only a GPU machine gets there), ``untyped`` (any other
exception) or ``death`` (the process died: :func:`run_isolated` runs the cases in a child).
"""

from __future__ import annotations

import collections
import ctypes
import json
import random
import subprocess
import sys

D = -(2 ** 63)
kDLCPU, kDLCUDA = 1, 2


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class Versioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", DELETER), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


class Legacy(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", DELETER)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
NAMES = (b"dltensor_versioned", b"dltensor", b"used_dltensor_versioned", b"used_dltensor",
         b"dltensor_versionedx", b"", b"DLTENSOR", None)
ENTRY = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_uint64))


class Fake:
    """One malformed managed tensor, kept alive with its arrays while a case runs."""

    def __init__(self, rng: random.Random) -> None:
        self.versioned = rng.random() < 0.7
        ndim = rng.choice((1, 1, 1, 0, 2, -1, -(2 ** 31), 64, 2 ** 31 - 1))
        n = max(0, min(ndim, 8)) or 1
        shape = [rng.choice((4, 0, -1, -(2 ** 63), 2 ** 62, 1)) for _ in range(n)]
        self.shape = (ctypes.c_int64 * n)(*shape)
        self.strides = (ctypes.c_int64 * n)(*[rng.choice((1, 0, -1, 2 ** 62, D))
                                              for _ in range(n)])
        self.deleter = DELETER(lambda _p: None)
        self.mt = (Versioned if self.versioned else Legacy)()
        t = self.mt.dl_tensor
        t.data = rng.choice((0, 0x10000, 1, 2 ** 63, 2 ** 64 - 16))
        t.device = DLDevice(rng.choice((kDLCUDA, kDLCUDA, kDLCPU, 10, 0, 255, -1)),
                            rng.choice((0, 0, 1, -1, 2 ** 31 - 1)))
        t.ndim = ndim
        t.dtype = DLDataType(rng.choice((2, 2, 0, 1, 4, 6, 255)), rng.choice((32, 32, 0, 8, 255)),
                             rng.choice((1, 1, 0, 4, 65535)))
        t.shape = self.shape if rng.random() < 0.9 else None
        t.strides = self.strides if rng.random() < 0.4 else None
        t.byte_offset = rng.choice((0, 0, 4, 2 ** 63))
        self.mt.deleter = self.deleter if rng.random() < 0.9 else DELETER()
        if self.versioned:
            self.mt.version = DLPackVersion(rng.choice((1, 1, 0, 2, 2 ** 32 - 1)),
                                            rng.choice((0, 3, 2 ** 32 - 1)))
            self.mt.flags = rng.choice((0, 0, 1, 2, 2 ** 64 - 1))
        default = b"dltensor_versioned" if self.versioned else b"dltensor"
        # A capsule named for the other layout is undetectable by any consumer (the name is
        # the layout's only witness): wrong names here are never the other valid one.
        other = b"dltensor" if self.versioned else b"dltensor_versioned"
        self.name = default if rng.random() < 0.6 else \
            rng.choice([n for n in NAMES if n != other])

    def capsule(self):
        return _capsule_new(ctypes.addressof(self.mt), self.name, None)


class Producer:
    """A ``__dlpack__`` producer that may lie about its device, raise or return junk."""

    def __init__(self, rng: random.Random, fake: Fake) -> None:
        self.fake = fake
        self.device_mode = rng.choice(("truth", "truth", "cpu", "cuda", "junk", "raise",
                                       "negative"))
        self.dlpack_mode = rng.choice(("capsule", "capsule", "capsule", "consumed", "junk",
                                       "raise", "none"))
        self.used = None

    def __dlpack_device__(self):
        t = self.fake.mt.dl_tensor.device
        return {"truth": (t.device_type, t.device_id), "cpu": (kDLCPU, 0),
                "cuda": (kDLCUDA, 0), "junk": "cuda:0", "negative": (-5, -1)}.get(
            self.device_mode) or _raise(RuntimeError("device query failed"))

    def __dlpack__(self, **kw):
        if self.dlpack_mode == "raise":
            raise BufferError("cannot export")
        if self.dlpack_mode == "junk":
            return object()
        if self.dlpack_mode == "none":
            return None
        cap = self.fake.capsule()
        if self.dlpack_mode == "consumed":
            ctypes.pythonapi.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
            ctypes.pythonapi.PyCapsule_SetName(cap, b"used_dltensor_versioned")
        self.used = cap
        return cap


def _raise(exc: BaseException):
    raise exc


def run(seed: int, count: int) -> dict[str, int]:
    """Run ``count`` cases in this process; outcome counts."""
    import pywave  # binds pywave's exceptions to _native
    from pywave import _native
    counts: collections.Counter[str] = collections.Counter()
    entry = ENTRY(lambda p: None)
    address = ctypes.cast(entry, ctypes.c_void_p).value
    from pywave.program import Param
    params = (Param("a", "memref", "memref<?xf32>", dtype=(2, 32, 1), sizes=(D,),
                    written=True),
              Param("s", "scalar", "f32", scalar="f32"))
    fn = _native.HostFunction(address, "f", params, kDLCUDA)
    for index in range(count):
        rng = random.Random(seed * 1_000_003 + index)
        fake = Fake(rng)
        how = rng.random()
        arg = fake.capsule() if how < 0.4 else Producer(rng, fake)
        try:
            fn(arg, rng.choice((1.0, 1, float("nan"), "x")))
            counts["accepted"] += 1
        except pywave.Error:
            counts["typed"] += 1
        except Exception as exc:  # noqa: BLE001 - counted
            counts["untyped"] += 1
            if counts["untyped"] <= 5:
                print(f"untyped #{index}: {type(exc).__name__}: {exc}", file=sys.stderr)
        del arg
    return dict(counts)


def run_isolated(seed: int, count: int) -> dict[str, int]:
    """:func:`run` in a child process; a death is counted as ``death``."""
    proc = subprocess.run(
        [sys.executable, "-c", "import json, sys; from fuzz import dlpack_fuzz; "
         "print(json.dumps(dlpack_fuzz.run(int(sys.argv[1]), int(sys.argv[2]))))",
         str(seed), str(count)], capture_output=True, text=True,
        cwd=__file__.rsplit("/fuzz/", 1)[0])
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-2000:])
        return {"death": 1}
    sys.stderr.write(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])
