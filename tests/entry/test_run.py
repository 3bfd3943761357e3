"""``pywave run`` and host code as MLIR users write it (tests/data/runner/*.mlir).

Compile-only tests run here: each program compiles with its runner entry, and its object
code loads into the JIT with every symbol resolved (libwavert, libwavert_runner, libc).
GPU tests (marked ``gpu``) run each program with ``python -m pywave run`` and compare stdout
byte for byte with ``NAME.out`` (the ``base@`` pointers of printMemref headers masked).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

import pytest

import pywave
from pywave import lowering, pipeline, runtime
from pywave.entry import run
from pywave.host import jit
from conftest import ROOT, TESTS

RUNNER = TESTS / "data" / "runner"
PROGRAMS = sorted(p.stem for p in RUNNER.glob("*.out"))
#: Programs with compile options (as `pywave run` arguments).
OPTIONS = {"nvgpu_mbarrier": ["--target", "sm_90a", "--features=+ptx80"]}
#: -e NAME, --entry-point-result, expected stdout.
RESULTS = [("answer", "i32", "42\n"), ("big", "i64", "-5000000000\n"),
           ("half", "f32", "5.000000e-01\n")]


@pytest.fixture(scope="session")
def cuda_device() -> None:
    """Skip unless an NVIDIA GPU is present (pywave run uses GPU 0)."""
    if not runtime.device_count(runtime.KDLCUDA):
        pytest.skip("needs an NVIDIA GPU")


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    run.add_arguments(parser)
    return parser.parse_args(argv)


def _build(name: str, entry: str = "main") -> pipeline.Artifacts:
    args = _args([str(RUNNER / f"{name}.mlir")] + OPTIONS.get(name, ["--target", "sm_90"]))
    return pipeline.Pipeline((RUNNER / f"{name}.mlir").read_text(), target=args.target,
                             lowering=run.lowering_options(args), run_entry=entry).run()


def _pywave(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pywave", *argv], capture_output=True,
                          text=True, timeout=600, cwd=TESTS)


def _masked(text: str) -> str:
    return re.sub(r"base@ = 0x[0-9a-f]+", "base@ = <ptr>", text)


# -------------------------------------------------------------------------- compile only

@pytest.mark.parametrize("name", PROGRAMS + ["fault"])
def test_program_compiles_and_links(name):
    art = _build(name)
    assert art.host.run_result == "void"
    jit.initialise(runtime.LIBRARY)
    jit.JitModule(art.object_code).close()    # CompileError if any symbol is unresolved


@pytest.mark.parametrize("entry,result,_", RESULTS)
def test_entry_results_compile(entry, result, _):
    assert _build("entry_result", entry).host.run_result == result


def test_private_helpers_are_not_entry_points():
    """@half_of (private) is a helper; @sum2 (public, returns f32, called by @main) is an
    entry point too, now that host functions may return values."""
    functions = _build("host_memref").host.functions
    assert [f.name for f in functions] == ["sum2", "main"]
    assert [r.scalar for r in functions[0].results] == ["f32"]


def test_public_function_with_unsupported_result_refused_by_compile():
    text = "func.func @main(%v: vector<4xf32>) -> vector<4xf32> {\n  return %v : vector<4xf32>\n}\n"
    with pytest.raises(pywave.CompileError, match="@main result #0"):
        pipeline.Pipeline(text, target="sm_90").run()


def test_entry_with_arguments_refused():
    text = ("module {\n  func.func @f(%x: i32) {\n    return\n  }\n}\n")
    with pytest.raises(pywave.CompileError, match="without arguments"):
        pipeline.Pipeline(text, target="sm_90", run_entry="f").run()


def test_sync_launch_waits_only_in_run_mode():
    """A synchronous launch synchronises the call's stream under `pywave run` only."""
    text = (RUNNER / "print_order.mlir").read_text()
    ran = pipeline.Pipeline(text, target="sm_90", run_entry="main").run().host.llvm_ir
    called = pipeline.Pipeline(text, target="sm_90").run().host.llvm_ir
    assert "mgpuStreamSynchronize" in ran
    assert "mgpuStreamSynchronize" not in called


def test_synchronous_memory_ops_lower_to_streams():
    ir_text = _build("memory_ops").host.llvm_ir
    for callee in ("mgpuStreamCreate", "mgpuMemAlloc", "mgpuMemcpy", "mgpuMemset32",
                   "mgpuMemFree", "mgpuStreamDestroy"):
        assert f"@{callee}(" in ir_text, callee
    assert "wavert_jit_stream" not in ir_text and "wavert_jit_mem" not in ir_text


def test_kernel_only_module_compiles_for_run():
    art = pipeline.Pipeline((RUNNER / "kernels_only.mlir").read_text(), target="sm_90").run()
    assert art.host.functions == () and len(art.binaries) == 1


def test_subgroup_ops_become_shuffles():
    art = pywave.api.build((RUNNER / "kernel_coverage.mlir").read_text(), target="sm_90",
                           format="ptx")
    ptx = b"".join(b.data for b in art.binaries)
    assert b"shfl.sync.bfly" in ptx


def test_nvgpu_on_sm_90a():
    art = _build("nvgpu_mbarrier")
    assert [b.chip for b in art.binaries] == ["sm_90a"]


def test_old_chip_gets_ptx_when_ptxas_dropped_it():
    from pywave.kernels import nvvm
    from pywave.kernels.toolkit import cuda_toolkit
    toolkit = cuda_toolkit()
    art = pipeline.Pipeline((RUNNER / "host_memref.mlir").read_text(), target="sm_70",
                            run_entry="main").run()
    ptxas = os.path.join(toolkit or "", "bin", "ptxas")
    chips = lowering.ptxas_chips(ptxas) if nvvm.has_ptxas(toolkit) else frozenset()
    if chips and "sm_70" in chips:
        assert art.binaries[0].format == "cubin"
    else:
        assert art.binaries[0].format == "ptx"
        assert b".target sm_70" in art.binaries[0].data


def test_cubin_for_a_chip_ptxas_dropped_is_an_error(monkeypatch):
    monkeypatch.setattr(lowering, "ptxas_chips", lambda ptxas: frozenset({"sm_90"}))
    monkeypatch.setattr(os, "access", lambda path, mode: True)
    with pytest.raises(pywave.CompileError, match="sm_70"):
        lowering.image_format("cubin", "sm_70", "/toolkit")
    assert lowering.image_format("fatbin", "sm_70", "/toolkit") == "ptx"
    assert lowering.image_format("auto", "sm_90", "/toolkit") == "auto"


def test_lowering_options_validated_and_keyed():
    with pytest.raises(pywave.CompileError, match="index_bitwidth"):
        lowering.LoweringOptions(index_bitwidth=16)
    with pytest.raises(pywave.CompileError, match="features"):
        lowering.LoweringOptions(features="ptx80")
    plain = pipeline.Pipeline("module {}", target="sm_90").options()
    narrow = pipeline.Pipeline("module {}", target="sm_90",
                               lowering=lowering.LoweringOptions(index_bitwidth=32)).options()
    assert "lowering" not in plain and narrow["lowering"]["index_bitwidth"] == 32


def _launch_helper_params(opts: lowering.LoweringOptions) -> int:
    art = pipeline.Pipeline((RUNNER / "host_memref.mlir").read_text(), target="sm_90",
                            lowering=opts, keep_stages=True, format="ptx").run()
    assert f"O = {opts.kernel_opt_level}" in art.stages["kernels"]
    signature = re.search(r"define internal i32 @__pywave_launch_0\(([^)]*)\)",
                          art.host.llvm_ir).group(1)
    return len(signature.split(","))


def test_index_bitwidth_and_bare_pointers_reach_the_kernels():
    """A memref<2x3xf32> kernel argument: a 7-word descriptor (MLIR's whole ABI), or one
    bare pointer; by default the words the kernel reads."""
    full = _launch_helper_params(lowering.LoweringOptions(keep_kernel_params=True))
    bare = _launch_helper_params(lowering.LoweringOptions(index_bitwidth=32,
                                                          kernel_bare_ptr=True,
                                                          kernel_opt_level=1))
    read = _launch_helper_params(lowering.LoweringOptions())
    assert full - bare == 6 and read < full


def test_cli_accepts_the_harness_options():
    """Every option tools/mlir_gpu_suite.py maps an upstream pipeline option to."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import mlir_gpu_suite
    finally:
        sys.path.pop(0)
    values = {"chip": "sm_90a", "features": "+ptx80", "kernel-opt-level": "2",
              "index-bitwidth": "32", "kernel-bare-ptr": "1", "host-bare-ptr": "1",
              "format": "fatbin"}
    argv = mlir_gpu_suite.compile_args(values)
    args = _args(["f.mlir", "-e", "main", "--entry-point-result=void", "-O3",
                  "--shared-libs=a.so,b.so"] + argv)
    assert (args.target, args.features, args.kernel_opt_level, args.index_bitwidth) == \
        ("sm_90a", "+ptx80", 2, 32)
    assert args.kernel_bare_ptr and args.host_bare_ptr and args.opt_level == 3


def test_run_refuses_a_result_mismatch_before_running():
    proc = _pywave("run", str(RUNNER / "entry_result.mlir"), "-e", "answer", "--target", "sm_90")
    assert proc.returncode == 1
    assert "--entry-point-result=void: @answer returns i32" in proc.stderr


@pytest.mark.parametrize("name", PROGRAMS[:3])
def test_compile_only_compiles_as_a_run_would_and_stops(name):
    """No GPU needed: the program compiles with its entry checked, and one line says so."""
    path = RUNNER / f"{name}.mlir"
    proc = _pywave("run", "--compile-only", str(path), *OPTIONS.get(name, ["--target", "sm_90"]))
    chip = OPTIONS.get(name, ["--target", "sm_90"])[1]
    assert (proc.returncode, proc.stdout) == (
        0, f"compiled {path} for {chip}: entry @main returns void; not run "
           "(--compile-only)\n"), proc.stderr


def test_compile_only_checks_the_entry_and_its_result():
    proc = _pywave("run", "--compile-only", str(RUNNER / "entry_result.mlir"), "-e", "answer",
                   "--target", "sm_90")
    assert proc.returncode == 1
    assert "--entry-point-result=void: @answer returns i32" in proc.stderr
    ok = _pywave("run", "--compile-only", str(RUNNER / "entry_result.mlir"), "-e", "answer",
                 "--entry-point-result=i32", "--target", "sm_90")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.endswith(": entry @answer returns i32; not run (--compile-only)\n")


def test_run_missing_shared_lib(tmp_path):
    with pytest.raises(pywave.Error, match="does not exist"):
        run.load_shared_libs([f"{tmp_path}/libmlir_runner_utils.so,{tmp_path}/libother.so"])


# -------------------------------------------------------------------------- on the GPU

#: The programs the CPU device runs: all but nvgpu_mbarrier (NVVM's mbarrier ops on sm_90a,
#: a GPU's).
CPU_PROGRAMS = [name for name in PROGRAMS if name != "nvgpu_mbarrier"]


@pytest.fixture(params=[pytest.param("gpu", marks=pytest.mark.gpu), "cpu"])
def run_target(request) -> list[str]:
    """The `pywave run` options of the device: GPU 0 (skips without an NVIDIA GPU) or the
    CPU device (``--target cpu``, everywhere)."""
    if request.param == "gpu":
        request.getfixturevalue("cuda_device")
        return []
    return ["--target", "cpu"]


@pytest.mark.gpu
@pytest.mark.parametrize("name", PROGRAMS)
def test_program_output(name, cuda_device):
    proc = _pywave("run", str(RUNNER / f"{name}.mlir"), *OPTIONS.get(name, []))
    assert proc.returncode == 0, proc.stderr
    assert _masked(proc.stdout) == (RUNNER / f"{name}.out").read_text()


@pytest.mark.parametrize("name", CPU_PROGRAMS)
def test_program_output_on_the_cpu_device(name):
    """The whole program (host code, gpu.alloc / memcpy / memset / wait, host-registered
    memory, launches) with ``--target cpu``: the output the GPU gives."""
    proc = _pywave("run", str(RUNNER / f"{name}.mlir"), "--target", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert _masked(proc.stdout) == (RUNNER / f"{name}.out").read_text()


@pytest.mark.parametrize("entry,result,expected", RESULTS)
def test_entry_result_printed(entry, result, expected, run_target):
    proc = _pywave("run", str(RUNNER / "entry_result.mlir"), "-e", entry,
                   f"--entry-point-result={result}", *run_target)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == expected


@pytest.mark.gpu
def test_device_fault_exits_non_zero(cuda_device):
    proc = _pywave("run", str(RUNNER / "fault.mlir"))
    assert proc.returncode == 1
    assert proc.stdout == "7\n"
    assert "error:" in proc.stderr and "ILLEGAL_ADDRESS" in proc.stderr
