"""Wave's host-wrapper convention (issue 23): host functions ``f(%stream: !llvm.ptr, %a1:
!llvm.ptr, ...)`` that read Python objects through Wave's helpers (wave_get_buffer, _dim,
_int64, _float64), as Wave emits them, and the form Wave's own gpu-to-gpu-runtime pass leaves
(wave_load_kernel / wave_launch_kernel). The four shapes of Wave's lit test and the pre-lowered
form are in tests/data/wave/.

Without a GPU: compiling (sm_90, and gfx942 where ld.lld is found), and running on libwavert's
driver stand-in (libfake_cuda.so, each scenario in a subprocess) with DLPack stand-ins and the
fake CuPy, reading what reached the driver. With a GPU (`gpu` marker): torch and CuPy tensors
against the values the kernels write.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import DATA, ROOT, TESTS, need_fake_driver, run_to_pass

import pywave
from pywave import api, cache, program

WAVE = DATA / "wave"
SHAPES = {"read_write": 2, "scalars": 3, "dynamic_dims": 2, "cluster": 2, "prelowered": 2}
F16, NONE = (2, 16, 1), (0, 0, 0)


def wave_text(name: str) -> str:
    return (WAVE / f"{name}.mlir").read_text()


@pytest.fixture(autouse=True)
def _pywave_exceptions():
    """pywave's exception classes in the native call path: test_args binds stand-ins
    (its device probe in a skipif condition leaves them bound when its test is skipped)."""
    from pywave import _native, runtime
    _native.set_exceptions(pywave.ArgumentError, pywave.DeviceError, runtime.STATUS_ERRORS)


# ------------------------------------------------------------------------------------------
# Compiling
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_wave_shapes_compile_as_wave_functions(name):
    art = api.build(wave_text(name), target="sm_90")
    (fn,) = art.host.functions
    assert fn.name == "isolated_benchmark" and fn.convention == program.WAVE_CONVENTION
    assert [p.kind for p in fn.params] == ["object"] * SHAPES[name]
    assert [p.name for p in fn.params] == [f"arg{i + 1}" for i in range(SHAPES[name])]
    assert fn.words == SHAPES[name] + 1 and fn.results == ()
    # the element type the host code views each buffer as (memref.view), where it states one
    viewed = {"read_write": [F16, F16], "scalars": [NONE, NONE, F16],
              "dynamic_dims": [F16, F16], "cluster": [F16, F16], "prelowered": [NONE, NONE]}
    assert [p.dtype for p in fn.params] == viewed[name]
    # written: a kernel stores through the buffer; pre-lowered launches are not followed
    written = {"read_write": [False, True], "scalars": [False, False, True],
               "dynamic_dims": [False, True], "cluster": [False, True],
               "prelowered": [True, True]}
    assert [p.written for p in fn.params] == written[name]
    ir = art.host.llvm_ir
    for wave_name in ("@_mlir_ciface_wave_", "@wave_load_kernel", "@wave_launch_kernel"):
        assert wave_name not in ir
    body = ir[ir.index("define void @isolated_benchmark"):]
    body = body[:body.index("\n}\n")]
    runtime_calls = body.count("call void @wavert_jit_wave_get_buffer") + \
        sum(body.count(f"@{n}(") for n in ("wave_get_buffer", "wave_get_dim", "wave_get_int64",
                                          "wave_get_float64", "wavert_jit_wave_load_kernel",
                                          "wavert_jit_wave_launch_kernel"))
    # each runtime call is followed by a check that returns early after a recorded error
    assert runtime_calls >= 2 and body.count("call i32 @wavert_jit_failed()") >= runtime_calls


UNRELATED = """
func.func @f(%s: !llvm.ptr, %a: !llvm.ptr) {
  return
}
"""


def test_functions_outside_the_convention_are_refused_as_before():
    with pytest.raises(pywave.CompileError, match="host arguments may be ranked memrefs or "
                                                  "scalars"):
        api.build(UNRELATED, target="sm_90")
    mixed = """
    func.func private @wave_get_dim(!llvm.ptr, i32) -> i64 attributes {llvm.emit_c_interface}
    func.func @f(%s: !llvm.ptr, %a: memref<?xf32>, %b: !llvm.ptr) {
      %c0 = arith.constant 0 : i32
      %d = call @wave_get_dim(%b, %c0) : (!llvm.ptr, i32) -> i64
      return
    }"""
    with pytest.raises(pywave.CompileError, match="argument #0 .'s'. has the type !llvm.ptr; .*"
                                                  "Wave's convention takes only !llvm.ptr"):
        api.build(mixed, target="sm_90")
    result = mixed.replace("%a: memref<?xf32>, ", "").replace(") {", ") -> i64 {", 1) \
        .replace("return", "return %d : i64")
    with pytest.raises(pywave.CompileError, match="has the type !llvm.ptr"):
        api.build(result, target="sm_90")
    private = mixed.replace("%a: memref<?xf32>, ", "").replace("func.func @f",
                                                               "func.func private @f")
    assert api.build(private, target="sm_90").host.functions == ()


HELPER = """
func.func private @wave_get_buffer(!llvm.ptr) -> {result} {attrs}
func.func @f(%s: !llvm.ptr, %a: !llvm.ptr) {{
  %b = call @wave_get_buffer(%a) : (!llvm.ptr) -> {result}
  return
}}
"""


@pytest.mark.parametrize("result, attrs, match", [
    ("memref<?xf32>", "attributes {llvm.emit_c_interface}", "declared as .* -> memref<.xf32>"),
    ("memref<?xi8>", "", "without llvm.emit_c_interface"),
])
def test_helper_declarations_must_have_waves_abi(result, attrs, match):
    with pytest.raises(pywave.CompileError, match=match):
        api.build(HELPER.format(result=result, attrs=attrs), target="sm_90")


def test_a_module_defining_a_helper_is_refused():
    text = """
    func.func private @wave_get_buffer(%p: !llvm.ptr) -> memref<?xi8>
        attributes {llvm.emit_c_interface} {
      %m = memref.alloc() : memref<4xi8>
      %c = memref.cast %m : memref<4xi8> to memref<?xi8>
      return %c : memref<?xi8>
    }
    func.func @f(%s: !llvm.ptr, %a: !llvm.ptr) {
      %b = call @wave_get_buffer(%a) : (!llvm.ptr) -> memref<?xi8>
      return
    }"""
    with pytest.raises(pywave.CompileError, match="defines @wave_get_buffer"):
        api.build(text, target="sm_90")


def test_lowered_helpers_alone_are_recognised():
    """LLVM-dialect host code calling only a helper's C interface is in the convention."""
    text = """
    llvm.func @_mlir_ciface_wave_get_int64(!llvm.ptr) -> i64
    llvm.func @f(%s: !llvm.ptr, %n: !llvm.ptr) {
      %v = llvm.call @_mlir_ciface_wave_get_int64(%n) : (!llvm.ptr) -> i64
      llvm.return
    }"""
    (fn,) = api.build(text, target="sm_90").host.functions
    assert fn.convention == "wave" and [p.name for p in fn.params] == ["n"]


def test_lowered_declarations_and_handles_are_checked():
    text = wave_text("prelowered")
    # nargs as i64, in the declaration and the call alike
    narrow = text.replace("i64, i64, !llvm.ptr, i32)", "i64, i64, !llvm.ptr, i64)") \
        .replace("%nargs = llvm.mlir.constant(6 : i32) : i32",
                 "%nargs = llvm.mlir.constant(6 : i64) : i64") \
        .replace("           i32) -> ()", "           i64) -> ()")
    with pytest.raises(pywave.CompileError, match="@wave_launch_kernel is declared as"):
        api.build(narrow, target="sm_90")
    stray = text.replace("@wave_load_kernel(%arg0, %handle,", "@wave_load_kernel(%arg0, %arg1,")
    with pytest.raises(pywave.CompileError, match="kernel handle from .*llvm.mlir.addressof"):
        api.build(stray, target="sm_90")


EXPORT_C = r"""
#include <stdio.h>
#include "fake_cuda.h"
#include "wave_rw.h"
int main(void) {
  int64_t shape[2] = {16, 16};
  DLTensor a = {(void *)0x10000, {kDLCUDA, 0}, 2, {kDLFloat, 16, 1}, shape, NULL, 0};
  DLTensor b = a, wide = a;
  b.data = (void *)0x20000;
  wide.dtype.bits = 32;
  wavert_object oa = {.kind = WAVERT_OBJECT_TENSOR, .tensor = &a};
  wavert_object ob = {.kind = WAVERT_OBJECT_TENSOR, .tensor = &b};
  wavert_object seven = {.kind = WAVERT_OBJECT_INT, .int_value = 7, .int_fits = 1};
  wavert_object owide = {.kind = WAVERT_OBJECT_TENSOR, .tensor = &wide};
  size_t sizes[6] = {8, 8, 8, 8, 8, 8};
  fake_cuda_set_param_sizes(6, sizes);
  int s = wave_rw_isolated_benchmark(&oa, &ob, (void *)2);
  const fake_cuda_launch *l = fake_cuda_launch_at(0);
  printf("%d %d %llx %llx %d|", s, fake_cuda_launch_count(), (unsigned long long)l->params[1],
         (unsigned long long)l->params[4], l->stream == (void *)2);
  s = wave_rw_isolated_benchmark(&oa, &seven, NULL);
  printf("%d %d %s|", s, fake_cuda_launch_count(), wave_rw_last_error());
  s = wave_rw_isolated_benchmark(&owide, &ob, NULL);
  printf("%d %d %s|", s, fake_cuda_launch_count(), wave_rw_last_error());
  s = wave_rw_isolated_benchmark(&oa, NULL, NULL);
  printf("%d %s\n", s, wave_rw_last_error());
  return 0;
}
"""


def test_export_runs_wave_functions_from_c(tmp_path):
    import shutil
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc.split()[0]) is None:
        pytest.skip("needs a C compiler (cc)")
    fake = need_fake_driver()
    out = tmp_path / "out"
    pywave.export(wave_text("read_write"), out, "wave_rw", target="sm_90",
                  lowering={"keep_kernel_params": True})   # the C reads words 1 and 4
    header = (out / "wave_rw.h").read_text()
    assert "int32_t wave_rw_isolated_benchmark(const wavert_object *arg1, " \
           "const wavert_object *arg2, void *stream);" in header
    src = tmp_path / "prog.c"
    src.write_text(EXPORT_C)
    libs = next(line for line in (out / "wave_rw.pc").read_text().splitlines()
                if line.startswith("Libs:"))[5:].replace("${libdir}", str(out)).split()
    proc = subprocess.run(cc.split() + ["-std=c11", "-Wall", "-Wextra", "-Werror", "-o",
                                        str(tmp_path / "prog"), str(src), f"-I{out}",
                                        f"-I{ROOT / 'libwavert' / 'tests'}", *libs,
                                        str(fake), f"-Wl,-rpath,{fake.parent}"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    env = dict(os.environ, WAVERT_CUDA_LIBRARY=str(fake), WAVERT_HIP_LIBRARY="/nonexistent")
    run_ = subprocess.run([str(tmp_path / "prog")], capture_output=True, text=True, env=env,
                          timeout=60)
    assert run_.returncode == 0, run_.stderr
    ok, int_error, dtype_error, null = run_.stdout.strip().split("|")
    assert ok == "0 1 10000 20000 1"
    assert int_error == "1 1 wave_get_buffer: argument 'arg2' (#1, int 7) is not a tensor " \
                        "(an object with __dlpack__)"
    assert dtype_error == "1 1 wave_rw_isolated_benchmark: argument 'arg1': the host code " \
                          "views it as elements of DLPack dtype (2, 16, 1), got (2, 32, 1)"
    assert null == "1 wave_rw_isolated_benchmark: argument 'arg2' is NULL"


def test_signature_and_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path))
    mod = pywave.compile(wave_text("scalars"), target="sm_90", disk_cache=False)
    f = mod.isolated_benchmark
    assert f.convention == "wave"
    assert str(inspect.signature(f)) == "(arg1: Any, arg2: Any, arg3: Any, /, *, stream=None)" \
        " -> None"
    assert "Wave's host-wrapper convention" in f.__doc__
    with pytest.raises(pywave.ArgumentError, match="takes 3 arguments"):
        f(1.0, 2)
    sig = mod._program.functions[0]
    prog = program.Program(program.Target("nvvm", "sm_90"), (), (sig,), b"object")
    assert cache._decode(cache._encode(prog, "k" * 64), "k" * 64) == prog
    mod.close()


def test_command_line_summary_names_the_convention():
    proc = subprocess.run([sys.executable, "-m", "pywave", "compile",
                           str(WAVE / "scalars.mlir"), "--target", "sm_90"],
                          capture_output=True, text=True, timeout=300, cwd=TESTS)
    assert proc.returncode == 0, proc.stderr
    assert "host function @isolated_benchmark(stream: !llvm.ptr, arg1: !llvm.ptr, arg2: " \
           "!llvm.ptr, arg3: !llvm.ptr; Wave's convention)" in proc.stdout


def test_gfx942_compiles_wave_kernels():
    from pywave.kernels import rocdl
    if rocdl.linker() is None:
        pytest.skip("no ld.lld (apt-get install lld, or pip install ziglang)")
    for name in ("read_write", "scalars", "dynamic_dims"):
        art = api.build(wave_text(name), target="gfx942")
        (binary,) = art.binaries
        assert binary.format == "hsaco" and binary.data[:4] == b"\x7fELF"
        kernel = "scalars" if name == "scalars" else "read_write"
        assert f"{kernel}.kd".encode() in binary.data
        assert art.host.functions[0].convention == "wave"


# ------------------------------------------------------------------------------------------
# Running on the driver stand-in
# ------------------------------------------------------------------------------------------
PRELUDE = """
import ctypes, re, sys, threading
import numpy as np
import pywave
import test_args as t
from conftest import fake_driver
from pathlib import Path
drv = ctypes.CDLL(str(fake_driver()))
drv.fake_cuda_launch_at.restype = ctypes.c_void_p
drv.fake_cuda_calls.argtypes = [ctypes.c_char_p]

class Launch(ctypes.Structure):
    _fields_ = [("function", ctypes.c_void_p), ("kernel", ctypes.c_char * 64),
                ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("context", ctypes.c_void_p), ("cluster", ctypes.c_uint * 3),
                ("policy", ctypes.c_int), ("params", ctypes.c_uint64 * 8)]

def launches():
    return [Launch.from_address(drv.fake_cuda_launch_at(i))
            for i in range(drv.fake_cuda_launch_count())]

def params(sizes):
    drv.fake_cuda_set_param_sizes(len(sizes), (ctypes.c_size_t * len(sizes))(*sizes))

def load(name, **lowering):
    # MLIR's whole kernel ABI unless told otherwise: the tests read every word launched
    text = (Path("data") / "wave" / f"{name}.mlir").read_text()
    lowering = {"keep_kernel_params": True, **lowering}
    return pywave.compile(text, target="sm_90", lowering=lowering).isolated_benchmark

def f16(shape, data, **kw):
    return t.Producer(t.FakeTensor(shape=shape, dtype=(2, 16, 1), data=data, **kw))

def refused(match, f, *args, **kw):
    before = drv.fake_cuda_launch_count()
    try:
        f(*args, **kw)
    except pywave.ArgumentError as e:
        assert re.search(match, str(e)), str(e)
    else:
        raise AssertionError("no ArgumentError: " + match)
    assert drv.fake_cuda_launch_count() == before, "launched after an error"
"""


def run(code: str, tmp: Path) -> None:
    run_to_pass(PRELUDE + textwrap.dedent(code) + "\nprint('PASS')", timeout=300,
                PYWAVE_ISOLATE="0", PYWAVE_CACHE_DIR=str(tmp))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("wave-cache")


def test_read_write_passes_buffers_and_streams(cache_dir):
    run("""
    f = load("read_write")
    params([8] * 6)
    a, b = f16((16, 16), 0x10000), f16((16, 16), 0x20000)
    f(a, b)
    (l,) = launches()
    assert l.kernel == b"read_write" and list(l.grid) == [1, 1, 1] and list(l.block) == [64, 1, 1]
    # each 0-d memref: allocated, aligned, offset 0
    assert list(l.params)[:6] == [0x10000, 0x10000, 0, 0x20000, 0x20000, 0]
    assert l.stream is None and a.calls[-1] == {"stream": 1, "max_version": (1, 3)}
    f(a, b, stream=2)                               # the per-thread default stream
    assert launches()[-1].stream == 2 and a.calls[-1]["stream"] == 2
    # a raw capsule, a byte offset (the view starts at the first element), size-1 strides
    c = t.FakeTensor(shape=(16, 16), dtype=(2, 16, 1), data=0x30000)
    c.mt.dl_tensor.byte_offset = 64
    f(c.capsule(), f16((1, 256), 0x40000, strides=(7, 1)))
    assert list(launches()[-1].params)[:6] == [0x30040, 0x30040, 0, 0x40000, 0x40000, 0]
    refused(r"wave_get_buffer: argument 'arg1' \\(#0, FakeTensor|argument 'arg1' \\(#0, Producer "
            r"of rank 2\\) is not compact row-major", f, f16((16, 16), 0x10000, strides=(1, 16)), b)
    odd = t.FakeTensor(shape=(16, 16), dtype=(2, 16, 1), data=0x30000)
    odd.mt.dl_tensor.byte_offset = 1
    refused("argument 'arg1' .#0, .* not aligned", f, odd.capsule(), b)
    refused("argument 'arg2' .#1. is read-only .its DLPack producer marks it READ_ONLY. but "
            "Wave's host code may write it", f, a, f16((16, 16), 0x20000, read_only=True))
    f(f16((16, 16), 0x10000, read_only=True), b)  # the kernel only reads arg1
    refused("argument 'arg2' .#1. is on the CPU", f, a, f16((16, 16), 0x20000, device=(1, 0)))
    refused("different devices", f, a, f16((16, 16), 0x20000, device=(2, 1)))
    refused(r"wave_get_buffer: argument 'arg2' \\(#1, int 7\\) is not a tensor", f, a, 7)
    refused("argument 'arg1' .#0.: the host code views it as f16 elements .memref.view of "
            "wave_get_buffer., got a tensor of f32", f,
            t.Producer(t.FakeTensor(shape=(16, 16), data=0x10000)), b)
    refused("views it as f16 elements .*got a tensor of ui16", f, a,
            t.Producer(t.FakeTensor(shape=(16, 16), dtype=(1, 16, 1), data=0x20000)))
    f(a, b)                                         # the call path keeps working
    assert len(launches()) == 5
    """, cache_dir)


def test_scalars_are_range_checked_by_the_helpers(cache_dir):
    run("""
    f = load("scalars")
    params([8, 8, 8, 4, 4])
    d = f16((16, 16), 0x10000)
    def scalars():
        p = list(launches()[-1].params)
        return (np.array([p[3]], np.uint32).view(np.float32)[0],
                int(np.array([p[4]], np.uint32).view(np.int32)[0]))
    f(2.5, 3, d)
    assert scalars() == (2.5, 3)
    f(np.float32(-1.5), np.int64(-7), d)            # NumPy scalars
    assert scalars() == (-1.5, -7)
    f(4, True, d)                                   # an int as the float, a bool as the int
    assert scalars() == (4.0, 1)
    refused(r"wave_get_int64: argument 'arg2' \\(#1, float 2.5\\) is not an int", f, 1.0, 2.5, d)
    refused(r"wave_get_int64: argument 'arg2' \\(#1, int 1180591620717411303424\\) does not fit "
            r"in int64", f, 1.0, 2**70, d)
    refused(r"wave_get_float64: argument 'arg1' \\(#0, int 1152921504606846976\\) is not exactly "
            r"representable as float64", f, 2**60, 1, d)
    refused(r"wave_get_float64: argument 'arg1' \\(#0, str 'x'\\) is not a float or an int",
            f, "x", 1, d)
    refused(r"wave_get_float64: argument 'arg1' \\(#0, list \\[1, 2\\]\\)", f, [1, 2], 1, d)
    refused(r"wave_get_buffer: argument 'arg3' \\(#2, float 1\\.5\\) is not a tensor",
            f, 1.0, 1, 1.5)
    class Bad:
        def __index__(self): raise RuntimeError("no index")
    refused("argument 'arg2' .#1.: __index__.. failed: no index", f, 1.0, Bad(), d)
    f(2.5, 3, d)
    assert scalars() == (2.5, 3) and len(launches()) == 4
    """, cache_dir)


def test_dimensions_set_the_grid(cache_dir):
    run("""
    f = load("dynamic_dims")
    params([8] * 8)
    f(f16((40, 20), 0x10000), f16((40, 20), 0x20000))
    (l,) = launches()
    assert list(l.grid) == [3, 2, 1] and list(l.block) == [64, 1, 1]
    assert list(l.params) == [0x10000, 0x10000, 0, 0x20000, 0x20000, 0, 40, 20]
    refused(r"wave_get_dim: argument 'arg1' \\(#0, Producer of rank 1\\) has no dimension 1 "
            r"\\(0 <= index < 1\\)", f, f16((40,), 0x10000), f16((40, 20), 0x20000))
    refused(r"wave_get_dim: argument 'arg1' \\(#0, int 3\\) is not a tensor",
            f, 3, f16((4, 4), 0x2000))
    """, cache_dir)


def test_launches_pass_only_the_parameters_the_kernel_reads(cache_dir):
    """By default (pywave.kernels.unused_params) dynamic_dims' kernel gets the 4 of its 8 words it
    reads: the two aligned pointers and the two sizes."""
    run("""
    f = load("dynamic_dims", keep_kernel_params=False)
    params([8] * 4)
    f(f16((40, 20), 0x10000), f16((40, 20), 0x20000))
    (l,) = launches()
    assert list(l.params)[:4] == [0x10000, 0x20000, 40, 20], list(l.params)
    """, cache_dir)


def test_cluster_launches(cache_dir):
    run("""
    f = load("cluster")
    f(f16((32, 32), 0x10000), f16((32, 32), 0x20000))
    (l,) = launches()
    assert list(l.grid) == [2, 2, 1] and list(l.cluster) == [2, 2, 1]
    # Wave's lit test: a 1x1x1 grid in 2x2x1 clusters, which CUDA cannot launch
    refused("grid x = 1 is not a multiple of cluster x = 2", f, f16((16, 16), 0x10000),
            f16((16, 16), 0x20000))
    """, cache_dir)


def test_prelowered_loads_once_and_releases(cache_dir):
    run("""
    text = (Path("data") / "wave" / "prelowered.mlir").read_text()
    mod = pywave.compile(text, target="sm_90")
    f = mod.isolated_benchmark
    params([8] * 6)
    a, b = f16((16, 16), 0x10000), f16((16, 16), 0x20000)
    refused(r"wave_get_buffer: argument 'arg2' \\(#1, str 'x'\\) is not a tensor", f, a, "x")
    assert drv.fake_cuda_calls(b"cuModuleLoadDataEx") == 0   # stopped before the load
    def calls():
        for _ in range(25):
            f(a, b, stream=2)
    threads = [threading.Thread(target=calls) for _ in range(4)]
    for th in threads: th.start()
    for th in threads: th.join()
    assert drv.fake_cuda_calls(b"cuModuleLoadDataEx") == 1
    ls = launches()
    assert len(ls) == 100 and all(l.stream == 2 for l in ls)    # the stream the host code got
    assert list(ls[0].params)[:6] == [0x10000, 0x10000, 0, 0x20000, 0x20000, 0]
    assert list(ls[0].grid) == [1, 1, 1] and list(ls[0].block) == [64, 1, 1]
    assert list(ls[0].cluster) == [0, 0, 0]                     # 1x1x1: a plain launch
    mod.close()
    assert drv.fake_cuda_calls(b"cuModuleUnload") == 1
    """, cache_dir)


def test_helpers_refuse_pointers_that_are_not_objects(cache_dir):
    run("""
    text = '''
    func.func private @wave_get_dim(!llvm.ptr, i32) -> i64 attributes {llvm.emit_c_interface}
    func.func @f(%s: !llvm.ptr, %a: !llvm.ptr) {
      %c0 = arith.constant 0 : i32
      %d = call @wave_get_dim(%s, %c0) : (!llvm.ptr, i32) -> i64
      return
    }'''
    f = pywave.compile(text, target="sm_90").f
    refused("wave_get_dim: 0x[0-9a-f]+ is not one of the call's 1 object arguments", f,
            f16((4,), 0x1000), stream=2)
    """, cache_dir)


def test_cupy_arrays_and_their_stream(cache_dir):
    run("""
    import fake_cupy
    cp = fake_cupy.install("api")
    f = load("read_write")
    params([8] * 6)
    a = cp.ndarray((16, 16), dtype="float16", ptr=0x10000)
    b = cp.ndarray((16, 16), dtype="float16", ptr=0x20000)
    f(a, b)
    (l,) = launches()
    assert list(l.params)[:6] == [0x10000, 0x10000, 0, 0x20000, 0x20000, 0]
    # CuPy's current stream; the array is taken through __dlpack__ (ordered before it)
    assert l.stream == 0x4242 and a.calls[-1]["stream"] == 0x4242
    refused("not compact row-major", f, cp.ndarray((16, 16), dtype="float16", strides=(2, 32)), b)
    """, cache_dir)


# ------------------------------------------------------------------------------------------
# On a GPU
# ------------------------------------------------------------------------------------------
@pytest.fixture
def wave_mod(compile_gpu):
    return lambda name: compile_gpu(wave_text(name)).isolated_benchmark


def _f16(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float16)


def test_read_write_on_the_device(device):
    a = device.put(_f16((16, 16)))
    b = device.zeros((16, 16), np.float16)
    device.compile(wave_text("read_write")).isolated_benchmark(a, b)
    assert np.array_equal(device.get(b), device.get(a))


def test_scalars_on_the_device(device):
    d = device.zeros((16, 16), np.float16)
    device.compile(wave_text("scalars")).isolated_benchmark(2.5, 3, d)
    assert (device.get(d) == np.float16(5.5)).all()


@pytest.mark.parametrize("shape", [(40, 20), (16, 16), (37, 5)])
def test_dims_set_the_grid_on_the_device(device, shape):
    a0 = _f16(shape)
    b = device.zeros(shape, np.float16)
    device.compile(wave_text("dynamic_dims")).isolated_benchmark(device.put(a0), b)
    assert np.array_equal(device.get(b), a0)


def test_cluster_launch_runs_on_the_cpu_device():
    """Wave's cluster launch (``clusters in``) through the CPU backend's cluster launch: the
    same copy as on the GPU (test_gpu_cluster)."""
    a = _f16((32, 32))
    b = np.zeros_like(a)
    with pywave.compile(wave_text("cluster"), target="cpu", disk_cache=False) as mod:
        mod.isolated_benchmark(a, b)
    assert np.array_equal(a, b)


@pytest.mark.gpu
def test_gpu_cluster(torch_cuda, wave_mod):
    torch = torch_cuda
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("thread-block clusters need sm_90 or newer")
    a = torch.randn(32, 32, dtype=torch.float16, device="cuda")
    b = torch.zeros_like(a)
    wave_mod("cluster")(a, b)
    torch.cuda.synchronize()
    assert torch.equal(a, b)


@pytest.mark.gpu
def test_gpu_prelowered(torch_cuda, wave_mod):
    torch = torch_cuda
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the embedded PTX targets sm_90")
    a = torch.randn(16, 16, dtype=torch.float16, device="cuda")
    b = torch.zeros_like(a)
    f = wave_mod("prelowered")
    f(a, b)
    f(a, b)
    torch.cuda.synchronize()
    assert torch.equal(a, b)


@pytest.mark.gpu
def test_gpu_streams_and_errors(torch_cuda, wave_mod):
    torch = torch_cuda
    f = wave_mod("read_write")
    side = torch.cuda.Stream()
    a = torch.randn(16, 16, dtype=torch.float16, device="cuda")
    b = torch.zeros_like(a)
    c = torch.zeros_like(a)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):           # torch's current stream is the call's
        a2 = a * 2
        f(a2, b)
    side.synchronize()
    assert torch.equal(b, a * 2)
    f(a, c, stream=side)                   # stream= wins
    side.synchronize()
    assert torch.equal(c, a)
    with pytest.raises(pywave.ArgumentError, match="not compact row-major"):
        f(a.t(), b)
    with pytest.raises(pywave.ArgumentError, match="is not a tensor"):
        f(a, 1)
    with pytest.raises(pywave.ArgumentError, match="views it as f16 elements"):
        f(a.float(), b)
    d = torch.zeros_like(a)
    f(a, d)
    torch.cuda.synchronize()
    assert torch.equal(d, a)


@pytest.mark.gpu
def test_gpu_jax_inputs_and_read_only_outputs(torch_cuda, jax_gpu, wave_mod):
    torch, jnp = torch_cuda, jax_gpu.numpy
    a = jnp.arange(256, dtype=jnp.float16).reshape(16, 16)      # read by the kernel: accepted
    b = torch.zeros(16, 16, dtype=torch.float16, device="cuda")
    f = wave_mod("read_write")
    f(a, b)
    torch.cuda.synchronize()
    assert torch.equal(b.cpu(), torch.arange(256, dtype=torch.float16).reshape(16, 16))
    with pytest.raises(pywave.ArgumentError, match="argument 'arg2' .#1. is read-only .JAX"):
        f(b, a)                                                 # written by the kernel


@pytest.mark.gpu
def test_gpu_cupy(cupy_mod, wave_mod):
    cp = cupy_mod
    a = cp.random.rand(16, 16).astype(cp.float16)
    b = cp.zeros_like(a)
    wave_mod("read_write")(a, b)
    cp.cuda.get_current_stream().synchronize()
    assert bool((a == b).all())
