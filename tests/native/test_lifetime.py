"""Lifetimes of pywave._native.HostCode / HostFunction: a function keeps its code alive;
close() is safe from a call's own callbacks, from other threads during calls, and the GC
cannot free the code of a running call (issue 12, item 1).

The entries are ctypes callbacks (test_args.Entry); the release is a Python callable
that records when it ran. Tests whose entry must run need a device: a GPU, or the driver
stand-in (WAVERT_CUDA_LIBRARY=.../libfake_cuda.so, as CI runs this file); the closing checks
that stop a call before its launch need none.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import threading
import time

import pytest

from pywave import _native
from test_args import (ENTRY, ArgumentError, DeviceError, Entry, FakeTensor, Producer,
                              device_present, local_table, memref, scalar)

kDLCUDA = 2
needs_device = pytest.mark.skipif("not device_present()", reason="no GPU device answers")


@pytest.fixture(autouse=True)
def _exceptions():
    _native.set_exceptions(ArgumentError, DeviceError, local_table())
    yield
    try:
        import pywave
        from pywave import runtime

        _native.set_exceptions(pywave.ArgumentError, pywave.DeviceError, runtime.STATUS_ERRORS)
    except (ImportError, AttributeError):
        pass


class Release:
    """The release callable of a HostCode: counts its runs and the calls in flight then."""

    def __init__(self):
        self.runs = 0
        self.in_flight_at_run: list[int] = []
        self.code = None

    def __call__(self):
        self.runs += 1
        if self.code is not None:
            self.in_flight_at_run.append(self.code.in_flight)


def code_and_function(params, entry=None):
    release = Release()
    code = _native.HostCode(release)
    release.code = code
    entry = entry or Entry(16)
    f = _native.HostFunction(entry.address, "f", params, kDLCUDA, code=code)
    return code, f, release, entry


def _call(f, *args, **kw):
    """Call f; the outcome: "ok", "closed", or "nodevice"."""
    try:
        f(*args, **kw)
    except DeviceError:
        return "nodevice"
    except ArgumentError as exc:
        assert "f(): the compiled module is closed" in str(exc)
        return "closed"
    return "ok"


# ------------------------------------------------------------------------------------------
# HostCode itself
# ------------------------------------------------------------------------------------------
def test_close_without_calls_releases_once():
    code, f, release, _ = code_and_function((scalar("x", "i32"),))
    assert f.code is code and not code.closed and not code.released and code.in_flight == 0
    code.close()
    assert release.runs == 1 and code.closed and code.released
    code.close()
    assert release.runs == 1
    assert _call(f, 1) == "closed"


def test_release_error_raised_by_close_and_not_rerun():
    calls = []

    def release():
        calls.append(1)
        raise OSError("unload failed")

    code = _native.HostCode(release)
    with pytest.raises(OSError, match="unload failed"):
        code.close()
    code.close()
    assert calls == [1] and code.released


def test_function_keeps_its_code_alive():
    code, f, release, _ = code_and_function((scalar("x", "i32"),))
    release.code = None
    del code
    gc.collect()
    assert release.runs == 0 and not f.code.closed
    del f
    gc.collect()
    assert release.runs == 1  # the last reference went: released without close()


def test_cyclic_garbage_is_released():
    code, f, release, _ = code_and_function((scalar("x", "i32"),))
    release.code = None
    holder = [f]
    holder.append(holder)
    del code, f, holder
    gc.collect()
    assert release.runs == 1


def test_construction_checks_code():
    e = Entry(1)
    with pytest.raises(TypeError, match="code must be a HostCode"):
        _native.HostFunction(e.address, "f", (), kDLCUDA, code=object())
    with pytest.raises(TypeError, match="release must be callable"):
        _native.HostCode(3)
    assert _native.HostFunction(e.address, "f", (), kDLCUDA, code=None).code is None


# ------------------------------------------------------------------------------------------
# close() from inside the call's own callbacks: the call stops before the entry, the
# release runs once after the call left (never during it)
# ------------------------------------------------------------------------------------------
class ClosingIndex:
    def __init__(self, code, value=3):
        self.code, self.value, self.in_flight = code, value, None

    def __index__(self):
        self.in_flight = self.code.in_flight
        self.code.close()
        return self.value


class ClosingFloat(ClosingIndex):
    def __float__(self):
        self.in_flight = self.code.in_flight
        self.code.close()
        return 2.0


class ClosingProducer(Producer):
    def __init__(self, code, where, **kw):
        super().__init__(**kw)
        self.code, self.where = code, where

    def __dlpack_device__(self):
        if self.where == "__dlpack_device__":
            self.code.close()
        return super().__dlpack_device__()

    def __dlpack__(self, **kw):
        if self.where == "__dlpack__":
            self.code.close()
        return super().__dlpack__(**kw)


class ClosingStream:
    def __init__(self, code):
        self.code = code

    def __cuda_stream__(self):
        self.code.close()
        return (0, 0)


@pytest.mark.parametrize("repeat", range(3))
@pytest.mark.parametrize("where", ["__index__", "__float__", "__dlpack_device__", "__dlpack__",
                                   "__cuda_stream__"])
def test_close_inside_a_callback(where, repeat):
    params = (memref("a"), scalar("k", "i32"), scalar("x", "f32"))
    code, f, release, entry = code_and_function(params)
    k, x, stream = 1, 1.0, None
    if where == "__index__":
        k = ClosingIndex(code)
    elif where == "__float__":
        x = ClosingFloat(code)
    elif where == "__cuda_stream__":
        stream = ClosingStream(code)
    tensor = FakeTensor()
    p = (ClosingProducer(code, where, tensor=tensor) if where.startswith("__dlpack")
         else Producer(tensor=tensor))
    assert _call(f, p, k, x, stream=stream) == "closed"
    assert entry.calls == []
    assert release.runs == 1 and release.in_flight_at_run == [0]
    assert tensor.deleted == (1 if p.calls else 0)
    assert _call(f, Producer(), 1, 1.0) == "closed"
    assert release.runs == 1


@needs_device
def test_close_inside_a_deleter_after_the_entry_ran():
    code, f, release, entry = code_and_function((memref("a"), scalar("k", "i32"),
                                                 scalar("x", "f32")))
    tensor = FakeTensor()
    seen = []

    def delete(_ptr):
        seen.append((code.in_flight, release.runs))
        code.close()

    tensor._deleter = type(tensor._deleter)(delete)
    tensor.mt.deleter = tensor._deleter
    f(tensor.capsule(), 1, 1.0)
    assert len(entry.calls) == 1
    assert seen == [(1, 0)] and release.runs == 1 and release.in_flight_at_run == [0]


@needs_device
def test_nested_call_from_a_callback_counts_twice():
    code, f, release, entry = code_and_function((scalar("k", "i32"),))

    class Reenter:
        def __index__(self):
            f(7)             # runs the entry while the outer call is in flight
            code.close()     # deferred: two calls were in flight, one still is
            return 1

    assert _call(f, Reenter()) == "closed"
    assert entry.calls[0][0] == 7 and release.runs == 1 and release.in_flight_at_run == [0]


# ------------------------------------------------------------------------------------------
# Threads: close() while other threads are inside calls
# ------------------------------------------------------------------------------------------
@needs_device
@pytest.mark.parametrize("repeat", range(5))
def test_close_while_threads_are_inside_calls(repeat):
    threads_n = 8
    inside = threading.Barrier(threads_n + 1)
    state = {"released": False, "entry_after_release": 0, "entries": 0}
    lock = threading.Lock()

    def entry_fn(_slots):
        with lock:
            state["entries"] += 1
            if state["released"]:
                state["entry_after_release"] += 1
        if first_round.get(threading.get_ident()):
            first_round[threading.get_ident()] = False
            inside.wait()      # every worker is inside the entry when close() runs
            time.sleep(0.02)

    def release_fn():
        with lock:
            state["released"] = True
            state["in_flight"] = code.in_flight

    cb = ENTRY(entry_fn)
    code = _native.HostCode(release_fn)
    f = _native.HostFunction(ctypes.cast(cb, ctypes.c_void_p).value, "f",
                             (scalar("k", "i32"),), kDLCUDA, code=code)
    first_round: dict[int, bool] = {}
    outcomes: list[str] = []

    def worker():
        first_round[threading.get_ident()] = True
        for i in range(50):
            r = _call(f, i)
            outcomes.append(r)
            if r == "closed":
                break

    ts = [threading.Thread(target=worker) for _ in range(threads_n)]
    for t in ts:
        t.start()
    inside.wait()
    code.close()
    assert code.closed and not state["released"]  # deferred: 8 calls are in flight
    for t in ts:
        t.join()
    assert state["released"] and state["in_flight"] == 0
    assert state["entry_after_release"] == 0
    assert outcomes.count("closed") == threads_n and "nodevice" not in outcomes


@needs_device
@pytest.mark.parametrize("repeat", range(5))
def test_close_races_with_many_short_calls(repeat):
    code, f, release, entry = code_and_function((scalar("k", "i32"),))
    stop = threading.Event()
    errors: list[BaseException] = []

    def worker():
        try:
            while not stop.is_set():
                if _call(f, 1) == "closed":
                    return
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        ts = [threading.Thread(target=worker) for _ in range(8)]
        for t in ts:
            t.start()
        time.sleep(0.01 * (repeat + 1))
        code.close()
        stop.set()
        for t in ts:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    assert release.runs == 1 and release.in_flight_at_run == [0] and code.in_flight == 0


# ------------------------------------------------------------------------------------------
# The GC during a call
# ------------------------------------------------------------------------------------------
@needs_device
def test_gc_during_a_call_cannot_release_the_running_code():
    state = {}

    def entry_fn(_slots):
        state["released_in_entry"] = release.runs

    cb = ENTRY(entry_fn)
    release = Release()
    code = _native.HostCode(release)
    f = _native.HostFunction(ctypes.cast(cb, ctypes.c_void_p).value, "f",
                             (scalar("k", "i32"),), kDLCUDA, code=code)
    holder = [f, code]
    holder.append(holder)   # a cycle only the GC frees

    class DropEverything:
        def __index__(self):
            holder.clear()
            gc.collect()
            state["released_in_index"] = release.runs
            return 1

    g = f
    del f, code
    g(DropEverything())
    assert state == {"released_in_index": 0, "released_in_entry": 0}
    del g
    gc.collect()
    assert release.runs == 1
