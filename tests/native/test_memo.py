"""The descriptor memo of pywave._native (tensors.c): each memref parameter remembers the last
tensor layout it accepted and the descriptor words derived from it, and reuses them for a
tensor of the same dtype, shape and strides. These tests change a tensor in place between
calls (resize, restride, dtype view, new data pointer, byte offset) and check that every
change is seen: the descriptor follows it, or the call raises the check's ArgumentError.

They run in a subprocess on libwavert's driver stand-in (the entry runs and records its slots),
with tensors taking the DLPack exchange-API route (torch's), the protocol route and raw
capsules. Without the stand-in built they skip.
"""

from __future__ import annotations

import textwrap

import pytest

from conftest import run_to_pass


PRELUDE = """
import ctypes
import test_args as t
from pywave import _native
_native.set_exceptions(t.ArgumentError, t.DeviceError, t.local_table())
D = _native.DYNAMIC
STRIDED = _native.MEMREF_STRIDED
Ex, log = t.exchange_type(stream=0)

def raises(match, f, *args):
    import re
    try:
        f(*args)
    except t.ArgumentError as e:
        assert re.search(match, str(e)), str(e)
        return
    raise AssertionError("no ArgumentError")

def words(w):
    return [x - 2**64 if x >= 2**63 else x for x in w]

def set_shape(x, *shape):
    x.t._shape = (ctypes.c_int64 * len(shape))(*shape)
    x.t.mt.dl_tensor.shape = x.t._shape
    x.t.mt.dl_tensor.ndim = len(shape)

def set_strides(x, *strides):
    x.t._strides = (ctypes.c_int64 * len(strides))(*strides) if strides else None
    x.t.mt.dl_tensor.strides = x.t._strides
"""


def run(code: str) -> None:
    run_to_pass(PRELUDE + textwrap.dedent(code) + "\nprint('PASS')")


def test_shape_changed_in_place_is_seen():
    run("""
    e = t.Entry(5)
    f, _ = t.make((t.memref("a"),), entry=e)
    a = Ex(shape=(4,), data=0x1000)
    f(a)
    f(a)
    set_shape(a, 9)               # resize_ in place: same object, same data pointer
    f(a)
    assert e.calls == [[0x1000, 0x1000, 0, 4, 1]] * 2 + [[0x1000, 0x1000, 0, 9, 1]], e.calls
    """)


def test_static_size_checked_after_a_resize():
    run("""
    e = t.Entry(5)
    f, _ = t.make((t.memref("a", sizes=(4,)),), entry=e)
    a = Ex(shape=(4,))
    f(a)
    set_shape(a, 5)
    raises(r"argument 'a' \\(#0\\): shape mismatch in dimension 0: expected \\[4\\], got \\[5\\]",
           f, a)
    set_shape(a, 4)
    f(a)
    assert len(e.calls) == 2
    """)


def test_rank_change_is_seen():
    run("""
    e = t.Entry(5)
    f, _ = t.make((t.memref("a"),), entry=e)
    a = Ex(shape=(6,))
    f(a)
    set_shape(a, 2, 3)            # view_/unsqueeze_ in place
    raises(r"argument 'a' \\(#0\\): rank mismatch: expected 1, got 2", f, a)
    """)


def test_strides_changed_in_place_are_seen():
    run("""
    e = t.Entry(7)
    f, _ = t.make((t.memref("a", sizes=(D, D)),), entry=e)
    a = Ex(shape=(2, 3), data=0x2000)
    f(a)                          # NULL strides: compact
    set_strides(a, 3, 1)          # the same layout, spelled out
    f(a)
    set_strides(a, 1, 2)          # as_strided_ / t_(): no longer row-major
    raises(r"argument 'a' \\(#0\\): layout mismatch in dimension 0", f, a)
    set_strides(a)
    f(a)
    assert e.calls == [[0x2000, 0x2000, 0, 2, 3, 3, 1]] * 3, e.calls
    """)


def test_strided_memref_follows_its_strides():
    run("""
    e = t.Entry(7)
    f, _ = t.make((t.memref("a", sizes=(D, D), strides=(D, D), flags=STRIDED, offset=D),),
                  entry=e)
    a = Ex(shape=(2, 3), strides=(3, 1), data=0x3000)
    f(a)
    set_strides(a, 1, 2)
    f(a)
    set_strides(a, -1, 2)
    f(a)
    assert [words(w) for w in e.calls] == [[0x3000, 0x3000, 0, 2, 3, 3, 1],
                                           [0x3000, 0x3000, 0, 2, 3, 1, 2],
                                           [0x3000, 0x3000, 0, 2, 3, -1, 2]], e.calls
    """)


def test_dtype_view_in_place_is_seen():
    run("""
    e = t.Entry(5)
    f, _ = t.make((t.memref("a"),), entry=e)          # float32
    a = Ex(shape=(4,))
    f(a)
    for dtype in [(0, 32, 1), (2, 16, 1), (2, 32, 2), (4, 32, 1)]:
        a.t.mt.dl_tensor.dtype = t.DLDataType(*dtype)  # .view(torch.int32) in place
        raises(r"argument 'a' \\(#0\\): dtype mismatch: expected float32", f, a)
    a.t.mt.dl_tensor.dtype = t.DLDataType(2, 32, 1)
    f(a)
    assert len(e.calls) == 2
    """)


def test_signless_memref_takes_either_signedness():
    run("""
    e = t.Entry(5)
    f, _ = t.make((t.memref("a", dtype=(0, 32, 1), flags=_native.MEMREF_SIGNLESS),), entry=e)
    a = Ex(shape=(4,), dtype=(0, 32, 1))
    f(a)
    a.t.mt.dl_tensor.dtype = t.DLDataType(1, 32, 1)
    f(a)
    a.t.mt.dl_tensor.dtype = t.DLDataType(2, 32, 1)
    raises(r"dtype mismatch", f, a)
    assert len(e.calls) == 2
    """)


def test_new_data_pointer_and_byte_offset_are_seen():
    run("""
    e = t.Entry(5)
    f, _ = t.make((t.memref("a"),), entry=e)
    a = Ex(shape=(4,), data=0x1000)
    f(a)
    a.t.mt.dl_tensor.data = 0x8000                    # set_() onto another storage
    f(a)
    a.t.mt.dl_tensor.byte_offset = 16
    f(a)
    assert e.calls == [[0x1000, 0x1000, 0, 4, 1], [0x8000, 0x8000, 0, 4, 1],
                       [0x8000, 0x8010, 0, 4, 1]], e.calls
    a.t.mt.dl_tensor.data = None
    raises(r"tensor data is NULL but the tensor is not empty", f, a)
    a.t.mt.dl_tensor.data = 2**64 - 8
    raises(r"overflows a 64-bit address", f, a)
    """)


def test_static_offset_with_a_new_data_pointer():
    run("""
    e = t.Entry(5)
    f, _ = t.make((t.memref("a", strides=(1,), flags=STRIDED, offset=2),), entry=e)
    a = Ex(shape=(4,), strides=(1,), data=0x1000)
    f(a)
    a.t.mt.dl_tensor.data = 0x2000
    f(a)
    assert e.calls == [[0x1000, 0x1000 - 8, 2, 4, 1], [0x2000, 0x2000 - 8, 2, 4, 1]], e.calls
    """)


def test_empty_tensor_then_null_data_with_elements():
    run("""
    e = t.Entry(5)
    f, _ = t.make((t.memref("a"),), entry=e)
    a = Ex(shape=(0,), data=None)
    f(a)
    f(a)
    set_shape(a, 3)                                   # resize_ from empty, no storage yet
    raises(r"tensor data is NULL but the tensor is not empty", f, a)
    assert e.calls == [[0, 0, 0, 0, 1]] * 2, e.calls
    """)


def test_each_parameter_and_function_has_its_own_memo():
    run("""
    e = t.Entry(10)
    f, _ = t.make((t.memref("a"), t.memref("b", sizes=(4,))), entry=e)
    g_entry = t.Entry(5)
    g, _ = t.make((t.memref("a", sizes=(4,)),), entry=g_entry)
    x, y = Ex(shape=(7,), data=0x1000), Ex(shape=(4,), data=0x2000)
    f(x, y)
    raises(r"argument 'b' \\(#1\\): shape mismatch", f, y, x)  # b's memo is of (4,) only
    raises(r"argument 'a' \\(#0\\): shape mismatch", g, x)
    f(y, y)
    assert e.calls == [[0x1000, 0x1000, 0, 7, 1, 0x2000, 0x2000, 0, 4, 1],
                       [0x2000, 0x2000, 0, 4, 1, 0x2000, 0x2000, 0, 4, 1]], e.calls
    """)


@pytest.mark.parametrize("route", ["protocol", "capsule"])
def test_other_routes_see_changes_too(route):
    run(f"""
    e = t.Entry(5)
    f, _ = t.make((t.memref("a", sizes=(4,)),), entry=e)
    fake = t.FakeTensor(shape=(4,), data=0x1000)
    arg = (lambda: t.Producer(tensor=fake)) if {route!r} == "protocol" else fake.capsule
    f(arg())
    fake._shape[0] = 5
    raises(r"shape mismatch in dimension 0: expected \\[4\\], got \\[5\\]", f, arg())
    fake._shape[0] = 4
    fake.mt.dl_tensor.dtype = t.DLDataType(2, 64, 1)
    raises(r"dtype mismatch", f, arg())
    fake.mt.dl_tensor.dtype = t.DLDataType(2, 32, 1)
    fake.mt.dl_tensor.data = 0x4000
    f(arg())
    assert e.calls == [[0x1000, 0x1000, 0, 4, 1], [0x4000, 0x4000, 0, 4, 1]], e.calls
    """)


def test_exchange_view_is_read_before_other_arguments_run_python_code():
    """The exchange API's view is borrowed: its descriptor is filled in the first pass, so a
    later argument's Python code (here __index__) changing the tensor cannot make the call
    use a half-read view; the call sees the tensor as it was when it was read."""
    run("""
    e = t.Entry(6)
    f, _ = t.make((t.memref("a"), t.scalar("n", "index")), entry=e)
    a = Ex(shape=(4,), data=0x1000)

    class Index:
        def __index__(self):
            a.t._shape[0] = 8                 # resize_ in place: the same shape array
            a.t.mt.dl_tensor.data = 0x9000
            return 3

    f(a, Index())
    f(a, 3)
    assert e.calls == [[0x1000, 0x1000, 0, 4, 1, 3], [0x9000, 0x9000, 0, 8, 1, 3]], e.calls
    """)
