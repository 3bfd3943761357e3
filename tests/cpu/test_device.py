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

ROOT = Path(__file__).resolve().parents[2]

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
REDUCE = (ROOT / "tests" / "data" / "cpu_reduce.mlir").read_text()


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


def test_gpu_only_op_is_a_compile_error_naming_it():
    text = NVVM_OP.replace("%l = nvvm.read.ptx.sreg.laneid : i32",
                           "%i = gpu.thread_id x\n"
                           "      %j = arith.index_cast %i : index to i32\n"
                           "      %l = gpu.subgroup_broadcast %j, first_active_lane : i32")
    with pytest.raises(pywave.CompileError, match=r"gpu\.subgroup_broadcast.*CPU"):
        _compile(text)


@pytest.mark.parametrize("op", ["%r = math.trunc %f : f32",
                                "%p = math.ipowi %j, %j : i32\n      %r = arith.sitofp %p : i32 to f32"])
def test_op_without_cpu_lowering_is_a_compile_error_not_a_crash(op):
    # convert-gpu-to-nvvm leaves math.trunc and math.ipowi as they are; translating them to
    # LLVM IR crashed the compiler process (SIGSEGV in the bindings) before this check.
    text = NVVM_OP.replace("memref<?xi32>", "memref<?xf32>").replace(
        "%l = nvvm.read.ptx.sreg.laneid : i32",
        "%i = gpu.thread_id x\n"
        "      %j = arith.index_cast %i : index to i32\n"
        "      %f = arith.sitofp %j : i32 to f32\n"
        f"      {op}").replace("memref.store %l,", "memref.store %r,")
    name = op.split(" = ")[1].split()[0] if "ipowi" not in op else "math.ipowi"
    with pytest.raises(pywave.CompileError,
                       match=rf"{name} at line \d+, column \d+ has no lowering for the CPU"):
        pywave.compile(text, target="cpu", disk_cache=False)


def test_gpu_tensor_is_refused_naming_the_argument():
    mod = _compile(VECTOR_ADD)

    class OnGpu:                      # a DLPack producer on cuda:0
        def __init__(self, a): self.a = a
        def __dlpack_device__(self): return (2, 0)
        def __dlpack__(self, **kw): return self.a.__dlpack__()

    a = np.zeros(4, dtype=np.float32)
    with pytest.raises(pywave.ArgumentError, match=r"argument 'a' \(#0\) is on cuda:0.*CPU device"):
        mod(OnGpu(a), a, a.copy())


def test_stream_on_the_cpu_device_is_refused_naming_the_cpu_device():
    mod = _compile(VECTOR_ADD)
    a = np.zeros(4, dtype=np.float32)
    with pytest.raises(pywave.ArgumentError,
                       match=r"main\(\): stream= was given, but the function runs its kernels "
                             r"on the CPU device \(target cpu\)"):
        mod.main(a, a.copy(), a.copy(), stream=5)


def test_no_gpu_and_no_target_suggests_the_cpu_device():
    if pywave.device_count() > 0:
        pytest.skip("a GPU is present: the module takes GPU 0's chip")
    with pytest.raises(pywave.CompileError,
                       match=r"no GPU was found to take one from; pass target='cpu' to run the "
                             r"kernels on this machine's CPU.*--target cpu"):
        pywave.compile(VECTOR_ADD, disk_cache=False)


def test_unknown_target_names_cpu():
    with pytest.raises(pywave.CompileError, match="'cpu'"):
        pywave.compile(VECTOR_ADD, target="tpu", disk_cache=False)


# ---- subgroups: 32 lanes, linear thread id % 32 ------------------------------------------

LANES = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @lanes(%out: memref<?x4xi64>) kernel {
      %g = gpu.global_id x
      %l = gpu.lane_id
      %s = gpu.subgroup_size : index
      %i = gpu.subgroup_id : index
      %n = gpu.num_subgroups : index
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %c3 = arith.constant 3 : index
      %v0 = arith.index_cast %l : index to i64
      %v1 = arith.index_cast %s : index to i64
      %v2 = arith.index_cast %i : index to i64
      %v3 = arith.index_cast %n : index to i64
      memref.store %v0, %out[%g, %c0] : memref<?x4xi64>
      memref.store %v1, %out[%g, %c1] : memref<?x4xi64>
      memref.store %v2, %out[%g, %c2] : memref<?x4xi64>
      memref.store %v3, %out[%g, %c3] : memref<?x4xi64>
      gpu.return
    }
  }
  func.func @run(%out: memref<?x4xi64>) {
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c72 = arith.constant 72 : index
    gpu.launch_func @k::@lanes blocks in (%c2, %c1, %c1) threads in (%c72, %c1, %c1)
        args(%out : memref<?x4xi64>)
    return
  }
}
"""


def test_subgroup_queries():
    out = np.full((144, 4), -1, dtype=np.int64)
    _compile(LANES).run(out)
    t = np.arange(144) % 72
    assert np.array_equal(out[:, 0], t % 32)
    assert np.all(out[:, 1] == 32)
    assert np.array_equal(out[:, 2], t // 32)
    assert np.all(out[:, 3] == 3)          # ceil(72 / 32)


_INT = {"i32": np.int32, "i64": np.int64, "f32": np.float32, "f64": np.float64}

SHUFFLE = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @shfl(%in: memref<?xT>, %out: memref<?xT>, %ok: memref<?xi8>, %off: i32,
                   %w: i32) kernel {
      %g = gpu.global_id x
      %x = memref.load %in[%g] : memref<?xT>
      %r, %v = gpu.shuffle MODE %x, %off, %w : T
      memref.store %r, %out[%g] : memref<?xT>
      %v8 = arith.extui %v : i1 to i8
      memref.store %v8, %ok[%g] : memref<?xi8>
      gpu.return
    }
  }
  func.func @run(%in: memref<?xT>, %out: memref<?xT>, %ok: memref<?xi8>, %off: i32, %w: i32,
                 %threads: index) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = memref.dim %in, %c0 : memref<?xT>
    %g = arith.divui %n, %threads : index
    gpu.launch_func @k::@shfl blocks in (%g, %c1, %c1) threads in (%threads, %c1, %c1)
        args(%in : memref<?xT>, %out : memref<?xT>, %ok : memref<?xi8>, %off : i32, %w : i32)
    return
  }
}
"""


def _shuffle_reference(mode, values, offset, width, threads):
    """The documented semantics (pywave/kernels/cpu.py, "Subgroups")."""
    out, ok = values.copy(), np.zeros(len(values), np.int8)
    o = offset & 31
    for g in range(len(values)):
        t = g % threads
        lane, base = t % 32, g - t % 32
        src = {"xor": lane ^ o, "down": lane + o, "up": lane - o, "idx": o}[mode]
        good = (src >= 0) if mode == "up" else (src < width)
        good = good and lane < width and (t - lane + src) < threads
        if good:
            out[g], ok[g] = values[base + src], 1
    return out, ok


@pytest.mark.parametrize("dtype", ["i32", "f32", "i64", "f64"])
@pytest.mark.parametrize("mode, offset, width", [
    ("xor", 1, 32), ("xor", 16, 32), ("xor", 5, 16), ("down", 1, 32), ("down", 7, 32),
    ("down", 3, 8), ("up", 1, 32), ("up", 9, 32), ("idx", 3, 32), ("idx", 20, 16),
    ("idx", 35, 32)])
def test_shuffle(dtype, mode, offset, width):
    mod = _compile(SHUFFLE.replace("MODE", mode).replace("xT", "x" + dtype)
                   .replace(": T", ": " + dtype))
    threads = 64
    n = threads * 3
    if dtype in ("i64",):
        values = (np.arange(n, dtype=np.int64) << 33) + 5     # the high word matters
    elif dtype == "f64":
        values = np.arange(n, dtype=np.float64) * 1e10 + 0.25
    else:
        values = (np.arange(n) * 3 + 1).astype(_INT[dtype])
    out = np.zeros_like(values)
    ok = np.full(n, 7, np.int8)
    mod.run(values, out, ok, offset, width, threads)
    want, want_ok = _shuffle_reference(mode, values, offset, width, threads)
    assert np.array_equal(ok, want_ok)
    assert np.array_equal(out, want)


def test_shuffle_spot_values_and_partial_warp():
    mod = _compile(SHUFFLE.replace("MODE", "xor").replace("xT", "xi32").replace(": T", ": i32"))
    values = np.arange(40, dtype=np.int32) * 10
    out, ok = np.zeros_like(values), np.zeros(40, np.int8)
    mod.run(values, out, ok, 1, 32, 40)              # one block of 40: warp 1 has 8 lanes
    assert out[0] == 10 and out[1] == 0 and out[31] == 300 and out[33] == 320
    assert ok.tolist() == [1] * 40
    mod.run(values, out, ok, 16, 32, 40)             # warp 1's lanes 16.. do not exist
    assert out[0] == 160 and out[16] == 0 and ok[:32].tolist() == [1] * 32
    assert out[32:].tolist() == values[32:].tolist() and ok[32:].tolist() == [0] * 8


REDUCE_SUBGROUP = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @red(%in: memref<?xT>, %out: memref<?xT>) kernel {
      %g = gpu.global_id x
      %x = memref.load %in[%g] : memref<?xT>
      %r = gpu.subgroup_reduce OP %x CLUSTER : (T) -> T
      memref.store %r, %out[%g] : memref<?xT>
      gpu.return
    }
  }
  func.func @run(%in: memref<?xT>, %out: memref<?xT>, %threads: index) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = memref.dim %in, %c0 : memref<?xT>
    %g = arith.divui %n, %threads : index
    gpu.launch_func @k::@red blocks in (%g, %c1, %c1) threads in (%threads, %c1, %c1)
        args(%in : memref<?xT>, %out : memref<?xT>)
    return
  }
}
"""

_NP_OP = {"add": np.add, "mul": np.multiply, "maxsi": np.maximum, "minsi": np.minimum,
          "maxui": np.maximum, "minui": np.minimum, "and": np.bitwise_and,
          "or": np.bitwise_or, "xor": np.bitwise_xor, "maxnumf": np.fmax, "minnumf": np.fmin,
          "maximumf": np.maximum, "minimumf": np.minimum}


def _subgroup_reference(op, values, threads, size, stride):
    out = values.copy()
    for g in range(len(values)):
        t = g % threads
        lane = t % 32
        warp_base = g - lane
        base = lane - lane % (size * stride) + lane % stride
        members = [base + k * stride for k in range(size)
                   if (t - lane) + base + k * stride < threads]
        acc = values[warp_base + members[0]]
        for m in members[1:]:
            acc = _NP_OP[op](acc, values[warp_base + m])
        out[g] = acc
    return out


@pytest.mark.parametrize("op, dtype", [
    ("add", "i32"), ("mul", "i32"), ("maxsi", "i32"), ("minsi", "i32"), ("maxui", "i32"),
    ("minui", "i32"), ("and", "i32"), ("or", "i32"), ("xor", "i32"), ("add", "i64"),
    ("add", "f32"), ("maxnumf", "f32"), ("minnumf", "f64"), ("maximumf", "f32"),
    ("minimumf", "f64"), ("mul", "f64")])
@pytest.mark.parametrize("cluster", [None, (4, 1), (2, 8), (8, 4)])
def test_subgroup_reduce(op, dtype, cluster):
    text = REDUCE_SUBGROUP.replace("OP", op).replace("xT", "x" + dtype)
    text = text.replace("(T) -> T", f"({dtype}) -> {dtype}")
    size, stride = cluster or (32, 1)
    text = text.replace("CLUSTER", f"cluster(size = {size}, stride = {stride})"
                        if cluster else "")
    mod = _compile(text)
    threads = 80                                      # warps of 32, 32 and 16 lanes
    n = threads * 2
    rng = np.random.default_rng(5)
    if dtype.startswith("i"):
        values = rng.integers(1, 200 if op != "mul" else 3, n).astype(_INT[dtype])
        if op in ("minui", "maxui"):
            values = rng.integers(0, 2**31, n).astype(np.uint32).astype(_INT[dtype])
    else:
        values = rng.integers(-64, 64, n).astype(_INT[dtype]) * 0.5   # exact sums
        if op == "mul":
            values = rng.choice([0.5, 1.0, 2.0, -1.0], n).astype(_INT[dtype])
    out = np.zeros_like(values)
    mod.run(values, out, threads)
    assert np.array_equal(out, _subgroup_reference(op, values, threads, size, stride))


ALL_REDUCE = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @red(%in: memref<?xi32>, %sum: memref<?xi32>, %max: memref<?xf32>,
                  %custom: memref<?xi32>) kernel {
      %tx = gpu.thread_id x
      %ty = gpu.thread_id y
      %b = gpu.block_id x
      %c5i = arith.constant 5 : index
      %c30 = arith.constant 30 : index
      %r0 = arith.muli %ty, %c5i : index
      %r1 = arith.addi %r0, %tx : index
      %r2 = arith.muli %b, %c30 : index
      %g = arith.addi %r2, %r1 : index      // block * 30 + linear thread id
      %x = memref.load %in[%g] : memref<?xi32>
      %s = gpu.all_reduce add %x uniform {} : (i32) -> (i32)
      memref.store %s, %sum[%g] : memref<?xi32>
      %f = arith.sitofp %x : i32 to f32
      %m = gpu.all_reduce maxnumf %f {} : (f32) -> (f32)
      memref.store %m, %max[%g] : memref<?xf32>
      %c = gpu.all_reduce %x {
      ^bb(%lhs : i32, %rhs : i32):
        %t = arith.muli %lhs, %rhs : i32
        %u = arith.addi %t, %rhs : i32
        "gpu.yield"(%u) : (i32) -> ()
      } : (i32) -> (i32)
      memref.store %c, %custom[%g] : memref<?xi32>
      gpu.return
    }
  }
  func.func @run(%in: memref<?xi32>, %sum: memref<?xi32>, %max: memref<?xf32>,
                 %custom: memref<?xi32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c5 = arith.constant 5 : index
    %c6 = arith.constant 6 : index
    gpu.launch_func @k::@red blocks in (%c4, %c1, %c1) threads in (%c5, %c6, %c1)
        args(%in : memref<?xi32>, %sum : memref<?xi32>, %max : memref<?xf32>,
             %custom : memref<?xi32>)
    return
  }
}
"""


def test_all_reduce_op_and_region():
    mod = _compile(ALL_REDUCE)
    x = np.random.default_rng(2).integers(-50, 50, 120).astype(np.int32)
    s, m, c = np.zeros(120, np.int32), np.zeros(120, np.float32), np.zeros(120, np.int32)
    mod.run(x, s, m, c)
    blocks = x.reshape(4, 30)
    assert np.array_equal(s, np.repeat(blocks.sum(axis=1), 30))
    assert np.array_equal(m, np.repeat(blocks.max(axis=1).astype(np.float32), 30))
    want = []
    for b in blocks:                        # the region combines in thread order
        acc = int(b[0])
        for v in b[1:]:
            acc = (acc * int(v) + int(v) + 2**31) % 2**32 - 2**31
        want.append(acc)
    assert np.array_equal(c, np.repeat(np.array(want, np.int32), 30))


ATOMICS = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @atom(%count: memref<?xi32>, %old: memref<?xi32>, %fsum: memref<?xf32>,
                   %top: memref<?xi32>) kernel {
      %g = gpu.global_id x
      %c0 = arith.constant 0 : index
      %one = arith.constant 1 : i32
      %o = memref.atomic_rmw addi %one, %count[%c0] : (i32, memref<?xi32>) -> i32
      memref.store %o, %old[%g] : memref<?xi32>
      %h = arith.constant 0.5 : f32
      %f = memref.atomic_rmw addf %h, %fsum[%c0] : (f32, memref<?xf32>) -> f32
      %gi = arith.index_cast %g : index to i32
      %seven = arith.constant 7 : i32
      %key = arith.remui %gi, %seven : i32
      %x = memref.generic_atomic_rmw %top[%c0] : memref<?xi32> {
      ^bb0(%cur : i32):
        %t = arith.muli %cur, %seven : i32
        %s = arith.addi %t, %key : i32
        %m = arith.remui %s, %seven : i32
        %n = arith.maxsi %cur, %gi : i32
        memref.atomic_yield %n : i32
      }
      gpu.return
    }
  }
  func.func @run(%count: memref<?xi32>, %old: memref<?xi32>, %fsum: memref<?xf32>,
                 %top: memref<?xi32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %n = memref.dim %old, %c0 : memref<?xi32>
    %g = arith.divui %n, %c256 : index
    gpu.launch_func @k::@atom blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%count : memref<?xi32>, %old : memref<?xi32>, %fsum : memref<?xf32>,
             %top : memref<?xi32>)
    return
  }
}
"""


def test_atomics_contention_across_blocks():
    mod = _compile(ATOMICS)
    n = 256 * 512
    count, old = np.zeros(1, np.int32), np.full(n, -1, np.int32)
    fsum, top = np.zeros(1, np.float32), np.full(1, -5, np.int32)
    mod.run(count, old, fsum, top)
    assert count[0] == n
    assert np.array_equal(np.sort(old), np.arange(n, dtype=np.int32))   # each value once
    assert fsum[0] == n * 0.5 and top[0] == n - 1


def _run_script(script: str, env_extra: dict, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, **env_extra}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)


def test_deterministic_mode_orders_atomics(tmp_path):
    """One pool thread: blocks in order, threads in order: atomic_rmw's old values are the
    linear global ids."""
    done = _run_script(f"""
        import numpy as np, pywave
        mod = pywave.compile({ATOMICS!r}, target="cpu", disk_cache=False)
        n = 256 * 16
        count, old = np.zeros(1, np.int32), np.full(n, -1, np.int32)
        fsum, top = np.zeros(1, np.float32), np.full(1, -5, np.int32)
        mod.run(count, old, fsum, top)
        assert np.array_equal(old, np.arange(n, dtype=np.int32)), old
        print("PASS")
    """, {"WAVERT_CPU_THREADS": "1"}, tmp_path)
    assert done.returncode == 0 and "PASS" in done.stdout, done.stderr


PRINTF = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @say(%f: f32, %big: i64) kernel {
      %t = gpu.thread_id x
      %b = gpu.block_id x
      %ti = arith.index_cast %t : index to i32
      %bi = arith.index_cast %b : index to i8
      %d = arith.extf %f : f32 to f64
      gpu.printf "block %d thread %u: %5.2f %lld %x %c%%\n", %bi, %ti, %d, %big, %ti, %ti : i8, i32, f64, i64, i32, i32
      gpu.return
    }
  }
  func.func @run(%f: f32, %big: i64) {
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    gpu.launch_func @k::@say blocks in (%c2, %c1, %c1) threads in (%c3, %c1, %c1)
        args(%f : f32, %big : i64)
    return
  }
}
""".replace("%c%%", "%c%%")


def test_printf_to_stdout(tmp_path):
    done = _run_script(f"""
        import pywave
        mod = pywave.compile({PRINTF!r}, target="cpu", disk_cache=False)
        mod.run(3.14159, -(2**40))
        import sys; sys.stdout.flush()
        print("after")
    """, {"WAVERT_CPU_THREADS": "1"}, tmp_path)
    assert done.returncode == 0, done.stderr
    want = "".join(f"block {b} thread {t}: {3.14159:5.2f} {-(2**40)} {t:x} {chr(t)}%\n"
                   for b in range(2) for t in range(3))
    assert done.stdout == want + "after\n"


# Thread 0 waits for its warp at a shuffle while the others wait for it at the barrier.
DEADLOCK = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @stuck(%out: memref<?xi32>) kernel {
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %one = arith.constant 1 : i32
      %w = arith.constant 32 : i32
      %first = arith.cmpi eq, %t, %c0 : index
      scf.if %first {
        %r, %ok = gpu.shuffle xor %one, %one, %w : i32
        memref.store %r, %out[%c0] : memref<?xi32>
      }
      gpu.barrier
      gpu.return
    }
  }
  func.func @run(%out: memref<?xi32>) {
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    gpu.launch_func @k::@stuck blocks in (%c1, %c1, %c1) threads in (%c64, %c1, %c1)
        args(%out : memref<?xi32>)
    return
  }
}
"""


def test_threads_waiting_at_different_points_is_an_error():
    mod = _compile(DEADLOCK)
    with pytest.raises(pywave.Error, match="wait at different barriers"):
        mod.run(np.zeros(1, np.int32))
    mod2 = _compile(REDUCE)                     # the pool thread's fibers still work
    a, out = _reduce_inputs(3), np.zeros(3, np.int32)
    mod2.run(a, out)
    assert np.array_equal(out, a.reshape(3, 256).sum(axis=1, dtype=np.int32))


STACK_HOG = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @hog(%out: memref<?xf32>) kernel {
      %t = gpu.thread_id x
      %big = memref.alloca() : memref<65536xf32>
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n = arith.constant 65536 : index
      scf.for %i = %c0 to %n step %c1 {
        %ii = arith.index_cast %i : index to i32
        %f = arith.sitofp %ii : i32 to f32
        memref.store %f, %big[%i] : memref<65536xf32>
      }
      gpu.barrier
      %p = arith.constant 7919 : index
      %j0 = arith.muli %t, %p : index
      %j = arith.remui %j0, %n : index
      %w = memref.load %big[%j] : memref<65536xf32>
      memref.store %w, %out[%t] : memref<?xf32>
      gpu.return
    }
  }
  func.func @run(%out: memref<?xf32>) {
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    gpu.launch_func @k::@hog blocks in (%c1, %c1, %c1) threads in (%c2, %c1, %c1)
        args(%out : memref<?xf32>)
    return
  }
}
"""


@pytest.mark.parametrize("kib, fits", [(None, False), ("1024", True)])
def test_fiber_stack_overflow_is_a_clear_fatal_error(tmp_path, kib, fits):
    done = _run_script(f"""
        import numpy as np, pywave
        mod = pywave.compile({STACK_HOG!r}, target="cpu", disk_cache=False)
        out = np.zeros(2, np.float32)
        mod.run(out)
        print("RAN", out.tolist())
    """, {"WAVERT_CPU_STACK_KIB": kib} if kib else {}, tmp_path)
    if fits:
        assert done.returncode == 0 and "RAN [0.0, 7919.0]" in done.stdout, done.stderr
    else:
        assert done.returncode != 0 and "overflowed its fiber stack (64 KiB" in done.stderr, \
            (done.returncode, done.stderr[-2000:])


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


def test_cpu_modules_come_back_from_the_disk_cache(tmp_path, monkeypatch, caplog):
    """A CPU-target module is stored and loaded from the disk cache like any other (its
    entries were once refused as 'unknown backend' and rebuilt every time)."""
    import logging
    from pywave import lookup
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path))
    text = VECTOR_ADD + "\n// cache round trip\n"
    pywave.compile(text, target="cpu").close()
    lookup._memory.clear()
    with caplog.at_level(logging.WARNING, logger="pywave.cache"):
        mod = pywave.compile(text, target="cpu")
    assert not [r for r in caplog.records if "corrupt" in r.getMessage()], caplog.text
    a = np.arange(10, dtype=np.float32)
    c = np.empty_like(a)
    mod(a, a, c)
    assert (c == 2 * a).all()
    mod.close()


def test_the_cpu_image_abi_is_part_of_the_cache_key():
    """A CPU-target module's cache key holds the image ABI version, so an entry built for
    another thread-record layout is never loaded (one was, and the launch crashed)."""
    from pywave import pipeline, program
    options = pipeline.Pipeline(VECTOR_ADD, target="cpu").options()
    assert options["kernel_cpu_abi"] == program.CPU_KERNEL_ABI
    assert "kernel_cpu_abi" not in pipeline.Pipeline(VECTOR_ADD, target="sm_90").options()


# Thread g = block * 4 + thread asserts g < %limit; the others (with the barrier: past a
# barrier the stopped threads no longer take part in) store g.
ASSERT = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @check(%out: memref<?xi32>, %limit: index) kernel {
      %t = gpu.thread_id x
      %b = gpu.block_id x
      %d = gpu.block_dim x
      %g0 = arith.muli %b, %d : index
      %g = arith.addi %g0, %t : index
      %ok = arith.cmpi ult, %g, %limit : index
      cf.assert %ok, "gid below limit"
      BARRIER
      %v = arith.index_cast %g : index to i32
      memref.store %v, %out[%g] : memref<?xi32>
      gpu.return
    }
  }
  func.func @run(%out: memref<?xi32>, %limit: index) {
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    gpu.launch_func @k::@check blocks in (%c2, %c1, %c1) threads in (%c4, %c1, %c1)
        args(%out : memref<?xi32>, %limit : index)
    return
  }
}
"""


@pytest.mark.parametrize("checks", [False, True])
@pytest.mark.parametrize("barrier", [False, True])
@pytest.mark.parametrize("limit", [5, 8])
def test_device_assert_prints_cuda_lines_and_fails_the_launch(tmp_path, barrier, checks, limit):
    """A failed cf.assert prints CUDA's line on stderr for each failing thread, stops that
    thread (the others go on, through the barrier) and the call raises KernelFaultError
    naming the assertion; a passing assert prints nothing. Checked mode keeps the kernel's
    own asserts as asserts."""
    text = ASSERT.replace("BARRIER", "gpu.barrier" if barrier else "")
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "cf.assert" in ln)
    done = _run_script(f"""
        import numpy as np, pywave
        mod = pywave.compile({text!r}, target="cpu", disk_cache=False, checks={checks})
        out = np.full(8, -1, np.int32)
        try:
            mod.run(out, {limit})
            print("returned")
        except pywave.KernelFaultError as exc:
            print("raised:", exc)
        print("out:", out.tolist())
    """, {"WAVERT_CPU_THREADS": "1"}, tmp_path)
    assert done.returncode == 0, done.stderr
    stdout = done.stdout.splitlines()
    assert stdout[-1] == f"out: {[g if g < limit else -1 for g in range(8)]}"
    failing = [g for g in range(8) if g >= limit]
    want = [f"-:{line}: (unknown): block: [{g // 4},0,0], thread: [{g % 4},0,0] Assertion "
            f"`gid below limit` failed." for g in failing]
    assert done.stderr.splitlines() == want
    if not failing:
        assert stdout[0] == "returned"
        return
    first = failing[0]
    assert stdout[0].startswith("raised: ") and "device-side assert triggered in " \
        f"{len(failing)} threads" in stdout[0], stdout
    assert f"kernel check, block ({first // 4}, 0, 0), thread ({first % 4}, 0, 0): assertion " \
        f"`gid below limit` failed (-:{line}: (unknown))" in stdout[0], stdout


def test_device_assert_stops_the_blocks_not_yet_started(capfd):
    """After a block with a failed assert the launch runs no block it had not started (as a
    CUDA trap ends the grid; 16 threads run in order on the calling thread); the module
    stays usable."""
    mod = _compile(ASSERT.replace("BARRIER", "").replace("(%c2, %c1, %c1) threads",
                                                         "(%c4, %c1, %c1) threads"))
    out = np.full(16, -1, np.int32)
    capfd.readouterr()
    with pytest.raises(pywave.KernelFaultError, match="in 4 threads .* block \\(0, 0, 0\\), "
                       "thread \\(0, 0, 0\\): assertion `gid below limit` failed"):
        mod.run(out, 0)
    lines = capfd.readouterr().err.splitlines()
    assert [ln.split(" Assertion")[0].split(": ", 2)[2] for ln in lines] == [
        f"block: [0,0,0], thread: [{t},0,0]" for t in range(4)]
    assert (out == -1).all()
    mod.run(out, 16)
    assert out.tolist() == list(range(16))
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("obj, fmt", [
    ('assembly = ".version 8.0\\0A.target sm_90\\0A"', "PTX"), ('bin = "\\7FELF"', "cubin")])
def test_an_embedded_gpu_binary_is_a_compile_error(obj, fmt):
    """A gpu.binary of the input holds a GPU image: target='cpu' refuses it at compile time
    (its launch once failed only at the first call, with an ArgumentError)."""
    start, end = VECTOR_ADD.index("  gpu.module @kernels"), VECTOR_ADD.index("  func.func @main")
    text = VECTOR_ADD[:start] + (f'  gpu.binary @kernels [#gpu.object<#nvvm.target<chip = '
                                 f'"sm_90">, {obj}>]\n') + VECTOR_ADD[end:]
    line = text[:text.index("gpu.binary")].count("\n") + 1
    with pytest.raises(pywave.CompileError) as info:
        _compile(text)
    message = str(info.value)
    assert f"gpu.binary @kernels at line {line}" in message, message
    assert f"({fmt} for #nvvm.target<chip = \"sm_90\">)" in message, message
    assert "cannot run on the CPU device" in message, message


# Each thread of each block writes, at its block's linear id, for x, y, z: cluster_id,
# cluster_dim, cluster_block_id, cluster_dim_blocks (12 words; thread 0 only).
CLUSTER = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @clusters(%out: memref<?x12xi64>) kernel {
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %first = arith.cmpi eq, %t, %c0 : index
      scf.if %first {
        %bx = gpu.block_id x
        %by = gpu.block_id y
        %bz = gpu.block_id z
        %gx = gpu.grid_dim x
        %gy = gpu.grid_dim y
        %l0 = arith.muli %bz, %gy : index
        %l1 = arith.addi %l0, %by : index
        %l2 = arith.muli %l1, %gx : index
        %b = arith.addi %l2, %bx : index
        %v0 = gpu.cluster_id x
        %v1 = gpu.cluster_id y
        %v2 = gpu.cluster_id z
        %v3 = gpu.cluster_dim x
        %v4 = gpu.cluster_dim y
        %v5 = gpu.cluster_dim z
        %v6 = gpu.cluster_block_id x
        %v7 = gpu.cluster_block_id y
        %v8 = gpu.cluster_block_id z
        %v9 = gpu.cluster_dim_blocks x
        %v10 = gpu.cluster_dim_blocks y
        %v11 = gpu.cluster_dim_blocks z
        STORES
      }
      gpu.return
    }
  }
  func.func @run(%out: memref<?x12xi64>, %gx: index, %gy: index, %gz: index, %cx: index,
                 %cy: index, %cz: index) {
    %c4 = arith.constant 4 : index
    %c1 = arith.constant 1 : index
    gpu.launch_func @k::@clusters CLUSTERS blocks in (%gx, %gy, %gz)
        threads in (%c4, %c1, %c1) args(%out : memref<?x12xi64>)
    return
  }
}
""".replace("STORES", "\n        ".join(
    f"%i{k} = arith.constant {k} : index\n        "
    f"%w{k} = arith.index_cast %v{k} : index to i64\n        "
    f"memref.store %w{k}, %out[%b, %i{k}] : memref<?x12xi64>" for k in range(12)))


def _cluster_expected(grid, cluster):
    """The 12 words per block in NumPy: MLIR's GPU dialect, cluster_id = block_id / size,
    cluster_dim (clusters per grid) = grid / size, cluster_block_id = block_id % size,
    cluster_dim_blocks = size."""
    gx, gy, gz = grid
    z, y, x = np.meshgrid(np.arange(gz), np.arange(gy), np.arange(gx), indexing="ij")
    ids = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1)
    size = np.array(cluster)
    n = len(ids)
    return np.concatenate([ids // size, np.tile(np.array(grid) // size, (n, 1)), ids % size,
                           np.tile(size, (n, 1))], axis=1).astype(np.int64)


@pytest.mark.parametrize("grid,cluster", [((4, 1, 1), (2, 1, 1)), ((6, 4, 2), (3, 2, 1)),
                                          ((2, 3, 4), (1, 1, 4)), ((8, 2, 2), (8, 2, 1))])
def test_cluster_queries_match_the_gpu_dialect(grid, cluster):
    mod = _compile(CLUSTER.replace("CLUSTERS", "clusters in (%cx, %cy, %cz)"))
    out = np.full((int(np.prod(grid)), 12), -1, np.int64)
    mod.run(out, *grid, *cluster)
    assert np.array_equal(out, _cluster_expected(grid, cluster))


def test_cluster_queries_without_clusters_are_clusters_of_one_block():
    """As on an NVIDIA GPU launched without cluster dimensions: every block its own cluster."""
    mod = _compile(CLUSTER.replace("CLUSTERS ", ""))
    grid = (3, 2, 2)
    out = np.full((12, 12), -1, np.int64)
    mod.run(out, *grid, 1, 1, 1)
    assert np.array_equal(out, _cluster_expected(grid, (1, 1, 1)))


def test_a_cluster_that_does_not_divide_the_grid_is_refused_naming_it():
    mod = _compile(CLUSTER.replace("CLUSTERS", "clusters in (%cx, %cy, %cz)"))
    out = np.zeros((6, 12), np.int64)
    with pytest.raises(pywave.ArgumentError,
                       match=r"kernel 'clusters': grid y = 3 is not a multiple of cluster y = 2"):
        mod.run(out, 2, 3, 1, 1, 2, 1)
    with pytest.raises(pywave.ArgumentError, match=r"cluster x = 0 is not a positive"):
        mod.run(out, 2, 3, 1, 0, 1, 1)


def test_distributed_shared_memory_is_a_compile_error_naming_the_op():
    """The blocks of a cluster are not scheduled together on the CPU device: the NVVM ops of
    distributed shared memory and cluster barriers are refused, as every NVVM op is."""
    text = NVVM_OP.replace("%l = nvvm.read.ptx.sreg.laneid : i32",
                           "nvvm.cluster.arrive\n      %l = arith.constant 0 : i32")
    with pytest.raises(pywave.CompileError, match=r"nvvm\.cluster\.arrive.*CPU"):
        _compile(text)


ASSERT_LOCATED = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @t(%no: i1, %yes: i1) kernel {
      %t = gpu.thread_id x
      cf.assert %yes, "holds"
      gpu.printf "thread %lld: before\n", %t : index
      cf.assert %no, "fails" loc(callsite("callee"("lib.cc":7:9) at "main.cc":10:8))
      gpu.printf "thread %lld: after\n", %t : index
      gpu.return
    }
  }
  func.func @main() {
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %f = arith.constant 0 : i1
    %t = arith.constant 1 : i1
    gpu.launch_func @k::@t blocks in (%c1, %c1, %c1) threads in (%c3, %c1, %c1)
        args(%f : i1, %t : i1)
    return
  }
}
"""


def test_device_assert_line_takes_file_and_function_from_the_location(capfd):
    """The line's file, line and function are the assert's location's (the callee of a call
    site, as MLIR's lowering passes them); printf before the assert is flushed, after it is
    never reached."""
    mod = _compile(ASSERT_LOCATED)
    capfd.readouterr()
    with pytest.raises(pywave.KernelFaultError, match=r"in 3 threads .* thread \(0, 0, 0\): "
                       r"assertion `fails` failed \(lib.cc:7: callee\)"):
        mod.main()
    captured = capfd.readouterr()
    assert captured.out == "".join(f"thread {t}: before\n" for t in range(3))
    assert captured.err.splitlines() == [
        f"lib.cc:7: callee: block: [0,0,0], thread: [{t},0,0] Assertion `fails` failed."
        for t in range(3)]
