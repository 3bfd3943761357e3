"""Argument handling of pywave._native.HostFunction, testable without a GPU.

The entry points here are ctypes callbacks that record their slots; tensors are NumPy arrays
(CPU), torch CPU tensors, or hand-made DLPack capsules that claim to be on a CUDA device (their
data is never touched: without a GPU the call stops at the device lookup with DeviceError,
after every argument check). Tests that need the entry to run skip when no device answers.
"""

from __future__ import annotations

import ctypes
import gc
import subprocess
import types
import sys
import textwrap

import numpy as np
import pytest

from pywave import _native

D = _native.DYNAMIC
kDLCPU, kDLCUDA, kDLROCM = 1, 2, 10


class ArgumentError(ValueError):
    pass


class DeviceError(RuntimeError):
    pass


def local_table() -> dict[int, type[Exception]]:
    """pywave.runtime.STATUS_ERRORS with this file's classes in place of pywave's."""
    import pywave
    from pywave import runtime

    return {status: ArgumentError if cls is pywave.ArgumentError else DeviceError
            for status, cls in runtime.STATUS_ERRORS.items()}


def _bind_pywave_exceptions() -> None:
    """Give pywave's own classes back to _native, if pywave bound them."""
    try:
        import pywave
        from pywave import runtime

        _native.set_exceptions(pywave.ArgumentError, pywave.DeviceError, runtime.STATUS_ERRORS)
    except (ImportError, AttributeError):
        pass


@pytest.fixture(autouse=True)
def _exceptions():
    _native.set_exceptions(ArgumentError, DeviceError, local_table())
    yield
    _bind_pywave_exceptions()


# ------------------------------------------------------------------------------------------
# Entry points and DLPack stand-ins
# ------------------------------------------------------------------------------------------
ENTRY = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_uint64))


class Entry:
    """A C-callable `void entry(uint64_t *slots)` recording the first `n` slots per call."""

    def __init__(self, n: int):
        self.n = n
        self.calls: list[list[int]] = []
        self._cb = ENTRY(lambda p: self.calls.append([p[i] for i in range(self.n)]))
        self.address = ctypes.cast(self._cb, ctypes.c_void_p).value


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_set_name = ctypes.pythonapi.PyCapsule_SetName
_capsule_set_name.restype = ctypes.c_int
_capsule_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]

_NAMES = {True: b"dltensor_versioned", False: b"dltensor"}
_USED = {True: b"used_dltensor_versioned", False: b"used_dltensor"}


class FakeTensor:
    """A DLPack managed tensor in ctypes memory that claims to live on (device_type, id).

    `deleted` counts deleter calls; `capsule()` makes a fresh capsule owning it (the capsule
    calls the deleter when it dies unconsumed, as producers do)."""

    def __init__(self, shape=(4,), dtype=(2, 32, 1), device=(kDLCUDA, 0), versioned=True,
                 read_only=False, data=0x10000, strides=None, major=1):
        self.versioned = versioned
        self.deleted = 0
        self._shape = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self._strides = (ctypes.c_int64 * max(len(shape), 1))(*strides) if strides else None
        self._deleter = DELETER(self._delete)
        cls = DLManagedTensorVersioned if versioned else DLManagedTensor
        self.mt = cls()
        t = self.mt.dl_tensor
        t.data = data
        t.device = DLDevice(*device)
        t.ndim = len(shape)
        t.dtype = DLDataType(*dtype)
        t.shape = self._shape
        t.strides = self._strides
        t.byte_offset = 0
        self.mt.deleter = self._deleter
        if versioned:
            self.mt.version = DLPackVersion(major, 3)
            self.mt.flags = 1 if read_only else 0

    def _delete(self, _ptr):
        self.deleted += 1

    def capsule(self):
        return _capsule_new(ctypes.addressof(self.mt), _NAMES[self.versioned], None)


class Producer:
    """A DLPack protocol producer handing out FakeTensor capsules; records __dlpack__ kwargs."""

    def __init__(self, tensor: FakeTensor | None = None, device=None, legacy=False,
                 refuse_stream=False, **kw):
        self.tensor = tensor or FakeTensor(**kw)
        self.device = device or (self.tensor.mt.dl_tensor.device.device_type,
                                 self.tensor.mt.dl_tensor.device.device_id)
        self.legacy = legacy
        self.refuse_stream = refuse_stream
        self.calls: list[dict] = []
        self.capsules = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kw):
        self.calls.append(kw)
        if self.legacy and "max_version" in kw:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        if self.refuse_stream and kw.get("stream") is not None:
            raise BufferError("stream must be None")
        cap = self.tensor.capsule()
        self.capsules.append(cap)
        return cap


def param(**fields):
    """A parameter object: HostFunction reads pywave's Param fields by attribute name."""
    return types.SimpleNamespace(**fields)


def memref(name, dtype=(2, 32, 1), sizes=(D,), written=False, flags=0, strides=None, offset=0):
    return param(name=name, kind="memref", type="", scalar="", dtype=dtype, flags=flags,
                 sizes=sizes, strides=strides, offset=offset, written=written)


def scalar(name, kind):
    return param(name=name, kind="scalar", type=kind, scalar=kind, dtype=(0, 0, 0), flags=0,
                 sizes=(), strides=None, offset=0, written=False)


def without(p, field):
    fields = dict(vars(p))
    del fields[field]
    return param(**fields)


K0 = (memref("a", written=True), scalar("s", "f32"))


def make(params=K0, name="f", entry: Entry | None = None, device_type=kDLCUDA):
    entry = entry or Entry(16)
    return _native.HostFunction(entry.address, name, params, device_type), entry


def device_present() -> bool:
    """Whether a call reaches a device. Other modules' skipif conditions call it outside this
    module's fixture, so pywave's classes are bound again after the probe."""
    _native.set_exceptions(ArgumentError, DeviceError, local_table())
    f, e = make((scalar("x", "i32"),), name="probe")
    try:
        f(1)
    except DeviceError:
        return False
    finally:
        _bind_pywave_exceptions()
    return True


needs_device = pytest.mark.skipif("not device_present()", reason="no GPU device answers")

_streams: dict[int, int] = {}


def device_stream(ordinal: int = 0) -> int:
    """A stream handle that stream= accepts on CUDA device `ordinal`: a stream created there
    through libwavert when the device answers (stream= is then checked with the driver), else
    an arbitrary aligned value (never checked: the call fails with "no device" first)."""
    if ordinal not in _streams:
        from pywave import runtime

        lib = ctypes.CDLL(runtime.LIBRARY)
        lib.wavert_device_get.argtypes = [ctypes.c_int32, ctypes.c_int32,
                                          ctypes.POINTER(ctypes.c_void_p)]
        lib.wavert_stream_create.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        device, stream = ctypes.c_void_p(), ctypes.c_void_p()
        if lib.wavert_device_get(kDLCUDA, ordinal, ctypes.byref(device)) == 0 and \
                lib.wavert_stream_create(device, ctypes.byref(stream)) == 0:
            _streams[ordinal] = stream.value  # kept for the process
        else:
            _streams[ordinal] = 0x7F00DE00 + 8 * ordinal
    return _streams[ordinal]


# ------------------------------------------------------------------------------------------
# Construction
# ------------------------------------------------------------------------------------------
def test_construction_and_attributes():
    f, e = make()
    assert f.name == "f"
    assert f.params == K0
    assert f.device_type == kDLCUDA
    assert repr(f) == "<pywave._native.HostFunction f(a: memref<?xf32>, s: f32) device=cuda>"
    g, _ = make((memref("b", (6, 8, 1), (D, 4), flags=_native.MEMREF_STRIDED,
                        strides=(D, 1), offset=D), scalar("n", "index")), name="g",
                device_type=kDLROCM)
    assert repr(g) == ("<pywave._native.HostFunction g(b: memref<?x4xi1, strided<[?, 1], "
                       "offset: ?>>, n: index) device=rocm>")
    with pytest.raises(AttributeError):
        f.name = "x"
    with pytest.raises(AttributeError):
        f.params = ()


@pytest.mark.parametrize(
    "args, exc",
    [
        ((0, "f", K0, kDLCUDA), ValueError),  # null entry
        (("x", "f", K0, kDLCUDA), TypeError),
        ((1, "f", K0, 7), ValueError),  # device type (kDLVulkan; kDLCPU: a host program's)
        ((1, "f", 5, kDLCUDA), TypeError),  # params not a sequence
        ((1, "f", "ab", kDLCUDA), TypeError),
        ((1, "f", (("scalar", "a", "f32"),), kDLCUDA), TypeError),  # a tuple, not an object
        ((1, "f", (param(name="a", kind="tensor"),), kDLCUDA), ValueError),
        ((1, "f", (scalar("a", "f128"),), kDLCUDA), ValueError),
        ((1, "f", (without(scalar("a", "f32"), "scalar"),), kDLCUDA), TypeError),
        ((1, "f", (without(memref("a"), "sizes"),), kDLCUDA), TypeError),
        ((1, "f", (param(name=3, kind="scalar", scalar="f32"),), kDLCUDA), TypeError),
        ((1, "f", (memref("a", dtype=(2, 32)),), kDLCUDA), TypeError),
        ((1, "f", (memref("a", sizes=(-5,)),), kDLCUDA), ValueError),
        ((1, "f", (memref("a", sizes=[D]),), kDLCUDA), TypeError),
        ((1, "f", (memref("a", strides=(1, 1)),), kDLCUDA), ValueError),
        ((1, "f", (memref("a", flags=_native.MEMREF_STRIDED),), kDLCUDA), ValueError),
        ((1, "f", (memref("a", flags=8),), kDLCUDA), ValueError),
        ((1, "f", (memref("a", dtype=(2, 0, 1)),), kDLCUDA), ValueError),
        ((1, "f", (memref("a", dtype=(2, 32, 1.5)),), kDLCUDA), TypeError),
        ((1, "f", (scalar("a", "i8"), scalar("a", "i8")), kDLCUDA), ValueError),  # duplicate
    ],
)
def test_construction_validation(args, exc):
    with pytest.raises(exc):
        _native.HostFunction(*args)


@pytest.mark.parametrize(
    "p, message",
    [
        (without(memref("a"), "written"), r"params\[0\] has no field 'written'"),
        (memref("a", dtype=(2, 32, "x")), r"parameter 'a': dtype lanes must be an int"),
        (memref("a", dtype=(2, 0, 1)), r"parameter 'a': field 'dtype' is not a DLPack dtype"),
        (memref("a", sizes=[D]), r"parameter 'a': field 'sizes' must be a tuple"),
        (memref("a", strides=(1, 1)), r"parameter 'a': field 'strides' must be None"),
        (memref("a", flags=8), r"parameter 'a': field 'flags' has unknown bits 8"),
        (scalar("k", "u8"), r"parameter 'k': field 'scalar' must be one of"),
        (param(name="k", kind=None), r"parameter 'k': field 'kind' must be"),
    ],
)
def test_construction_errors_name_the_field(p, message):
    with pytest.raises((TypeError, ValueError), match=message):
        _native.HostFunction(1, "f", (p,), kDLCUDA)


def test_params_any_sequence_kept_as_tuple():
    f, _ = make(list(K0))
    assert f.params == K0 and type(f.params) is tuple


def test_set_exceptions_validates():
    with pytest.raises(TypeError):
        _native.set_exceptions(ValueError)
    with pytest.raises(TypeError):
        _native.set_exceptions(1, 2, {})
    with pytest.raises(TypeError):
        _native.set_exceptions(ValueError, RuntimeError)  # the status table is required
    with pytest.raises(TypeError):
        _native.set_exceptions(ValueError, RuntimeError, {1: "not a class"})


# ------------------------------------------------------------------------------------------
# Argument count, keywords, non-tensors
# ------------------------------------------------------------------------------------------
def test_argument_count():
    f, _ = make()
    with pytest.raises(ArgumentError, match=r"^f\(\) takes 2 arguments \(a, s\), got 3$"):
        f(1, 2, 3)
    with pytest.raises(ArgumentError, match=r"takes 2 arguments \(a, s\), got 0"):
        f()
    g, _ = make((scalar("k", "i8"),), name="g")
    with pytest.raises(ArgumentError, match=r"g\(\) takes 1 argument \(k\), got 2"):
        g(1, 2)
    with pytest.raises(ArgumentError, match="unexpected keyword argument 'a'"):
        f(a=1, s=2.0)


def test_not_a_tensor():
    f, _ = make()
    with pytest.raises(ArgumentError,
                       match=r"argument 'a' \(#0\): expects a DLPack tensor \(memref<\?xf32>\), "
                             r"got int"):
        f(3, 1.0)
    with pytest.raises(ArgumentError, match=r"got list"):
        f([1.0, 2.0], 1.0)


def test_numpy_array_rejected_naming_argument_and_type():
    f, e = make()
    with pytest.raises(ArgumentError, match=r"^argument 'a' \(#0\) is on the CPU "
                                            r"\(numpy.ndarray\); pass a GPU tensor on cuda$"):
        f(np.zeros(4, np.float32), 1.0)
    assert e.calls == []


def test_torch_cpu_tensor_rejected_through_exchange_api():
    torch = pytest.importorskip("torch")
    f, _ = make()
    with pytest.raises(ArgumentError, match=r"argument 'a' \(#0\) is on the CPU \(torch.Tensor\)"):
        f(torch.zeros(4), 1.0)
    # A subclass uses the same exchange API.
    with pytest.raises(ArgumentError, match=r"is on the CPU \(torch.nn.parameter.Parameter\)"):
        f(torch.nn.Parameter(torch.zeros(4)), 1.0)


# ------------------------------------------------------------------------------------------
# Raw capsules
# ------------------------------------------------------------------------------------------
def test_cpu_capsule_rejected_without_consuming():
    f, _ = make()
    cap = np.zeros(4, np.float32).__dlpack__()
    for _ in range(2):  # not consumed: the same error twice, never "already consumed"
        with pytest.raises(ArgumentError, match=r"argument 'a' \(#0\) is on the CPU"):
            f(cap, 1.0)
    assert np.from_dlpack is not None  # numpy still owns it; freed with the capsule


@pytest.mark.parametrize("versioned", [True, False])
def test_capsule_consumed_once(versioned):
    f, _ = make()
    t = FakeTensor(versioned=versioned)
    cap = t.capsule()
    try:
        f(cap, 1.0)  # no GPU: DeviceError after every argument check; with one: runs
    except DeviceError:
        pass
    assert t.deleted == 1
    with pytest.raises(ArgumentError, match=r"argument 'a' \(#0\): DLPack capsule already "
                                            r"consumed; pass the array itself"):
        f(cap, 1.0)
    del cap
    gc.collect()
    assert t.deleted == 1


def test_same_capsule_twice_in_one_call():
    f, _ = make((memref("a"), memref("b")))
    t = FakeTensor()
    cap = t.capsule()
    with pytest.raises(ArgumentError, match=r"argument 'b' \(#1\): DLPack capsule already"):
        f(cap, cap)
    assert t.deleted == 1


def test_foreign_capsule_and_bad_version():
    f, _ = make()
    other = _capsule_new(ctypes.addressof(FakeTensor().mt), b"something", None)
    with pytest.raises(ArgumentError, match="got a PyCapsule named something"):
        f(other, 1.0)
    t = FakeTensor(major=2)
    with pytest.raises(ArgumentError, match=r"unsupported version 2\.3"):
        f(t.capsule(), 1.0)


def test_dtype_mismatch_names_argument():
    f, _ = make()
    t = FakeTensor(dtype=(0, 32, 1))  # int32 for memref<?xf32>
    with pytest.raises(ArgumentError, match=r"^argument 'a' \(#0\): "):
        f(t.capsule(), 1.0)
    assert t.deleted == 1


class MismatchError(ValueError):
    pass


def test_tensor_mismatch_class_comes_from_the_status_table():
    from pywave import runtime

    _native.set_exceptions(ArgumentError, DeviceError,
                           {**local_table(), runtime.INVALID_ARGUMENT: MismatchError})
    f, _ = make()
    t = FakeTensor(dtype=(0, 32, 1))
    with pytest.raises(MismatchError, match=r"^argument 'a' \(#0\): dtype mismatch"):
        f(t.capsule(), 1.0)
    assert t.deleted == 1


def test_unsupported_memref_is_the_tables_device_error_naming_the_argument():
    # libwavert says UNSUPPORTED for a static offset of 4-bit elements that is not a whole
    # byte; the one table (pywave.runtime.STATUS_ERRORS) makes that a DeviceError.
    f, _ = make((memref("q", dtype=(0, 4, 1), flags=2, strides=(1,), offset=1),))
    t = FakeTensor(dtype=(0, 4, 1))
    with pytest.raises(DeviceError, match=r"^argument 'q' \(#0\): static offset 1 of 4-bit "
                                          r"elements is not a whole byte"):
        f(t.capsule())
    assert t.deleted == 1


# ------------------------------------------------------------------------------------------
# The DLPack protocol
# ------------------------------------------------------------------------------------------
def _call(f, *args, **kw):
    try:
        f(*args, **kw)
    except DeviceError:
        pass


def test_protocol_asks_for_versioned_capsule_on_the_default_stream():
    f, _ = make()
    p = Producer()
    _call(f, p, 2.0)
    assert p.calls == [{"stream": 1, "max_version": (1, 3)}]
    assert p.tensor.deleted == 1
    assert all(not c.__repr__().startswith('<capsule object "dltensor') for c in p.capsules)


def test_protocol_rocm_default_stream_is_zero():
    f, _ = make(device_type=kDLROCM)
    p = Producer(device=(kDLROCM, 0), tensor=FakeTensor(device=(kDLROCM, 0)))
    _call(f, p, 2.0)
    assert p.calls == [{"stream": 0, "max_version": (1, 3)}]


def test_legacy_producer_without_max_version():
    f, _ = make()
    p = Producer(legacy=True, versioned=False)
    _call(f, p, 2.0)
    assert p.calls == [{"stream": 1, "max_version": (1, 3)}, {"stream": 1}]
    assert p.tensor.deleted == 1


def test_producer_refusing_the_stream_gets_none():
    f, _ = make()
    p = Producer(refuse_stream=True)
    _call(f, p, 2.0, stream=device_stream())
    assert p.calls[0] == {"stream": device_stream(), "max_version": (1, 3)}
    assert p.calls[-1] in ({"max_version": (1, 3)}, {})
    assert p.tensor.deleted == 1


class TorchLikeProducer(Producer):
    """Refuses the per-thread default stream as torch does (BufferError for 2)."""

    def __dlpack__(self, **kw):
        if kw.get("stream") == 2:
            self.calls.append(kw)
            raise BufferError("per-thread default stream is not supported.")
        return super().__dlpack__(**kw)


class NumpyLikeProducer(Producer):
    """Accepts only stream=None, raising RuntimeError otherwise as NumPy does."""

    def __dlpack__(self, **kw):
        if kw.get("stream") is not None:
            self.calls.append(kw)
            raise RuntimeError("NumPy only supports stream=None.")
        return super().__dlpack__(**kw)


def test_torch_like_producer_refusing_per_thread_stream_falls_back_to_none():
    f, _ = make()
    p = TorchLikeProducer()
    _call(f, p, 2.0, stream=2)
    assert p.calls == [{"stream": 2, "max_version": (1, 3)}, {"max_version": (1, 3)}]
    assert p.tensor.deleted == 1
    q = TorchLikeProducer()  # the legacy default (1) is accepted: asked once
    _call(f, q, 2.0)
    assert q.calls == [{"stream": 1, "max_version": (1, 3)}]


@pytest.mark.parametrize("stream", [None, 0, 2, "created"])
def test_numpy_like_producer_accepting_only_none_falls_back_to_none(stream):
    f, _ = make()
    p = NumpyLikeProducer()
    _call(f, p, 2.0, stream=device_stream() if stream == "created" else stream)
    assert p.calls[0]["stream"] not in (0, None)  # never 0: 1 is the legacy default
    assert p.calls[-1] == {"max_version": (1, 3)}
    assert len(p.calls) == 2 and p.tensor.deleted == 1


def test_producer_that_lies_about_its_device():
    f, _ = make()
    p = Producer(device=(kDLCUDA, 0), tensor=FakeTensor(device=(kDLCPU, 0)))
    with pytest.raises(ArgumentError, match=r"argument 'a' \(#0\) is on the CPU \(.*Producer\)"):
        f(p, 1.0)
    assert p.tensor.deleted == 1
    # The capsule it returned was consumed: passing it directly is refused.
    with pytest.raises(ArgumentError, match="already consumed"):
        f(p.capsules[0], 1.0)


def test_producer_errors_are_argument_errors():
    class Broken(Producer):
        def __dlpack__(self, **kw):
            raise RuntimeError("device lost")

    f, _ = make()
    with pytest.raises(ArgumentError, match=r"argument 'a' \(#0\): __dlpack__\(\) failed: "
                                            r"device lost") as ei:
        f(Broken(), 1.0)
    assert isinstance(ei.value.__cause__, RuntimeError)

    class NotCapsule(Producer):
        def __dlpack__(self, **kw):
            return 5

    with pytest.raises(ArgumentError, match=r"__dlpack__\(\) returned 5"):
        f(NotCapsule(), 1.0)


def test_read_only_tensor_written_is_refused():
    f, e = make()
    p = Producer(read_only=True)
    with pytest.raises(ArgumentError, match=r"argument 'a' \(#0\) is read-only"):
        f(p, 1.0)
    assert p.tensor.deleted == 1 and e.calls == []
    # Only read: accepted (DeviceError without a GPU comes after every argument check).
    g, _ = make((memref("a", written=False), scalar("s", "f32")))
    p = Producer(read_only=True)
    _call(g, p, 1.0)
    assert p.tensor.deleted == 1


def test_jax_array_written_is_refused_before_export():
    Jax = type("ArrayImpl", (Producer,), {"__module__": "jaxlib._jax"})
    f, _ = make()
    p = Jax()
    with pytest.raises(ArgumentError, match=r"argument 'a' \(#0\) is read-only \(JAX"):
        f(p, 1.0)
    assert p.calls == []
    g, _ = make((memref("a", written=False), scalar("s", "f32")))
    _call(g, p, 1.0)
    assert len(p.calls) == 1


def test_devices_must_agree():
    f, _ = make((memref("a"), memref("b"), scalar("s", "f32")))
    a = Producer(device=(kDLCUDA, 0), tensor=FakeTensor(device=(kDLCUDA, 0)))
    b = Producer(device=(kDLCUDA, 1), tensor=FakeTensor(device=(kDLCUDA, 1)))
    with pytest.raises(ArgumentError, match=r"^arguments 'a' \(cuda:0\) and 'b' \(cuda:1\) "
                                            r"are on different devices$"):
        f(a, b, 1.0)
    with pytest.raises(ArgumentError, match=r"^argument 'b' \(#1\) is on the CPU "
                                            r"\(numpy.ndarray\)"):
        f(a, np.zeros(4, np.float32), 1.0)
    host = FakeTensor(device=(3, 0))
    with pytest.raises(ArgumentError, match=r"argument 'a' \(#0\) is on cuda_host:0"):
        f(host.capsule(), a, 1.0)
    # Only the first protocol tensor's __dlpack_device__ is asked (it picks the stream); later
    # ones are checked from their exported DLTensor, so the two failing calls that reached
    # pass 2 exported `a` (and `b` once) before the mismatch was seen.
    assert len(a.calls) == 2 and len(b.calls) == 1


# ------------------------------------------------------------------------------------------
# The DLPack C exchange API (torch >= 2.10), faked with ctypes
# ------------------------------------------------------------------------------------------
class DLPackExchangeAPI(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("prev_api", ctypes.c_void_p),
        ("managed_tensor_allocator", ctypes.c_void_p),
        ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
        ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
        ("dltensor_from_py_object_no_sync", ctypes.c_void_p),
        ("current_work_stream", ctypes.c_void_p),
    ]


FROM_PY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))
WORK_STREAM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32,
                               ctypes.POINTER(ctypes.c_void_p))


def exchange_type(stream=0x77):
    """A tensor class exposing __dlpack_c_exchange_api__; instances wrap a FakeTensor."""
    log = {"from_py": 0, "stream_asked": []}

    def from_py(obj, out):
        log["from_py"] += 1
        if obj.fail:
            return -1  # a real API sets a Python error; this one does not
        ctypes.memmove(out, ctypes.addressof(obj.t.mt.dl_tensor), ctypes.sizeof(DLTensor))
        return 0

    def work_stream(device_type, device_id, out):
        log["stream_asked"].append((device_type, device_id))
        out[0] = stream
        return 0

    keep = [FROM_PY(from_py), WORK_STREAM(work_stream)]
    api = DLPackExchangeAPI()
    api.version = DLPackVersion(1, 3)
    api.dltensor_from_py_object_no_sync = ctypes.cast(keep[0], ctypes.c_void_p).value
    api.current_work_stream = ctypes.cast(keep[1], ctypes.c_void_p).value
    cap = _capsule_new(ctypes.addressof(api), b"dlpack_exchange_api", None)

    class ExTensor:
        _keep = (keep, api)
        __dlpack_c_exchange_api__ = cap

        def __init__(self, **kw):
            self.fail = kw.pop("fail", False)
            self.t = FakeTensor(**kw)

        def __dlpack__(self, **kw):  # never used: the exchange API wins
            raise AssertionError("__dlpack__ called")

        def __dlpack_device__(self):
            raise AssertionError("__dlpack_device__ called")

    return ExTensor, log


def test_exchange_api_route():
    Ex, log = exchange_type()
    f, _ = make((memref("a"), memref("b"), scalar("s", "f32")))
    a, b = Ex(device=(kDLCUDA, 1)), Ex(device=(kDLCUDA, 1))
    _call(f, a, b, 1.0)
    assert log["from_py"] == 2
    assert log["stream_asked"] == [(kDLCUDA, 1)]  # once per call, on the tensors' device
    # A protocol producer among them gets the exchange API's current stream.
    p = Producer(device=(kDLCUDA, 1), tensor=FakeTensor(device=(kDLCUDA, 1)))
    _call(f, a, p, 1.0)
    assert p.calls[0]["stream"] == 0x77
    # An explicit stream wins: the current stream is not asked for.
    log["stream_asked"].clear()
    p.calls.clear()
    _call(f, a, p, 1.0, stream=device_stream(1))
    assert log["stream_asked"] == [] and p.calls[0]["stream"] == device_stream(1)


def test_exchange_api_errors():
    Ex, log = exchange_type()
    f, _ = make((memref("a"), memref("b"), scalar("s", "f32")))
    with pytest.raises(ArgumentError, match=r"argument 'b' \(#1\) is on the CPU \(.*ExTensor\)"):
        f(Ex(), Ex(device=(kDLCPU, 0)), 1.0)
    with pytest.raises(ArgumentError, match=r"arguments 'a' \(cuda:0\) and 'b' \(cuda:2\)"):
        f(Ex(), Ex(device=(kDLCUDA, 2)), 1.0)
    with pytest.raises(ArgumentError, match=r"^argument 'a' \(#0\): "):
        f(Ex(fail=True), Ex(), 1.0)
    with pytest.raises(ArgumentError, match=r"^argument 'b' \(#1\): "):
        f(Ex(), Ex(dtype=(2, 16, 1)), 1.0)


# ------------------------------------------------------------------------------------------
# Streams
# ------------------------------------------------------------------------------------------
class CudaStreamProtocol:
    def __init__(self, h):
        self.h = h

    def __cuda_stream__(self):
        return (0, self.h)


class TorchLikeStream:
    def __init__(self, h):
        self.cuda_stream = h


class CupyLikeStream:
    def __init__(self, h):
        self.ptr = h


@pytest.mark.parametrize(
    "stream, seen",
    [
        (None, 1),
        (0, 1),  # 0 = the legacy default stream = DLPack 1
        (2, 2),
        ("created", "created"),
        (CudaStreamProtocol, "created"),
        (TorchLikeStream, "created"),
        (CupyLikeStream, "created"),
        (CupyLikeStream(0), 1),
    ],
)
def test_stream_reaches_the_producer(stream, seen):
    if isinstance(stream, type):
        stream = stream(device_stream())
    elif stream == "created":
        stream = device_stream()
    f, _ = make()
    p = Producer()
    _call(f, p, 1.0, stream=stream)
    assert p.calls[0]["stream"] == (device_stream() if seen == "created" else seen)


@pytest.mark.parametrize("stream", ["x", -1, 1.5, True, 2**70, CudaStreamProtocol("h"),
                                    TorchLikeStream(None), object()])
def test_bad_stream(stream):
    f, _ = make()
    p = Producer()
    with pytest.raises(ArgumentError, match="argument 'stream'"):
        f(p, 1.0, stream=stream)
    assert p.calls == []


class _Raises:
    def __init__(self, exc):
        self.exc = exc

    def __call__(self, *_):
        raise self.exc


class OddCudaStream:
    """__cuda_stream__ returning `value` (raising it when it is an exception)."""

    def __init__(self, value):
        self.value = value

    def __cuda_stream__(self):
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value


class GetattrRaises:
    def __init__(self, exc):
        self.exc = exc

    def __getattr__(self, name):
        raise self.exc


class PtrProperty:
    @property
    def ptr(self):
        raise RuntimeError("ptr is gone")


_ODD_STREAMS = {
    "cuda_stream_raises": lambda: OddCudaStream(RuntimeError("boom")),
    "cuda_stream_str": lambda: OddCudaStream("x"),
    "cuda_stream_1_tuple": lambda: OddCudaStream((0,)),
    "cuda_stream_negative": lambda: OddCudaStream((0, -1)),
    "cuda_stream_2**70": lambda: OddCudaStream((0, 2**70)),
    "cuda_stream_float": lambda: OddCudaStream((0, 1.5)),
    "cuda_stream_none": lambda: OddCudaStream(None),
    "cuda_stream_3_tuple": lambda: OddCudaStream((0, 1, 2)),
    "cuda_stream_bool": lambda: OddCudaStream((0, True)),
    "getattr_keyerror": lambda: GetattrRaises(KeyError("k")),
    "getattr_recursion": lambda: GetattrRaises(RecursionError("deep")),
    "ptr_property_raises": PtrProperty,
    "cuda_stream_attr_negative": lambda: TorchLikeStream(-8),
    "ptr_2**64": lambda: CupyLikeStream(2**64),
    "numpy_int": lambda: np.int64(1),
    "complex": lambda: 1j,
    "bytes": lambda: b"\x00" * 8,
    "list": lambda: [0],
    "tuple": lambda: (0, 0),
    "-2**63": lambda: -(2**63),
    "2**64": lambda: 2**64,
}


@pytest.mark.parametrize("stream", list(_ODD_STREAMS))
def test_odd_stream_objects_are_argument_errors(stream):
    f, e = make()
    p = Producer()
    with pytest.raises(ArgumentError, match="argument 'stream'"):
        f(p, 1.0, stream=_ODD_STREAMS[stream]())
    assert p.calls == [] and e.calls == []


_not_a_stream = (ctypes.c_uint64 * 8)()  # readable memory that is not a stream


@needs_device
@pytest.mark.parametrize("stream", [
    5, 8, 0x1234, 0x1238, 2**64 - 8, 2**64 - 1, 0x7F00DEA8, "buffer",
    CudaStreamProtocol(8), TorchLikeStream(0x1235), CupyLikeStream("buffer"),
])
def test_stream_handles_that_are_not_streams_are_refused(stream):
    address = ctypes.addressof(_not_a_stream)
    if stream == "buffer":
        stream = address
    elif isinstance(stream, CupyLikeStream):
        stream = CupyLikeStream(address)
    f, e = make()
    p = Producer()
    with pytest.raises(ArgumentError, match=r"f\(\): argument 'stream' on cuda device 0: .*"
                                            r"stream handle 0x[0-9a-f]+ is not a"):
        f(p, 1.0, stream=stream)
    assert p.calls == [] and e.calls == []  # neither the producer nor the driver saw it


@needs_device
def test_stream_of_another_device_is_refused():
    if device_stream(1) == 0x7F00DE08:
        pytest.skip("needs two devices")
    f, e = make()
    p = Producer()
    with pytest.raises(ArgumentError, match="argument 'stream' on cuda device 0: .*device 0"):
        f(p, 1.0, stream=device_stream(1))
    assert e.calls == []
    f(Producer(), 1.0, stream=device_stream(0))
    assert len(e.calls) == 1


def test_cupy_current_stream_used_for_cupy_arrays():
    # In a subprocess: the lookup of cupy.cuda.get_current_stream is cached per process.
    code = textwrap.dedent(
        """
        import sys, types
        sys.path[:0] = %r
        cupy = types.ModuleType("cupy"); cuda = types.ModuleType("cupy.cuda")
        asked = []
        class S: ptr = 0x4242
        def get_current_stream(device_id=-1):
            asked.append(device_id); return S()
        cuda.get_current_stream = get_current_stream; cupy.cuda = cuda
        sys.modules["cupy"] = cupy; sys.modules["cupy.cuda"] = cuda
        import test_args as t
        from pywave import _native
        _native.set_exceptions(t.ArgumentError, t.DeviceError, t.local_table())
        Arr = type("ndarray", (t.Producer,), {"__module__": "cupy._core.core"})
        f, _ = t.make()
        p = Arr(tensor=t.FakeTensor(device=(2, 0)))
        t._call(f, p, 1.0)
        assert p.calls[0]["stream"] == 0x4242, p.calls
        assert asked == [0], asked
        q = t.Producer()  # not CuPy: legacy default
        t._call(f, q, 1.0)
        assert q.calls[0]["stream"] == 1, q.calls
        print("ok")
        """
        % (sys.path,)
    )
    import os

    env = dict(os.environ)
    here = os.path.dirname(__file__)
    env["PYTHONPATH"] = os.pathsep.join([here] + [x for x in sys.path if x])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=here)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# ------------------------------------------------------------------------------------------
# Scalars
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kind, value, message",
    [
        ("i8", 200, r"200 is out of range for i8 \[-128, 127\]"),
        ("i8", -129, r"-129 is out of range for i8"),
        ("i16", 40000, r"40000 is out of range for i16 \[-32768, 32767\]"),
        ("i32", 2**31, r"2147483648 is out of range for i32"),
        ("i64", 2**63, r".* is out of range for i64"),
        ("index", -(2**63) - 1, r".* is out of range for index"),
        ("i1", 2, r"2 is out of range for i1 \[0, 1\]"),
        ("i1", 1.0, r"expects a bool for i1, got float"),
        ("f32", 1e300, r"1e\+300 is out of range for f32"),
        ("f32", 10**400, r".* is out of range for f32"),
        ("f16", 70000.0, r"70000.0 is out of range for f16"),
        ("f16", 65520.0, r"65520.0 is out of range for f16"),
        ("bf16", 1e39, r".* is out of range for bf16"),
        ("i32", 2.5, r"expects an integer for i32, got float \(2.5\)"),
        ("i32", 2.0, r"expects an integer for i32, got float"),
        ("i8", np.float32(1.0), r"expects an integer for i8"),
        ("f32", "1.0", r"expects a number for f32, got str"),
        ("f64", None, r"expects a number for f64, got NoneType"),
    ],
)
def test_scalar_range_errors(kind, value, message):
    f, e = make((memref("a"), scalar("x", "f64"), scalar("k", kind)))
    p = Producer()
    with pytest.raises(ArgumentError, match=r"^argument 'k' \(#2\): " + message):
        f(p, 1.0, value)
    assert p.calls == [] and e.calls == []
    with pytest.raises(ArgumentError, match=message):
        _native._pack_scalar(kind, value)


@pytest.mark.parametrize(
    "kind, value, word",
    [
        ("i1", True, 1),
        ("i1", False, 0),
        ("i1", 1, 1),
        ("i1", np.bool_(True), 1),
        ("i8", -3, 0xFD),
        ("i8", 127, 0x7F),
        ("i8", np.int8(-128), 0x80),
        ("i16", -2, 0xFFFE),
        ("i32", np.int64(-1), 0xFFFFFFFF),
        ("i64", -1, 2**64 - 1),
        ("index", 2**63 - 1, 2**63 - 1),
        ("i32", True, 1),
        ("f32", 2.0, 0x40000000),
        ("f32", 3, 0x40400000),
        ("f32", np.float32(0.1), int(np.float32(0.1).view(np.uint32))),
        ("f32", float("inf"), 0x7F800000),
        ("f32", float("-inf"), 0xFF800000),
        ("f64", 0.1, int(np.float64(0.1).view(np.uint64))),
        ("f64", np.float16(1.5), int(np.float64(1.5).view(np.uint64))),
        ("f16", 1.5, 0x3E00),
        ("f16", 65504.0, 0x7BFF),
        ("f16", 65519.99, 0x7BFF),
        ("f16", -0.0, 0x8000),
        ("f16", float("inf"), 0x7C00),
        ("f16", 2.0**-24, 0x0001),
        ("f16", 2.0**-25, 0x0000),  # tie to even
        ("f16", 1.5 * 2.0**-25, 0x0001),
        ("bf16", 1.5, 0x3FC0),
        ("bf16", -2.0, 0xC000),
        ("bf16", 0.0078125, 0x3C00),
        ("bf16", 1.0 + 2.0**-8, 0x3F80),  # tie to even (down)
        ("bf16", 1.0 + 3 * 2.0**-8, 0x3F82),  # tie to even (up)
    ],
)
def test_scalar_words(kind, value, word):
    assert _native._pack_scalar(kind, value) == word


def test_nan_stays_nan():
    assert _native._pack_scalar("f16", float("nan")) & 0x7FFF > 0x7C00
    assert _native._pack_scalar("bf16", float("nan")) & 0x7FFF > 0x7F80
    assert _native._pack_scalar("f32", float("nan")) & 0x7FFFFFFF > 0x7F800000


def test_f16_matches_numpy_rounding():
    rng = np.random.default_rng(0)
    values = np.concatenate([
        rng.standard_normal(4000) * 10.0 ** rng.integers(-9, 5, 4000),
        (np.arange(-2048, 2048) + 0.5) * 2.0**-24,  # subnormal ties
        np.arange(1024, 4096) + 0.5,  # normal ties in [1024, 4096) (quantum 1 or 2)
    ])
    values = values[np.abs(values) < 65504]
    expected = values.astype(np.float16).view(np.uint16)
    got = np.array([_native._pack_scalar("f16", float(v)) for v in values], np.uint16)
    bad = np.nonzero(got != expected)[0]
    assert bad.size == 0, [(values[i], hex(got[i]), hex(expected[i])) for i in bad[:5]]


def _bf16_reference(x: float) -> int:
    """Round-to-nearest-even through exact integer arithmetic on the f64 bits (normal range)."""
    import fractions
    import math

    if x == 0:
        return 0x8000 if math.copysign(1, x) < 0 else 0
    sign = 0x8000 if x < 0 else 0
    m, e = math.frexp(abs(x))  # abs(x) = m * 2^e, m in [0.5, 1)
    q = fractions.Fraction(m) * 2**8  # 8 significant bits
    n = int(q)
    rem = q - n
    if rem > fractions.Fraction(1, 2) or (rem == fractions.Fraction(1, 2) and n & 1):
        n += 1
    if n == 256:
        n, e = 128, e + 1
    return sign | ((e - 1 + 127) << 7) | (n & 0x7F)


def test_bf16_matches_reference_rounding():
    rng = np.random.default_rng(1)
    values = rng.standard_normal(3000) * 10.0 ** rng.integers(-30, 30, 3000)
    for v in values:
        assert _native._pack_scalar("bf16", float(v)) == _bf16_reference(float(v)), v


def test_scalar_only_function_without_device():
    f, e = make((scalar("k", "i8"), scalar("x", "f32")))
    try:
        f(1, 2.0)
    except DeviceError as exc:
        assert "f(): no cuda device 0" in str(exc)
        assert e.calls == []
    else:
        assert e.calls[0][:2] == [1, 0x40000000]


# ------------------------------------------------------------------------------------------
# With a device: the slots the entry receives
# ------------------------------------------------------------------------------------------
@needs_device
def test_slots_layout_with_device():
    params = (memref("x"), memref("y", dtype=(2, 64, 1), sizes=(D, 3), written=True),
              scalar("a", "f32"), scalar("b", "f64"), scalar("k", "i8"), scalar("m", "i16"),
              scalar("flag", "i1"), scalar("h", "f16"))
    e = Entry(5 + 7 + 6)
    f, _ = make(params, entry=e)
    x = FakeTensor(shape=(5,), data=0x1000)
    y = FakeTensor(shape=(2, 3), dtype=(2, 64, 1), data=0x2000)
    f(x.capsule(), Producer(y), 2.0, 0.1, -3, 300, True, np.float16(1.5))
    (s,) = e.calls
    assert s[0:5] == [0x1000, 0x1000, 0, 5, 1]
    assert s[5:12] == [0x2000, 0x2000, 0, 2, 3, 3, 1]
    assert s[12:] == [0x40000000, int(np.float64(0.1).view(np.uint64)), 0xFD, 300, 1, 0x3E00]
    assert x.deleted == 1 and y.deleted == 1


@needs_device
def test_large_signature_uses_heap_slots():
    n = _native.STACK_SLOTS + 10
    params = tuple(scalar(f"v{i}", "i32") for i in range(n))
    e = Entry(n)
    f, _ = make(params, entry=e)
    f(*range(n))
    assert e.calls == [list(range(n))]
    k = _native.STACK_TENSORS + 8  # more tensors than the stack array
    params = tuple(memref(f"t{i}") for i in range(k))
    e = Entry(5 * k)
    f, _ = make(params, entry=e)
    ts = [FakeTensor(data=0x1000 * (i + 1)) for i in range(k)]
    f(*[t.capsule() for t in ts])
    assert [e.calls[0][5 * i] for i in range(k)] == [0x1000 * (i + 1) for i in range(k)]
    assert all(t.deleted == 1 for t in ts)


# ------------------------------------------------------------------------------------------
# No leaks on error paths
# ------------------------------------------------------------------------------------------
def test_error_paths_do_not_leak():
    import tracemalloc

    f, _ = make((memref("a", written=True), scalar("k", "i8")))
    arr = np.zeros(4, np.float32)
    t = FakeTensor(read_only=True)
    p = Producer(tensor=t)

    def round_():
        for bad in ((arr, 1), (3, 1), (p, 1), (p, 300)):
            try:
                f(*bad)
            except ArgumentError:
                pass
        try:
            f(p, 1, stream="x")
        except ArgumentError:
            pass
        p.capsules.clear()
        p.calls.clear()

    for _ in range(200):
        round_()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(5000):
        round_()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert after - before < 64 * 1024, after - before
    assert t.deleted == 5200  # one export per round reaches the read-only check


def test_cupy_unsigned_negative_stride_is_read_as_cupy_means_it():
    # CuPy exports stride -1 of a float32 view as (2^64 - 4) // 4 (unsigned division).
    wrapped = (2 ** 64 - 4) // 4
    strided = memref("a", sizes=(D,), flags=_native.MEMREF_STRIDED, strides=(D,), offset=D)
    f, entry = make((strided,))
    other = Producer(shape=(10,), strides=(wrapped,))
    with pytest.raises(ArgumentError, match=r"argument 'a' \(#0\).*byte extent overflows"):
        f(other)
    Cupy = type("ndarray", (Producer,), {"__module__": "cupy._core.core"})
    _call(f, Cupy(shape=(10,), strides=(wrapped,)))
    if entry.calls:   # a device (or the driver stand-in) answered: stride word is -1
        assert entry.calls[-1][4] == 2 ** 64 - 1
