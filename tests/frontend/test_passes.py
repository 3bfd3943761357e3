"""The user's own pass pipeline (``passes=``, ``--pass-pipeline``, ``pywave opt``): it runs
right after parsing, before pywave's lowering, in the compile worker; it is part of the cache
key; an unknown pass, a bad option or a failing pass is a CompileError naming the pass."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import pywave
from pywave import cache, pipeline
from pywave.api import build
from pywave.entry.cli import main
from pywave.frontend.passes import Pass, check, split
from conftest import TESTS

DATA = TESTS / "data"
VECTOR_ADD = (DATA / "vector_add.mlir").read_text()

#: A kernel pywave cannot lower by itself (linalg), but can after convert-linalg-to-loops.
LINALG_FILL = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @fill(%m: memref<4xf32>) kernel {
      %one = arith.constant 1.0 : f32
      linalg.fill ins(%one : f32) outs(%m : memref<4xf32>)
      gpu.return
    }
  }
}
"""
TO_LOOPS = "builtin.module(gpu.module(gpu.func(convert-linalg-to-loops)))"

#: The same value computed twice; cse leaves one.
TWICE = """
module {
  func.func @f(%a: i32) -> i32 {
    %c = arith.constant 3 : i32
    %b = arith.addi %a, %c : i32
    %d = arith.addi %a, %c : i32
    %e = arith.muli %b, %d : i32
    return %e : i32
  }
}
"""
CSE = "builtin.module(func.func(cse))"


# --------------------------------------------------------------------------------------------
# The pipeline text
# --------------------------------------------------------------------------------------------
def test_split_gives_each_pass_with_its_anchors_in_order():
    text = ('builtin.module(canonicalize{max-iterations=3 test-convergence=false}, '
            'func.func(cse, loop-invariant-code-motion), '
            'gpu.module(gpu.func(convert-linalg-to-loops)), '
            'gpu-module-to-binary{format=isa toolkit="/a b/{c},d"})')
    assert split(text) == [
        Pass("canonicalize{max-iterations=3 test-convergence=false}", ("builtin.module",)),
        Pass("cse", ("builtin.module", "func.func")),
        Pass("loop-invariant-code-motion", ("builtin.module", "func.func")),
        Pass("convert-linalg-to-loops", ("builtin.module", "gpu.module", "gpu.func")),
        Pass('gpu-module-to-binary{format=isa toolkit="/a b/{c},d"}', ("builtin.module",))]
    assert split(text)[1].pipeline == "builtin.module(func.func(cse))"
    assert split(text)[3].name == "gpu.module(gpu.func(convert-linalg-to-loops))"
    assert split("builtin.module()") == []
    assert split("builtin.module(a{x='}),('}, b)") == [
        Pass("a{x='}),('}", ("builtin.module",)), Pass("b", ("builtin.module",))]


@pytest.mark.parametrize("bad, message", [
    ("func.func(cse)", "not a pass pipeline on the module: expected builtin.module"),
    ("cse", "not a pass pipeline on the module"),
    ("", "not a pass pipeline on the module"),
    ("builtin.module(cse", "not a pass pipeline on the module"),
    ("builtin.module(func.func(cse)", "expected ',' or '\\)' at character"),
    ("builtin.module(cse))", "text after the end of the pipeline at character 20"),
    ("builtin.module(canonicalize{a=1)", "unbalanced '{' in pass options"),
    ('builtin.module(gpu-module-to-binary{toolkit="x})', "unterminated quoted option"),
    ("builtin.module(cse,)", "expected a pass or anchor name"),
])
def test_malformed_pipelines_are_compile_errors_naming_the_parameter(bad, message):
    with pytest.raises(pywave.CompileError, match=f"passes=.*{message}"):
        check(bad)


def test_a_pipeline_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match="passes must be a pass pipeline \\(str\\).*list"):
        check(["cse"])


def test_an_overlong_pipeline_is_refused():
    with pytest.raises(pywave.CompileError, match="passes is 70000 characters long; the "
                       "limit is 65536"):
        check("builtin.module(" + "c" * 69984 + ")")


def test_the_pipeline_is_checked_when_the_compile_is_made():
    with pytest.raises(pywave.CompileError, match="passes="):
        pywave.compile(VECTOR_ADD, target="sm_90", passes="cse")


# --------------------------------------------------------------------------------------------
# Running it
# --------------------------------------------------------------------------------------------
def test_passes_run_after_parse_and_before_the_lowering():
    with pytest.raises(pywave.CompileError, match="linalg.fill .*cannot be lowered"):
        build(LINALG_FILL, target="sm_90", format="ptx")
    art = build(LINALG_FILL, target="sm_90", format="ptx", passes=TO_LOOPS, keep_stages=True)
    assert "linalg" not in art.stages["passes"] and "scf.for" in art.stages["passes"]
    assert "linalg.fill" in art.stages["parse"]
    assert list(art.seconds)[:3] == ["parse", "passes", "prepare"]
    assert b".entry fill" in art.binaries[0].data


def test_compile_runs_the_passes_in_the_worker():
    mod = pywave.compile(LINALG_FILL, target="sm_90", format="ptx", passes=TO_LOOPS,
                         disk_cache=False)
    assert list(mod.kernels) == ["k::fill"]


def test_compile_many_and_export_take_passes(tmp_path):
    (mod,) = pywave.compile_many([LINALG_FILL], target="sm_90", format="ptx",
                                 passes=TO_LOOPS, disk_cache=False)
    assert list(mod.kernels) == ["k::fill"]
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("needs a C compiler for export")
    text = LINALG_FILL.replace("  }\n}\n", """  }
  func.func @main(%m: memref<4xf32>) {
    %c1 = arith.constant 1 : index
    gpu.launch_func @k::@fill blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%m : memref<4xf32>)
    return
  }
}
""")
    done = pywave.export(text, tmp_path, "filled", target="sm_90", format="ptx",
                         passes=TO_LOOPS)
    assert done.functions == ("filled_main",)


def test_passes_are_part_of_the_cache_key():
    def key(passes):
        made = pipeline.Pipeline(TWICE, target="sm_90", passes=passes)
        return cache.key(TWICE, cache.described(made.options(), pipeline.tool_versions()))
    assert len({key(None), key(CSE), key("builtin.module(canonicalize)")}) == 3
    assert key(CSE) == key(CSE)


def test_unknown_pass_is_a_compile_error_naming_it():
    with pytest.raises(pywave.CompileError, match="'no-such-pass' does not refer to a "
                       "registered pass"):
        build(TWICE, target="sm_90", passes="builtin.module(no-such-pass)")


def test_bad_option_is_a_compile_error_naming_the_pass():
    with pytest.raises(pywave.CompileError, match="(?s)no such option bogus.*`canonicalize`"):
        pywave.compile(VECTOR_ADD, target="sm_90", disk_cache=False,
                       passes="builtin.module(canonicalize{bogus=1})")


def test_failing_pass_names_the_pass_the_op_and_its_location():
    with pytest.raises(pywave.CompileError) as info:
        pywave.compile(Path(DATA / "vector_add.mlir"), target="sm_90", disk_cache=False,
                       passes="builtin.module(canonicalize, gpu-module-to-binary)")
    message = str(info.value)
    assert "the pass 'gpu-module-to-binary' of passes= failed" in message
    assert "vector_add.mlir:3:3: the module has no target attributes" in message
    assert (info.value.line, info.value.column) == (3, 3)
    assert "gpu.module @kernels" in info.value.source_line
    # MLIR's note printing the failing op is cut short (for a module pass: the module)
    assert "note: see current operation" in message and "more lines)" in message
    assert len(message.splitlines()) < 25


def test_failing_nested_pass_is_named_with_its_anchors():
    """Upstream's NVVM lowering run by the user, before pywave's rewrite of num_subgroups."""
    text = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @f(%o: memref<?xindex>) kernel {
      %n = gpu.num_subgroups : index
      %c0 = arith.constant 0 : index
      memref.store %n, %o[%c0] : memref<?xindex>
      gpu.return
    }
  }
}
"""
    build(text, target="sm_90", format="ptx")           # pywave lowers it
    with pytest.raises(pywave.CompileError) as info:
        build(text, target="sm_90", format="ptx",
              passes="builtin.module(func.func(cse), gpu.module(convert-gpu-to-nvvm))")
    message = str(info.value)
    assert message.startswith("the pass 'gpu.module(convert-gpu-to-nvvm)' of passes= failed")
    assert "<input>:5:12: failed to legalize operation 'gpu.num_subgroups'" in message


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------
def test_opt_prints_the_module_after_the_passes(tmp_path, capsys):
    source = tmp_path / "twice.mlir"
    source.write_text(TWICE)
    assert main(["opt", str(source), f"--pass-pipeline={CSE}"]) == 0
    out = capsys.readouterr().out
    assert out.count("arith.addi") == 1 and "arith.muli %0, %0" in out
    assert main(["opt", str(source), "--pass-pipeline", CSE, "-o",
                 str(tmp_path / "out.mlir")]) == 0
    assert (tmp_path / "out.mlir").read_text() == out


def test_opt_without_passes_round_trips(tmp_path, capsys):
    source = tmp_path / "twice.mlir"
    source.write_text(TWICE)
    assert main(["opt", str(source)]) == 0
    assert capsys.readouterr().out.count("arith.addi") == 2


def test_opt_errors_are_one_line_and_status_1(tmp_path, capsys):
    source = tmp_path / "k.mlir"
    source.write_text(VECTOR_ADD)
    assert main(["opt", str(source), "--pass-pipeline=builtin.module(gpu-module-to-binary)"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: the pass 'gpu-module-to-binary' of passes= failed")
    assert f"{source}:3:3: the module has no target attributes" in err


def test_opt_runs_in_the_worker_and_needs_no_target(monkeypatch, tmp_path, capsys):
    """passes_only looks up no GPU: TargetChoice probes nothing."""
    from pywave import pipeline as pl
    monkeypatch.setattr(pl, "default_target", lambda: pytest.fail("looked up a GPU"))
    made = pl.Pipeline(TWICE, passes=CSE, passes_only=True)
    art = made.run()
    assert art.target is None and art.text.count("arith.addi") == 1
    with pytest.raises(pywave.Error, match="compiles no program"):
        art.program()


def test_cli_compile_takes_pass_pipeline(tmp_path, capsys):
    source = tmp_path / "fill.mlir"
    source.write_text(LINALG_FILL)
    assert main(["compile", str(source), "--target", "sm_90", "--format", "ptx"]) == 1
    assert main(["compile", str(source), "--target", "sm_90", "--format", "ptx",
                 f"--pass-pipeline={TO_LOOPS}"]) == 0
    assert "stage passes" in capsys.readouterr().out


def test_cli_run_takes_pass_pipeline(tmp_path):
    source = tmp_path / "fill.mlir"
    source.write_text(LINALG_FILL.replace("  }\n}\n", """  }
  func.func @main() {
    return
  }
}
"""))
    assert main(["run", str(source), "--target", "sm_90", "--format", "ptx",
                 "--compile-only"]) == 1
    assert main(["run", str(source), "--target", "sm_90", "--format", "ptx",
                 "--compile-only", f"--pass-pipeline={TO_LOOPS}"]) == 0


def test_linalg_kernel_runs_after_the_users_passes(device):
    mod = device.compile(LINALG_FILL, passes=TO_LOOPS)
    out = device.zeros(4)
    mod.kernels["fill"](out, grid=1, block=1)
    assert device.get(out).tolist() == [1.0, 1.0, 1.0, 1.0]


def test_a_crash_inside_a_users_pass_is_an_error_with_a_reproducer(tmp_path, monkeypatch,
                                                                   capsys):
    """A real one: LLVM's NVPTX backend exits with 'LLVM ERROR' when upstream's pipeline
    serialises sm_90 kernels at its default PTX version. The worker dies, not this process."""
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "k.mlir"
    source.write_text(VECTOR_ADD)
    crashing = "builtin.module(gpu-lower-to-nvvm-pipeline{cubin-chip=sm_90 cubin-format=isa})"
    assert main(["opt", str(source), f"--pass-pipeline={crashing}"]) == 1
    err = capsys.readouterr().err
    assert "during stage 'passes': LLVM ERROR: PTX version" in err
    reproducer = Path(err.split("reproducer: ")[1].split()[0])
    assert reproducer.read_text() == VECTOR_ADD
    options = json.loads(reproducer.with_suffix(".json").read_text())["options"]
    assert options["passes"] == crashing and options["passes_only"] is True


# --------------------------------------------------------------------------------------------
# pywave's own passes: stand-ins for mlir-opt's test-only transform-dialect passes
# --------------------------------------------------------------------------------------------
#: LINALG_FILL with a schedule in upstream's old style: a top-level transform.sequence
#: (mlir-opt -test-transform-dialect-interpreter applies it).
FILL_SEQUENCE = LINALG_FILL.rstrip()[:-1] + """
  transform.sequence failures(propagate) {
  ^bb1(%root: !transform.any_op):
    %fill = transform.structured.match ops{["linalg.fill"]} in %root
      : (!transform.any_op) -> !transform.any_op
    %loop = transform.structured.convert_to_loops %fill
      : (!transform.any_op) -> !transform.any_op
  }
}
"""
#: The same schedule in today's style: a named sequence @__transform_main in a nested module
#: (MLIR's transform-interpreter applies it; the bindings register that one).
FILL_NAMED = LINALG_FILL.rstrip()[:-1] + """
  module attributes {transform.with_named_sequence} {
    transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
      %fill = transform.structured.match ops{["linalg.fill"]} in %root
        : (!transform.any_op) -> !transform.any_op
      %loop = transform.structured.convert_to_loops %fill
        : (!transform.any_op) -> !transform.any_op
      transform.yield
    }
  }
}
"""


def _opt(text: str, passes: str) -> str:
    return pipeline.Pipeline(text, passes=passes, passes_only=True).run().text


@pytest.mark.parametrize("interpret, erase", [
    ("pywave-apply-transform-schedule", "pywave-erase-transform-schedule"),
    ("test-transform-dialect-interpreter", "test-transform-dialect-erase-schedule")])
def test_a_top_level_schedule_is_applied_and_erased(interpret, erase):
    out = _opt(FILL_SEQUENCE, f"builtin.module({interpret}, {erase})")
    assert "scf.for" in out and "linalg.fill" not in out and "transform." not in out
    kept = _opt(FILL_SEQUENCE, f"builtin.module({erase})")
    assert "linalg.fill" in kept and "transform." not in kept


def test_erasing_a_named_schedule_drops_its_module_and_attribute():
    out = _opt(FILL_NAMED, "builtin.module(transform-interpreter, "
                           "test-transform-dialect-erase-schedule)")
    assert "scf.for" in out and "linalg.fill" not in out
    assert "transform" not in out
    assert [line.split()[0] for line in out.splitlines() if "module" in line] == [
        "module", "gpu.module"]                          # the schedule's module is gone


def test_an_upstream_transform_run_line_compiles_through_pywave_run(tmp_path):
    """mlir-opt -transform-interpreter -test-transform-dialect-erase-schedule
    -gpu-lower-to-nvvm-pipeline | mlir-runner, as one `pywave run`."""
    source = tmp_path / "fill.mlir"
    source.write_text(FILL_NAMED.rstrip()[:-1] + "  func.func @main() {\n    return\n  }\n}\n")
    run = ["run", str(source), "--target", "sm_90", "--format", "ptx", "--compile-only"]
    assert main(run + ["--pass-pipeline=builtin.module(transform-interpreter)"]) == 1
    assert main(run + ["--pass-pipeline=builtin.module(transform-interpreter, "
                       "test-transform-dialect-erase-schedule)"]) == 0


def test_applying_without_a_top_level_schedule_names_the_pass():
    with pytest.raises(pywave.CompileError, match="the pass 'pywave-apply-transform-schedule' "
                       "of passes= failed: .*no top-level transform op.*transform-interpreter"):
        _opt(FILL_NAMED, "builtin.module(pywave-apply-transform-schedule)")


def test_a_failing_schedule_is_a_compile_error_naming_the_pass_and_the_op():
    failing = FILL_SEQUENCE.replace('ops{["linalg.fill"]}', 'ops{["gpu.func"]}')
    with pytest.raises(pywave.CompileError) as info:
        _opt(failing, "builtin.module(test-transform-dialect-interpreter)")
    message = str(info.value)
    assert message.startswith("the pass 'test-transform-dialect-interpreter' of passes= failed")
    line = failing.splitlines().index(next(l for l in failing.splitlines()
                                           if "convert_to_loops" in l)) + 1
    assert f":{line}:" in message and "expected the payload to implement TilingInterface" \
        in message


@pytest.mark.parametrize("bad, message", [
    ("builtin.module(func.func(pywave-erase-transform-schedule))",
     "'pywave-erase-transform-schedule' runs on the module; put it directly inside "
     "builtin.module\\(...\\), not inside func.func"),
    ("builtin.module(test-transform-dialect-interpreter{enable-expensive-checks=1})",
     "'test-transform-dialect-interpreter' \\(pywave-apply-transform-schedule\\) takes no "
     "options")])
def test_own_passes_run_on_the_module_without_options(bad, message):
    with pytest.raises(pywave.CompileError, match=message):
        check(bad)
    with pytest.raises(pywave.CompileError, match=message):
        _opt(FILL_SEQUENCE, bad)


def test_a_kernel_runs_after_its_transform_schedule(device):
    mod = device.compile(FILL_NAMED, passes="builtin.module(transform-interpreter, "
                                            "pywave-erase-transform-schedule)")
    out = device.zeros(4)
    mod.kernels["fill"](out, grid=1, block=1)
    assert device.get(out).tolist() == [1.0, 1.0, 1.0, 1.0]
