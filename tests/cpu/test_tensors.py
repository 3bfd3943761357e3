"""DLPack CPU tensors on the CPU device (``target="cpu"``): torch CPU tensors and JAX CPU arrays
are used in place (the kernel sees the caller's data pointer and writes into the caller's
tensor), strided views as strided memrefs, 0-d tensors, f16/bf16; read-only tensors (JAX
arrays, DLPack's READ_ONLY flag) and tensors on another device are typed errors naming the
argument. No GPU. The torch and JAX tests skip where those packages are not installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import pywave
from test_args import FakeTensor, kDLCUDA  # tests/native: DLPack capsules made with ctypes

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed (pip install torch==2.13.0, "
                                        "the CPU build)")
needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                               reason="jax is not installed (pip install jax jaxlib)")

kDLCUDAHost, kDLCUDAManaged = 3, 13


def _compile(text: str):
    return pywave.compile(text, target="cpu", disk_cache=False)


# @at asserts that its argument's first element is at address %expect as the kernel sees it
# (the aligned pointer plus the offset in bytes), so a copy made on the way in would fail it.
AT = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @at(%a: memref<?xf32, strided<[?], offset: ?>>, %expect: index) kernel {
      %c4 = arith.constant 4 : index
      %p = memref.extract_aligned_pointer_as_index %a
          : memref<?xf32, strided<[?], offset: ?>> -> index
      %b, %off, %sz, %st = memref.extract_strided_metadata %a
          : memref<?xf32, strided<[?], offset: ?>> -> memref<f32>, index, index, index
      %ob = arith.muli %off, %c4 : index
      %first = arith.addi %p, %ob : index
      %same = arith.cmpi eq, %first, %expect : index
      cf.assert %same, "not the caller's memory"
      gpu.return
    }
  }
  func.func @at(%a: memref<?xf32, strided<[?], offset: ?>>, %expect: index) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @k::@at blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%a : memref<?xf32, strided<[?], offset: ?>>, %expect : index)
    return
  }
}
"""

# @double doubles a 2-D view in place, whatever its strides (one block per row).
DOUBLE_2D = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @double(%a: memref<?x?xf32, strided<[?, ?], offset: ?>>) kernel {
      %r = gpu.block_id x
      %q = gpu.thread_id x
      %v = memref.load %a[%r, %q] : memref<?x?xf32, strided<[?, ?], offset: ?>>
      %w = arith.addf %v, %v : f32
      memref.store %w, %a[%r, %q] : memref<?x?xf32, strided<[?, ?], offset: ?>>
      gpu.return
    }
  }
  func.func @double(%a: memref<?x?xf32, strided<[?, ?], offset: ?>>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = memref.dim %a, %c0 : memref<?x?xf32, strided<[?, ?], offset: ?>>
    %cols = memref.dim %a, %c1 : memref<?x?xf32, strided<[?, ?], offset: ?>>
    gpu.launch_func @k::@double blocks in (%rows, %c1, %c1) threads in (%cols, %c1, %c1)
        args(%a : memref<?x?xf32, strided<[?, ?], offset: ?>>)
    return
  }
}
"""

# 0-d memrefs: out[] = in[] * 2 + 1.
ZERO_D = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @affine(%in: memref<f32>, %out: memref<f32>) kernel {
      %v = memref.load %in[] : memref<f32>
      %c2 = arith.constant 2.0 : f32
      %c1 = arith.constant 1.0 : f32
      %m = arith.mulf %v, %c2 : f32
      %w = arith.addf %m, %c1 : f32
      memref.store %w, %out[] : memref<f32>
      gpu.return
    }
  }
  func.func @affine(%in: memref<f32>, %out: memref<f32>) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @k::@affine blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%in : memref<f32>, %out : memref<f32>)
    return
  }
}
"""

# f32 -> TYPE with arith.truncf (round to nearest even), one block of n <= 1024 threads.
NARROW = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @narrow(%in: memref<?xf32>, %out: memref<?xTYPE>) kernel {
      %i = gpu.thread_id x
      %v = memref.load %in[%i] : memref<?xf32>
      %w = arith.truncf %v : f32 to TYPE
      memref.store %w, %out[%i] : memref<?xTYPE>
      gpu.return
    }
  }
  func.func @narrow(%in: memref<?xf32>, %out: memref<?xTYPE>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = memref.dim %in, %c0 : memref<?xf32>
    gpu.launch_func @k::@narrow blocks in (%c1, %c1, %c1) threads in (%n, %c1, %c1)
        args(%in : memref<?xf32>, %out : memref<?xTYPE>)
    return
  }
}
"""


@pytest.fixture(scope="module")
def vector_add():
    return _compile((ROOT / "examples" / "vector_add.mlir").read_text())


@pytest.fixture(scope="module")
def at():
    mod = _compile(AT)
    a = np.zeros(4, np.float32)
    mod.at(a, a.ctypes.data)                          # the check can fail: a wrong address
    with pytest.raises(pywave.Error, match="not the caller's memory"):
        mod.at(a, a.ctypes.data + 4)
    return mod


# ---- torch -------------------------------------------------------------------------------

@needs_torch
def test_torch_tensors_are_used_in_place(vector_add, at):
    import torch
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(3000, generator=g), torch.rand(3000, generator=g)
    base = torch.full((3010,), -1.0)
    c = base[5:3005]                              # a view: data_ptr() includes its offset
    ptr = c.data_ptr()
    vector_add(a, b, c)
    assert c.data_ptr() == ptr
    assert np.array_equal(c.numpy(), a.numpy() + b.numpy())
    assert torch.all(base[:5] == -1) and torch.all(base[3005:] == -1)
    for t in (a, c, base[7:], torch.arange(40, dtype=torch.float32)[::3]):
        at.at(t, t.data_ptr())


@needs_torch
@pytest.mark.parametrize("view", ["transpose", "slice", "step"])
def test_torch_strided_views_are_written_in_place(view):
    import torch
    mod = _compile(DOUBLE_2D)
    base = torch.arange(12 * 10, dtype=torch.float32).reshape(12, 10)
    t = {"transpose": lambda x: x.t(), "slice": lambda x: x[2:9, 3:8],
         "step": lambda x: x[1::3, ::2]}[view](base)
    assert not t.is_contiguous()
    expect = base.numpy().copy()
    np_view = {"transpose": lambda x: x.T, "slice": lambda x: x[2:9, 3:8],
               "step": lambda x: x[1::3, ::2]}[view](expect)
    np_view *= 2
    mod.double(t)
    assert np.array_equal(base.numpy(), expect)


@needs_torch
def test_torch_non_contiguous_tensor_for_a_compact_memref_names_the_argument(vector_add):
    import torch
    a = torch.zeros(16)
    with pytest.raises(pywave.ArgumentError,
                       match=r"argument 'c' \(#2\).*compact row-major.*strides \[2\]"):
        vector_add(a[:8], a[:8], a[::2])


@needs_torch
def test_torch_zero_d_tensors():
    import torch
    mod = _compile(ZERO_D)
    x, y = torch.tensor(3.25), torch.tensor(-1.0)
    ptr = y.data_ptr()
    mod.affine(x, y)
    assert y.item() == 7.5 and y.data_ptr() == ptr
    with pytest.raises(pywave.ArgumentError, match=r"argument 'out' \(#1\).*rank"):
        mod.affine(x, torch.zeros(1))


@needs_torch
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_torch_half_precision_in_and_out(dtype):
    import torch
    tdtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype]
    g = torch.Generator().manual_seed(1)
    src = (torch.rand(300, generator=g) - 0.5) * 1000
    # In: bf16.mlir widens with arith.extf, exact for every value.
    widen = _compile((DATA / "bf16.mlir").read_text())
    half = src.to(tdtype)
    out = torch.zeros(300)
    getattr(widen, f"widen_{dtype}")(half, out)
    assert torch.equal(out, half.float())
    # Out: arith.truncf rounds to nearest even, as torch's conversion does.
    narrow = _compile(NARROW.replace("TYPE", dtype))
    res = torch.zeros(300, dtype=tdtype)
    ptr = res.data_ptr()
    narrow.narrow(src, res)
    assert res.data_ptr() == ptr
    assert torch.equal(res.view(torch.int16), src.to(tdtype).view(torch.int16))
    with pytest.raises(pywave.ArgumentError, match=r"argument 'out' \(#1\): dtype mismatch"):
        narrow.narrow(src, torch.zeros(300, dtype=torch.float16 if dtype == "bf16"
                                       else torch.bfloat16))


# ---- JAX ---------------------------------------------------------------------------------

@pytest.fixture
def jnp():
    """jax.numpy making its arrays on JAX's CPU device (a machine with a GPU makes them on
    the GPU by default, which the CPU device refuses)."""
    import jax
    import jax.numpy
    with jax.default_device(jax.devices("cpu")[0]):
        yield jax.numpy


@needs_jax
def test_jax_arrays_are_read_in_place(vector_add, at, jnp):
    a = jnp.arange(2000, dtype=jnp.float32)
    b = jnp.full(2000, 0.5, dtype=jnp.float32)
    c = np.zeros(2000, np.float32)
    vector_add(a, b, c)
    assert np.array_equal(c, np.asarray(a) + np.asarray(b))
    at.at(a, a.unsafe_buffer_pointer())          # a read-only memref: JAX arrays are taken


@needs_jax
def test_jax_array_as_an_output_is_refused_naming_the_argument(vector_add, jnp):
    a = jnp.ones(64, dtype=jnp.float32)
    out = jnp.zeros(64, dtype=jnp.float32)
    with pytest.raises(pywave.ArgumentError,
                       match=r"argument 'c' \(#2\) is read-only \(JAX arrays are immutable\) "
                             r"but memref<\?xf32> writes it"):
        vector_add(a, a, out)
    assert not np.asarray(out).any()                 # nothing was written


@needs_jax
def test_jax_zero_d_and_bf16_inputs(jnp):
    mod = _compile(ZERO_D)
    y = np.zeros((), np.float32)
    mod.affine(jnp.float32(-2.5) * jnp.ones((), jnp.float32), y)
    assert y == -4.0
    widen = _compile((DATA / "bf16.mlir").read_text())
    src = np.linspace(-300, 300, 257, dtype=np.float32)
    half = jnp.asarray(src).astype(jnp.bfloat16)
    out = np.zeros(257, np.float32)
    widen.widen_bf16(half, out)
    assert np.array_equal(out, np.asarray(half.astype(jnp.float32)))


# ---- read-only and foreign-device capsules (no torch or JAX needed) -----------------------

def test_read_only_tensor_for_a_written_memref_is_refused(vector_add):
    a = np.ones(8, np.float32)
    ro = np.zeros(8, np.float32)
    ro.flags.writeable = False                       # NumPy sets DLPack's READ_ONLY flag
    vector_add(ro, ro, a)                            # read: fine
    assert not a.any()
    for arg in (ro, ro.__dlpack__(max_version=(1, 0))):
        with pytest.raises(pywave.ArgumentError,
                           match=r"argument 'c' \(#2\) is read-only \(its DLPack producer marks "
                                 r"it READ_ONLY\)"):
            vector_add(a, a, arg)
    assert not ro.any()


@pytest.mark.parametrize("versioned", [True, False])
@pytest.mark.parametrize("device", [kDLCUDA, kDLCUDAManaged])
def test_gpu_capsule_is_refused_naming_the_argument(vector_add, versioned, device):
    host = np.zeros(8, np.float32)
    t = FakeTensor(shape=(8,), device=(device, 0), versioned=versioned,
                   data=host.ctypes.data)
    kind = {kDLCUDA: "cuda", kDLCUDAManaged: "cuda_managed"}[device]
    cap = t.capsule()
    for _ in range(2):      # refused before it is consumed: the second try says the same
        with pytest.raises(pywave.ArgumentError,
                           match=rf"argument 'b' \(#1\) is on {kind}:0 \(DLPack capsule\)"
                                 r".*CPU device \(target cpu\)"):
            vector_add(host, cap, host.copy())
    assert t.deleted == 0


def test_pinned_host_capsule_is_written_in_place(vector_add):
    """kDLCUDAHost memory is host memory: a CPU-device kernel writes it in place."""
    out = np.full(8, -1, np.float32)
    t = FakeTensor(shape=(8,), device=(kDLCUDAHost, 0), data=out.ctypes.data)
    a = np.arange(8, dtype=np.float32)
    vector_add(a, a, t.capsule())
    assert np.array_equal(out, 2 * a)
    assert t.deleted == 1


def test_an_address_that_only_stays_a_number_is_not_a_write():
    """The write analysis (pywave.host.signature) follows memref.extract_aligned_pointer_as_index:
    an address only computed with and asserted on leaves the memref read-only; one that
    becomes a pointer again (here llvm.inttoptr) makes it written."""
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    _compile(AT).at(ro, ro.ctypes.data)
    stored = AT.replace('cf.assert %same, "not the caller\'s memory"',
                        '%i = arith.index_cast %first : index to i64\n'
                        '      %ptr = llvm.inttoptr %i : i64 to !llvm.ptr\n'
                        '      %one = arith.constant 1.0 : f32\n'
                        '      llvm.store %one, %ptr : f32, !llvm.ptr')
    with pytest.raises(pywave.ArgumentError, match=r"argument 'a' \(#0\) is read-only"):
        _compile(stored).at(ro, ro.ctypes.data)
