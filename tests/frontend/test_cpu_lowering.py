"""pywave's own host lowering (no user pipeline) of what MLIR lowers on a CPU: n-D vector
ops, masks, transfers, contractions and reductions, math (intrinsics, libm, integer powers),
complex, the small float types and linalg on memrefs (tests/data/cpu_lowering/*.mlir, this
project's programs), each run with ``pywave run`` and compared with MLIR's own
ExecutionEngine running the same module lowered by upstream's CPU pipeline
(tests/upstream_engine.py). Tensors need the user's bufferization: without it the compile
error names the op and the pass."""

from __future__ import annotations

import pytest

from pywave.frontend import cpu_lowering
from upstream_engine import masked, pywave_output, upstream_output
from conftest import TESTS

DATA = TESTS / "data" / "cpu_lowering"
PROGRAMS = sorted(p.stem for p in DATA.glob("*.mlir") if p.stem != "tensor")
BUFFERIZE = "builtin.module(one-shot-bufferize{bufferize-function-boundaries})"


@pytest.mark.parametrize("name", PROGRAMS)
def test_pywave_run_prints_what_mlirs_execution_engine_prints(name):
    path = DATA / f"{name}.mlir"
    expected = masked(upstream_output(path))
    assert expected.count("\n") >= 5          # the reference printed the program's values
    got = pywave_output(path)
    assert got.returncode == 0, got.stderr
    assert masked(got.stdout) == expected


def test_tensors_without_bufferization_name_the_op_and_the_pass():
    got = pywave_output(DATA / "tensor.mlir")
    assert got.returncode != 0
    assert "arith.constant at line 3" in got.stderr     # the first op on tensors
    assert "one-shot-bufferize" in got.stderr
    assert "Traceback" not in got.stderr


def test_tensors_bufferized_by_the_users_pipeline_run_as_upstream():
    path = DATA / "tensor.mlir"
    got = pywave_output(path, BUFFERIZE)
    assert got.returncode == 0, got.stderr
    assert got.stdout == upstream_output(path, BUFFERIZE)
    assert got.stdout.split() == ["4.5", "-0.5", "9", "-2", "9.5"]


def test_steps_run_only_for_the_dialects_host_code_holds():
    from mlir import ir
    with ir.Context():
        plain = ir.Module.parse("""
          func.func @f(%a: memref<4xf32>) {
            %c0 = arith.constant 0 : index
            %v = memref.load %a[%c0] : memref<4xf32>
            memref.store %v, %a[%c0] : memref<4xf32>
            return
          }""")
        for table in (cpu_lowering.HOST_STEPS, cpu_lowering.LATE_STEPS):
            assert cpu_lowering.steps(table, cpu_lowering.host_ops(plain)) == []
        mixed = ir.Module.parse("""
          module attributes {gpu.container_module} {
            gpu.module @k {
              gpu.func @g() kernel {
                %x = arith.constant 1.0 : f32
                %y = math.tan %x : f32
                gpu.return
              }
            }
            func.func @f(%x: f4E2M1FN) -> vector<2xf32> {
              %w = arith.extf %x : f4E2M1FN to f32
              %v = vector.broadcast %w : f32 to vector<2xf32>
              return %v : vector<2xf32>
            }
          }""")
        present = cpu_lowering.host_ops(mixed)
        assert "math." not in present                  # inside a gpu.module only
        assert cpu_lowering.SMALL_FLOAT_CASTS in present and "vector." in present
        assert [s.split(",")[0] for s in cpu_lowering.steps(cpu_lowering.HOST_STEPS, present)
                ] == ["convert-arith-to-llvm", "func.func(lower-vector-mask"]
        assert cpu_lowering.steps(cpu_lowering.LATE_STEPS, present) == ["convert-vector-to-llvm"]


def test_small_float_step_expands_no_other_arith_op(tmp_path):
    """arith-expand runs after convert-arith-to-llvm: maximumf(+0.0, -0.0) stays +0.0 (the
    op orders -0.0 below +0.0; arith-expand's select-based expansion would give -0.0)."""
    path = tmp_path / "max.mlir"
    path.write_text("""
      func.func @main() {
        %p = arith.constant 0.0 : f32
        %n = arith.constant -0.0 : f32
        %m = arith.maximumf %p, %n : f32
        %q = arith.minimumf %n, %p : f32
        vector.print %m : f32
        vector.print %q : f32
        %h = arith.constant 1.5 : f4E2M1FN
        %w = arith.extf %h : f4E2M1FN to f32
        vector.print %w : f32
        return
      }""")
    got = pywave_output(path)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["0", "-0", "1.5"]


def test_a_transform_schedule_left_in_the_module_names_the_passes(tmp_path):
    path = tmp_path / "schedule.mlir"
    path.write_text("""
      func.func @main() {
        return
      }
      module attributes {transform.with_named_sequence} {
        transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {
          transform.yield
        }
      }""")
    got = pywave_output(path)
    assert got.returncode != 0 and "Traceback" not in got.stderr
    assert "transform schedule" in got.stderr and "transform-interpreter" in got.stderr
    assert "pywave-erase-transform-schedule" in got.stderr
    erased = pywave_output(path, "builtin.module(pywave-erase-transform-schedule)")
    assert erased.returncode == 0, erased.stderr
