"""Kernel parameters no kernel reads are dropped (pywave.kernels.unused_params), and each launch
passes only the ones kept: which words stay for which memref uses, what keeps MLIR's ABI
(the option, Wave's launch calls, a kernel referenced in its module), the host code's
launch, and the record in the compile cache. Compile only: no GPU."""

from __future__ import annotations

import re

import pytest

import pywave
from pywave import api, cache, image_params
from pywave.kernels import unused_params

KERNEL = """
module attributes {{gpu.container_module}} {{
  gpu.module @k {{
    gpu.func @f({args}) kernel {{
{body}
      gpu.return
    }}
  }}
  func.func @main({args}) {{
    %c1 = arith.constant 1 : index
    gpu.launch_func @k::@f blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args({operands})
    return
  }}
}}
"""


def module(args: list[tuple[str, str]], body: str) -> str:
    return KERNEL.format(args=", ".join(f"%{n}: {t}" for n, t in args), body=body,
                         operands=", ".join(f"%{n} : {t}" for n, t in args))


def kept(text: str, **lowering) -> tuple:
    [binary] = api.build(text, target="sm_90", format="ptx", lowering=lowering).binaries
    return binary.params


def entry_params(text: str, **lowering) -> int:
    [binary] = api.build(text, target="sm_90", format="ptx", lowering=lowering).binaries
    return image_params.ptx_counts(binary.data)["f"]


LOAD = ("      %c0 = arith.constant 0 : index\n      %x = memref.load %a[%c0] : {t}\n"
        "      memref.store %x, %a[%c0] : {t}")


def test_a_loaded_memref_keeps_its_aligned_pointer_only():
    text = module([("a", "memref<?xf32>")], LOAD.format(t="memref<?xf32>"))
    assert kept(text) == (("f", 5, (1,)),)
    assert entry_params(text) == 1


def test_dim_and_dynamic_layout_keep_their_words():
    """memref.dim reads the size; a dynamic strided layout reads offset and stride."""
    t = "memref<?xf32, strided<[?], offset: ?>>"
    body = ("      %c0 = arith.constant 0 : index\n      %x = memref.load %a[%c0] : " + t
            + "\n      %d = memref.dim %a, %c0 : " + t
            + "\n      %i = arith.index_cast %d : index to i32"
            + "\n      %f = arith.sitofp %i : i32 to f32"
            + "\n      %s = arith.addf %x, %f : f32"
            + "\n      memref.store %s, %a[%c0] : " + t)
    assert kept(module([("a", t)], body)) == (("f", 5, (1, 2, 3, 4)),)


def test_unused_scalars_and_memrefs_are_dropped_and_all_unused_leaves_none():
    text = module([("a", "memref<?xf32>"), ("n", "index"), ("b", "memref<4xf32>")],
                  LOAD.format(t="memref<?xf32>"))
    assert kept(text) == (("f", 11, (1,)),)
    assert kept(module([("n", "index")], "")) == (("f", 1, ()),)
    assert entry_params(module([("n", "index")], "")) == 0


def test_a_kernel_reading_every_parameter_has_no_record():
    """Bare pointers (kernel_bare_ptr) of static memrefs: one word each, all read."""
    t = "memref<4xf32>"
    text = module([("a", t), ("b", t)], LOAD.format(t=t).replace("memref.store %x, %a",
                                                                 "memref.store %x, %b"))
    assert kept(text, kernel_bare_ptr=True) == ()
    assert entry_params(text, kernel_bare_ptr=True) == 2


def test_keep_kernel_params_keeps_mlirs_abi():
    text = module([("a", "memref<?xf32>")], LOAD.format(t="memref<?xf32>"))
    assert kept(text, keep_kernel_params=True) == ()
    assert entry_params(text, keep_kernel_params=True) == 5
    with pytest.raises(pywave.CompileError, match="keep_kernel_params must be a bool"):
        api.build(text, target="sm_90", lowering={"keep_kernel_params": 1})


def test_the_launch_passes_the_kept_operands():
    """The launch helper takes grid and block (6) and the one word kept."""
    art = api.build(module([("a", "memref<?xf32>"), ("n", "index")],
                           LOAD.format(t="memref<?xf32>")), target="sm_90")
    helper = re.search(r"define internal i32 @__pywave_launch_0\(([^)]*)\)", art.host.llvm_ir)
    assert helper and helper.group(1).count(",") + 1 == 6 + 1


def test_wave_launch_calls_keep_every_parameter():
    from mlir import ir
    with ir.Context():
        mod = ir.Module.parse("""
          llvm.func @wave_launch_kernel(!llvm.ptr)
          gpu.module @k { llvm.func @f(%a: i64) attributes {gpu.kernel} { llvm.return } }
        """)
        assert unused_params.launched_by_wave(mod)
        assert unused_params.drop_unused(mod) == {}


def test_a_kernel_referenced_in_its_module_keeps_every_parameter():
    from mlir import ir
    with ir.Context():
        mod = ir.Module.parse("""
          gpu.module @k {
            llvm.func @f(%a: i64, %b: i64) attributes {gpu.kernel} { llvm.return }
            llvm.func @g(%a: !llvm.ptr, %b: !llvm.ptr) attributes {gpu.kernel,
                arg_attrs = [{llvm.noundef}, {llvm.noalias}]} {
              %p = llvm.mlir.addressof @f : !llvm.ptr
              llvm.return
            }
          }
        """)
        assert unused_params.drop_unused(mod) == {"k": (("g", 2, ()),)}
        text = str(mod)
    assert "llvm.func @f(%arg0: i64, %arg1: i64)" in text
    assert "llvm.func @g() attributes {gpu.kernel}" in text   # arg_attrs: none left


def test_arg_attrs_follow_the_kept_parameters():
    from mlir import ir
    with ir.Context():
        mod = ir.Module.parse("""
          gpu.module @k {
            llvm.func @g(%a: !llvm.ptr, %b: !llvm.ptr) attributes {gpu.kernel,
                arg_attrs = [{llvm.noundef}, {llvm.noalias}]} {
              %x = llvm.load %b : !llvm.ptr -> i32
              llvm.return
            }
          }
        """)
        assert unused_params.drop_unused(mod) == {"k": (("g", 2, (1,)),)}
        func = mod.body.operations[0].regions[0].blocks[0].operations[0]
        assert str(func.attributes["arg_attrs"]) == "[{llvm.noalias}]"
        assert str(func.attributes["function_type"]) == "!llvm.func<void (ptr)>"
        mod.operation.verify()


def test_the_record_survives_the_cache(tmp_path, monkeypatch):
    pytest.importorskip("pywave._native")
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path))
    text = module([("a", "memref<?xf32>")], LOAD.format(t="memref<?xf32>"))
    program = api.build(text, target="sm_90").program()
    assert cache.store("k" * 64, program) is not None
    assert cache.load("k" * 64).binaries[0].params == (("f", 5, (1,)),)


@pytest.mark.parametrize("record", [["f", 5, [2, 1]], ["f", 2, [2]], ["f", 5, [-1]],
                                    ["f", 5], [1, 5, [1]], ["f", "5", [1]]])
def test_a_bad_record_is_a_corrupt_entry(record):
    with pytest.raises(cache.CorruptEntry, match="kernel parameter record"):
        cache._kept_params(record)


def test_the_execution_engines_compile_keeps_every_parameter():
    """MLIR's translation emits the engine's launches (mgpuLaunchKernel with every word)."""
    from pywave import pipeline
    text = module([("a", "memref<?xf32>")], LOAD.format(t="memref<?xf32>"))
    art = pipeline.Pipeline(text, target="sm_90", format="ptx", packed_interface=True).run()
    assert art.binaries[0].params == ()
    assert image_params.ptx_counts(art.binaries[0].data) == {"f": 5}


def test_the_command_line_takes_keep_kernel_params():
    import argparse
    from pywave.entry import run
    parser = argparse.ArgumentParser()
    run.add_lowering_options(parser)
    assert run.lowering_options(parser.parse_args([])).keep_kernel_params is False
    assert run.lowering_options(parser.parse_args(["--keep-kernel-params"])).keep_kernel_params


def test_a_launch_whose_operands_disagree_with_the_record_is_refused(monkeypatch):
    """The host stage checks each launch against what the kernels stage recorded: a record
    of another parameter count (a bug, simulated here) is a CompileError naming both."""
    monkeypatch.setattr(unused_params, "drop_unused",
                        lambda module, names=None: {"k": (("f", 99, (1,)),)})
    text = module([("a", "memref<?xf32>")], LOAD.format(t="memref<?xf32>"))
    with pytest.raises(pywave.CompileError, match=r"@k::@f passes 5 kernel operands after "
                       r"lowering; the kernel was lowered with 99 parameters"):
        api.build(text, target="sm_90")


def test_amd_kernels_drop_them_too():
    """The ROCDL lowering records the same kept parameters, and the launch passes them."""
    from test_rocdl import _tools_missing
    if _tools_missing() is not None:
        pytest.skip(str(_tools_missing()))
    text = module([("a", "memref<?xf32>")], LOAD.format(t="memref<?xf32>"))
    art = api.build(text, target="gfx942")
    assert art.binaries[0].format == "hsaco" and art.binaries[0].params == (("f", 5, (1,)),)
    helper = re.search(r"define internal i32 @__pywave_launch_0\(([^)]*)\)", art.host.llvm_ir)
    assert helper and helper.group(1).count(",") + 1 == 6 + 1
    kept = api.build(text, target="gfx942", lowering={"keep_kernel_params": True})
    assert kept.binaries[0].params == ()
