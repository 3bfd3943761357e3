"""pywave.ExecutionEngine, the drop-in for mlir.execution_engine.ExecutionEngine: upstream's
calling convention (packed ``_mlir__mlir_ciface_<f>``, ctypes pointers, mlir.runtime memref
descriptors), host functions on the CPU, GPU programs in both forms (before lowering; lowered
by gpu-lower-to-nvvm-pipeline) against the driver stand-in, and on a GPU."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pywave
from pywave import pipeline
from pywave.entry.engine import ExecutionEngine, UnknownFunction

from conftest import TESTS, fake_driver_env, need_fake_driver

DATA = TESTS / "data"
VECTOR_ADD = (DATA / "vector_add.mlir").read_text().replace(
    "func.func @main(%a: memref<?xf32>, %b: memref<?xf32>, %c: memref<?xf32>)",
    "func.func @main(%a: memref<?xf32>, %b: memref<?xf32>, %c: memref<?xf32>) "
    "attributes {llvm.emit_c_interface}")
LOWER = "builtin.module(gpu-lower-to-nvvm-pipeline{cubin-chip=sm_90 cubin-features=+ptx80 " \
        "cubin-format=isa})"

HOST_ONLY = """
module {
  func.func @add(%a: i32, %b: i32) -> i32 attributes {llvm.emit_c_interface} {
    %s = arith.addi %a, %b : i32
    return %s : i32
  }
  func.func @fill(%m: memref<?xf32>, %v: f32) attributes {llvm.emit_c_interface} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = memref.dim %m, %c0 : memref<?xf32>
    scf.for %i = %c0 to %n step %c1 {
      memref.store %v, %m[%i] : memref<?xf32>
    }
    return
  }
  func.func @no_interface() {
    return
  }
}
"""


CALLBACK = """
module {
  func.func private @twice(i32) -> i32 attributes {llvm.emit_c_interface}
  func.func @doubled(%a: i32) -> i32 attributes {llvm.emit_c_interface} {
    %r = func.call @twice(%a) : (i32) -> i32
    return %r : i32
  }
}
"""


def _lowered_upstream() -> str:
    """VECTOR_ADD as upstream's gpu-lower-to-nvvm-pipeline leaves it (run by pywave opt)."""
    done = pipeline.Pipeline(VECTOR_ADD, passes=LOWER, passes_only=True).run()
    assert "gpu.binary" in done.text and "llvm.func @_mlir_ciface_main" in done.text
    return done.text


def _descriptor_pointer(array: np.ndarray):
    from mlir import runtime as rt
    return ctypes.pointer(ctypes.pointer(rt.get_ranked_memref_descriptor(array)))


# --------------------------------------------------------------------------------------------
# CPU: host functions, the calling convention, the API surface
# --------------------------------------------------------------------------------------------
def test_scalar_arguments_and_result_as_upstream_passes_them():
    with ExecutionEngine(HOST_ONLY, target="sm_90") as engine:
        result = ctypes.c_int32(-1)
        engine.invoke("add", ctypes.pointer(ctypes.c_int32(40)),
                      ctypes.pointer(ctypes.c_int32(2)), ctypes.pointer(result))
        assert result.value == 42


def test_memref_argument_as_an_mlir_runtime_descriptor():
    array = np.zeros(5, np.float32)
    with ExecutionEngine(HOST_ONLY, target="sm_90") as engine:
        engine.invoke("fill", _descriptor_pointer(array), ctypes.pointer(ctypes.c_float(2.5)))
    assert array.tolist() == [2.5] * 5


def test_an_mlir_module_object_and_lookup():
    from mlir import ir
    with ir.Context():
        module = ir.Module.parse(HOST_ONLY)
        engine = ExecutionEngine(module, opt_level=3, target="sm_90")
        assert "llvm.func" not in str(module)        # the caller's module is not lowered
    func = engine.lookup("add")
    a, b, r = ctypes.c_int32(1), ctypes.c_int32(2), ctypes.c_int32(0)
    packed = (ctypes.c_void_p * 3)(*(ctypes.cast(ctypes.pointer(x), ctypes.c_void_p)
                                     for x in (a, b, r)))
    func(packed)
    assert r.value == 3
    assert engine.raw_lookup("_mlir_ciface_add") == ctypes.cast(func, ctypes.c_void_p).value
    engine.close()


def test_register_runtime_defines_a_c_interface_function_for_the_program():
    engine = ExecutionEngine(CALLBACK, target="sm_90")
    callback = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32)(lambda x: 2 * x + 1)
    engine.register_runtime("twice", callback)
    result = ctypes.c_int32(0)
    engine.invoke("doubled", ctypes.pointer(ctypes.c_int32(20)), ctypes.pointer(result))
    assert result.value == 41
    with pytest.raises(pywave.Error, match="register runtime functions before the first"):
        engine.register_runtime("twice", callback)
    engine.close()


def test_an_unresolved_runtime_function_fails_at_the_first_lookup():
    engine = ExecutionEngine(CALLBACK.replace("@twice", "@thrice"), target="sm_90")
    with pytest.raises(pywave.CompileError, match="_mlir_ciface_thrice"):
        engine.lookup("doubled")


def test_calls_after_close_raise():
    engine = ExecutionEngine(HOST_ONLY, target="sm_90")
    result = ctypes.c_int32(0)
    args = (ctypes.pointer(ctypes.c_int32(1)), ctypes.pointer(ctypes.c_int32(2)),
            ctypes.pointer(result))
    engine.invoke("add", *args)
    engine.close()
    engine.close()                                       # idempotent
    with pytest.raises(pywave.Error, match="the ExecutionEngine is closed"):
        engine.invoke("add", *args)
    # no GPU op: a host program whatever chip was asked for
    assert repr(engine) == "<pywave.ExecutionEngine target=host closed>"


def test_unknown_function_is_a_runtime_error():
    with ExecutionEngine(HOST_ONLY, target="sm_90") as engine:
        with pytest.raises(UnknownFunction, match="Unknown function no_interface.*"
                           "llvm.emit_c_interface"):
            engine.invoke("no_interface")
        with pytest.raises(RuntimeError, match="Unknown function nope"):
            engine.lookup("nope")
        assert engine.raw_lookup("nope") == 0
        assert engine.raw_lookup("no_interface") != 0     # _mlir_no_interface exists


def test_a_non_pointer_argument_is_a_type_error_naming_it():
    with ExecutionEngine(HOST_ONLY, target="sm_90") as engine:
        with pytest.raises(TypeError, match="invoke\\('add'\\): argument 1 must be a ctypes "
                           "pointer .*got str"):
            engine.invoke("add", ctypes.pointer(ctypes.c_int32(1)), "2",
                          ctypes.pointer(ctypes.c_int32(0)))


def test_a_wrong_number_of_pointers_is_a_type_error_not_a_wild_read():
    with ExecutionEngine(HOST_ONLY, target="sm_90") as engine:
        with pytest.raises(TypeError, match="invoke\\('add'\\) takes 3 pointers .*got 2"):
            engine.invoke("add", ctypes.pointer(ctypes.c_int32(1)),
                          ctypes.pointer(ctypes.c_int32(2)))


def test_object_dump(tmp_path):
    with ExecutionEngine(HOST_ONLY, target="sm_90", enable_object_dump=True) as engine:
        engine.dump_to_object_file(str(tmp_path / "host.o"))
    assert (tmp_path / "host.o").read_bytes()[:4] == b"\x7fELF"
    with ExecutionEngine(HOST_ONLY, target="sm_90") as engine:
        with pytest.raises(pywave.Error, match="enable_object_dump=True"):
            engine.dump_to_object_file(str(tmp_path / "no.o"))


def test_shared_libs_of_mlir_are_accepted_and_others_must_exist(tmp_path):
    ExecutionEngine(HOST_ONLY, target="sm_90", shared_libs=[
        "/opt/llvm/lib/libmlir_cuda_runtime.so", "/x/libmlir_c_runner_utils.so"]).close()
    with pytest.raises(pywave.Error, match="does not exist"):
        ExecutionEngine(HOST_ONLY, target="sm_90", shared_libs=[str(tmp_path / "libno.so")])
    with pytest.raises(TypeError, match="shared_libs must be a list"):
        ExecutionEngine(HOST_ONLY, target="sm_90", shared_libs="libfoo.so")


def test_compile_errors_and_wrong_types_are_pywave_errors():
    with pytest.raises(pywave.CompileError, match="arith.addii"):
        ExecutionEngine(HOST_ONLY.replace("arith.addi", "arith.addii"), target="sm_90")
    with pytest.raises(pywave.CompileError, match="opt_level=7"):
        ExecutionEngine(HOST_ONLY, opt_level=7, target="sm_90")
    with pytest.raises(TypeError, match="MLIR text"):
        ExecutionEngine(42, target="sm_90")


def test_both_gpu_forms_get_the_packed_interface_and_engine_entries():
    for text in (VECTOR_ADD, _lowered_upstream()):
        art = pipeline.Pipeline(text, target="sm_90", format="ptx",
                                packed_interface=True).run()
        defined = [line.split("@")[1].split("(")[0] for line in art.host.llvm_ir.splitlines()
                   if line.startswith("define")]
        assert {"main", "_mlir_ciface_main", "_mlir__mlir_ciface_main",
                "_pywave_engine_init", "_pywave_engine_fini"} <= set(defined)
        assert "call void @mgpuLaunchKernel" in art.host.llvm_ir


def test_pywave_is_the_drop_in():
    assert pywave.ExecutionEngine is ExecutionEngine


# --------------------------------------------------------------------------------------------
# The driver stand-in: module load, launch, errors, unload
# --------------------------------------------------------------------------------------------
def _run_on_fake_driver(code: str) -> None:
    fake = need_fake_driver()
    env = fake_driver_env(PYWAVE_CACHE="0")
    prelude = textwrap.dedent(f"""
        import ctypes
        import numpy as np
        import pywave
        from mlir import runtime as rt
        FAKE = ctypes.CDLL({str(fake)!r})
        FAKE.fake_cuda_calls.argtypes = [ctypes.c_char_p]
        FAKE.fake_cuda_fail_next.argtypes = [ctypes.c_char_p, ctypes.c_int]
        class Launch(ctypes.Structure):
            _fields_ = [("function", ctypes.c_void_p), ("kernel", ctypes.c_char * 64),
                        ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3)]
        FAKE.fake_cuda_launch_at.restype = ctypes.POINTER(Launch)
        def args(n):
            return [ctypes.pointer(ctypes.pointer(rt.get_ranked_memref_descriptor(
                np.zeros(n, np.float32)))) for _ in range(3)]
        """)
    proc = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, env=env, timeout=300, cwd="/")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.strip().endswith("PASS"), proc.stdout[-2000:]


@pytest.mark.parametrize("form", ["before lowering", "lowered upstream"])
def test_launch_load_and_unload_on_the_stand_in(form, tmp_path):
    source = tmp_path / "program.mlir"
    source.write_text(VECTOR_ADD if form == "before lowering" else _lowered_upstream())
    _run_on_fake_driver(f"""
    engine = pywave.ExecutionEngine(open({str(source)!r}).read(), target="sm_90",
                                    format="ptx")
    assert FAKE.fake_cuda_calls(b"cuModuleLoadDataEx") == 0      # loaded on first use
    engine.invoke("main", *args(1000))
    assert FAKE.fake_cuda_calls(b"cuModuleLoadDataEx") == 1
    assert FAKE.fake_cuda_calls(b"cuLaunchKernel") == 1
    assert FAKE.fake_cuda_calls(b"cuStreamSynchronize") == 1      # a synchronous launch
    launch = FAKE.fake_cuda_launch_at(0).contents
    assert launch.kernel == b"add", launch.kernel
    assert list(launch.grid) == [4, 1, 1] and list(launch.block) == [256, 1, 1]
    engine.invoke("main", *args(10))
    assert FAKE.fake_cuda_calls(b"cuModuleLoadDataEx") == 1      # once per engine
    assert list(FAKE.fake_cuda_launch_at(1).contents.grid) == [1, 1, 1]
    engine.close()
    assert FAKE.fake_cuda_calls(b"cuModuleUnload") == 1
    print("PASS")
    """)


def test_a_failed_launch_is_a_device_error_naming_the_driver_call():
    _run_on_fake_driver(f"""
    engine = pywave.ExecutionEngine({VECTOR_ADD!r}, target="sm_90", format="ptx")
    FAKE.fake_cuda_fail_next(b"cuLaunchKernel", 700)
    try:
        engine.invoke("main", *args(64))
    except pywave.DeviceError as exc:
        assert "@main: cuLaunchKernel: CUDA_ERROR_ILLEGAL_ADDRESS" in str(exc), exc
    else:
        raise AssertionError("no DeviceError")
    engine.invoke("main", *args(64))                # the error was taken: the next call runs
    assert FAKE.fake_cuda_calls(b"cuLaunchKernel") == 2
    print("PASS")
    """)


# --------------------------------------------------------------------------------------------
# GPU
# --------------------------------------------------------------------------------------------
HOST_REGISTERED_ADD = """
module attributes {gpu.container_module} {
  func.func @add(%a: memref<?xf32>, %b: memref<?xf32>, %c: memref<?xf32>)
      attributes {llvm.emit_c_interface} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = memref.dim %a, %c0 : memref<?xf32>
    %ua = memref.cast %a : memref<?xf32> to memref<*xf32>
    %ub = memref.cast %b : memref<?xf32> to memref<*xf32>
    %uc = memref.cast %c : memref<?xf32> to memref<*xf32>
    gpu.host_register %ua : memref<*xf32>
    gpu.host_register %ub : memref<*xf32>
    gpu.host_register %uc : memref<*xf32>
    gpu.launch blocks(%bx, %by, %bz) in (%gx = %n, %gy = %c1, %gz = %c1)
               threads(%tx, %ty, %tz) in (%sx = %c1, %sy = %c1, %sz = %c1) {
      %x = memref.load %a[%bx] : memref<?xf32>
      %y = memref.load %b[%bx] : memref<?xf32>
      %s = arith.addf %x, %y : f32
      memref.store %s, %c[%bx] : memref<?xf32>
      gpu.terminator
    }
    gpu.host_unregister %ua : memref<*xf32>
    gpu.host_unregister %ub : memref<*xf32>
    gpu.host_unregister %uc : memref<*xf32>
    return
  }
}
"""


@pytest.mark.parametrize("device, lowered", [
    pytest.param("gpu", False, marks=pytest.mark.gpu),
    pytest.param("gpu", True, marks=pytest.mark.gpu),
    ("cpu", False)])        # lowered: gpu-lower-to-nvvm-pipeline makes NVVM, a GPU's
def test_gpu_program_runs_on_numpy_arrays_as_upstream_runs_it(request, device, lowered):
    """An upstream-style GPU program (host memory registered with the driver) through the
    engine, before lowering and after gpu-lower-to-nvvm-pipeline; on the CPU device
    (target="cpu") too, where host registration is a no-op and the kernel reads the arrays."""
    if device == "gpu":
        request.getfixturevalue("torch_cuda")
    text = HOST_REGISTERED_ADD
    if lowered:
        text = pipeline.Pipeline(text, passes=LOWER, passes_only=True).run().text
    a = np.arange(100, dtype=np.float32)
    b = np.full(100, 0.5, np.float32)
    c = np.zeros(100, np.float32)
    with ExecutionEngine(text, target="cpu" if device == "cpu" else None) as engine:
        assert (repr(engine) == "<pywave.ExecutionEngine target=cpu not loaded>") == \
            (device == "cpu")
        engine.invoke("add", *(_descriptor_pointer(x) for x in (a, b, c)))
    assert c.tolist() == (a + b).tolist()
