"""gfx11 WMMA lowering of ``gpu.subgroup_mma_*`` (pywave.kernels.rewrites.amdgpu_wmma), without an AMD GPU.

Two checks:

* **A wave emulated on the CPU.** A kernel body using the subgroup MMA ops is rewritten by
  ``lower_wmma`` exactly as for gfx1100; then ``gpu.lane_id`` becomes an argument, and each
  ``rocdl.wmma.*`` becomes a hand-off to a NumPy model of the instruction. The rewritten body is
  JIT-compiled for the CPU and run by 32 threads (one per lane) that meet at the WMMA, where the
  model computes D = A x B + C from the 32 lanes' registers. The model reads the registers as
  AMD's RDNA3 ISA guide lays them out (lane l: A row l % 16, B column l % 16, C/D VGPR v row
  2v + l // 16, column l % 16, f16 C/D in the half OPSEL names; lanes 16-31 must repeat lanes
  0-15), written here independently of the rewrite. The unused f16 half is NaN after a WMMA, so
  a store of the wrong half fails. The results must equal NumPy's matmul.
* **Compiled for gfx1100.** The kernels go through pywave's AMD pipeline and the emitted
  assembly holds the ``v_wmma_*`` instructions (with ``op_sel`` where asked); chips without
  gfx11 WMMA get a CompileError naming the op and the chip.
"""

from __future__ import annotations

import ctypes
import re
import threading

import numpy as np
import pytest
from mlir import execution_engine, ir, passmanager, runtime
from mlir.dialects import arith, func, vector

import pywave
from pywave.api import build
from pywave.kernels import rocdl
from pywave.kernels.rewrites.amdgpu_wmma import lower_wmma

WAVE = 32
KIND_F32, KIND_F16_LOW, KIND_F16_HIGH = 0, 1, 2

#: The kernel a test writes (``{args}``, ``{body}``), with the exchange buffers of the model.
TEMPLATE = """
func.func private @wmma_sync(i64, i64) attributes {{llvm.emit_c_interface}}
func.func @kernel(%lane: index, %xa: memref<32x16xf16>, %xb: memref<32x16xf16>,
                  %xc16: memref<32x16xf16>, %xd16: memref<32x16xf16>,
                  %xc32: memref<32x8xf32>, %xd32: memref<32x8xf32>, {args})
    attributes {{llvm.emit_c_interface}} {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
{body}
  return
}}
"""

CPU_PIPELINE = ("builtin.module(convert-scf-to-cf, expand-strided-metadata, "
                "convert-vector-to-llvm, finalize-memref-to-llvm, convert-to-llvm, "
                "reconcile-unrealized-casts)")


# --------------------------------------------------------------------------------------------
# The WMMA instruction as the RDNA3 ISA guide describes it
# --------------------------------------------------------------------------------------------
def wmma_model(kind: int, x: dict[str, np.ndarray]) -> None:
    """One V_WMMA_{F32,F16}_16X16X16_F16 of a wave32 from the lanes' exchange rows."""
    a, b = x["a"].astype(np.float32), x["b"].astype(np.float32)
    assert np.array_equal(a[16:], a[:16]), "gfx11 needs lanes 16-31 to repeat A of lanes 0-15"
    assert np.array_equal(b[16:], b[:16]), "gfx11 needs lanes 16-31 to repeat B of lanes 0-15"
    mat_a = a[:16]            # lane m holds row m, element k = column k
    mat_b = b[:16].T          # lane n holds column n, element k = row k
    mat_c = np.zeros((16, 16), np.float32)
    half = kind - KIND_F16_LOW
    for lane in range(WAVE):
        for v in range(8):
            row, col = 2 * v + lane // 16, lane % 16
            mat_c[row, col] = x["c32"][lane, v] if kind == KIND_F32 else \
                np.float32(x["c16"][lane, 2 * v + half])
    mat_d = mat_a @ mat_b + mat_c
    for lane in range(WAVE):
        if kind != KIND_F32:
            x["d16"][lane, :] = np.nan   # the other half: nothing may read it
        for v in range(8):
            row, col = 2 * v + lane // 16, lane % 16
            if kind == KIND_F32:
                x["d32"][lane, v] = mat_d[row, col]
            else:
                x["d16"][lane, 2 * v + half] = np.float16(mat_d[row, col])


# --------------------------------------------------------------------------------------------
# Running a rewritten kernel as 32 CPU threads
# --------------------------------------------------------------------------------------------
def _hand_off_wmma(kernel: ir.Operation) -> int:
    """Replace gpu.lane_id by the %lane argument and each rocdl.wmma by: store A, B, C to the
    exchange rows of the lane, call @wmma_sync(lane, kind), load D. Returns the WMMA count."""
    entry = kernel.regions[0].blocks[0]
    lane, xa, xb, xc16, xd16, xc32, xd32 = list(entry.arguments)[:7]
    ops: list[ir.Operation] = []
    kernel.walk(lambda op: (ops.append(op), ir.WalkResult.ADVANCE)[1])
    count = 0
    i64 = ir.IntegerType.get_signless(64)
    for op in ops:
        if op.name == "gpu.lane_id":
            op.results[0].replace_all_uses_with(lane)
            op.erase()
        elif op.name.startswith("rocdl.wmma."):
            a, b, c = op.operands
            f32 = op.name == "rocdl.wmma.f32.16x16x16.f16"
            opsel = "opsel" in op.attributes and ir.BoolAttr(op.attributes["opsel"]).value
            kind = KIND_F32 if f32 else (KIND_F16_HIGH if opsel else KIND_F16_LOW)
            with ir.InsertionPoint(op), op.location:
                zero = arith.constant(ir.IndexType.get(), 0)
                vector.store(a, xa, [lane, zero])
                vector.store(b, xb, [lane, zero])
                vector.store(c, xc32 if f32 else xc16, [lane, zero])
                lane64 = arith.index_cast(i64, lane)
                func.call([], "wmma_sync", [lane64, arith.constant(i64, kind)])
                d = vector.load(op.results[0].type, xd32 if f32 else xd16, [lane, zero])
            op.results[0].replace_all_uses_with(d)
            op.erase()
            count += 1
    return count


def run_wave(args: str, body: str, arrays: list[np.ndarray]) -> int:
    """Rewrite the kernel for gfx1100, run it as a wave of 32 CPU threads on ``arrays``
    (updated in place); returns how many WMMAs ran per lane."""
    ctx = ir.Context()
    module = ir.Module.parse(TEMPLATE.format(args=args, body=body), ctx)
    assert lower_wmma(module.operation, "gfx1100") > 0
    assert "gpu.subgroup_mma" not in str(module)
    with ctx, ir.Location.unknown():
        kernel = next(op for op in module.body.operations
                      if op.operation.name == "func.func" and
                      ir.StringAttr(op.attributes["sym_name"]).value == "kernel")
        count = _hand_off_wmma(kernel.operation)
    module.operation.verify()
    passmanager.PassManager.parse(CPU_PIPELINE, ctx).run(module.operation)
    engine = execution_engine.ExecutionEngine(module, opt_level=1)

    exchange = {"a": np.zeros((WAVE, 16), np.float16), "b": np.zeros((WAVE, 16), np.float16),
                "c16": np.zeros((WAVE, 16), np.float16), "d16": np.zeros((WAVE, 16), np.float16),
                "c32": np.zeros((WAVE, 8), np.float32), "d32": np.zeros((WAVE, 8), np.float32)}
    kinds = [0] * WAVE
    errors: list[BaseException] = []

    def at_barrier() -> None:
        try:
            assert len(set(kinds)) == 1, f"lanes disagree on the WMMA kind: {kinds}"
            wmma_model(kinds[0], exchange)
        except BaseException as exc:  # reported after the wave ends
            errors.append(exc)
            raise

    barrier = threading.Barrier(WAVE, action=at_barrier, timeout=60)

    @ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)
    def wmma_sync(lane: int, kind: int) -> None:
        kinds[lane] = kind
        try:
            barrier.wait()
        except BaseException as exc:
            errors.append(exc)

    engine.register_runtime("wmma_sync", wmma_sync)
    buffers = [exchange[k] for k in ("a", "b", "c16", "d16", "c32", "d32")] + arrays
    descriptors = [ctypes.pointer(ctypes.pointer(runtime.get_ranked_memref_descriptor(b)))
                   for b in buffers]

    def lane_main(lane: int) -> None:
        engine.invoke("kernel", ctypes.pointer(ctypes.c_int64(lane)), *descriptors)

    threads = [threading.Thread(target=lane_main, args=(lane,)) for lane in range(WAVE)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    return count


def ints(rng: np.random.Generator, shape: tuple[int, ...], dtype) -> np.ndarray:
    """Small integers: every product and sum below is exact in f16 and f32."""
    return rng.integers(-3, 4, size=shape).astype(dtype)


# --------------------------------------------------------------------------------------------
# The lowering, run
# --------------------------------------------------------------------------------------------
def test_f32_accumulator_at_offsets_and_lead_dimensions():
    rng = np.random.default_rng(1)
    a, b = ints(rng, (32, 48), np.float16), ints(rng, (16, 16), np.float16)
    c, d = ints(rng, (20, 16), np.float32), ints(rng, (16, 40), np.float32)
    expect = d.copy()
    expect[:, 20:36] = a[16:, 8:24].astype(np.float32) @ b.astype(np.float32) + c[4:]
    body = """
  %A = gpu.subgroup_mma_load_matrix %a[%c16, %c8] {leadDimension = 48 : index} : memref<32x48xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
  %B = gpu.subgroup_mma_load_matrix %b[%c0, %c0] {leadDimension = 16 : index} : memref<16x16xf16> -> !gpu.mma_matrix<16x16xf16, "BOp">
  %C = gpu.subgroup_mma_load_matrix %c[%c4, %c0] {leadDimension = 16 : index} : memref<20x16xf32> -> !gpu.mma_matrix<16x16xf32, "COp">
  %R = gpu.subgroup_mma_compute %A, %B, %C : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
  %c20 = arith.constant 20 : index
  gpu.subgroup_mma_store_matrix %R, %d[%c0, %c20] {leadDimension = 40 : index} : !gpu.mma_matrix<16x16xf32, "COp">, memref<16x40xf32>
"""
    args = "%a: memref<32x48xf16>, %b: memref<16x16xf16>, %c: memref<20x16xf32>, %d: memref<16x40xf32>"
    assert run_wave(args, body, [a, b, c, d]) == 1
    np.testing.assert_array_equal(d, expect)


def test_transposed_loads_and_store_on_a_strided_subview():
    rng = np.random.default_rng(2)
    big = ints(rng, (24, 40), np.float16)
    b, c = ints(rng, (16, 16), np.float16), ints(rng, (16, 16), np.float32)
    d = np.zeros((16, 16), np.float32)
    sub = big[5:21, 3:19]            # the subview below
    mat_a, mat_b = sub.T.astype(np.float32), b.T.astype(np.float32)
    expect = (mat_a @ mat_b + c.T).T  # C loaded and D stored transposed
    body = """
  %sv = memref.subview %big[5, 3] [16, 16] [1, 1] : memref<24x40xf16> to memref<16x16xf16, strided<[40, 1], offset: 203>>
  %A = gpu.subgroup_mma_load_matrix %sv[%c0, %c0] {leadDimension = 40 : index, transpose} : memref<16x16xf16, strided<[40, 1], offset: 203>> -> !gpu.mma_matrix<16x16xf16, "AOp">
  %B = gpu.subgroup_mma_load_matrix %b[%c0, %c0] {leadDimension = 16 : index, transpose} : memref<16x16xf16> -> !gpu.mma_matrix<16x16xf16, "BOp">
  %C = gpu.subgroup_mma_load_matrix %c[%c0, %c0] {leadDimension = 16 : index, transpose} : memref<16x16xf32> -> !gpu.mma_matrix<16x16xf32, "COp">
  %R = gpu.subgroup_mma_compute %A, %B, %C {a_transpose, b_transpose} : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
  gpu.subgroup_mma_store_matrix %R, %d[%c0, %c0] {leadDimension = 16 : index, transpose} : !gpu.mma_matrix<16x16xf32, "COp">, memref<16x16xf32>
"""
    args = "%big: memref<24x40xf16>, %b: memref<16x16xf16>, %c: memref<16x16xf32>, %d: memref<16x16xf32>"
    run_wave(args, body, [big, b, c, d])
    np.testing.assert_array_equal(d, expect)


F16_BODY = """
  %A = gpu.subgroup_mma_load_matrix %a[%c0, %c0] {leadDimension = 16 : index} : memref<16x16xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
  %B = gpu.subgroup_mma_load_matrix %b[%c0, %c0] {leadDimension = 16 : index} : memref<16x16xf16> -> !gpu.mma_matrix<16x16xf16, "BOp">
  %C = gpu.subgroup_mma_load_matrix %c[%c0, %c0] {leadDimension = 32 : index LOAD_ATTR} : memref<16x32xf16> -> !gpu.mma_matrix<16x16xf16, "COp">
  %R = gpu.subgroup_mma_compute %A, %B, %C COMPUTE_ATTR : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xf16, "COp">
  %R2 = gpu.subgroup_mma_compute %A, %B, %R SECOND_ATTR : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xf16, "COp">
  gpu.subgroup_mma_store_matrix %R, %c[%c0, %c16] {leadDimension = 32 : index STORE_ATTR} : !gpu.mma_matrix<16x16xf16, "COp">, memref<16x32xf16>
  gpu.subgroup_mma_store_matrix %R2, %d[%c0, %c0] {leadDimension = 16 : index} : !gpu.mma_matrix<16x16xf16, "COp">, memref<16x16xf16>
"""


@pytest.mark.parametrize("load,compute,second,store", [
    ("", "", "", ""),
    (", opSelect", "{opSelect}", "{opSelect}", ", opSelect"),
    ("", "{opSelect}", "", ""),              # the halves move between ops
    (", opSelect", "", "{opSelect}", ", opSelect"),
])
def test_f16_accumulator_in_either_half(load, compute, second, store):
    rng = np.random.default_rng(3)
    a, b = ints(rng, (16, 16), np.float16), ints(rng, (16, 16), np.float16)
    c, d = ints(rng, (16, 32), np.float16), np.zeros((16, 16), np.float16)
    prod = a.astype(np.float32) @ b.astype(np.float32)
    first = prod + c[:, :16].astype(np.float32)
    expect_c = c.copy()
    expect_c[:, 16:] = first.astype(np.float16)
    body = (F16_BODY.replace("LOAD_ATTR", load).replace("COMPUTE_ATTR", compute)
            .replace("SECOND_ATTR", second).replace("STORE_ATTR", store))
    args = "%a: memref<16x16xf16>, %b: memref<16x16xf16>, %c: memref<16x32xf16>, %d: memref<16x16xf16>"
    assert run_wave(args, body, [a, b, c, d]) == 2
    np.testing.assert_array_equal(c, expect_c)
    np.testing.assert_array_equal(d, (prod + first).astype(np.float16))


@pytest.mark.parametrize("acc,opsel", [("f32", ""), ("f16", "{opSelect}")])
def test_loop_carried_accumulator_over_k(acc, opsel):
    rng = np.random.default_rng(4)
    a, b = ints(rng, (16, 64), np.float16), ints(rng, (64, 16), np.float16)
    dt = np.float32 if acc == "f32" else np.float16
    d = np.full((16, 16), 7, dt)
    body = f"""
  %c64 = arith.constant 64 : index
  %zero = arith.constant 0.0 : {acc}
  %Z = gpu.subgroup_mma_constant_matrix %zero : !gpu.mma_matrix<16x16x{acc}, "COp">
  %R = scf.for %k = %c0 to %c64 step %c16 iter_args(%acc = %Z) -> (!gpu.mma_matrix<16x16x{acc}, "COp">) {{
    %A = gpu.subgroup_mma_load_matrix %a[%c0, %k] {{leadDimension = 64 : index}} : memref<16x64xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
    %B = gpu.subgroup_mma_load_matrix %b[%k, %c0] {{leadDimension = 16 : index}} : memref<64x16xf16> -> !gpu.mma_matrix<16x16xf16, "BOp">
    %N = gpu.subgroup_mma_compute %A, %B, %acc {opsel} : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16x{acc}, "COp">
    scf.yield %N : !gpu.mma_matrix<16x16x{acc}, "COp">
  }}
  gpu.subgroup_mma_store_matrix %R, %d[%c0, %c0] {{leadDimension = 16 : index}} : !gpu.mma_matrix<16x16x{acc}, "COp">, memref<16x16x{acc}>
"""
    args = f"%a: memref<16x64xf16>, %b: memref<64x16xf16>, %d: memref<16x16x{acc}>"
    assert run_wave(args, body, [a, b, d]) == 1
    np.testing.assert_array_equal(d, (a.astype(np.float32) @ b.astype(np.float32)).astype(dt))


def test_constant_and_elementwise_fragments():
    rng = np.random.default_rng(5)
    a, b = ints(rng, (16, 16), np.float16), ints(rng, (16, 16), np.float16)
    c = ints(rng, (16, 16), np.float32)
    d, e = np.zeros((16, 16), np.float32), np.zeros((16, 16), np.float32)
    body = """
  %A = gpu.subgroup_mma_load_matrix %a[%c0, %c0] {leadDimension = 16 : index} : memref<16x16xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
  %B = gpu.subgroup_mma_load_matrix %b[%c0, %c0] {leadDimension = 16 : index} : memref<16x16xf16> -> !gpu.mma_matrix<16x16xf16, "BOp">
  %C = gpu.subgroup_mma_load_matrix %c[%c0, %c0] {leadDimension = 16 : index} : memref<16x16xf32> -> !gpu.mma_matrix<16x16xf32, "COp">
  %two = arith.constant 2.0 : f32
  %T = gpu.subgroup_mma_constant_matrix %two : !gpu.mma_matrix<16x16xf32, "COp">
  %P = gpu.subgroup_mma_compute %A, %B, %T : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xf32, "COp">
  %S = gpu.subgroup_mma_elementwise subf %P, %C : (!gpu.mma_matrix<16x16xf32, "COp">, !gpu.mma_matrix<16x16xf32, "COp">) -> !gpu.mma_matrix<16x16xf32, "COp">
  %M = gpu.subgroup_mma_elementwise mulf %S, %T : (!gpu.mma_matrix<16x16xf32, "COp">, !gpu.mma_matrix<16x16xf32, "COp">) -> !gpu.mma_matrix<16x16xf32, "COp">
  %X = gpu.subgroup_mma_elementwise maxf %M, %C : (!gpu.mma_matrix<16x16xf32, "COp">, !gpu.mma_matrix<16x16xf32, "COp">) -> !gpu.mma_matrix<16x16xf32, "COp">
  %N = gpu.subgroup_mma_elementwise negatef %X : (!gpu.mma_matrix<16x16xf32, "COp">) -> !gpu.mma_matrix<16x16xf32, "COp">
  gpu.subgroup_mma_store_matrix %N, %d[%c0, %c0] {leadDimension = 16 : index} : !gpu.mma_matrix<16x16xf32, "COp">, memref<16x16xf32>
  %one = arith.constant 1.0 : f16
  %H = gpu.subgroup_mma_constant_matrix %one : !gpu.mma_matrix<16x16xf16, "COp">
  %Q = gpu.subgroup_mma_compute %A, %B, %H {opSelect} : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xf16, "COp">
  %W = gpu.subgroup_mma_elementwise extf %Q : (!gpu.mma_matrix<16x16xf16, "COp">) -> !gpu.mma_matrix<16x16xf32, "COp">
  gpu.subgroup_mma_store_matrix %W, %e[%c0, %c0] {leadDimension = 16 : index} : !gpu.mma_matrix<16x16xf32, "COp">, memref<16x16xf32>
"""
    args = ("%a: memref<16x16xf16>, %b: memref<16x16xf16>, %c: memref<16x16xf32>, "
            "%d: memref<16x16xf32>, %e: memref<16x16xf32>")
    assert run_wave(args, body, [a, b, c, d, e]) == 2
    prod = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_array_equal(d, -np.maximum((prod + 2 - c) * 2, c))
    np.testing.assert_array_equal(e, prod + 1)


# --------------------------------------------------------------------------------------------
# Compiled for the chip
# --------------------------------------------------------------------------------------------
def _tools_missing() -> str | None:
    if rocdl.linker() is None:
        return "no ld.lld (apt-get install lld, or pip install ziglang)"
    return None


needs_lld = pytest.mark.skipif(_tools_missing() is not None, reason=str(_tools_missing()))

PROGRAM = """
module attributes {gpu.container_module} {
  gpu.module @wmma [#rocdl.target<chip = "CHIP">] {
    gpu.func @matmul(%a: memref<16x16xf16>, %b: memref<16x16xf16>, %c: memref<16x32xACC>) kernel {
      %c0 = arith.constant 0 : index
      %c16 = arith.constant 16 : index
      %A = gpu.subgroup_mma_load_matrix %a[%c0, %c0] {leadDimension = 16 : index} : memref<16x16xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">
      %B = gpu.subgroup_mma_load_matrix %b[%c0, %c0] {leadDimension = 16 : index, transpose} : memref<16x16xf16> -> !gpu.mma_matrix<16x16xf16, "BOp">
      %C = gpu.subgroup_mma_load_matrix %c[%c0, %c0] {leadDimension = 32 : index} : memref<16x32xACC> -> !gpu.mma_matrix<16x16xACC, "COp">
      %H = gpu.subgroup_mma_load_matrix %c[%c0, %c16] {leadDimension = 32 : index OPSEL_LOAD} : memref<16x32xACC> -> !gpu.mma_matrix<16x16xACC, "COp">
      %R = gpu.subgroup_mma_compute %A, %B, %C : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xACC, "COp">
      %S = gpu.subgroup_mma_compute %A, %B, %H OPSEL : !gpu.mma_matrix<16x16xf16, "AOp">, !gpu.mma_matrix<16x16xf16, "BOp"> -> !gpu.mma_matrix<16x16xACC, "COp">
      gpu.subgroup_mma_store_matrix %R, %c[%c0, %c0] {leadDimension = 32 : index} : !gpu.mma_matrix<16x16xACC, "COp">, memref<16x32xACC>
      gpu.subgroup_mma_store_matrix %S, %c[%c0, %c16] {leadDimension = 32 : index} : !gpu.mma_matrix<16x16xACC, "COp">, memref<16x32xACC>
      gpu.return
    }
  }
}
"""


def program(chip: str, acc: str) -> str:
    opsel = acc == "f16"
    return (PROGRAM.replace("CHIP", chip).replace("ACC", acc)
            .replace("OPSEL_LOAD", ", opSelect" if opsel else "")
            .replace("OPSEL", "{opSelect}" if opsel else ""))


def gfx1100_assembly(text: str) -> str:
    ctx = ir.Context()
    module = ir.Module.parse(text, ctx)
    gmod = next(op.operation for op in module.body.operations
                if op.operation.name == "gpu.module")
    assert lower_wmma(gmod, "gfx1100") == 8
    passmanager.PassManager.parse(rocdl.ROCDL_PIPELINE.format(chip="gfx1100"), ctx).run(gmod)
    return rocdl.kernel_assembly(rocdl.translate(gmod), "gfx1100", ["matmul"])


@pytest.mark.parametrize("acc", ["f32", "f16"])
def test_gfx1100_assembly_runs_v_wmma(acc):
    asm = gfx1100_assembly(program("gfx1100", acc))
    wmma = [line.split("//")[0].strip() for line in asm.splitlines()
            if re.match(r"\s*v_wmma_", line)]
    assert len(wmma) == 2, asm
    assert all(w.startswith(f"v_wmma_{acc}_16x16x16_f16 ") for w in wmma), wmma
    # The f16 accumulator loaded with opSelect is computed in the high halves, no moves.
    assert ["op_sel:[0,0,1]" in w for w in wmma] == [False, acc == "f16"]
    assert "v_perm_b32" not in asm and "v_mov_b16" not in asm


@needs_lld
@pytest.mark.parametrize("acc", ["f32", "f16"])
def test_gfx1100_build_makes_an_hsaco(acc):
    art = build(program("gfx1100", acc), target="gfx1100")
    assert [b.format for b in art.binaries] == ["hsaco"]
    assert art.binaries[0].data[:4] == b"\x7fELF"


@pytest.mark.parametrize("chip", ["gfx90a", "gfx942", "gfx1200"])
def test_chip_without_gfx11_wmma_is_a_compile_error(chip):
    with pytest.raises(pywave.CompileError) as info:
        build(program(chip, "f32"), target=chip)
    message = str(info.value)
    assert "gpu.subgroup_mma_load_matrix" in message and chip in message
    assert "gfx1100" in message and "MFMA" in message


def test_thread_local_fragment_access_is_a_compile_error():
    text = program("gfx1100", "f32").replace(
        "      gpu.return",
        "      %i = arith.constant 0 : index\n"
        "      %x = gpu.subgroup_mma_extract_thread_local %R[%i] : "
        "!gpu.mma_matrix<16x16xf32, \"COp\"> -> f32\n"
        "      memref.store %x, %c[%c0, %c0] : memref<16x32xf32>\n      gpu.return")
    with pytest.raises(pywave.CompileError, match="extract_thread_local"):
        build(text, target="gfx1100")


def test_unsupported_fragment_type_is_a_compile_error():
    text = program("gfx1100", "f32").replace(
        '%A = gpu.subgroup_mma_load_matrix %a[%c0, %c0] {leadDimension = 16 : index} : '
        'memref<16x16xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">',
        '%A0 = gpu.subgroup_mma_load_matrix %a[%c0, %c0] {leadDimension = 16 : index} : '
        'memref<16x16xf16> -> !gpu.mma_matrix<16x16xf16, "AOp">\n'
        '      %A = gpu.subgroup_mma_elementwise extf %A0 : (!gpu.mma_matrix<16x16xf16, "AOp">) '
        '-> !gpu.mma_matrix<16x16xf32, "AOp">')
    with pytest.raises(pywave.CompileError, match="f32.*AOp|AOp.*f32"):
        build(text, target="gfx1100")
