"""The CPU device (``target="cpu"``): gpu.module kernels compiled for the host and run by
libwavert's CPU backend on NumPy arrays, through the same host code as on a GPU. No GPU."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import pywave

ROOT = Path(__file__).resolve().parent.parent
VECTOR_ADD = (ROOT / "examples" / "vector_add.mlir").read_text()


def _compile(text: str):
    return pywave.compile(text, target="cpu", disk_cache=False)


def test_vector_add_numpy_exact():
    mod = _compile(VECTOR_ADD)
    assert mod.target == "cpu"
    rng = np.random.default_rng(0)
    n = 1 << 16
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    c = np.zeros_like(a)
    mod(a, b, c)
    assert np.array_equal(c, a + b)
    # A length that is not a multiple of the block: the guard in the kernel holds.
    a2, b2, c2 = a[:1000].copy(), b[:1000].copy(), np.full(1003, -1, np.float32)
    mod(a2, b2, c2[:1000])
    assert np.array_equal(c2[:1000], a2 + b2) and np.all(c2[1000:] == -1)


# Each thread writes (block id, thread id) x, y, z, its block and grid dims into 12 words
# at its linear global index.
IDS = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @ids(%out: memref<?x12xi64>) kernel {
      %tx = gpu.thread_id x
      %ty = gpu.thread_id y
      %tz = gpu.thread_id z
      %bx = gpu.block_id x
      %by = gpu.block_id y
      %bz = gpu.block_id z
      %dx = gpu.block_dim x
      %dy = gpu.block_dim y
      %dz = gpu.block_dim z
      %gx = gpu.grid_dim x
      %gy = gpu.grid_dim y
      %gz = gpu.grid_dim z
      // linear = ((((bz*gy + by)*gx + bx)*dz + tz)*dy + ty)*dx + tx
      %l0 = arith.muli %bz, %gy : index
      %l1 = arith.addi %l0, %by : index
      %l2 = arith.muli %l1, %gx : index
      %l3 = arith.addi %l2, %bx : index
      %l4 = arith.muli %l3, %dz : index
      %l5 = arith.addi %l4, %tz : index
      %l6 = arith.muli %l5, %dy : index
      %l7 = arith.addi %l6, %ty : index
      %l8 = arith.muli %l7, %dx : index
      %l = arith.addi %l8, %tx : index
      %vals = arith.constant 0 : index
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %c4 = arith.constant 4 : index
      %c5 = arith.constant 5 : index
      %c6 = arith.constant 6 : index
      %c7 = arith.constant 7 : index
      %c8 = arith.constant 8 : index
      %c9 = arith.constant 9 : index
      %c10 = arith.constant 10 : index
      %c11 = arith.constant 11 : index
      %v0 = arith.index_cast %tx : index to i64
      %v1 = arith.index_cast %ty : index to i64
      %v2 = arith.index_cast %tz : index to i64
      %v3 = arith.index_cast %bx : index to i64
      %v4 = arith.index_cast %by : index to i64
      %v5 = arith.index_cast %bz : index to i64
      %v6 = arith.index_cast %dx : index to i64
      %v7 = arith.index_cast %dy : index to i64
      %v8 = arith.index_cast %dz : index to i64
      %v9 = arith.index_cast %gx : index to i64
      %v10 = arith.index_cast %gy : index to i64
      %v11 = arith.index_cast %gz : index to i64
      memref.store %v0, %out[%l, %c0] : memref<?x12xi64>
      memref.store %v1, %out[%l, %c1] : memref<?x12xi64>
      memref.store %v2, %out[%l, %c2] : memref<?x12xi64>
      memref.store %v3, %out[%l, %c3] : memref<?x12xi64>
      memref.store %v4, %out[%l, %c4] : memref<?x12xi64>
      memref.store %v5, %out[%l, %c5] : memref<?x12xi64>
      memref.store %v6, %out[%l, %c6] : memref<?x12xi64>
      memref.store %v7, %out[%l, %c7] : memref<?x12xi64>
      memref.store %v8, %out[%l, %c8] : memref<?x12xi64>
      memref.store %v9, %out[%l, %c9] : memref<?x12xi64>
      memref.store %v10, %out[%l, %c10] : memref<?x12xi64>
      memref.store %v11, %out[%l, %c11] : memref<?x12xi64>
      gpu.return
    }
  }
  func.func @run(%out: memref<?x12xi64>, %gx: index, %gy: index, %gz: index,
                 %bx: index, %by: index, %bz: index) {
    gpu.launch_func @k::@ids blocks in (%gx, %gy, %gz) threads in (%bx, %by, %bz)
        args(%out : memref<?x12xi64>)
    return
  }
}
"""


def _expected_ids(grid, block):
    rows = []
    for bz in range(grid[2]):
        for by in range(grid[1]):
            for bx in range(grid[0]):
                for tz in range(block[2]):
                    for ty in range(block[1]):
                        for tx in range(block[0]):
                            rows.append((tx, ty, tz, bx, by, bz, *block, *grid))
    return np.array(rows, dtype=np.int64)


@pytest.mark.parametrize("grid, block", [((3, 2, 1), (4, 5, 1)), ((2, 3, 2), (3, 2, 4)),
                                         ((1, 1, 1), (1, 1, 1))])
def test_thread_and_block_ids(grid, block):
    mod = _compile(IDS)
    total = int(np.prod(grid) * np.prod(block))
    out = np.full((total, 12), -1, dtype=np.int64)
    mod.run(out, *grid, *block)
    assert np.array_equal(out, _expected_ids(grid, block))


# Tree reduction of 256 values per block in workgroup memory, a gpu.barrier per step; thread
# 0 writes the block's sum. Integers: the sums are exact whatever the order.
REDUCE = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @sum(%a: memref<?xi32>, %out: memref<?xi32>)
        workgroup(%s: memref<256xi32, #gpu.address_space<workgroup>>) kernel {
      %t = gpu.thread_id x
      %b = gpu.block_id x
      %g = gpu.global_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c128 = arith.constant 128 : index
      %v = memref.load %a[%g] : memref<?xi32>
      memref.store %v, %s[%t] : memref<256xi32, #gpu.address_space<workgroup>>
      gpu.barrier
      %r = scf.while (%step = %c128) : (index) -> index {
        %more = arith.cmpi ugt, %step, %c0 : index
        scf.condition(%more) %step : index
      } do {
      ^bb0(%step: index):
        %lt = arith.cmpi ult, %t, %step : index
        scf.if %lt {
          %o = arith.addi %t, %step : index
          %x = memref.load %s[%t] : memref<256xi32, #gpu.address_space<workgroup>>
          %y = memref.load %s[%o] : memref<256xi32, #gpu.address_space<workgroup>>
          %z = arith.addi %x, %y : i32
          memref.store %z, %s[%t] : memref<256xi32, #gpu.address_space<workgroup>>
        }
        gpu.barrier
        %next = arith.shrui %step, %c1 : index
        scf.yield %next : index
      }
      %first = arith.cmpi eq, %t, %c0 : index
      scf.if %first {
        %total = memref.load %s[%c0] : memref<256xi32, #gpu.address_space<workgroup>>
        memref.store %total, %out[%b] : memref<?xi32>
      }
      gpu.return
    }
  }
  func.func @run(%a: memref<?xi32>, %out: memref<?xi32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %g = memref.dim %out, %c0 : memref<?xi32>
    gpu.launch_func @k::@sum blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%a : memref<?xi32>, %out : memref<?xi32>)
    return
  }
}
"""


def _reduce_inputs(blocks: int):
    rng = np.random.default_rng(1)
    return rng.integers(-1000, 1000, blocks * 256, dtype=np.int32)


def test_shared_memory_tree_reduction_with_barriers():
    mod = _compile(REDUCE)
    blocks = 37
    a = _reduce_inputs(blocks)
    out = np.zeros(blocks, dtype=np.int32)
    mod.run(a, out)
    assert np.array_equal(out, a.reshape(blocks, 256).sum(axis=1, dtype=np.int32))


def test_deterministic_single_thread_mode(tmp_path):
    """WAVERT_CPU_THREADS=1 runs every block on the calling thread; the result is the same."""
    script = textwrap.dedent(f"""
        import numpy as np, pywave
        mod = pywave.compile({REDUCE!r}, target="cpu", disk_cache=False)
        a = np.random.default_rng(1).integers(-1000, 1000, 9 * 256, dtype=np.int32)
        out = np.zeros(9, dtype=np.int32)
        mod.run(a, out)
        assert np.array_equal(out, a.reshape(9, 256).sum(axis=1, dtype=np.int32)), out
        print("PASS")
    """)
    env = {**os.environ, "WAVERT_CPU_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0 and "PASS" in done.stdout, done.stderr


# Dynamic workgroup memory: each block reverses its 64 values through it.
DYNAMIC = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @reverse(%a: memref<?xf32>, %out: memref<?xf32>) kernel {
      %t = gpu.thread_id x
      %d = gpu.block_dim x
      %g = gpu.global_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %raw = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
      %s = memref.view %raw[%c0][%d] : memref<?xi8, #gpu.address_space<workgroup>>
          to memref<?xf32, #gpu.address_space<workgroup>>
      %v = memref.load %a[%g] : memref<?xf32>
      memref.store %v, %s[%t] : memref<?xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %last = arith.subi %d, %c1 : index
      %r = arith.subi %last, %t : index
      %w = memref.load %s[%r] : memref<?xf32, #gpu.address_space<workgroup>>
      memref.store %w, %out[%g] : memref<?xf32>
      gpu.return
    }
  }
  func.func @run(%a: memref<?xf32>, %out: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bytes = arith.constant 256 : i32
    %n = memref.dim %a, %c0 : memref<?xf32>
    %g = arith.divui %n, %c64 : index
    gpu.launch_func @k::@reverse blocks in (%g, %c1, %c1) threads in (%c64, %c1, %c1)
        dynamic_shared_memory_size %bytes
        args(%a : memref<?xf32>, %out : memref<?xf32>)
    return
  }
}
"""


def test_dynamic_shared_memory():
    mod = _compile(DYNAMIC)
    a = np.arange(64 * 10, dtype=np.float32)
    out = np.zeros_like(a)
    mod.run(a, out)
    assert np.array_equal(out, a.reshape(10, 64)[:, ::-1].reshape(-1))


NVVM_OP = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @warp(%out: memref<?xi32>) kernel {
      %l = nvvm.read.ptx.sreg.laneid : i32
      %c0 = arith.constant 0 : index
      memref.store %l, %out[%c0] : memref<?xi32>
      gpu.return
    }
  }
  func.func @run(%out: memref<?xi32>) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @k::@warp blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%out : memref<?xi32>)
    return
  }
}
"""


def test_nvvm_op_is_a_compile_error_naming_it():
    with pytest.raises(pywave.CompileError, match=r"nvvm\.read\.ptx\.sreg\.laneid.*CPU"):
        _compile(NVVM_OP)


def test_subgroup_op_is_a_compile_error_naming_it():
    text = NVVM_OP.replace("%l = nvvm.read.ptx.sreg.laneid : i32",
                           "%c3 = arith.constant 3 : i32\n"
                           "      %w = arith.constant 32 : i32\n"
                           "      %l, %ok = gpu.shuffle xor %c3, %c3, %w : i32")
    with pytest.raises(pywave.CompileError, match=r"gpu\.shuffle"):
        _compile(text)


def test_gpu_tensor_is_refused_naming_the_argument():
    mod = _compile(VECTOR_ADD)

    class OnGpu:                      # a DLPack producer on cuda:0
        def __init__(self, a): self.a = a
        def __dlpack_device__(self): return (2, 0)
        def __dlpack__(self, **kw): return self.a.__dlpack__()

    a = np.zeros(4, dtype=np.float32)
    with pytest.raises(pywave.ArgumentError, match=r"argument 'a' \(#0\) is on cuda:0.*CPU device"):
        mod(OnGpu(a), a, a.copy())


def test_unknown_target_names_cpu():
    with pytest.raises(pywave.CompileError, match="'cpu'"):
        pywave.compile(VECTOR_ADD, target="tpu", disk_cache=False)


def test_compile_many_for_the_cpu_device():
    """compile_many(target="cpu"): every module runs on the CPU device, each its own kernel."""
    texts = [VECTOR_ADD, VECTOR_ADD.replace("arith.addf", "arith.mulf")]
    mods = pywave.compile_many(texts, target="cpu", disk_cache=False)
    assert [m.target for m in mods] == ["cpu", "cpu"]
    a = np.arange(1, 1001, dtype=np.float32)
    b = np.full(1000, 1.5, np.float32)
    outs = []
    for mod in mods:
        c = np.zeros_like(a)
        mod(a, b, c)
        outs.append(c)
        mod.close()
    assert np.array_equal(outs[0], a + b) and np.array_equal(outs[1], a * b)
