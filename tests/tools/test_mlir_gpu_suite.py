"""RUN-line parsing of tools/mlir_gpu_suite.py, on synthetic RUN lines."""

import importlib.util
import sys

import pytest
from conftest import ROOT

_PATH = ROOT / "tools" / "mlir_gpu_suite.py"
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
    assert spec.prelude == ["convert-vector-to-gpu"] and spec.env == {"SOME_VAR": "1"}
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


def test_the_prelude_becomes_one_pass_pipeline_for_pywave_run():
    """Upstream's transform RUN lines: the passes before the lowering, in flag order, as
    one --pass-pipeline; pywave provides mlir-opt's test passes under their names."""
    spec = _one('// RUN: mlir-opt %s -transform-interpreter \\\n'
                '// RUN:   -test-transform-dialect-erase-schedule \\\n'
                '// RUN:   -gpu-lower-to-nvvm-pipeline="cubin-chip=sm_80" \\\n'
                '// RUN: | mlir-runner --entry-point-result=void | FileCheck %s\n')
    assert spec.prelude == ["transform-interpreter", "test-transform-dialect-erase-schedule"]
    assert spec.pywave_args()[:3] == [
        "-e", "main", "--pass-pipeline=builtin.module(transform-interpreter,"
                      "test-transform-dialect-erase-schedule)"]
    assert suite.missing_passes(spec.prelude) == [] and spec.unknown == []


def test_flag_options_become_pass_options_and_the_lowering_ends_the_prelude():
    spec = _one('// RUN: mlir-opt %s -canonicalize="max-iterations=3 test-convergence=false" '
                '-transform-interpreter=entry-point=main -convert-nvgpu-to-nvvm '
                '-gpu-kernel-outlining -canonicalize -convert-vector-to-gpu '
                '| mlir-runner | FileCheck %s\n')
    assert spec.prelude == ["canonicalize{max-iterations=3 test-convergence=false}",
                            "transform-interpreter{entry-point=main}"]
    # after convert-nvgpu-to-nvvm (pywave's lowering) a clean-up is skipped, anything else
    # is reported
    assert spec.lowering and spec.unknown == ["convert-vector-to-gpu"]
    assert suite.prelude_pipeline(spec.prelude) == (
        "builtin.module(canonicalize{max-iterations=3 test-convergence=false},"
        "transform-interpreter{entry-point=main})")


def test_passes_the_bindings_restrict_to_an_op_are_nested_in_it():
    """mlir-opt nests flat flags implicitly; the textual pipeline needs the anchor, which the
    bindings' pass manager names ("restricted to 'func.func'")."""
    assert suite.pass_info("affine-scalrep") == suite.PassInfo(True, "func.func")
    assert suite.pass_info("canonicalize") == suite.PassInfo(True, None)
    assert suite.pass_info("no-such-pass") == suite.PassInfo(False, None)
    assert suite.prelude_pipeline(["affine-scalrep", "affine-loop-invariant-code-motion",
                                   "canonicalize", "buffer-hoisting"]) == (
        "builtin.module(func.func(affine-scalrep,affine-loop-invariant-code-motion),"
        "canonicalize,func.func(buffer-hoisting))")
    assert suite.prelude_pipeline([]) is None


def test_a_prelude_pass_nobody_provides_is_named():
    assert suite.missing_passes(["test-transform-dialect-interpreter", "sparsifier{a=1}",
                                 "test-lower-something", "sparse-compiler{x}"]) == [
        "test-lower-something", "sparse-compiler"]


#: A kernel with linalg that a named transform schedule turns into loops, as upstream's
#: TensorCore transform tests are written.
SCHEDULED_PROGRAM = """{run}
module attributes {{gpu.container_module}} {{
  gpu.module @k {{
    gpu.func @fill(%m: memref<4xf32>) kernel {{
      %one = arith.constant 1.0 : f32
      linalg.fill ins(%one : f32) outs(%m : memref<4xf32>)
      gpu.return
    }}
  }}
  func.func @main() {{
    return
  }}
  module attributes {{transform.with_named_sequence}} {{
    transform.named_sequence @__transform_main(%root: !transform.any_op {{transform.readonly}}) {{
      %fill = transform.structured.match ops{{["linalg.fill"]}} in %root
        : (!transform.any_op) -> !transform.any_op
      %loop = transform.structured.convert_to_loops %fill
        : (!transform.any_op) -> !transform.any_op
      transform.yield
    }}
  }}
}}
"""


def test_a_transform_run_line_compiles_through_pywave_run_alone(tmp_path, capsys):
    """--compile-only: the RUN line's prelude goes to `pywave run` as --pass-pipeline; the
    harness changes nothing in the program. A prelude without the erase pass fails in pywave
    (the schedule's module is left in the program), one with an unknown pass SKIPs."""
    run = ("// RUN: mlir-opt %s -transform-interpreter {erase} "
           '-gpu-lower-to-nvvm-pipeline="cubin-chip=sm_80" | mlir-runner | FileCheck %s')
    cases = {"ok.mlir": "-test-transform-dialect-erase-schedule", "kept.mlir": "",
             "unknown.mlir": "-test-no-such-pass"}
    for name, erase in cases.items():
        (tmp_path / name).write_text(SCHEDULED_PROGRAM.format(run=run.format(erase=erase)))
    suite.main([str(tmp_path), "--compile-only"])
    out = dict(line.split(" ", 1)[::-1] for line in capsys.readouterr().out.splitlines()[:-1])
    assert out["ok.mlir: compiled for sm_80"] == "PASS"
    assert any(k.startswith("kept.mlir: compile for sm_80") and v == "FAIL"
               for k, v in out.items())
    assert out["unknown.mlir: needs mlir-opt pass test-no-such-pass (neither the MLIR "
               "bindings nor pywave provide it)"] == "SKIP"


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
    assert with_rt.needs is None and not with_rt.unknown   # libwavert has the runtime library
    assert without_rt.needs is None and not without_rt.unknown
    assert without_rt.prelude == [
        "sparsifier{enable-gpu-libgen gpu-triple=nvptx64-nvidia-cuda gpu-chip=sm_80 "
        "gpu-features=+ptx71 gpu-format=fatbin enable-runtime-library=false}"]
    assert without_rt.compile == {"chip": "sm_80", "features": "+ptx71"}
    assert without_rt.entry == "main" and without_rt.entry_result == "void"
    assert without_rt.filecheck and other.entry == "other" and not other.filecheck


def test_defines_naming_other_defines_expand_with_the_redefined_value():
    """Upstream's sparse CPU tests: %{compile} names %{sparsifier_opts} and %{run} names
    %{run_opts}; a REDEFINE of the inner one changes the next RUN line (before, the inner
    names reached the pipeline unexpanded: ``sparsifier{%{sparsifier_opts}}``)."""
    text = ('// DEFINE: %{opts} = enable-runtime-library=true\n'
            '// DEFINE: %{compile} = mlir-opt %s --sparsifier="%{opts}"\n'
            '// DEFINE: %{run_opts} = -e start -entry-point-result=void\n'
            '// DEFINE: %{run} = mlir-cpu-runner %{run_opts}\n'
            '// RUN: %{compile} | %{run} | FileCheck %s\n'
            '// REDEFINE: %{opts} = enable-runtime-library=false vl=4\n'
            '// RUN: %{compile} | %{run} | FileCheck %s\n')
    first, second = (suite.parse_run(suite.substitute(c, "/t/p.mlir", {}))
                     for c in suite.run_lines(text))
    assert first.prelude == ["sparsifier{enable-runtime-library=true}"]
    assert second.prelude == ["sparsifier{enable-runtime-library=false vl=4}"]
    assert first.entry == second.entry == "start"


def test_a_self_referring_define_does_not_loop():
    text = '// DEFINE: %{a} = x %{a}\n// RUN: tool %{a}\n'
    assert suite.run_lines(text)[0].startswith("tool x x")


def test_index_dialect_bitwidth_is_not_the_kernel_index_width():
    """Upstream's sm90 TMA RUN lines: convert-index-to-llvm{index-bitwidth=32} (the `index`
    dialect's ops only) beside convert-gpu-to-nvvm at its default 64 bits: the kernels'
    index is 64-bit there, so pywave gets no --index-bitwidth=32."""
    spec = _one("// RUN: mlir-opt %s -transform-interpreter -convert-nvgpu-to-nvvm "
                "-gpu-kernel-outlining -convert-index-to-llvm=index-bitwidth=32 "
                "-convert-arith-to-llvm --nvvm-attach-target=\"module=main_kernel "
                "features=+ptx80 chip=sm_90 O=3\" \\\n"
                "// RUN: | mlir-opt -pass-pipeline='builtin.module(gpu.module(strip-debuginfo,"
                "convert-gpu-to-nvvm,convert-index-to-llvm{index-bitwidth=32},canonicalize,"
                "cse))' \\\n"
                "// RUN: | mlir-opt --gpu-to-llvm --gpu-module-to-binary=format=fatbin "
                "| mlir-runner --entry-point-result=void | FileCheck %s\n")
    assert spec.prelude == ["transform-interpreter"] and spec.unknown == []
    assert spec.compile == {"chip": "sm_90", "features": "+ptx80", "kernel-opt-level": "3",
                            "format": "fatbin"}
    nvvm = _one("// RUN: mlir-opt %s -pass-pipeline='builtin.module(gpu.module("
                "convert-gpu-to-nvvm{index-bitwidth=32 use-bare-ptr-memref-call-conv=1}))' "
                "| mlir-runner\n")
    assert nvvm.compile == {"index-bitwidth": "32", "kernel-bare-ptr": "true"}


def test_data_files_come_from_the_mlir_source_folder(tmp_path):
    """``env TENSOR0=%mlir_src_dir/test/Integration/data/x.mtx``: %mlir_src_dir is the mlir
    folder above a test in an llvm-project checkout (or --mlir-src-dir); a data file that is
    not there is named by the SKIP."""
    mlir = tmp_path / "llvm-project" / "mlir"
    test = mlir / "test" / "Integration" / "Dialect" / "SparseTensor" / "GPU" / "t.mlir"
    test.parent.mkdir(parents=True)
    assert suite.mlir_src_dir(test) == mlir
    assert suite.mlir_src_dir(tmp_path / "elsewhere" / "t.mlir") is None
    text = ('// RUN: mlir-opt %s --sparsifier="enable-runtime-library=false gpu-chip=sm_80" '
            '| env TENSOR0="%mlir_src_dir/test/Integration/data/block.mtx" mlir-runner -e main '
            '--entry-point-result=void | FileCheck %s\n')
    spec = _one(text, {"%mlir_src_dir": str(mlir)})
    data = mlir / "test" / "Integration" / "data" / "block.mtx"
    assert spec.env == {"TENSOR0": str(data)} and spec.needs is None
    assert suite.missing_data_files(spec) == [str(data)]
    data.parent.mkdir(parents=True)
    data.write_text("%%MatrixMarket matrix coordinate real general\n1 1 0\n")
    assert suite.missing_data_files(spec) == []
    # Without a source folder the substitution stays, and the file counts as missing.
    assert suite.missing_data_files(_one(text)) == [
        "%mlir_src_dir/test/Integration/data/block.mtx"]


def test_a_continuation_goes_on_at_the_next_run_line_past_other_lines():
    text = ("// RUN: mlir-opt %s -canonicalize | \\\n\n// a comment\n"
            "// RUN: mlir-runner -e main -entry-point-result=void | FileCheck %s\n")
    spec = _one(text)
    assert spec.runs_program and spec.filecheck and spec.prelude == ["canonicalize"]


def test_cpu_lowering_flags_end_the_prelude_and_own_lowering_drops_it():
    spec = _one("// RUN: mlir-opt %s -one-shot-bufferize -test-lower-to-llvm | "
                "mlir-runner -e entry -entry-point-result=void | FileCheck %s")
    assert spec.prelude == ["one-shot-bufferize"] and spec.lowering and not spec.unknown
    assert "--pass-pipeline=builtin.module(one-shot-bufferize)" in spec.pywave_args()
    assert spec.pywave_args(own_lowering=True) == ["-e", "entry",
                                                    "--entry-point-result=void"]


def test_a_pass_pipeline_without_lowering_passes_is_prelude():
    spec = _one('// RUN: mlir-opt %s -pass-pipeline="builtin.module(func.func(canonicalize,'
                'cse),one-shot-bufferize{bufferize-function-boundaries})" | mlir-opt '
                '-pass-pipeline="builtin.module(convert-linalg-to-loops, lower-affine)" | '
                'mlir-runner -e main -entry-point-result=void | FileCheck %s')
    assert spec.prelude == [
        "func.func(canonicalize,cse),one-shot-bufferize{bufferize-function-boundaries}"]
    assert spec.lowering
