"""Streams and events of the CPU device (``target="cpu"``): work on one stream runs in order,
work on different streams concurrently, an event orders two streams, a failure is reported
where the CUDA driver reports an asynchronous one (libwavert/src/backend_cpu.c, "streams and
events"; docs/cpu-device.md). No GPU."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pywave

#: Kernels: ``meet`` is upstream MLIR's concurrent-kernels.mlir kernel (add 1 to a counter,
#: spin until it is 2); ``slow_write`` spins ``spin`` atomic adds on a scratch word, then
#: block b writes b + 1 (or adds 1 with ``add``); ``copy`` copies element b; ``check`` asserts
#: its global id is below a limit and writes it.
KERNELS = r"""
  gpu.module @k {
    gpu.func @meet(%m: memref<i32>) kernel {
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %c2 = arith.constant 2 : i32
      %old = memref.atomic_rmw addi %c1, %m[] : (i32, memref<i32>) -> i32
      scf.while : () -> () {
        %v = memref.atomic_rmw addi %c0, %m[] : (i32, memref<i32>) -> i32
        %go = arith.cmpi slt, %v, %c2 : i32
        scf.condition(%go)
      } do {
        scf.yield
      }
      gpu.return
    }
    gpu.func @slow_write(%buf: memref<?xi32>, %scratch: memref<i32>, %spin: index,
                         %add: i32) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %one = arith.constant 1 : i32
      scf.for %i = %c0 to %spin step %c1 {
        %o = memref.atomic_rmw addi %one, %scratch[] : (i32, memref<i32>) -> i32
      }
      %b = gpu.block_id x
      %bi = arith.index_cast %b : index to i32
      %old = memref.load %buf[%b] : memref<?xi32>
      %plus = arith.addi %old, %one : i32
      %own = arith.addi %bi, %one : i32
      %zero = arith.constant 0 : i32
      %is_add = arith.cmpi ne, %add, %zero : i32
      %v = arith.select %is_add, %plus, %own : i32
      memref.store %v, %buf[%b] : memref<?xi32>
      gpu.return
    }
    gpu.func @copy(%src: memref<?xi32>, %dst: memref<?xi32>) kernel {
      %b = gpu.block_id x
      %v = memref.load %src[%b] : memref<?xi32>
      memref.store %v, %dst[%b] : memref<?xi32>
      gpu.return
    }
    gpu.func @check(%out: memref<?xi32>, %limit: index) kernel {
      %g = gpu.global_id x
      %ok = arith.cmpi ult, %g, %limit : index
      cf.assert %ok, "gid below limit"
      %v = arith.index_cast %g : index to i32
      memref.store %v, %out[%g] : memref<?xi32>
      gpu.return
    }
  }
"""

MODULE = r"""
module attributes {gpu.container_module} {
""" + KERNELS + r"""
  // Upstream's concurrent-kernels.mlir: two kernels on two streams that wait for each other.
  func.func @meet_twice(%m: memref<i32>) {
    %c1 = arith.constant 1 : index
    %s0 = gpu.wait async
    %s1 = gpu.wait async
    %t0 = gpu.launch_func async [%s0] @k::@meet blocks in (%c1, %c1, %c1)
        threads in (%c1, %c1, %c1) args(%m : memref<i32>)
    %t1 = gpu.launch_func async [%s1] @k::@meet blocks in (%c1, %c1, %c1)
        threads in (%c1, %c1, %c1) args(%m : memref<i32>)
    gpu.wait [%t0, %t1]
    return
  }

  // Stream B waits for an event recorded on A after the kernel that writes buf.
  func.func @ordered(%buf: memref<?xi32>, %out: memref<?xi32>, %scratch: memref<i32>,
                     %spin: index) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %zero = arith.constant 0 : i32
    %n = memref.dim %buf, %c0 : memref<?xi32>
    %a = gpu.wait async
    %ta = gpu.launch_func async [%a] @k::@slow_write blocks in (%n, %c1, %c1)
        threads in (%c1, %c1, %c1)
        args(%buf : memref<?xi32>, %scratch : memref<i32>, %spin : index, %zero : i32)
    // Two dependencies with work (one would be A's stream itself; one without work is
    // folded away): a new stream B waiting for events recorded on A and on C.
    %c = gpu.wait async
    %tc = gpu.memset async [%c] %out, %zero : memref<?xi32>, i32
    %b = gpu.wait async [%ta, %tc]
    %tb = gpu.launch_func async [%b] @k::@copy blocks in (%n, %c1, %c1)
        threads in (%c1, %c1, %c1) args(%buf : memref<?xi32>, %out : memref<?xi32>)
    gpu.wait [%tb]
    return
  }

  // On one stream: fill buf with v, add 1 to each element (slowly), copy buf into out.
  func.func @fill_add_copy(%buf: memref<?xi32>, %out: memref<?xi32>, %scratch: memref<i32>,
                           %spin: index, %v: i32) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %one = arith.constant 1 : i32
    %n = memref.dim %buf, %c0 : memref<?xi32>
    %a = gpu.wait async
    %t1 = gpu.memset async [%a] %buf, %v : memref<?xi32>, i32
    %t2 = gpu.launch_func async [%t1] @k::@slow_write blocks in (%n, %c1, %c1)
        threads in (%c1, %c1, %c1)
        args(%buf : memref<?xi32>, %scratch : memref<i32>, %spin : index, %one : i32)
    %t3 = gpu.memcpy async [%t2] %out, %buf : memref<?xi32>, memref<?xi32>
    gpu.wait [%t3]
    return
  }

  // A kernel whose cf.assert fails for gid >= limit, then a fill of out with 7, on a stream.
  func.func @check_then_fill(%out: memref<?xi32>, %limit: index) {
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %seven = arith.constant 7 : i32
    %a = gpu.wait async
    %t1 = gpu.launch_func async [%a] @k::@check blocks in (%c2, %c1, %c1)
        threads in (%c4, %c1, %c1) args(%out : memref<?xi32>, %limit : index)
    %t2 = gpu.memset async [%t1] %out, %seven : memref<?xi32>, i32
    gpu.wait [%t2]
    return
  }

  // The same kernel on a stream that the host code never synchronises.
  func.func @check_unsynchronised(%out: memref<?xi32>, %limit: index) {
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %a = gpu.wait async
    %t1 = gpu.launch_func async [%a] @k::@check blocks in (%c2, %c1, %c1)
        threads in (%c4, %c1, %c1) args(%out : memref<?xi32>, %limit : index)
    return
  }
}
"""

#: Spin iterations of slow_write: some milliseconds, far longer than starting the next item.
SPIN = 200_000


@pytest.fixture(scope="module")
def mod():
    return pywave.compile(MODULE, target="cpu", disk_cache=False)


def _run_script(script: str, env_extra: dict, tmp_path, timeout: float = 120):
    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=timeout)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_kernels_on_two_streams_wait_for_each_other(tmp_path, threads):
    """Upstream's concurrent-kernels pattern: each kernel adds 1 to a counter and spins until
    it is 2, so the first returns only if the second runs at the same time. Each stream's
    worker runs its kernel, whatever the pool size (one pool thread included). A fresh
    process with a watchdog: a regression fails instead of hanging the suite."""
    script = f"""
        import numpy as np, pywave
        mod = pywave.compile({MODULE!r}, target="cpu", disk_cache=False)
        for _ in range(20):
            m = np.zeros((), np.int32)
            mod.meet_twice(m)
            assert int(m) == 2, int(m)
        print("PASS")
    """
    try:
        done = _run_script(script, {"WAVERT_CPU_THREADS": threads}, tmp_path, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the two kernels on two streams did not both run: the call hung (120 s)")
    assert done.returncode == 0 and done.stdout.strip() == "PASS", done.stdout + done.stderr


def test_an_event_orders_two_streams(mod):
    """Stream B waits for an event recorded on stream A after a slow kernel that writes buf;
    B's kernel reads buf: it sees every value the slow kernel wrote (without the wait it
    would start while A's kernel still spins, B's worker being a thread of its own)."""
    n = 8
    for _ in range(3):
        buf, out = np.zeros(n, np.int32), np.full(n, -1, np.int32)
        scratch = np.zeros((), np.int32)
        mod.ordered(buf, out, scratch, SPIN)
        assert buf.tolist() == list(range(1, n + 1))
        assert out.tolist() == list(range(1, n + 1))
        assert int(scratch) == n * SPIN


def test_memset_kernel_memcpy_run_in_stream_order(mod):
    """A fill, a slow kernel adding 1 to each element and a copy, queued on one stream, run
    in that order: the copy holds v + 1 everywhere."""
    n = 6
    for v in (5, -3):
        buf, out = np.zeros(n, np.int32), np.zeros(n, np.int32)
        scratch = np.zeros((), np.int32)
        mod.fill_add_copy(buf, out, scratch, SPIN, v)
        assert buf.tolist() == [v + 1] * n
        assert out.tolist() == [v + 1] * n


def test_a_failing_kernel_on_a_stream_is_reported_at_the_synchronize(mod, capfd):
    """A cf.assert failing in a kernel queued on a stream is a KernelFaultError raised by the
    call (its gpu.wait: mgpuStreamSynchronize), naming the stream and the assertion; the
    stream's later work (the fill) is skipped, as on a GPU after a fault. The module and the
    device go on: the next call runs the kernel and the fill."""
    out = np.full(8, -1, np.int32)
    capfd.readouterr()
    with pytest.raises(pywave.KernelFaultError,
                       match=r"work queued on CPU stream 0x[0-9a-f]+: CPU launch: device-side "
                             r"assert triggered in 3 threads .* assertion `gid below limit` "
                             r"failed"):
        mod.check_then_fill(out, 5)
    assert "Assertion `gid below limit` failed." in capfd.readouterr().err
    assert out.tolist() == [0, 1, 2, 3, 4, -1, -1, -1]
    mod.check_then_fill(out, 8)
    assert out.tolist() == [7] * 8


def test_a_failure_on_a_stream_never_synchronised_is_the_calls(mod, capfd):
    """Host code that returns without synchronising its stream: the call on the CPU device
    waits for the work it queued (pywave has no synchronize for the CPU device) and raises
    its failure; a passing run leaves every value written when the call returns."""
    out = np.full(8, -1, np.int32)
    with pytest.raises(pywave.KernelFaultError, match="assertion `gid below limit` failed"):
        mod.check_unsynchronised(out, 6)
    capfd.readouterr()
    out[:] = -1
    mod.check_unsynchronised(out, 8)
    assert out.tolist() == list(range(8))


def _libwavert() -> ctypes.CDLL:
    lib = ctypes.CDLL(os.path.join(os.path.dirname(pywave.__file__), "libwavert.so"))
    P = ctypes.c_void_p
    lib.wavert_device_get.argtypes = [ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(P)]
    lib.wavert_stream_create.argtypes = [P, ctypes.POINTER(P)]
    lib.wavert_stream_release.argtypes = [P, P]
    lib.wavert_stream_synchronize.argtypes = [P, P]
    lib.wavert_stream_wait_stream.argtypes = [P, P, P]
    lib.wavert_device_synchronize.argtypes = [P]
    lib.wavert_memory_set.argtypes = [P, P, ctypes.c_uint32, ctypes.c_size_t, ctypes.c_size_t,
                                      P]
    lib.wavert_memory_copy.argtypes = [P, P, P, ctypes.c_size_t, P]
    lib.wavert_last_error.restype = ctypes.c_char_p
    return lib


LIBWAVERT_PRELUDE = """
    import ctypes, os, numpy as np, pywave
    lib = ctypes.CDLL(os.path.join(os.path.dirname(pywave.__file__), "libwavert.so"))
    P = ctypes.c_void_p
    lib.wavert_device_get.argtypes = [ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(P)]
    lib.wavert_stream_create.argtypes = [P, ctypes.POINTER(P)]
    lib.wavert_stream_release.argtypes = [P, P]
    lib.wavert_memory_set.argtypes = [P, P, ctypes.c_uint32, ctypes.c_size_t, ctypes.c_size_t, P]
    lib.wavert_memory_copy.argtypes = [P, P, P, ctypes.c_size_t, P]
    dev, stream = P(), P()
    assert lib.wavert_device_get(1, 0, ctypes.byref(dev)) == 0
    assert lib.wavert_stream_create(dev, ctypes.byref(stream)) == 0
"""


def test_stream_destroyed_with_pending_work_runs_it():
    """wavert_stream_release of a CPU stream with work queued returns at once (as
    cuStreamDestroy) and the work still runs, in order: fills and copies of 16 MiB queued on
    one stream, the stream released, then the device synchronised. Another stream waits for
    a third one's fill (wavert_stream_wait_stream: event record + wait) before its copy."""
    lib = _libwavert()
    dev, stream, late, other = (ctypes.c_void_p() for _ in range(4))
    assert lib.wavert_device_get(1, 0, ctypes.byref(dev)) == 0
    for s in (stream, late, other):
        assert lib.wavert_stream_create(dev, ctypes.byref(s)) == 0
    n = 1 << 22
    a, b, c = np.zeros(n, np.uint32), np.zeros(n, np.uint32), np.zeros(n, np.uint32)
    pa, pb, pc = (x.ctypes.data for x in (a, b, c))
    for value in range(1, 9):
        assert lib.wavert_memory_set(dev, pa, value, 4, n, stream) == 0
        assert lib.wavert_memory_copy(dev, pb, pa, 4 * n, stream) == 0
    assert lib.wavert_stream_release(dev, stream) == 0
    assert lib.wavert_memory_set(dev, pc, 42, 4, n, other) == 0
    assert lib.wavert_stream_wait_stream(dev, late, other) == 0
    assert lib.wavert_memory_copy(dev, pa, pc, 4 * n, late) == 0
    # `late`'s copy waits for `other`'s fill; `stream`'s own items may still be queued.
    assert lib.wavert_stream_synchronize(dev, late) == 0, lib.wavert_last_error()
    assert lib.wavert_device_synchronize(dev) == 0, lib.wavert_last_error()
    assert (b == 8).all() and (c == 42).all()
    assert (a == 42).all() or (a == 8).all()  # the two streams are not ordered with each other
    for s in (late, other):
        assert lib.wavert_stream_release(dev, s) == 0
    # A released stream is no longer a stream: queueing on it is refused, not a crash.
    assert lib.wavert_memory_set(dev, pa, 1, 4, n, stream) == 1  # INVALID_ARGUMENT
    assert b"not a live stream" in lib.wavert_last_error()


def test_process_exit_with_queued_work_does_not_crash(tmp_path):
    """A process that exits with work still queued on a CPU stream (never synchronised,
    never released: 64 fills and copies of 64 MiB) exits normally at once: the workers stop
    after their current item."""
    done = _run_script(textwrap.dedent(LIBWAVERT_PRELUDE) + textwrap.dedent("""
        # Device memory (never freed): NumPy's arrays would be freed under the queued work
        # at interpreter exit, a use after free on any device.
        lib.wavert_memory_alloc.argtypes = [P, ctypes.c_size_t, ctypes.POINTER(P)]
        n = 1 << 24
        a, b = P(), P()
        assert lib.wavert_memory_alloc(dev, 4 * n, ctypes.byref(a)) == 0
        assert lib.wavert_memory_alloc(dev, 4 * n, ctypes.byref(b)) == 0
        for value in range(64):
            assert lib.wavert_memory_set(dev, a, value, 4, n, stream) == 0
            assert lib.wavert_memory_copy(dev, b, a, 4 * n, stream) == 0
        print("queued")
    """), {}, tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "queued" and done.stderr == ""
