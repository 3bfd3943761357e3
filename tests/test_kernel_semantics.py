"""pywave.semantics: the two places where upstream's NVVM path computed something other than
the MLIR program says (found by test_gpu_semantics on an H200), checked in the PTX here.

- 8-byte loads and stores keep their natural alignment (the target's data layout is set
  before translation), so no f64 is stored as two 4-byte halves;
- ``math.sqrt`` on f32 is correctly rounded (``sqrt.rn.f32``) unless its fast-math flags
  (or ``fast_math=True``) allow an approximation.
"""

from __future__ import annotations

import re

import pytest

import pywave.api as api

STORE_F64 = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @conv(%in: memref<?xi32>, %out: memref<?xf64>, %o2: memref<?xi64>) kernel {
      %i = gpu.thread_id x
      %v = memref.load %in[%i] : memref<?xi32>
      %f = arith.sitofp %v : i32 to f64
      memref.store %f, %out[%i] : memref<?xf64>
      %b = arith.bitcast %f : f64 to i64
      memref.store %b, %o2[%i] : memref<?xi64>
      gpu.return
    }
  }
}
"""

SQRT = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @root(%m: memref<?xf32>, %w: memref<?xvector<4xf32>>) kernel {
      %i = gpu.thread_id x
      %v = memref.load %m[%i] : memref<?xf32>
      %r = math.sqrt %v FLAGS: f32
      memref.store %r, %m[%i] : memref<?xf32>
      %x = memref.load %w[%i] : memref<?xvector<4xf32>>
      %y = math.sqrt %x FLAGS: vector<4xf32>
      memref.store %y, %w[%i] : memref<?xvector<4xf32>>
      gpu.return
    }
  }
}
"""


def ptx(text: str, **kw) -> str:
    return api.build(text, target="sm_90", format="ptx", **kw).binaries[0].data.decode()


def test_eight_byte_stores_are_not_split():
    code = ptx(STORE_F64)
    assert re.findall(r"st\.global\.\w+", code) == ["st.global.b64", "st.global.b64"]
    assert "shr.u64" not in code


def test_a_data_layout_of_the_users_own_is_kept():
    """A gpu.module stating its own layout (here i64 aligned to 4) is translated with it."""
    own = STORE_F64.replace(
        "gpu.module @k {",
        'gpu.module @k attributes {llvm.data_layout = "e-p6:32:32-i64:32-n16:32:64"} {')
    assert "st.global.b32" in ptx(own)


@pytest.mark.parametrize("flags, f32, vec", [
    ("", "sqrt.rn.f32", 5),
    ("fastmath<contract> ", "sqrt.rn.f32", 5),
    ("fastmath<afn> ", "sqrt.approx.f32", 5),
    ("fastmath<fast> ", "sqrt.approx", 5),
])
def test_f32_sqrt_is_correctly_rounded_unless_approximation_is_allowed(flags, f32, vec):
    code = ptx(SQRT.replace("FLAGS", flags))
    roots = re.findall(r"sqrt\.[\w.]+", code)
    assert len(roots) == vec and all(r.startswith(f32) for r in roots), roots


def test_fast_math_keeps_the_approximate_sqrt():
    code = ptx(SQRT.replace("FLAGS", ""), lowering={"fast_math": True})
    roots = re.findall(r"sqrt\.[\w.]+", code)
    assert roots and all(r.startswith("sqrt.approx") for r in roots), roots


def test_amd_translation_keeps_the_rocdl_data_layout():
    """convert-gpu-to-rocdl gives the gpu.module its data layout; the translation of its
    body must keep it (8-byte accesses aligned to 8, not LLVM's default 4)."""
    from mlir import ir

    from pywave import amdgpu, kernels
    from pywave.mlirutil import run_pipeline
    text = STORE_F64.replace("gpu.module @k {",
                             'gpu.module @k [#rocdl.target<chip = "gfx942">] {')
    with ir.Context():
        module = ir.Module.parse(text)
        run_pipeline(module, "builtin.module(" + amdgpu.ROCDL_PIPELINE.format(chip="gfx942")
                     + ")", "lowering to ROCDL")
        (gmod,) = kernels.gpu_modules(module)
        llvm_ir = amdgpu.translate(gmod)
    stores = re.findall(r"store (?:double|i64) .*, align (\d+)", llvm_ir)
    assert stores and set(stores) == {"8"}, llvm_ir
