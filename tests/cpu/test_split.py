"""Kernels with barriers run as thread loops on the CPU device (pywave/kernels/cpu_split.py):
each result checked against NumPy, and whether the kernel was split (its image exports a
block entry) or kept its fibers, as the module's rules say."""

from __future__ import annotations

import ctypes
import os
import tempfile

import numpy as np
import pytest

import pywave

HOST_1D = """
  func.func @run({args}) {{
    %c1 = arith.constant 1 : index
    %cb = arith.constant {blocks} : index
    %ct = arith.constant {threads} : index
    gpu.launch_func @k::@kern blocks in (%cb, %c1, %c1) threads in (%ct, %c1, %c1)
        args({call})
    return
  }}
"""


def program(kernel: str, args: list[str], *, blocks: int, threads: int) -> str:
    """A module with gpu.module @k holding ``kernel`` (named @kern, taking ``args``: memref
    types) and @run launching it on a 1-D grid."""
    sig = ", ".join(f"%a{i}: {t}" for i, t in enumerate(args))
    call = ", ".join(f"%a{i} : {t}" for i, t in enumerate(args))
    return ("module attributes {gpu.container_module} {\n  gpu.module @k {\n" + kernel +
            "\n  }\n" + HOST_1D.format(args=sig, call=call, blocks=blocks, threads=threads) +
            "}\n")


def split(mod, kernel: str = "kern") -> bool:
    """Whether ``kernel``'s image runs whole blocks (exports ``__wavert_cpu_block_<kernel>``),
    read from the ELF image's dynamic symbols."""
    (binary,) = mod.binaries
    with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as fh:
        fh.write(binary.data)
    try:
        lib = ctypes.CDLL(fh.name)
        return hasattr(lib, f"__wavert_cpu_block_{kernel}")
    finally:
        os.unlink(fh.name)


# Hillis-Steele inclusive scan of each 128-element block: the step is the iv of an scf.for
# holding two barriers; the value read before the second barrier is stored after it (a value
# crossing a barrier: kept per thread), the global index is recomputed after it.
SCAN = """
    gpu.func @kern(%a: memref<?xi32>, %out: memref<?xi32>)
        workgroup(%s: memref<128xi32, #gpu.address_space<workgroup>>) kernel {
      %t = gpu.thread_id x
      %g = gpu.global_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c7 = arith.constant 7 : index
      %zero = arith.constant 0 : i32
      %v = memref.load %a[%g] : memref<?xi32>
      memref.store %v, %s[%t] : memref<128xi32, #gpu.address_space<workgroup>>
      gpu.barrier
      scf.for %k = %c0 to %c7 step %c1 {
        %off = arith.shli %c1, %k : index
        %ge = arith.cmpi uge, %t, %off : index
        %add = scf.if %ge -> (i32) {
          %j = arith.subi %t, %off : index
          %x = memref.load %s[%j] : memref<128xi32, #gpu.address_space<workgroup>>
          scf.yield %x : i32
        } else {
          scf.yield %zero : i32
        }
        %mine = memref.load %s[%t] : memref<128xi32, #gpu.address_space<workgroup>>
        gpu.barrier
        %sum = arith.addi %mine, %add : i32
        memref.store %sum, %s[%t] : memref<128xi32, #gpu.address_space<workgroup>>
        gpu.barrier
      }
      %r = memref.load %s[%t] : memref<128xi32, #gpu.address_space<workgroup>>
      memref.store %r, %out[%g] : memref<?xi32>
      gpu.return
    }
"""


def test_scan_with_barriers_in_a_loop_is_split_and_exact():
    blocks = 6
    a = np.random.default_rng(3).integers(-50, 50, blocks * 128).astype(np.int32)
    out = np.zeros_like(a)
    with pywave.compile(program(SCAN, ["memref<?xi32>"] * 2, blocks=blocks, threads=128),
                        target="cpu", disk_cache=False) as mod:
        mod.run(a, out)
        assert split(mod)
    np.testing.assert_array_equal(out, np.cumsum(a.reshape(blocks, 128), axis=1).ravel())


# Reversal of each block through workgroup memory: vector<4xf32> and i1 values and a
# private alloca's contents live across the barrier (the alloca: memref, so it is not).
REVERSE = """
    gpu.func @kern(%a: memref<?xf32>, %out: memref<?xf32>)
        workgroup(%s: memref<64xf32, #gpu.address_space<workgroup>>) kernel {
      %t = gpu.thread_id x
      %b = gpu.block_id x
      %c0 = arith.constant 0 : index
      %c4 = arith.constant 4 : index
      %c63 = arith.constant 63 : index
      %c64 = arith.constant 64 : index
      %base = arith.muli %b, %c64 : index
      %g = arith.addi %base, %t : index
      %x = memref.load %a[%g] : memref<?xf32>
      %vec = vector.broadcast %x : f32 to vector<4xf32>
      %odd = arith.andi %t, %c4 : index
      %flag = arith.cmpi ne, %odd, %c0 : index
      memref.store %x, %s[%t] : memref<64xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %r = arith.subi %c63, %t : index
      %y = memref.load %s[%r] : memref<64xf32, #gpu.address_space<workgroup>>
      %e = vector.extract %vec[2] : f32 from vector<4xf32>
      %neg = arith.negf %e : f32
      %pick = arith.select %flag, %neg, %e : f32
      %z = arith.addf %y, %pick : f32
      memref.store %z, %out[%g] : memref<?xf32>
      gpu.return
    }
"""


def test_vector_and_i1_values_cross_a_barrier():
    blocks = 5
    a = np.arange(blocks * 64, dtype=np.float32)
    out = np.zeros_like(a)
    with pywave.compile(program(REVERSE, ["memref<?xf32>"] * 2, blocks=blocks, threads=64),
                        target="cpu", disk_cache=False) as mod:
        mod.run(a, out)
        assert split(mod)
    t = np.arange(64)
    rows = a.reshape(blocks, 64)
    mine = np.where(t & 4, -rows, rows)
    np.testing.assert_array_equal(out, (rows[:, ::-1] + mine).ravel())


# A 2-D block (8 x 4) with a private buffer used within one segment, an scf.if on the block
# id (uniform) holding a barrier, and an scf.while whose step is uniform.
TILE = """
    gpu.func @kern(%a: memref<?xi32>, %out: memref<?xi32>)
        workgroup(%s: memref<32xi32, #gpu.address_space<workgroup>>) kernel {
      %tx = gpu.thread_id x
      %ty = gpu.thread_id y
      %b = gpu.block_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c8 = arith.constant 8 : index
      %c16 = arith.constant 16 : index
      %c32 = arith.constant 32 : index
      %row = arith.muli %ty, %c8 : index
      %lin = arith.addi %row, %tx : index
      %base = arith.muli %b, %c32 : index
      %g = arith.addi %base, %lin : index
      %tmp = memref.alloca() : memref<2xi32>
      %v = memref.load %a[%g] : memref<?xi32>
      memref.store %v, %tmp[%c0] : memref<2xi32>
      %v2 = arith.muli %v, %v : i32
      memref.store %v2, %tmp[%c1] : memref<2xi32>
      %p = memref.load %tmp[%c0] : memref<2xi32>
      %q = memref.load %tmp[%c1] : memref<2xi32>
      %pq = arith.addi %p, %q : i32
      memref.store %pq, %s[%lin] : memref<32xi32, #gpu.address_space<workgroup>>
      gpu.barrier
      %even = arith.remui %b, %c2 : index
      %is_even = arith.cmpi eq, %even, %c0 : index
      scf.if %is_even {
        %half = scf.while (%step = %c16) : (index) -> index {
          %more = arith.cmpi ugt, %step, %c0 : index
          scf.condition(%more) %step : index
        } do {
        ^bb0(%step: index):
          %lt = arith.cmpi ult, %lin, %step : index
          scf.if %lt {
            %o = arith.addi %lin, %step : index
            %x = memref.load %s[%lin] : memref<32xi32, #gpu.address_space<workgroup>>
            %y = memref.load %s[%o] : memref<32xi32, #gpu.address_space<workgroup>>
            %z = arith.addi %x, %y : i32
            memref.store %z, %s[%lin] : memref<32xi32, #gpu.address_space<workgroup>>
          }
          gpu.barrier
          %next = arith.shrui %step, %c1 : index
          scf.yield %next : index
        }
      }
      %r = memref.load %s[%lin] : memref<32xi32, #gpu.address_space<workgroup>>
      memref.store %r, %out[%g] : memref<?xi32>
      gpu.return
    }
"""

HOST_2D = """
  func.func @run(%a: memref<?xi32>, %out: memref<?xi32>) {
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c8 = arith.constant 8 : index
    %cb = arith.constant 4 : index
    gpu.launch_func @k::@kern blocks in (%cb, %c1, %c1) threads in (%c8, %c4, %c1)
        args(%a : memref<?xi32>, %out : memref<?xi32>)
    return
  }
"""


def _tile_expected(a: np.ndarray) -> np.ndarray:
    out = []
    for b, row in enumerate((a + a * a).reshape(4, 32)):
        s = row.copy()
        if b % 2 == 0:
            step = 16
            while step > 0:
                s[:step] += s[step:2 * step]
                step //= 2
        out.append(s)
    return np.concatenate(out)


def test_two_d_block_private_memory_and_uniform_if_and_while():
    text = ("module attributes {gpu.container_module} {\n  gpu.module @k {\n" + TILE +
            "\n  }\n" + HOST_2D + "}\n")
    a = np.random.default_rng(5).integers(-20, 20, 128).astype(np.int32)
    out = np.zeros_like(a)
    with pywave.compile(text, target="cpu", disk_cache=False) as mod:
        mod.run(a, out)
        assert split(mod)
    np.testing.assert_array_equal(out, _tile_expected(a))


# A barrier only the first 16 threads reach (undefined on a GPU): the kernel keeps its
# fibers, on which threads that returned no longer take part in a barrier.
PARTIAL = """
    gpu.func @kern(%a: memref<?xi32>, %out: memref<?xi32>) kernel {
      %t = gpu.thread_id x
      %c16 = arith.constant 16 : index
      %lt = arith.cmpi ult, %t, %c16 : index
      %v = memref.load %a[%t] : memref<?xi32>
      scf.if %lt {
        gpu.barrier
      }
      memref.store %v, %out[%t] : memref<?xi32>
      gpu.return
    }
"""

# A loop bound each thread reads for itself: kept as fibers.
LOADED_BOUND = """
    gpu.func @kern(%a: memref<?xi32>, %out: memref<?xi32>) kernel {
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n32 = memref.load %a[%c0] : memref<?xi32>
      %n = arith.index_cast %n32 : i32 to index
      scf.for %i = %c0 to %n step %c1 {
        gpu.barrier
      }
      %v = memref.load %a[%t] : memref<?xi32>
      memref.store %v, %out[%t] : memref<?xi32>
      gpu.return
    }
"""

# A private buffer written before a barrier and read after it: a per-thread memref lives
# across the barrier, so the kernel keeps its fibers.
PRIVATE_ACROSS = """
    gpu.func @kern(%a: memref<?xi32>, %out: memref<?xi32>) kernel {
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %tmp = memref.alloca() : memref<1xi32>
      %v = memref.load %a[%t] : memref<?xi32>
      memref.store %v, %tmp[%c0] : memref<1xi32>
      gpu.barrier
      %w = memref.load %tmp[%c0] : memref<1xi32>
      memref.store %w, %out[%t] : memref<?xi32>
      gpu.return
    }
"""


@pytest.mark.parametrize("kernel", [PARTIAL, LOADED_BOUND, PRIVATE_ACROSS],
                         ids=["partial-barrier", "loaded-bound", "private-across"])
def test_kernels_outside_the_rules_keep_their_fibers(kernel):
    a = np.arange(64, dtype=np.int32) + 3
    out = np.zeros_like(a)
    with pywave.compile(program(kernel, ["memref<?xi32>"] * 2, blocks=1, threads=64),
                        target="cpu", disk_cache=False) as mod:
        mod.run(a, out)
        assert not split(mod)
    np.testing.assert_array_equal(out, a)


def test_barrier_free_kernel_is_one_thread_loop():
    kernel = """
    gpu.func @kern(%a: memref<?xf32>, %out: memref<?xf32>) kernel {
      %g = gpu.global_id x
      %x = memref.load %a[%g] : memref<?xf32>
      %y = arith.mulf %x, %x : f32
      memref.store %y, %out[%g] : memref<?xf32>
      gpu.return
    }
"""
    a = np.linspace(-3, 3, 4 * 256, dtype=np.float32)
    out = np.zeros_like(a)
    with pywave.compile(program(kernel, ["memref<?xf32>"] * 2, blocks=4, threads=256),
                        target="cpu", disk_cache=False) as mod:
        mod.run(a, out)
        assert split(mod)
    np.testing.assert_array_equal(out, a * a)


def test_kernel_opt_level_0_keeps_the_fibers():
    blocks = 2
    a = np.arange(blocks * 128, dtype=np.int32) % 7
    out = np.zeros_like(a)
    with pywave.compile(program(SCAN, ["memref<?xi32>"] * 2, blocks=blocks, threads=128),
                        target="cpu", disk_cache=False,
                        lowering={"kernel_opt_level": 0}) as mod:
        mod.run(a, out)
        assert not split(mod)
    np.testing.assert_array_equal(out, np.cumsum(a.reshape(blocks, 128), axis=1).ravel())


# Found by the split fuzzer (tests/fuzz/split_fuzz.py).

# An i1 read from memory lives across the barrier: kept per thread, in an i8 array (the
# memref lowering aborted on a store into memref<1024xi1>).
I1_ACROSS = """
    gpu.func @kern(%a: memref<?xi32>, %out: memref<?xi32>) kernel {
      %t = gpu.thread_id x
      %zero = arith.constant 0 : i32
      %x = memref.load %a[%t] : memref<?xi32>
      %neg = arith.cmpi slt, %x, %zero : i32
      gpu.barrier
      %r = arith.extui %neg : i1 to i32
      memref.store %r, %out[%t] : memref<?xi32>
      gpu.return
    }
"""

# A private buffer allocated inside an scf.if of a segment (freed per thread): the segment
# was wrapped in memref.alloca_scope, whose single block convert-scf-to-cf broke
# ("'memref.alloca_scope' op expects region #0 to have 0 or 1 blocks").
NESTED_ALLOCA = """
    gpu.func @kern(%a: memref<?xi32>, %out: memref<?xi32>) kernel {
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c2 = arith.constant 2 : index
      %x = memref.load %a[%t] : memref<?xi32>
      gpu.barrier
      %odd = arith.remui %t, %c2 : index
      %is_odd = arith.cmpi ne, %odd, %c0 : index
      %r = scf.if %is_odd -> (i32) {
        %p = memref.alloca() : memref<1xi32>
        %x2 = arith.addi %x, %x : i32
        memref.store %x2, %p[%c0] : memref<1xi32>
        %y = memref.load %p[%c0] : memref<1xi32>
        scf.yield %y : i32
      } else {
        scf.yield %x : i32
      }
      memref.store %r, %out[%t] : memref<?xi32>
      gpu.return
    }
"""


def test_i1_and_nested_private_buffers_in_split_kernels():
    a = np.arange(64, dtype=np.int32) - 30
    t = np.arange(64)
    for kernel, expected in ((I1_ACROSS, (a < 0).astype(np.int32)),
                             (NESTED_ALLOCA, np.where(t % 2 == 1, 2 * a, a))):
        out = np.zeros_like(a)
        with pywave.compile(program(kernel, ["memref<?xi32>"] * 2, blocks=1, threads=64),
                            target="cpu", disk_cache=False) as mod:
            mod.run(a, out)
            assert split(mod)
        np.testing.assert_array_equal(out, expected)


# Atomic adds after a barrier return the counter's old values in the order the threads run:
# thread order both ways (the fibers used to go on from the last thread to arrive at the
# barrier, then 0, 1, ...: other old values than the thread loops').
ATOMIC_ORDER = """
    gpu.func @kern(%a: memref<?xi32>, %out: memref<?xi32>)
        workgroup(%cnt: memref<1xi32, #gpu.address_space<workgroup>>) kernel {
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c3 = arith.constant 3 : index
      %c1 = arith.constant 1 : index
      %x = memref.load %a[%t] : memref<?xi32>
      %first = arith.cmpi eq, %t, %c0 : index
      scf.if %first {
        memref.store %x, %cnt[%c0] : memref<1xi32, #gpu.address_space<workgroup>>
      }
      gpu.barrier
      %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%o = %x) -> (i32) {
        %old = memref.atomic_rmw addi %x, %cnt[%c0]
            : (i32, memref<1xi32, #gpu.address_space<workgroup>>) -> i32
        scf.yield %old : i32
      }
      memref.store %r, %out[%t] : memref<?xi32>
      gpu.return
    }
"""


@pytest.mark.parametrize("lowering", [{}, {"kernel_opt_level": 0}], ids=["split", "fibers"])
def test_threads_after_a_barrier_run_in_thread_order(lowering):
    a = np.random.default_rng(7).integers(-1000, 1000, 48).astype(np.int32)
    out = np.zeros_like(a)
    with pywave.compile(program(ATOMIC_ORDER, ["memref<?xi32>"] * 2, blocks=1, threads=48),
                        target="cpu", disk_cache=False, lowering=lowering) as mod:
        mod.run(a, out)
        assert split(mod) == (not lowering)
    counter, expected = int(a[0]), []
    for x in a.tolist():
        for _ in range(3):
            old, counter = counter, counter + x
        expected.append(old)
    np.testing.assert_array_equal(out, np.array(expected, dtype=np.int32))


def _many_values(count: int) -> str:
    """A kernel keeping ``count`` vector<4xf32> values (16 bytes each) across one barrier."""
    consts = "\n".join(f"      %k{i} = arith.constant dense<{i}.0> : vector<4xf32>"
                       for i in range(count))
    defs = "\n".join(f"      %x{i} = arith.addf %v, %k{i} : vector<4xf32>" for i in range(count))
    sums = "\n".join(f"      %s{i + 1} = arith.addf %s{i}, %x{i} : vector<4xf32>"
                     for i in range(count))
    return f"""
    gpu.func @kern(%a: memref<?xf32>, %out: memref<?xf32>) kernel {{
      %g = gpu.global_id x
      %f = memref.load %a[%g] : memref<?xf32>
      %v = vector.broadcast %f : f32 to vector<4xf32>
{consts}
{defs}
      gpu.barrier
      %s0 = arith.constant dense<0.0> : vector<4xf32>
{sums}
      %e = vector.extract %s{count}[3] : f32 from vector<4xf32>
      memref.store %e, %out[%g] : memref<?xf32>
      gpu.return
    }}
"""


@pytest.mark.parametrize("count", [64, 600])
def test_values_kept_across_a_barrier_fit_the_stack(count):
    """64 x 16 bytes per thread: split, the values in per-type arrays of the block's size;
    600 x 16: more than SPILL_BYTES, fibers (the thread loops' arrays of 1024 rows per value
    overflowed the host thread's stack: a segmentation fault)."""
    blocks, threads = 4, 128
    a = np.arange(blocks * threads, dtype=np.float32)
    out = np.zeros_like(a)
    with pywave.compile(program(_many_values(count), ["memref<?xf32>"] * 2, blocks=blocks,
                                threads=threads), target="cpu", disk_cache=False) as mod:
        mod.run(a, out)
        assert split(mod) == (count * 16 <= 1024)
    np.testing.assert_array_equal(out, count * a + count * (count - 1) // 2)
