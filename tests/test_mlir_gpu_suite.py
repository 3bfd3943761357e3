"""RUN-line parsing of tools/mlir_gpu_suite.py, on synthetic RUN lines."""

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "tools" / "mlir_gpu_suite.py"
_spec = importlib.util.spec_from_file_location("mlir_gpu_suite", _PATH)
suite = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = suite            # dataclasses look their module up there
_spec.loader.exec_module(suite)


def _one(text: str, subs: dict | None = None) -> "suite.RunSpec":
    commands = suite.run_lines(text)
    assert len(commands) == 1
    return suite.parse_run(suite.substitute(commands[0], "/t/prog.mlir", subs or {}))


def test_continuations_join_and_separate_commands():
    text = ("// RUN: tool-a %s \\\n// RUN:   --flag \\\n// RUN: | FileCheck %s\n"
            "func.func @f() { return }\n// RUN: tool-b %s\n")
    commands = [" ".join(c.split()) for c in suite.run_lines(text)]
    assert commands == ["tool-a %s --flag | FileCheck %s", "tool-b %s"]


def test_one_shot_nvvm_pipeline_options_map_to_pywave():
    spec = _one('// RUN: mlir-opt %s -gpu-lower-to-nvvm-pipeline="cubin-chip=sm_90a '
                'cubin-features=+ptx80 opt-level=3 kernel-index-bitwidth=32 '
                'cubin-format=%gpu_compilation_format" \\\n'
                '// RUN: | mlir-runner -e entry --entry-point-result=void -O2 \\\n'
                '// RUN:   --shared-libs=%mlir_cuda_runtime --shared-libs=/x/libfoo.so \\\n'
                '// RUN: | FileCheck %s --check-prefixes=ONE,TWO\n')
    assert spec.runs_program and spec.filecheck and spec.backend == "nvvm"
    assert spec.compile == {"chip": "sm_90a", "features": "+ptx80", "kernel-opt-level": "3",
                            "index-bitwidth": "32", "format": "fatbin"}
    assert spec.check_prefixes == ["ONE", "TWO"]
    assert spec.pywave_args() == [
        "-e", "entry", "--entry-point-result=void", "-O2", "--shared-libs=/x/libfoo.so",
        "--target=sm_90a", "--features=+ptx80", "--kernel-opt-level=3", "--index-bitwidth=32",
        "--format=fatbin"]
    assert spec.unknown == []


def test_bare_pointer_flags_and_default_entry():
    spec = _one('// RUN: mlir-opt %s -gpu-lower-to-nvvm-pipeline="host-bare-ptr-calling-convention=1'
                ' kernel-bare-ptr-calling-convention=true" | mlir-cpu-runner '
                '--entry-point-result=void | FileCheck %s\n')
    assert spec.entry == "main" and spec.check_prefixes == ["CHECK"]
    assert spec.compile == {"host-bare-ptr": "true", "kernel-bare-ptr": "true"}


def test_hand_written_rocdl_pipeline_with_chip_substitution():
    spec = _one("// RUN: mlir-opt %s -pass-pipeline='builtin.module(gpu.module(strip-debuginfo,"
                "convert-gpu-to-rocdl{chipset=%chip index-bitwidth=32}),"
                "rocdl-attach-target{chip=%chip})' \\\n"
                "// RUN: | mlir-opt -gpu-to-llvm=use-bare-pointers-for-kernels=true "
                "-gpu-module-to-binary \\\n"
                "// RUN: | mlir-runner --entry-point-result=void 2>&1 | FileCheck %s\n",
                {"%chip": "gfx1234"})
    assert spec.backend == "rocdl" and spec.merge_stderr
    assert spec.compile == {"chip": "gfx1234", "index-bitwidth": "32", "kernel-bare-ptr": "true"}


def test_pre_passes_env_and_compiler_output_checks():
    spec = _one("// RUN: mlir-opt %s -convert-vector-to-gpu -gpu-lower-to-nvvm-pipeline "
                "| env SOME_VAR=1 mlir-runner --entry-point-result=void\n")
    assert spec.pre_passes == ["convert-vector-to-gpu"] and spec.env == {"SOME_VAR": "1"}
    assert spec.runs_program and not spec.filecheck
    check = _one('// RUN: mlir-opt %s -gpu-lower-to-nvvm-pipeline="cubin-chip=sm_75" '
                 "-debug-only=some-stage 2>&1 | FileCheck %s --check-prefix=ISA\n")
    assert not check.runs_program and check.debug_only == "some-stage"
    assert check.check_prefixes == ["ISA"] and check.merge_stderr


def test_quoted_pipe_does_not_split_a_stage():
    assert suite.split_pipeline("a 'x|y' | b \"p|q\" | c") == ["a 'x|y'", 'b "p|q"', "c"]


@pytest.mark.parametrize("chip, gpu, ok", [
    ("sm_80", "sm_90", True), ("sm_90", "sm_80", False), ("sm_90a", "sm_90", True),
    ("sm_90a", "sm_100", False), ("gfx1100", "gfx1100", True), ("gfx1100", "gfx942", False)])
def test_chip_compatibility(chip, gpu, ok):
    assert suite.chip_runs_on(chip, gpu) is ok


@pytest.mark.parametrize("chip, gpu, ok", [
    ("sm_80", "sm_90", False), ("sm_80", "sm_86", True), ("sm_86", "sm_80", False),
    ("sm_90", "sm_90", True), ("sm_90", "sm_100", False)])
def test_a_cubin_runs_on_its_major_architecture_only(chip, gpu, ok):
    assert suite.chip_runs_on(chip, gpu, "cubin") is ok
    assert suite.chip_runs_on(chip, gpu, "fatbin") is (int(chip[3:]) <= int(gpu[3:]))


def test_gpu_to_cubin_in_a_pass_pipeline_asks_for_a_cubin():
    spec = _one("// RUN: mlir-opt %s -pass-pipeline='builtin.module(gpu.module("
                "convert-gpu-to-nvvm,gpu-to-cubin{chip=sm_80}))' | mlir-runner "
                "--shared-libs=%mlir_cuda_runtime | FileCheck %s\n")
    assert spec.compile["chip"] == "sm_80" and spec.compile["format"] == "cubin"


SCHEDULED = """
func.func @f(%a: memref<4xf32>) {
  %c = arith.constant 1.0 : f32
  linalg.fill ins(%c : f32) outs(%a : memref<4xf32>)
  return
}
transform.sequence failures(propagate) {
^bb1(%root: !transform.any_op):
  %fill = transform.structured.match ops{["linalg.fill"]} in %root
    : (!transform.any_op) -> !transform.any_op
  %loop = transform.structured.convert_to_loops %fill
    : (!transform.any_op) -> !transform.any_op
}
"""


def test_test_transform_passes_are_done_by_the_harness():
    """mlir-opt's test-transform-dialect-interpreter applies the top-level schedule, and
    -erase-schedule removes it: what remains is the transformed payload only."""
    out = suite.apply_pre_passes(SCHEDULED, ["test-transform-dialect-interpreter",
                                             "test-transform-dialect-erase-schedule"])
    assert "scf.for" in out and "linalg.fill" not in out and "transform." not in out
    kept = suite.apply_pre_passes(SCHEDULED, ["test-transform-dialect-erase-schedule"])
    assert "linalg.fill" in kept and "transform." not in kept


def test_lit_local_cfg_unsupported_and_substitutions(tmp_path):
    (tmp_path / "lit.local.cfg").write_text(
        'config.substitutions.append(("%chip", config.test_chip))\n')
    sub = tmp_path / "needs_flag"
    sub.mkdir()
    (sub / "lit.local.cfg").write_text("if not config.some_flag:\n    config.unsupported = True\n")
    test = sub / "t.mlir"
    test.write_text("")
    assert suite.lit_config(test, tmp_path, {"test_chip": "gfx1"}) == (
        True, {"%chip": "gfx1"}, "needs_flag/lit.local.cfg")
    assert suite.lit_config(test, tmp_path, {"test_chip": "gfx1", "some_flag": True})[0] is False


def test_the_gpu_chip_comes_from_pywave(monkeypatch):
    from pywave import pipeline
    from pywave.program import Target
    monkeypatch.setattr(pipeline, "default_target", lambda: Target("nvvm", "sm_90"))
    assert suite.detect_gpu_chip() == "sm_90"
    monkeypatch.setattr(pipeline, "default_target", lambda: None)
    assert suite.detect_gpu_chip() is None


def test_lit_defines_expand_in_run_lines():
    """Upstream's sparse GPU tests: DEFINE'd %{compile} (its quote closed by the RUN line) and
    %{run}, a REDEFINE, and the sparsifier run by the harness with its chip as the target."""
    text = ('// DEFINE: %{compile} = mlir-opt %s \\\n'
            '// DEFINE:   --sparsifier="enable-gpu-libgen gpu-triple=nvptx64-nvidia-cuda '
            'gpu-chip=sm_80 gpu-features=+ptx71 gpu-format=%gpu_compilation_format\n'
            '// DEFINE: %{run} = mlir-runner \\\n'
            '// DEFINE:   --shared-libs=%mlir_cuda_runtime \\\n'
            '// DEFINE:   --e main --entry-point-result=void \\\n'
            '// DEFINE: | FileCheck %s\n'
            '// RUN: %{compile} enable-runtime-library=true" | %{run}\n'
            '// RUN: %{compile} enable-runtime-library=false" | %{run}\n'
            '// REDEFINE: %{run} = mlir-runner -e other\n'
            '// RUN: %{compile} enable-runtime-library=false" | %{run}\n')
    commands = [suite.substitute(c, "/t/p.mlir", {}) for c in suite.run_lines(text)]
    assert len(commands) == 3
    with_rt, without_rt, other = (suite.parse_run(c) for c in commands)
    assert with_rt.needs and "sparse runtime library" in with_rt.needs
    assert without_rt.needs is None and not without_rt.unknown
    assert without_rt.pre_passes == [
        "sparsifier{enable-gpu-libgen gpu-triple=nvptx64-nvidia-cuda gpu-chip=sm_80 "
        "gpu-features=+ptx71 gpu-format=fatbin enable-runtime-library=false}"]
    assert without_rt.compile == {"chip": "sm_80", "features": "+ptx71"}
    assert without_rt.entry == "main" and without_rt.entry_result == "void"
    assert without_rt.filecheck and other.entry == "other" and not other.filecheck
