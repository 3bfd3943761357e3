"""pywave.kernels.rewrites.semantics: the two places where upstream's NVVM path computed something other than
the MLIR program says (found by gpu/test_op_semantics.py on an H200), checked in the PTX here.

- 8-byte loads and stores keep their natural alignment (the target's data layout is set
  before translation), so no f64 is stored as two 4-byte halves;
- ``math.sqrt`` on f32 is correctly rounded (``sqrt.rn.f32``) unless its fast-math flags
  (or ``fast_math=True``) allow an approximation.

Also the kernel ops upstream's lowerings leave out, each lowered to what MLIR defines it as
(run on a GPU against a host reference by gpu/test_op_semantics.py): every ``gpu`` id and
dimension query on NVVM and ROCDL (:mod:`pywave.kernels.rewrites.gpu_ids`), uniform 32-bit integer subgroup
reductions as ``redux.sync`` on sm_80 and newer (:mod:`pywave.kernels.rewrites.subgroups`), and ``cf.assert``
in ROCDL kernels (:func:`pywave.kernels.rocdl.lower_asserts`).
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

    from pywave.kernels import rocdl, nvvm
    from pywave.mlirutil import gpu_modules, run_pipeline
    text = STORE_F64.replace("gpu.module @k {",
                             'gpu.module @k [#rocdl.target<chip = "gfx942">] {')
    with ir.Context():
        module = ir.Module.parse(text)
        run_pipeline(module, "builtin.module(" + rocdl.ROCDL_PIPELINE.format(chip="gfx942")
                     + ")", "lowering to ROCDL")
        (gmod,) = gpu_modules(module)
        llvm_ir = rocdl.translate(gmod)
    stores = re.findall(r"store (?:double|i64) .*, align (\d+)", llvm_ir)
    assert stores and set(stores) == {"8"}, llvm_ir


# --------------------------------------------------------------------------------------------
# gpu id and dimension queries, subgroup reductions, asserts
# --------------------------------------------------------------------------------------------
#: Every id/dimension query of the gpu dialect (``gpu.thread_id x`` prints without a type;
#: the subgroup queries take ``: index``).
ID_QUERIES = ["thread_id x", "block_id y", "block_dim z", "grid_dim x", "global_id y",
              "lane_id", "subgroup_size : index", "num_subgroups : index",
              "subgroup_id : index", "cluster_id x", "cluster_dim y", "cluster_block_id z",
              "cluster_dim_blocks x"]

QUERY = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @f(%o: memref<?xindex>) kernel {
      %v = gpu.QUERY
      %c0 = arith.constant 0 : index
      memref.store %v, %o[%c0] : memref<?xindex>
      gpu.return
    }
  }
}
"""


def amd_llvm_ir(text: str, monkeypatch) -> str:
    """The LLVM IR pywave hands to the AMDGPU backend for ``text`` (gfx942), captured before
    code generation (which needs ld.lld and the ROCm device libraries; tests/kernels/test_rocdl.py
    runs it where they are installed)."""
    from pywave.kernels import rocdl
    seen = []

    def capture(llvm_ir, chip, kernels, **kw):
        seen.append(llvm_ir)
        return b"\x7fELF"

    monkeypatch.setattr(rocdl, "compile_llvm_ir", capture)
    api.build(text, target="gfx942")
    (llvm_ir,) = seen
    return llvm_ir


@pytest.mark.parametrize("query", ID_QUERIES)
def test_every_id_query_lowers_for_nvvm(query):
    assert ".entry f" in ptx(QUERY.replace("QUERY", query))


@pytest.mark.parametrize("query", ID_QUERIES)
def test_every_id_query_lowers_for_rocdl(query, monkeypatch):
    assert "amdgpu_kernel void @f" in amd_llvm_ir(QUERY.replace("QUERY", query), monkeypatch)


def test_num_subgroups_is_the_block_size_divided_by_the_warp_size_rounded_up():
    code = ptx(QUERY.replace("QUERY", "num_subgroups : index"))
    assert all(f"%ntid.{d}" in code for d in "xyz"), code
    # ceildivui(n, 32) as MLIR lowers it: n == 0 ? 0 : (n - 1) / 32 + 1 (a shift by 5)
    assert re.search(r"shr\.u64\s+%rd\d+, %rd\d+, 5;", code), code


def test_rocdl_subgroup_queries_read_the_wavefront_size(monkeypatch):
    for query in ("num_subgroups : index", "subgroup_id : index"):
        llvm_ir = amd_llvm_ir(QUERY.replace("QUERY", query), monkeypatch)
        assert "@llvm.amdgcn.wavefrontsize()" in llvm_ir
    llvm_ir = amd_llvm_ir(QUERY.replace("QUERY", "cluster_block_id z"), monkeypatch)
    assert "store i64 0" in llvm_ir


REDUCE = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @f(%o: memref<?xi32>) kernel {
      %t = gpu.thread_id x
      %x = memref.load %o[%t] : memref<?xi32>
      %r = gpu.subgroup_reduce KIND %x FORM: (i32) -> i32
      memref.store %r, %o[%t] : memref<?xi32>
      gpu.return
    }
  }
}
"""

REDUX = {"add": "add.s32", "and": "and.b32", "or": "or.b32", "xor": "xor.b32",
         "minsi": "min.s32", "minui": "min.u32", "maxsi": "max.s32", "maxui": "max.u32"}


@pytest.mark.parametrize("kind", sorted(REDUX))
@pytest.mark.parametrize("chip", ["sm_80", "sm_90"])
def test_uniform_i32_reduction_is_one_redux_sync_from_sm80(kind, chip):
    code = api.build(REDUCE.replace("KIND", kind).replace("FORM", "uniform "), target=chip,
                     format="ptx").binaries[0].data.decode()
    assert re.findall(r"redux\.sync\.[\w.]+", code) == [f"redux.sync.{REDUX[kind]}"], code
    assert "shfl" not in code


@pytest.mark.parametrize("kind, form, chip", [
    ("add", "uniform ", "sm_75"),                            # no redux.sync before sm_80
    ("add", "", "sm_90"),                                    # not uniform
    ("mul", "uniform ", "sm_90"),                            # no redux.sync.mul
    ("add", "uniform cluster(size = 32) ", "sm_90"),         # clustered: left to shuffles
])
def test_other_i32_reductions_stay_shuffles(kind, form, chip):
    code = api.build(REDUCE.replace("KIND", kind).replace("FORM", form), target=chip,
                     format="ptx").binaries[0].data.decode()
    assert "redux" not in code
    assert code.count("shfl.sync.bfly.b32") == 5


ASSERT = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @f(%o: memref<?xi32>) kernel {
      %c0 = arith.constant 0 : index
      %x = memref.load %o[%c0] : memref<?xi32>
      %z = arith.constant 0 : i32
      %ok = arith.cmpi eq, %x, %z : i32
      cf.assert %ok, "x is \\"zero\\" (100%)"
      cf.assert %ok, "x is \\"zero\\" (100%)"
      gpu.return
    }
  }
}
"""


def test_rocdl_assert_prints_the_message_and_traps(monkeypatch):
    llvm_ir = amd_llvm_ir(ASSERT, monkeypatch)
    assert "call void @llvm.trap()" in llvm_ir
    assert "__ockl_printf_begin" in llvm_ir
    # the message as HIP's printf gets it: % escaped, quotes as \22, the line of the op
    assert 'c"line 9: Device-side assertion `x is \\22zero\\22 (100%%)\' failed.\\0A\\00"' \
        in llvm_ir, llvm_ir
    assert llvm_ir.count("call void @__pywave_assert_0(i1") == 2
