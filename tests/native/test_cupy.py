"""CuPy arrays read in place by pywave._native (issue 15, item 1): no __dlpack__ call, the
memref words the entry receives, every check kept, and the DLPack fallback.

Without a GPU: the fake CuPy of fake_cupy.py (both ways of reading: CuPy >= 14.3's C API and
the object layout of CuPy 8..14.2) on the driver stand-in, each scenario in a subprocess
(pywave remembers what it found of CuPy for the process). With a GPU (`gpu` marker): real
CuPy arrays against the values they hold.
"""

from __future__ import annotations

import textwrap

import pytest

from conftest import run_to_pass


PRELUDE = """
import numpy as np
import fake_cupy
import test_args as t
from pywave import _native
_native.set_exceptions(t.ArgumentError, t.DeviceError, t.local_table())
D = _native.DYNAMIC
STRIDED = dict(flags=_native.MEMREF_STRIDED, offset=D)
def raises(match, f, *args, **kw):
    import re
    try:
        f(*args, **kw)
    except t.ArgumentError as e:
        assert re.search(match, str(e)), str(e)
        return
    raise AssertionError("no ArgumentError")
def words(w):
    return [x - 2**64 if x >= 2**63 else x for x in w]
"""


def run(code: str) -> None:
    run_to_pass(PRELUDE + textwrap.dedent(code) + "\nprint('PASS')")


ROUTES = ["api", "layout"]


@pytest.mark.parametrize("route", ROUTES)
def test_read_in_place_gives_the_descriptor_without_dlpack(route):
    run(f"""
    cp = fake_cupy.install({route!r})
    e = t.Entry(15)
    f, _ = t.make((t.memref("a"), t.memref("b"), t.memref("c", written=True)), entry=e)
    a, b, c = (cp.ndarray((7,), ptr=0x1000 * (k + 1)) for k in range(3))
    f(a, b, c)
    f(a, b, c)
    assert e.calls[-1] == [0x1000, 0x1000, 0, 7, 1, 0x2000, 0x2000, 0, 7, 1,
                           0x3000, 0x3000, 0, 7, 1], e.calls
    assert a.calls == b.calls == c.calls == []          # no __dlpack__
    # CuPy's current stream of the arrays' device, once per call
    want = [("api", 0)] * 2 if {route!r} == "api" else [0, 0]
    assert cp.stream_asked == want, cp.stream_asked
    """)


@pytest.mark.parametrize("route", ROUTES)
def test_strides_in_bytes_become_signed_element_strides(route):
    run(f"""
    cp = fake_cupy.install({route!r})
    e = t.Entry(7)
    f, _ = t.make((t.memref("a", dtype=(2, 64, 1), sizes=(D, D), strides=(D, D), **STRIDED),),
                  entry=e)
    # a non-contiguous view: every other column of a 4x6 float64 matrix, reversed rows
    v = cp.ndarray((4, 3), dtype="float64", strides=(-48, 16), ptr=0x9000)
    f(v)
    assert words(e.calls[-1]) == [0x9000, 0x9000, 0, 4, 3, -6, 2], e.calls
    g, _ = t.make((t.memref("a"),))
    raises(r"argument 'a' \\(#0\\): CuPy array stride 6 bytes in dimension 0 is not a multiple "
           r"of its item size 4 bytes", g, cp.ndarray((3,), strides=(6,)))
    raises(r"argument 'a' \\(#0\\).*layout mismatch", g, cp.ndarray((3,), strides=(8,)))
    """)


@pytest.mark.parametrize("route", ROUTES)
def test_dtypes_empty_and_zero_dim(route):
    run(f"""
    cp = fake_cupy.install({route!r})
    cases = [("bool", (6, 8, 1)), ("int8", (0, 8, 1)), ("uint16", (1, 16, 1)),
             ("int32", (0, 32, 1)), ("uint64", (1, 64, 1)), ("float16", (2, 16, 1)),
             ("float32", (2, 32, 1)), ("float64", (2, 64, 1)), ("complex64", (5, 64, 1)),
             ("complex128", (5, 128, 1))]
    for name, dl in cases:
        e = t.Entry(5)
        f, _ = t.make((t.memref("a", dtype=dl),), entry=e)
        a = cp.ndarray((2,), dtype=name)
        f(a)
        assert e.calls == [[0x10000, 0x10000, 0, 2, 1]] and a.calls == [], (name, e.calls)
        other = (2, 32, 1) if dl != (2, 32, 1) else (2, 64, 1)
        g, _ = t.make((t.memref("a", dtype=other),))
        raises(r"argument 'a' \\(#0\\): dtype mismatch", g, a)
    e = t.Entry(5)
    f, _ = t.make((t.memref("a"),), entry=e)
    f(cp.ndarray((0,), ptr=0))                      # empty: NULL data is fine
    assert e.calls == [[0, 0, 0, 0, 1]], e.calls
    e = t.Entry(3)
    f, _ = t.make((t.memref("s", sizes=()),), entry=e)
    f(cp.ndarray((), ptr=0x5000))                   # rank 0
    assert e.calls == [[0x5000, 0x5000, 0]], e.calls
    g, _ = t.make((t.memref("a", sizes=(4,)),))
    raises(r"argument 'a' \\(#0\\): shape mismatch", g, cp.ndarray((3,)))
    raises(r"argument 'a' \\(#0\\): rank mismatch", g, cp.ndarray((2, 2)))
    """)


@pytest.mark.parametrize("route", ROUTES)
def test_device_checks_kept(route):
    run(f"""
    cp = fake_cupy.install({route!r})
    f, _ = t.make((t.memref("a"), t.memref("b")))
    raises(r"arguments 'a' \\(cuda:0\\) and 'b' \\(cuda:1\\) are on different devices",
           f, cp.ndarray((2,)), cp.ndarray((2,), device=1))
    # a protocol producer on another device after a CuPy array
    raises(r"different devices", f, cp.ndarray((2,)),
           t.Producer(tensor=t.FakeTensor(device=(2, 1))))
    r, _ = t.make((t.memref("a"),), device_type=t.kDLROCM)
    raises(r"argument 'a' \\(#0\\) is on cuda:0", r, cp.ndarray((2,)))
    """)


@pytest.mark.parametrize("route", ROUTES)
def test_fallbacks_to_the_dlpack_protocol(route):
    run(f"""
    cp = fake_cupy.install({route!r})
    e = t.Entry(5)
    f, _ = t.make((t.memref("a"),), entry=e)
    # another stream than CuPy's current one: __dlpack__(stream=S) orders CuPy's work before S
    s = t.device_stream(0)
    a = cp.ndarray((3,))
    f(a, stream=s)
    assert [c["stream"] for c in a.calls] == [s] and e.calls[-1][3] == 3
    # an exchange-API tensor sets the stream: the CuPy array goes through __dlpack__ on it
    Ex, log = t.exchange_type(stream=0x77)
    g, _ = t.make((t.memref("x"), t.memref("a")))
    a = cp.ndarray((3,))
    g(Ex(), a)
    assert [c["stream"] for c in a.calls] == [0x77]
    # a dtype without a DLPack code: CuPy's export decides (here: refused)
    a = cp.ndarray((3,), dtype=[("x", "f4")])
    raises(r"argument 'a' \\(#0\\)", f, a)
    assert len(a.calls) == 1
    # a type from CuPy's namespace that is not an ndarray (cupyx's sparse matrices, ...)
    Other = type("csr_matrix", (cp.ndarray,), {{}})
    Other.__module__ = "cupyx.scipy.sparse"
    init = lambda self, shape: fake_cupy._fields(self, shape, "float32", None, 0x10000, 0)
    Unrelated = type("csr_matrix", (fake_cupy._Protocol,), {{"__init__": init}})
    Unrelated.__module__ = "cupyx.scipy.sparse"
    u = Unrelated((3,))
    f(u)
    assert len(u.calls) == 1
    o = Other((3,))                                 # a subclass is an ndarray: in place
    f(o)
    assert o.calls == []
    """)


def test_layout_that_disagrees_is_refused_for_the_type():
    run("""
    cp = fake_cupy.install("layout", lie=True)      # .size says one more than the layout
    e = t.Entry(5)
    f, _ = t.make((t.memref("a"),), entry=e)
    a = cp.ndarray((3,))
    f(a)
    f(a)
    assert len(a.calls) == 2 and e.calls[-1][3] == 3
    """)


def test_layout_array_without_memory_pointer_falls_back():
    run("""
    cp = fake_cupy.install("layout")
    f, _ = t.make((t.memref("a"),))
    f(cp.ndarray((3,)))                             # the type passes its check
    a = cp.ndarray((3,))
    fake_cupy.ArrayLayout.from_address(id(a)).data = id(None)   # as a bare _ndarray_base
    f(a)
    assert len(a.calls) == 1
    """)


@pytest.mark.parametrize("version", ["7.8.0", "14.3.0", "15.0.0", "not a version"])
def test_layout_only_for_the_versions_it_is_known_for(version):
    # without the C API, only CuPy 8..14.2 are read through the layout
    run(f"""
    cp = fake_cupy.install("layout", version={version!r})
    f, _ = t.make((t.memref("a"),))
    a = cp.ndarray((3,))
    f(a)
    assert len(a.calls) == 1
    """)


def test_without_cuda_runtime_module_everything_takes_the_protocol():
    run("""
    cp = fake_cupy.install("api")
    del cp.cuda.runtime
    f, _ = t.make((t.memref("a"),))
    a = cp.ndarray((3,))
    f(a)
    assert len(a.calls) == 1
    """)


def test_cuda_managed_memory_fits_a_cuda_function():
    run("""
    e = t.Entry(5)
    f, _ = t.make((t.memref("a"),), entry=e)
    f(t.FakeTensor(device=(13, 0), data=0x7000).capsule())
    assert e.calls[-1][:2] == [0x7000, 0x7000]
    r, _ = t.make((t.memref("a"),), device_type=t.kDLROCM)
    raises(r"is on cuda_managed:0", r, t.FakeTensor(device=(13, 0)).capsule())
    """)


# ------------------------------------------------------------------------------------------
# Real CuPy on a GPU
# ------------------------------------------------------------------------------------------
def _cupy():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no GPU")
    except Exception as e:  # noqa: BLE001 (no driver: skip)
        pytest.skip(f"no GPU: {e}")
    return cupy


COPY = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @copy(%a: memref<?xDT, strided<[?], offset: ?>>,
                   %b: memref<?xDT, strided<[?], offset: ?>>, %n: index) kernel {
      %i = gpu.thread_id x
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %x = memref.load %a[%i] : memref<?xDT, strided<[?], offset: ?>>
        memref.store %x, %b[%i] : memref<?xDT, strided<[?], offset: ?>>
      }
      gpu.return
    }
  }
  func.func @copy(%a: memref<?xDT, strided<[?], offset: ?>>,
                  %b: memref<?xDT, strided<[?], offset: ?>>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = memref.dim %a, %c0 : memref<?xDT, strided<[?], offset: ?>>
    gpu.launch_func @k::@copy blocks in (%c1, %c1, %c1) threads in (%n, %c1, %c1)
        args(%a : memref<?xDT, strided<[?], offset: ?>>,
             %b : memref<?xDT, strided<[?], offset: ?>>, %n : index)
    return
  }
}
"""

DTYPES = {"bool": "i1", "int8": "i8", "uint8": "i8", "int16": "i16", "int32": "i32",
          "uint32": "i32", "int64": "i64", "float16": "f16", "float32": "f32", "float64": "f64"}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(DTYPES))
def test_gpu_cupy_every_dtype_strided_and_reversed(name):
    cupy = _cupy()
    import numpy as np

    import pywave

    mod = pywave.compile(COPY.replace("DT", DTYPES[name]))
    rng = np.random.default_rng(0)
    src = cupy.asarray((rng.standard_normal(64) * 50).astype(name))
    cases = [(src[:32], cupy.zeros(32, name)),                    # contiguous
             (src[::3], cupy.zeros(22, name)),                    # strided view
             (src[::-1], cupy.zeros(64, name)),                   # negative stride
             (src[::-2], cupy.zeros(64, name)[::2]),              # both non-contiguous
             (src[:0], cupy.zeros(0, name))]                      # empty
    for a, b in cases:
        mod.copy(a, b)
        cupy.cuda.get_current_stream().synchronize()
        assert (cupy.asnumpy(b) == cupy.asnumpy(a)).all(), (name, a.strides)


@pytest.mark.gpu
def test_gpu_cupy_checks_and_current_stream():
    cupy = _cupy()
    import pywave

    mod = pywave.compile(COPY.replace("DT", "f32"))
    a = cupy.arange(8, dtype=cupy.float32)
    with pytest.raises(pywave.ArgumentError, match=r"argument 'a' \(#0\): dtype mismatch"):
        mod.copy(a.astype(cupy.float64), a)
    with pytest.raises(pywave.ArgumentError, match="rank mismatch"):
        mod.copy(a.reshape(2, 4), a)
    odd = cupy.ndarray((3,), cupy.float32, a.data + 2, strides=(6,))
    with pytest.raises(pywave.ArgumentError, match="not a multiple of its item size"):
        mod.copy(odd, a)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        b = cupy.zeros(8, cupy.float32)
        mod.copy(a, b)                                   # on CuPy's current stream s
        s.synchronize()
    assert (cupy.asnumpy(b) == cupy.asnumpy(a)).all()
    c = cupy.zeros(8, cupy.float32)
    mod.copy(a, c, stream=s.ptr)                         # another stream: through __dlpack__
    s.synchronize()
    assert (cupy.asnumpy(c) == cupy.asnumpy(a)).all()
