"""nvgpu and vector ops in kernels lowered with 32-bit ``index``
(``LoweringOptions(index_bitwidth=32)``, ``--index-bitwidth=32``;
pywave.kernels.rewrites.index_width).

MLIR 22's ``convert-nvgpu-to-nvvm`` and ``convert-vector-to-llvm`` lower with a 64-bit index
whatever the kernel's width, and their casts between ``index`` and i64 and from memrefs to
64-bit descriptors met the kernel's 32-bit values: "LLVM Translation failed for operation:
builtin.unrealized_conversion_cast". CPU: the rewrite on hand-written casts, and kernels using
mbarriers, cp.async, ldmatrix, warpgroup MMA and vector loads, stores, transfers and index
vectors compiled for sm_90a at both widths (the TMA programs are in gpu/test_sm90.py). GPU (any
NVIDIA GPU, marked ``gpu``): a vector kernel's results at both widths, checked with NumPy.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from pywave import mlirutil, pipeline, runtime
from pywave.errors import CompileError
from pywave.lowering import LoweringOptions, nvvm_pipeline

ir = pytest.importorskip("mlir.ir")
from pywave.kernels.rewrites import index_width  # noqa: E402 - needs MLIR

DESC2 = "!llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>"
CASTS = f"""
module attributes {{gpu.container_module}} {{
  gpu.module @k {{
    gpu.func @f(%i: index, %m: memref<?x4xf32, strided<[?, 1], offset: ?>>, %s: memref<f32>,
                %v: memref<4xf32>, %w: i64, %vi: vector<4xindex>, %w2: i64,
                %out: memref<?xindex>) kernel {{
      %a = builtin.unrealized_conversion_cast %i : index to i64
      %d = builtin.unrealized_conversion_cast %m
          : memref<?x4xf32, strided<[?, 1], offset: ?>> to {DESC2}
      %z = builtin.unrealized_conversion_cast %s : memref<f32> to !llvm.struct<(ptr, ptr, i64)>
      %r = builtin.unrealized_conversion_cast %v : memref<4xf32> to {DESC2}
      %back = builtin.unrealized_conversion_cast %w : i64 to index
      %same = builtin.unrealized_conversion_cast %back : index to i64
      %vw = builtin.unrealized_conversion_cast %vi : vector<4xindex> to vector<4xi64>
      %n = builtin.unrealized_conversion_cast %w2 : i64 to index
      %size = llvm.extractvalue %d[3, 1] : {DESC2}
      %off = llvm.extractvalue %z[2] : !llvm.struct<(ptr, ptr, i64)>
      %sum = llvm.add %a, %same : i64
      %lane = llvm.extractelement %vw[%sum : i64] : vector<4xi64>
      %all = llvm.add %lane, %size : i64
      %ptr = llvm.extractvalue %z[1] : !llvm.struct<(ptr, ptr, i64)>
      %p = llvm.getelementptr %ptr[%all] : (!llvm.ptr, i64) -> !llvm.ptr, f32
      %q = llvm.getelementptr %p[%off] : (!llvm.ptr, i64) -> !llvm.ptr, f32
      %x = llvm.mlir.constant(1.0 : f32) : f32
      llvm.store %x, %q : f32, !llvm.ptr
      %c0 = arith.constant 0 : index
      memref.store %n, %out[%c0] : memref<?xindex>
      gpu.return
    }}
  }}
}}
"""


def _casts(text: str) -> list[str]:
    return re.findall(r"builtin\.unrealized_conversion_cast .*", text)


def test_casts_to_64_bit_index_types_become_conversions_at_the_kernel_width():
    with ir.Context():
        module = ir.Module.parse(CASTS)
        assert index_width.widen_index_casts(module, 32) == 6
        module.operation.verify()
        text = str(module)
    # index <-> i64, scalars and vectors: MLIR's own conversion (sext / trunc at 32 bits)
    assert "arith.index_cast %arg0 : index to i64" in text
    assert "arith.index_cast %arg5 : vector<4xindex> to vector<4xi64>" in text
    assert "arith.index_cast %arg6 : i64 to index" in text
    # a cast back to the source type is folded (as reconcile-unrealized-casts would), not
    # truncated and extended
    assert re.search(r"llvm\.add %\d+, %arg4 : i64", text), text
    casts = _casts(text)
    # the memrefs now cast to descriptors of the kernel's width...
    assert any("to !llvm.struct<(ptr, ptr, i32, array<2 x i32>, array<2 x i32>)>" in c
               for c in casts), casts
    assert any("memref<f32> to !llvm.struct<(ptr, ptr, i32)>" in c for c in casts), casts
    # ...widened field by field: offset, 2 sizes, 2 strides; the rank-0 one's offset
    assert text.count("llvm.sext") == 6
    assert "llvm.insertvalue" in text and "llvm.mlir.poison" in text
    # left alone: a struct that is no descriptor of the memref (rank 1, not 2)
    assert len(casts) == 3 and any(f"memref<4xf32> to {DESC2}" in c for c in casts), casts


def test_widened_casts_lower_without_leftover_casts():
    text = CASTS.replace(f"      %r = builtin.unrealized_conversion_cast %v : memref<4xf32> to "
                         f"{DESC2}\n", "")
    with ir.Context():
        module = ir.Module.parse(text)
        index_width.widen_index_casts(module, 32)
        mlirutil.run_pipeline(module, nvvm_pipeline(LoweringOptions(index_bitwidth=32)), "lower")
        lowered = str(module)
    assert not _casts(lowered), _casts(lowered)
    assert "llvm.func @f(%arg0: i32," in lowered
    assert re.search(r"llvm\.sext %arg0 : i32 to i64", lowered), lowered


def test_kernels_at_64_bit_index_are_left_as_they_are():
    with ir.Context():
        module = ir.Module.parse(CASTS)
        before = str(module)
        assert index_width.widen_index_casts(module, 64) == 0
        assert str(module) == before


# -------------------------------------------------------------------- whole kernels, PTX

BARRIERS = """
!barrier = !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>, num_barriers = 4>
!token = !nvgpu.mbarrier.token
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @barriers(%which: index, %count: index, %bytes: index, %out: memref<?xi8>) kernel {
      %ticks = arith.constant 1000 : index
      %phase = arith.constant false
      %tid = gpu.thread_id x
      %bar = nvgpu.mbarrier.create -> !barrier
      nvgpu.mbarrier.init %bar[%which], %count : !barrier
      %tok = nvgpu.mbarrier.arrive %bar[%which] : !barrier -> !token
      %done = nvgpu.mbarrier.test.wait %bar[%which], %tok : !barrier, !token
      nvgpu.mbarrier.arrive.expect_tx %bar[%tid], %bytes : !barrier
      nvgpu.mbarrier.try_wait.parity %bar[%tid], %phase, %ticks : !barrier
      %b = arith.extui %done : i1 to i8
      memref.store %b, %out[%tid] : memref<?xi8>
      gpu.return
    }
    gpu.func @async_copy(%src: memref<?xf32>, %dst: memref<?xf32>, %i: index)
        workgroup(%smem : memref<128xf32, #gpu.address_space<workgroup>>) kernel {
      %tid = gpu.thread_id x
      %t = nvgpu.device_async_copy %src[%i], %smem[%tid], 4
          : memref<?xf32> to memref<128xf32, #gpu.address_space<workgroup>>
      %g = nvgpu.device_async_create_group %t
      nvgpu.device_async_wait %g
      %v = memref.load %smem[%tid] : memref<128xf32, #gpu.address_space<workgroup>>
      memref.store %v, %dst[%tid] : memref<?xf32>
      gpu.return
    }
    gpu.func @ldmatrix(%dst: memref<?xf16>, %row: index, %col: index)
        workgroup(%smem : memref<16x16xf16, #gpu.address_space<workgroup>>) kernel {
      %m = nvgpu.ldmatrix %smem[%row, %col] {numTiles = 4 : i32, transpose = false}
          : memref<16x16xf16, #gpu.address_space<workgroup>> -> vector<4x2xf16>
      %e = vector.extract %m[0, 0] : f16 from vector<4x2xf16>
      %tid = gpu.thread_id x
      memref.store %e, %dst[%tid] : memref<?xf16>
      gpu.return
    }
  }
}
"""

WARPGROUP = """
!tmA = !nvgpu.tensormap.descriptor<tensor = memref<128x64xf16, 3>, swizzle = swizzle_128b,
                                   l2promo = none, oob = zero, interleave = none>
!tmB = !nvgpu.tensormap.descriptor<tensor = memref<64x64xf16, 3>, swizzle = swizzle_128b,
                                   l2promo = none, oob = zero, interleave = none>
!dA = !nvgpu.warpgroup.descriptor<tensor = memref<128x64xf16, 3>>
!dB = !nvgpu.warpgroup.descriptor<tensor = memref<64x128xf16, 3>>
!acc = !nvgpu.warpgroup.accumulator<fragmented = vector<128x128xf32>>
module attributes {gpu.container_module} {
  memref.global "private" @smemA : memref<128x64xf16, 3> {alignment = 1024 : i64}
  memref.global "private" @smemB : memref<64x128xf16, 3> {alignment = 1024 : i64}
  memref.global "private" @smemD : memref<128x128xf32, 3> {alignment = 128 : i64}
  func.func @main(%a: memref<128x64xf16>, %b: memref<64x128xf16>, %d: memref<128x128xf32>) {
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %c128 = arith.constant 128 : index
    %ua = memref.cast %a : memref<128x64xf16> to memref<*xf16>
    %ub = memref.cast %b : memref<64x128xf16> to memref<*xf16>
    %tA = nvgpu.tma.create.descriptor %ua box[%c128, %c64] : memref<*xf16> -> !tmA
    %tB = nvgpu.tma.create.descriptor %ub box[%c64, %c64] : memref<*xf16> -> !tmB
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c128, %sy = %c1, %sz = %c1) {
      %sa = memref.get_global @smemA : memref<128x64xf16, 3>
      %sb = memref.get_global @smemB : memref<64x128xf16, 3>
      %sd = memref.get_global @smemD : memref<128x128xf32, 3>
      %da = nvgpu.warpgroup.generate.descriptor %sa, %tA : memref<128x64xf16, 3>, !tmA -> !dA
      %db = nvgpu.warpgroup.generate.descriptor %sb, %tB : memref<64x128xf16, 3>, !tmB -> !dB
      %acc = nvgpu.warpgroup.mma.init.accumulator -> !acc
      %r = nvgpu.warpgroup.mma %da, %db, %acc {transposeB} : !dA, !dB, !acc -> !acc
      nvgpu.warpgroup.mma.store %r, %sd : !acc to memref<128x128xf32, 3>
      %tid = gpu.thread_id x
      %v = memref.load %sd[%tid, %tid] : memref<128x128xf32, 3>
      memref.store %v, %d[%tid, %tid] : memref<128x128xf32>
      gpu.terminator
    }
    return
  }
}
"""


VECTORS = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @vectors(%m: memref<?xf32>, %o: memref<?xi32>, %i: index) kernel {
      %pad = arith.constant 0.0 : f32
      %x = vector.load %m[%i] : memref<?xf32>, vector<4xf32>
      %tid = gpu.thread_id x
      vector.store %x, %m[%tid] : memref<?xf32>, vector<4xf32>
      %t = vector.transfer_read %m[%tid], %pad : memref<?xf32>, vector<4xf32>
      vector.transfer_write %t, %m[%i] : vector<4xf32>, memref<?xf32>
      %s = vector.step : vector<4xindex>
      %b = vector.broadcast %tid : index to vector<4xindex>
      %sum = arith.addi %s, %b : vector<4xindex>
      %e = vector.extract %sum[%i] : index from vector<4xindex>
      %r = vector.reduction <add>, %sum : vector<4xindex> into index
      %q = arith.addi %e, %r : index
      %qi = arith.index_cast %q : index to i32
      memref.store %qi, %o[%tid] : memref<?xi32>
      %sumi = arith.index_cast %sum : vector<4xindex> to vector<4xi32>
      vector.store %sumi, %o[%i] : memref<?xi32>, vector<4xi32>
      gpu.return
    }
  }
}
"""


def _ptx(text: str, index_bitwidth: int) -> str:
    # MLIR's whole kernel ABI: the tests compare the widths of every parameter
    art = pipeline.Pipeline(text, target="sm_90a", format="ptx",
                            lowering=LoweringOptions(features="+ptx80",
                                                     index_bitwidth=index_bitwidth,
                                                     keep_kernel_params=True)).run()
    return b"".join(b.data for b in art.binaries).decode()


#: PTX each program must hold, with the count (equal at both widths).
EXPECTED = {
    "barriers": (BARRIERS, ["mbarrier.init.shared.b64", "mbarrier.arrive.shared.b64",
                            "mbarrier.test_wait.shared.b64",
                            "mbarrier.arrive.expect_tx.shared.b64",
                            "mbarrier.try_wait.parity.shared.b64", "cp.async.ca.shared.global",
                            "cp.async.commit_group", "cp.async.wait_group",
                            "ldmatrix.sync.aligned.m8n8.x4.shared.b16"]),
    "warpgroup": (WARPGROUP, ["wgmma.fence.sync.aligned", "wgmma.mma_async.sync.aligned",
                              "wgmma.commit_group.sync.aligned",
                              "wgmma.wait_group.sync.aligned"]),
    # vector loads and stores (plain and guarded transfers) of f32, and of the index vector
    # as i32
    "vectors": (VECTORS, ["ld.global.b32", "st.global.b32", "setp.lt"]),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_kernels_compile_at_32_bit_index(name):
    text, instructions = EXPECTED[name]
    wide, narrow = _ptx(text, 64), _ptx(text, 32)
    for instruction in instructions:
        assert wide.count(instruction) >= 1, instruction
        assert narrow.count(instruction) == wide.count(instruction), instruction
    # the kernels' index parameters are 32-bit at 32 (memref sizes, index arguments)
    assert re.search(r"\.param \.u32 \w+_param_\d+", narrow)
    assert len(re.findall(r"\.param \.u64", narrow)) < len(re.findall(r"\.param \.u64", wide))


def test_memrefs_of_index_through_64_bit_lowerings_are_refused_at_32_bit_index():
    """convert-vector-to-llvm addresses index elements as i64, the kernel's memref ops as
    i32: one memref, two layouts. A CompileError naming the op's line (it failed LLVM
    translation before)."""
    text = VECTORS.replace("%o: memref<?xi32>", "%o: memref<?xindex>").replace(
        "%sumi = arith.index_cast %sum : vector<4xindex> to vector<4xi32>\n", "").replace(
        "vector.store %sumi, %o[%i] : memref<?xi32>, vector<4xi32>",
        "vector.store %sum, %o[%i] : memref<?xindex>, vector<4xindex>").replace(
        "memref.store %qi, %o[%tid] : memref<?xi32>", "memref.store %q, %o[%tid] : memref<?xindex>")
    assert "memref<?xi32>" not in text
    assert _ptx(text, 64)
    with pytest.raises(CompileError, match=r"vector op at line 19, column \d+ accesses the "
                       r"memref type memref<\?xindex> with index_bitwidth=32") as err:
        _ptx(text, 32)
    assert err.value.line == 19


# -------------------------------------------------------------------------- on the GPU

#: 16 threads, 4 lanes each: out[k] = in[k] + k for the 62 elements of in, and -1 + k for the
#: two lanes past its end (a masked transfer_read's padding); the kernel's index values and
#: in's size go through convert-vector-to-llvm's 64-bit lowering.
VECTOR_PROGRAM = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @add_index(%in: memref<?xf32>, %out: memref<?xf32>) kernel {
      %c4 = arith.constant 4 : index
      %pad = arith.constant -1.0 : f32
      %tid = gpu.thread_id x
      %i = arith.muli %tid, %c4 : index
      %v = vector.transfer_read %in[%i], %pad : memref<?xf32>, vector<4xf32>
      %s = vector.step : vector<4xindex>
      %b = vector.broadcast %i : index to vector<4xindex>
      %k = arith.addi %s, %b : vector<4xindex>
      %ki = arith.index_cast %k : vector<4xindex> to vector<4xi32>
      %kf = arith.sitofp %ki : vector<4xi32> to vector<4xf32>
      %r = arith.addf %v, %kf : vector<4xf32>
      vector.store %r, %out[%i] : memref<?xf32>, vector<4xf32>
      gpu.return
    }
  }
  func.func @main() -> memref<?xf32> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c16 = arith.constant 16 : index
    %c62 = arith.constant 62 : index
    %c64 = arith.constant 64 : index
    %half = arith.constant 0.5 : f32
    %host = memref.alloc(%c62) : memref<?xf32>
    scf.for %j = %c0 to %c62 step %c1 {
      %ji = arith.index_cast %j : index to i32
      %jf = arith.sitofp %ji : i32 to f32
      %x = arith.mulf %jf, %half : f32
      memref.store %x, %host[%j] : memref<?xf32>
    }
    %in = gpu.alloc(%c62) : memref<?xf32>
    %out = gpu.alloc(%c64) : memref<?xf32>
    gpu.memcpy %in, %host : memref<?xf32>, memref<?xf32>
    gpu.launch_func @k::@add_index blocks in (%c1, %c1, %c1) threads in (%c16, %c1, %c1)
        args(%in : memref<?xf32>, %out : memref<?xf32>)
    %result = memref.alloc(%c64) : memref<?xf32>
    gpu.memcpy %result, %out : memref<?xf32>, memref<?xf32>
    gpu.dealloc %in : memref<?xf32>
    gpu.dealloc %out : memref<?xf32>
    return %result : memref<?xf32>
  }
}
"""


def test_vector_program_compiles_at_both_widths():
    """The 4-lane store (4 stores of 4 bytes: the memref promises 4-byte alignment only) and
    the transfer's bound checks against in's size, at both widths."""
    for ptx in (_ptx(VECTOR_PROGRAM, 32), _ptx(VECTOR_PROGRAM, 64)):
        assert ptx.count("st.global.b32") == 4
        assert ptx.count("setp.") >= 4


@pytest.mark.parametrize("device_name", [pytest.param("gpu", marks=pytest.mark.gpu), "cpu"])
@pytest.mark.parametrize("index_bitwidth", [64, 32])
def test_vector_kernel_results_at_both_widths(index_bitwidth, device_name, compile_gpu):
    """On an NVIDIA GPU and on the CPU device (target="cpu"): the same results."""
    target = {}
    if device_name == "cpu":
        target = {"target": "cpu"}
    elif not runtime.device_count(runtime.KDLCUDA):
        pytest.skip("needs an NVIDIA GPU")
    mod = compile_gpu(VECTOR_PROGRAM, lowering={"index_bitwidth": index_bitwidth}, **target)
    got = np.from_dlpack(mod.main())
    k = np.arange(64, dtype=np.float32)
    expected = np.where(k < 62, k * np.float32(0.5), np.float32(-1)) + k
    np.testing.assert_array_equal(got, expected)
