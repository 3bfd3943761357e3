"""pywave.kernels.rewrites.nvvm_wmma: gpu.subgroup_mma_elementwise kinds MLIR 22's NVVM lowering aborts on
(llvm_unreachable) are lowered member by member; extf is a CompileError naming the op."""

from __future__ import annotations

import re

import pytest

import pywave
import pywave.api as api


def kernel(kind: str, ty: str, result: str | None = None) -> str:
    frag = f'!gpu.mma_matrix<16x16x{ty}, "COp">'
    out = f'!gpu.mma_matrix<16x16x{result or ty}, "COp">'
    unary = kind in ("negatef", "negates", "extf")
    operands, types = ("%c", frag) if unary else ("%c, %d", f"{frag}, {frag}")
    rty = result or ty
    return f"""
module attributes {{gpu.container_module}} {{
  gpu.module @k {{
    gpu.func @f(%m: memref<16x16x{ty}>, %o: memref<16x16x{rty}>) kernel {{
      %c0 = arith.constant 0 : index
      %c8 = arith.constant 8 : index
      %c = gpu.subgroup_mma_load_matrix %m[%c0, %c0] {{leadDimension = 16 : index}}
          : memref<16x16x{ty}> -> {frag}
      %d = gpu.subgroup_mma_load_matrix %m[%c8, %c0] {{leadDimension = 16 : index}}
          : memref<16x16x{ty}> -> {frag}
      %r = gpu.subgroup_mma_elementwise {kind} {operands} : ({types}) -> {out}
      gpu.subgroup_mma_store_matrix %r, %o[%c0, %c0] {{leadDimension = 16 : index}}
          : {out}, memref<16x16x{rty}>
      gpu.return
    }}
  }}
}}
"""


def ptx(text: str) -> str:
    return api.build(text, target="sm_90", format="ptx").binaries[0].data.decode()


@pytest.mark.parametrize("kind, ty, instruction, count", [
    ("subf", "f16", "sub.rn.f16x2", 4), ("negatef", "f16", "neg.f16x2", 4),
    ("subf", "f32", "sub.rn.f32", 8), ("negatef", "f32", "neg.f32", 8),
    ("addi", "i32", "add.s32", 8), ("subi", "i32", "sub.s32", 8),
    ("muli", "i32", "mul.lo.s32", 8), ("divs", "i32", "div.s32", 8),
    ("divu", "i32", "div.u32", 8), ("negates", "i32", "neg.s32", 8),
])
def test_kinds_upstream_aborts_on_are_lowered_per_register(kind, ty, instruction, count):
    """One instruction per register of the lane's fragment (4 f16x2 pairs or 8 words)."""
    code = ptx(kernel(kind, ty))
    assert len(re.findall(rf"\b{re.escape(instruction)}\b", code)) == count, code


def test_upstream_kinds_are_left_to_upstream():
    assert "add.rn.f16x2" in ptx(kernel("addf", "f16"))


def test_extf_is_a_compile_error_naming_the_op():
    with pytest.raises(pywave.CompileError, match=r"subgroup_mma_elementwise extf cannot be "
                                                  r"lowered to NVVM"):
        ptx(kernel("extf", "f16", result="f32"))
