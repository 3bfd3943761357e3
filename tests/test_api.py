"""Compile-only tests: need no GPU and no built native extension (pywave.api.build)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import pywave
from pywave import api, pipeline

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent
KERNELS = sorted(p.name for p in DATA.glob("*.mlir"))
ELF_MAGIC = b"\x7fELF"

# Kernels that must be isolated in a child process: compiling them aborted the interpreter
# (an MLIR assertion) at the time of writing.
ISOLATE = {"bool_i1.mlir"}
# The third launch waits on two tokens; either it runs exactly (GPU test) or the compile
# error names the op and "async dependencies".
ASYNC_TWO_DEPS = "async_deps.mlir"


def build(text: str, **kwargs) -> pipeline.Artifacts:
    kwargs.setdefault("target", "sm_90")
    return api.build(text, **kwargs)


def check_binary(binary) -> None:
    assert binary.chip == "sm_90"
    if binary.format == "cubin":
        assert binary.data[:4] == ELF_MAGIC
    else:
        assert binary.format == "ptx"
        assert b".target sm_90" in binary.data and binary.data.endswith(b"\0")


@pytest.mark.parametrize("name", [k for k in KERNELS if k not in ISOLATE | {ASYNC_TWO_DEPS}])
def test_kernel_compiles_for_sm_90(mlir, name):
    art = build(mlir(name))
    assert art.target.chip == "sm_90" and art.target.backend == "nvvm"
    assert art.binaries
    for binary in art.binaries:
        check_binary(binary)
    assert art.host.functions
    assert art.object_code


@pytest.mark.parametrize("name", sorted(ISOLATE))
def test_isolated_kernel_compiles(mlir, name, isolated_build):
    assert isolated_build(mlir(name)) == "OK"


def test_async_two_dependencies_compiles_or_names_them(mlir, isolated_build):
    out = isolated_build(mlir(ASYNC_TWO_DEPS))
    if out != "OK":
        assert "gpu.launch_func" in out and "async dependencies" in out, out


def test_ptx_format_is_nul_terminated_ptx(mlir):
    art = build(mlir("scale_in_place.mlir"), format="ptx")
    [binary] = art.binaries
    assert binary.format == "ptx"
    check_binary(binary)


def test_keep_stages_dumps_each_stage(mlir):
    art = build(mlir("scale_in_place.mlir"), keep_stages=True)
    assert {"parse", "prepare", "kernels", "llvm"} <= set(art.stages)
    assert "gpu.binary" in art.stages["kernels"]
    assert set(art.seconds) >= {"parse", "prepare", "kernels", "host", "llvm-codegen"}


def test_host_signature_names_and_written_flags(mlir):
    art = build(mlir("vector_add.mlir"))
    [main] = art.host.functions
    assert main.name == "main"
    assert [(p.name, p.kind, p.type, p.written) for p in main.params] == [
        ("a", "memref", "memref<?xf32>", False),
        ("b", "memref", "memref<?xf32>", False),
        ("c", "memref", "memref<?xf32>", True),
    ]


def test_scalar_parameters_keep_their_types(mlir):
    art = build(mlir("scalars_mixed.mlir"))
    [main] = art.host.functions
    assert [(p.name, p.kind, p.type) for p in main.params] == [
        ("x", "memref", "memref<?xf32>"), ("y", "memref", "memref<?xf64>"),
        ("a", "scalar", "f32"), ("b", "scalar", "f64"), ("k", "scalar", "i8"),
        ("m", "scalar", "i16"), ("flag", "scalar", "i1")]


def test_private_host_functions_are_not_exported(mlir):
    art = build(mlir("named_functions.mlir"))
    assert [f.name for f in art.host.functions] == ["double_it", "negate"]


def test_launch_region_is_outlined(mlir):
    art = build(mlir("launch_outline.mlir"), keep_stages=True)
    assert "gpu.launch_func" in art.stages["prepare"]
    assert "gpu.launch " not in art.stages["prepare"]


def test_one_binary_per_gpu_module_not_per_launch_site(mlir):
    art = build(mlir("multi_kernel.mlir"))
    assert [b.name for b in art.binaries] == ["kernels"]


def test_host_code_releases_every_kernel_it_launches(mlir):
    art = build(mlir("multi_kernel.mlir"))     # three kernels and their coarsened copies
    head = "define void @_pywave_release_kernels()"
    assert art.host.llvm_ir.count(head) == 1
    release = art.host.llvm_ir.split(head)[1].split("\n}\n")[0]
    assert release.count("call void @wavert_kernel_release(") == 6
    assert release.count("store ptr null, ptr @__pywave_slot_") == 6


# ----------------------------------------------------------------------------------------
# Targets
# ----------------------------------------------------------------------------------------
def test_module_without_target_takes_requested_chip(mlir):
    text = mlir("scale_in_place.mlir")
    assert "#nvvm.target" not in text
    art = build(text, target="sm_80")
    assert art.target.chip == "sm_80"
    assert all(b.chip == "sm_80" for b in art.binaries)


def test_empty_gpu_module_is_ignored(mlir):
    art = build(mlir("scale_with_empty_gpu_module.mlir"), keep_stages=True)
    assert [b.name for b in art.binaries] == ["kernels"]
    assert "@empty" not in art.stages["kernels"]


def test_rocdl_module_for_nvidia_target_names_module_and_backends(mlir):
    with pytest.raises(pywave.CompileError) as info:
        build(mlir("bad/scale_with_rocdl_target.mlir"))
    msg = str(info.value)
    assert "@kernels" in msg
    assert "rocdl" in msg and "gfx942" in msg
    assert "nvvm" in msg and "sm_90" in msg


# ----------------------------------------------------------------------------------------
# Compile errors
# ----------------------------------------------------------------------------------------
def test_unranked_kernel_argument(mlir):
    with pytest.raises(pywave.CompileError) as info:
        build(mlir("bad/unranked_kernel_arg.mlir"))
    msg = str(info.value)
    assert "@touch" in msg and "argument #0" in msg and "unranked" in msg


def test_malformed_text_reports_line_column_and_source_line(mlir):
    text = mlir("bad/malformed.mlir")
    with pytest.raises(pywave.CompileError) as info:
        build(text)
    err = info.value
    assert (err.line, err.column) == (5, 27)
    assert err.source_line == text.splitlines()[4]
    msg = str(err)
    assert "5:27" in msg and "undeclared SSA value" in msg
    assert "%missing" in msg  # the offending source line is shown


def test_filename_appears_in_location(mlir):
    with pytest.raises(pywave.CompileError) as info:
        build(mlir("bad/malformed.mlir"), filename="prog.mlir")
    assert info.value.filename == "prog.mlir"
    assert "prog.mlir:5:27" in str(info.value)


def test_unknown_dialect_names_upstream_dialects():
    text = 'module {\n  func.func @main() {\n    "triton.nope"() : () -> ()\n    return\n  }\n}\n'
    with pytest.raises(pywave.CompileError) as info:
        build(text)
    assert info.value.line == 3
    assert "upstream dialects" in str(info.value)


def test_unknown_target(mlir):
    with pytest.raises(pywave.CompileError) as info:
        build(mlir("scale_in_place.mlir"), target="foo")
    msg = str(info.value)
    assert "'foo'" in msg and "sm_90" in msg


def test_unknown_binary_format(mlir):
    with pytest.raises(pywave.CompileError) as info:
        build(mlir("scale_in_place.mlir"), format="sass")
    assert "'sass'" in str(info.value) and "cubin" in str(info.value)


def test_module_without_host_function_compiles(mlir):
    art = build(mlir("runner/kernels_only.mlir"))
    assert art.host.functions == ()
    assert [b.name for b in art.binaries] == ["kernels"]


def test_host_function_with_result_is_an_entry_point():
    art = build("func.func @main(%a: memref<?xf32>) -> index {\n"
                "  %c0 = arith.constant 0 : index\n"
                "  %n = memref.dim %a, %c0 : memref<?xf32>\n  return %n : index\n}\n")
    (fn,) = art.host.functions
    assert [(r.name, r.kind, r.scalar) for r in fn.results] == [("result0", "scalar", "index")]


def test_unranked_host_argument():
    text = ("module {\n  func.func @main(%u: memref<*xf32>) {\n    return\n  }\n}\n")
    with pytest.raises(pywave.CompileError) as info:
        build(text)
    msg = str(info.value)
    assert "'u'" in msg and "#0" in msg and "unranked" in msg


def test_unsupported_host_scalar_type():
    text = ("module {\n  func.func @main(%v: vector<4xf32>) {\n    return\n  }\n}\n")
    with pytest.raises(pywave.CompileError) as info:
        build(text)
    assert "'v'" in str(info.value) and "vector<4xf32>" in str(info.value)


def test_compile_takes_text_not_bytes():
    with pytest.raises(TypeError):
        api.build(b"module {}", target="sm_90")


def test_errors_are_typed():
    assert issubclass(pywave.CompileError, pywave.Error)
    assert issubclass(pywave.ArgumentError, pywave.Error)
    assert issubclass(pywave.ArgumentError, ValueError)
    assert issubclass(pywave.DeviceError, pywave.Error)


# ----------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------
def _pywave_cli(*args: str) -> subprocess.CompletedProcess:
    here = str(Path(pywave.__file__).resolve().parent.parent)
    return subprocess.run([sys.executable, "-m", "pywave", *args], capture_output=True,
                          text=True, cwd=here, timeout=300)


def test_cli_compile_prints_stages():
    proc = _pywave_cli("compile", str(ROOT / "examples" / "vector_add.mlir"), "--target", "sm_90")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "target: sm_90 (nvvm)" in out
    for stage in ("parse", "prepare", "kernels", "host", "llvm-codegen"):
        assert f"stage {stage}" in out
    assert "kernel binary @kernels" in out
    assert "host function @main(a: memref<?xf32>, b: memref<?xf32>, c: memref<?xf32> (written))" \
        in out


def test_cli_compile_error_exits_1():
    proc = _pywave_cli("compile", str(DATA / "bad" / "malformed.mlir"), "--target", "sm_90")
    assert proc.returncode == 1
    assert "error:" in proc.stderr and "5:27" in proc.stderr


def test_affine_loads_and_stores_of_bool_memrefs_are_widened_too():
    """prepare widens ``memref<...xi1>`` to bytes and narrows each access: ``affine.load`` and
    ``affine.store`` were left typed i1 on the i8 memref, a verifier error quoting IR the user
    never wrote."""
    text = """module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @f(%a: memref<?xi1>, %b: memref<?xi1>) kernel {
      %v = affine.load %a[0] : memref<?xi1>
      affine.store %v, %b[1] : memref<?xi1>
      gpu.return
    }
  }
  func.func @main(%a: memref<?xi1>, %b: memref<?xi1>) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @k::@f blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%a : memref<?xi1>, %b : memref<?xi1>)
    return
  }
}"""
    art = api.build(text, target="sm_90", format="ptx", keep_stages=True)
    prepared = art.stages["prepare"]
    assert "arith.trunci" in prepared and "arith.extui" in prepared
    assert "memref<?xi1>" not in prepared



BOOL_KERNEL = """module attributes {{gpu.container_module}} {{
  gpu.module @k {{{global_}
    gpu.func @f(%a: memref<?xi1>, %b: memref<?xi1>) kernel {{
      %c0 = arith.constant 0 : index
      {body}
      gpu.return
    }}
  }}
}}"""


@pytest.mark.parametrize("global_, body, match", [
    ("", "%v = vector.load %a[%c0] : memref<?xi1>, vector<4xi1>\n"
         "vector.store %v, %b[%c0] : memref<?xi1>, vector<4xi1>", r"vector.load at line 5.*i1")])
def test_bool_memref_accesses_prepare_cannot_narrow_are_named(global_, body, match):
    """Vector accesses of i1 elements failed MLIR's verifier on IR the user never wrote
    (``memref<?xi8>`` after the widening); now a CompileError names the op and the fix."""
    with pytest.raises(pywave.CompileError, match=match):
        api.build(BOOL_KERNEL.format(global_=global_, body=body), target="sm_90", format="ptx")


def test_bool_globals_are_widened_with_their_values():
    """A memref.global of i1 in a kernel (before: refused) becomes a global of bytes holding
    the same bools; its loads are narrowed like those of any bool memref."""
    text = BOOL_KERNEL.format(
        global_='\n    memref.global "private" constant @g : memref<3xi1> = '
                'dense<[true, false, true]>',
        body="%m = memref.get_global @g : memref<3xi1>\n%v = memref.load %m[%c0] : "
             "memref<3xi1>\nmemref.store %v, %b[%c0] : memref<?xi1>")
    art = api.build(text, target="sm_90", format="ptx", keep_stages=True)
    prepared = art.stages["prepare"]
    assert "memref<3xi8> = dense<[1, 0, 1]>" in prepared, prepared
    assert "memref<3xi1>" not in prepared
