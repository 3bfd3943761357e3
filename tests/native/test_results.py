"""Host functions that return values (issue 13, item 4): scalars become Python numbers, a
returned memref a ``pywave._native.Memref`` that owns its memory and exports it through DLPack
and ``__cuda_array_interface__``.

Compile-only tests need no driver; the stand-in tests run host code against the CUDA driver
stand-in (libfake_cuda.so, built by the C tests) in a child process, where "device" memory is
host memory the stand-in tracks; the `gpu` tests hand results to torch, CuPy, JAX and NumPy.
"""

from __future__ import annotations

import dataclasses
import gc
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pywave
import pywave.api as api
from pywave import cache, files
from pywave.program import DYNAMIC, Program, Target
from conftest import TESTS, fake_driver_env, need_fake_driver

# ------------------------------------------------------------------------------------------
# Compile only: signatures, the packed entry, refusals, the cache format
# ------------------------------------------------------------------------------------------
SCALARS = ["i1", "i8", "i16", "i32", "i64", "index", "f16", "bf16", "f32", "f64"]


def _sig(text: str):
    (fn,) = api.build(text, target="sm_90").host.functions
    return fn


def test_signature_records_every_result_kind():
    types = SCALARS + ["memref<?x4xf32>", "memref<2x?xi32, strided<[?, 1], offset: ?>>",
                       "memref<8xf64, 1>"]
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(types))
    values = ", ".join(f"%a{i}" for i in range(len(types)))
    fn = _sig(f"func.func @main({args}) -> ({', '.join(types)}) {{\n"
              f"  return {values} : {', '.join(types)}\n}}")
    assert [r.name for r in fn.results] == [f"result{i}" for i in range(len(types))]
    assert [r.scalar for r in fn.results[:10]] == SCALARS
    ident, strided, spaced = fn.results[10:]
    assert (ident.kind, ident.dtype, ident.sizes, ident.strides, ident.memory) == \
        ("memref", (2, 32, 1), (pywave._native.DYNAMIC, 4), None, "")
    assert strided.strides == (pywave._native.DYNAMIC, 1) and strided.flags & 2
    assert spaced.memory == "device"
    assert fn.result_words == 10 + (3 + 4) + (3 + 4) + (3 + 2)
    assert fn.words == fn.result_words   # the arguments are the same types


def test_bool_memref_result_has_bool_elements():
    fn = _sig("func.func @main() -> (memref<4xi1>, memref<2xi8>) {\n"
              " %m = memref.alloc() : memref<4xi1>\n %k = memref.alloc() : memref<2xi8>\n"
              " return %m, %k : memref<4xi1>, memref<2xi8>\n}")
    assert [(r.type, r.dtype) for r in fn.results] == [("memref<4xi1>", (6, 8, 1)),
                                                       ("memref<2xi8>", (0, 8, 1))]


def test_packed_entry_stores_results_after_the_arguments():
    art = api.build("""
    func.func @main(%n: index, %x: f32) -> (f32, memref<?xf32>, i1) {
      %m = memref.alloc(%n) : memref<?xf32>
      %t = arith.constant 1 : i1
      return %x, %m, %t : f32, memref<?xf32>, i1
    }""", target="sm_90")
    ir = art.host.llvm_ir
    entry = ir[ir.index("define void @_pywave_packed_main"):]
    entry = entry[:entry.index("\n}")]
    # arguments in slots 0-1; results: f32 at 2, the descriptor at 3..7, the i1 at 8
    assert "getelementptr i64, ptr %0, i32 2\n  store float" in entry
    assert "getelementptr i64, ptr %0, i32 3\n  store { ptr, ptr, i64, [1 x i64], [1 x i64] }" \
        in entry
    assert "getelementptr i64, ptr %0, i32 8\n  store i1" in entry


@pytest.mark.parametrize("body, match", [
    ("%m = memref.alloca() : memref<4xf32>\n return %m : memref<4xf32>",
     "memref.alloca, which dies with the call"),
    ("%m = memref.get_global @g : memref<4xf32>\n return %m : memref<4xf32>",
     "memref.get_global, which the call does not own"),
    ("%m = memref.alloca() : memref<8xf32>\n"
     "%v = memref.subview %m[0][4][1] : memref<8xf32> to memref<4xf32, strided<[1]>>\n"
     "%c = memref.cast %v : memref<4xf32, strided<[1]>> to memref<4xf32>\n"
     "return %c : memref<4xf32>", "memref.alloca"),
])
def test_memory_the_call_does_not_own_is_refused(body, match):
    text = ("memref.global \"private\" @g : memref<4xf32> = dense<1.0>\n"
            f"func.func @main() -> memref<4xf32> {{\n {body}\n}}")
    with pytest.raises(pywave.CompileError, match=f"result #0 returns the memory of {match}"):
        api.build(text, target="sm_90")


@pytest.mark.parametrize("rtype, match", [
    ("memref<4xf32, 3>", "memory space 3"),
    ("memref<4xf32, #gpu.address_space<global>>", r"GPU global memory \(memory space 1\)"),
    ("memref<*xf32>", "unranked"),
    ("vector<4xf32>", "host results may be ranked memrefs or scalars"),
])
def test_unsupported_result_types_are_refused(rtype, match):
    with pytest.raises(pywave.CompileError, match=match):
        api.build(f"func.func @main(%a: {rtype}) -> {rtype} {{\n return %a : {rtype}\n}}",
                  target="sm_90")


def test_cache_round_trip_keeps_results_and_old_entries_are_corrupt():
    fn = _sig("func.func @main(%a: memref<?xf32, 1>) -> "
              "(memref<?xf32, 1>, f16) {\n"
              " %h = arith.constant 1.0 : f16\n"
              " return %a, %h : memref<?xf32, 1>, f16\n}")
    program = Program(Target("nvvm", "sm_90"), (), (fn,), b"object")
    raw = cache._encode(program, "k" * 64)
    assert cache._decode(raw, "k" * 64) == program
    assert cache.MAGIC == b"PYWAVE-CACHE-8\n"
    # a record without the results field (format 4) does not decode
    import json
    import struct
    payload = raw[len(cache.MAGIC) + 32:]
    (n,) = struct.unpack_from("<Q", payload, 0)
    meta = json.loads(payload[8:8 + n])
    del meta["functions"][0]["results"]
    head = json.dumps(meta).encode()
    payload = struct.pack("<Q", len(head)) + head + payload[8 + n:]
    old = cache.MAGIC + files.digest(payload).digest() + payload
    with pytest.raises(cache.CorruptEntry, match="fields"):
        cache._decode(old, "k" * 64)
    bad = dataclasses.replace(fn, results=(dataclasses.replace(fn.results[0],
                                                               memory="managed"),))
    raw = cache._encode(Program(Target("nvvm", "sm_90"), (), (bad,), b"o"), "k" * 64)
    with pytest.raises(cache.CorruptEntry, match="result record"):
        cache._decode(raw, "k" * 64)


def test_export_refuses_functions_with_results(tmp_path):
    from pywave.entry import c_export
    with pytest.raises(pywave.CompileError, match="returns values"):
        c_export.export("func.func @main(%x: f32) -> f32 {\n return %x : f32\n}",
                        tmp_path, "lib", target="sm_90")


def test_host_function_results_field_is_checked():
    from pywave import _native
    from pywave.program import Param
    p = Param("result0", "memref", "memref<4xf32>", dtype=(2, 32, 1), sizes=(4,),
              memory="elsewhere")
    with pytest.raises(ValueError, match="field 'memory' must be"):
        _native.HostFunction(1, "f", (), 2, results=(p,))
    with pytest.raises(TypeError, match="results must be a sequence"):
        _native.HostFunction(1, "f", (), 2, results="x")
    fn = _native.HostFunction(1, "f", (), 2, results=(dataclasses.replace(p, memory=""),))
    assert fn.results[0].name == "result0"


# ------------------------------------------------------------------------------------------
# On the driver stand-in
# ------------------------------------------------------------------------------------------
def _run_on_fake_driver(code: str) -> None:
    fake = need_fake_driver()
    env = fake_driver_env()
    prelude = textwrap.dedent(f"""
        import ctypes, gc, weakref
        import numpy as np
        import pywave
        from pywave import _native
        FAKE = ctypes.CDLL({str(fake)!r})
        FAKE.fake_cuda_calls.argtypes = [ctypes.c_char_p]
        def compile_(text):
            return pywave.compile(text, target="sm_90", disk_cache=False)
        def frees():
            return _native.result_frees()
        """)
    proc = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, env=env, timeout=300,
                          cwd=TESTS)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.strip().endswith("PASS"), proc.stdout[-2000:]


def test_scalar_results_of_every_type_on_the_stand_in():
    _run_on_fake_driver("""
    cases = [("i1", "1", True), ("i1", "0", False), ("i8", "-128", -128),
             ("i8", "127", 127), ("i16", "-32768", -32768), ("i32", "-2147483648", -2**31),
             ("i32", "2147483647", 2**31 - 1), ("i64", "-9223372036854775808", -2**63),
             ("index", "-7", -7), ("f16", "1.5", 1.5), ("f16", "-65504.0", -65504.0),
             ("bf16", "-2.5", -2.5), ("f32", "0.1", float(np.float32(0.1))),
             ("f64", "0.1", 0.1)]
    types = ", ".join(t for t, _, _ in cases)
    body = "\\n".join(f"  %v{i} = arith.constant {v} : {t}" for i, (t, v, _) in enumerate(cases))
    rets = ", ".join(f"%v{i}" for i in range(len(cases)))
    f = compile_(f"func.func @main() -> ({types}) {{\\n{body}\\n  return {rets} : {types}\\n}}").main
    got = f()
    assert got == tuple(e for _, _, e in cases), got
    assert [type(g) for g in got] == [type(e) for _, _, e in cases]
    one = compile_("func.func @main(%x: f64, %k: i32) -> i32 {\\n"
                   "  %y = arith.muli %k, %k : i32\\n return %y : i32\\n}").main
    assert one(0.0, -3) == 9
    none = compile_("func.func @main(%x: f64) {\\n return\\n}").main
    assert none(1.0) is None
    print("PASS")
    """)


FILL_2D = """
func.func @main(%n: index, %x: f32) -> memref<?x3xf32> {
  %m = memref.alloc(%n) : memref<?x3xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  scf.for %i = %c0 to %n step %c1 {
    scf.for %j = %c0 to %c3 step %c1 {
      %k = arith.muli %i, %c3 : index
      %l = arith.addi %k, %j : index
      %li = arith.index_cast %l : index to i32
      %f = arith.sitofp %li : i32 to f32
      %v = arith.mulf %f, %x : f32
      memref.store %v, %m[%i, %j] : memref<?x3xf32>
    }
  }
  return %m : memref<?x3xf32>
}
"""


def test_host_memref_result_read_by_numpy_and_freed_once():
    _run_on_fake_driver(f"""
    f = compile_({FILL_2D!r}).main
    m = f(5, 0.5)
    assert m.__dlpack_device__() == (1, 0) and m.owns_memory
    assert (m.shape, m.strides, m.dtype) == ((5, 3), (3, 1), (2, 32, 1))
    assert not hasattr(m, "__cuda_array_interface__")
    a = np.from_dlpack(m)
    assert np.array_equal(a, 0.5 * np.arange(15, dtype=np.float32).reshape(5, 3))
    assert a.ctypes.data == m.data_ptr and a.strides == (12, 4)
    alive = weakref.ref(m)
    del m
    gc.collect()
    assert alive() is not None and frees() == (0, 0)  # numpy's array holds it
    b = a[1:]
    del a
    gc.collect()
    assert alive() is not None and frees() == (0, 0)
    del b
    gc.collect()
    assert alive() is None and frees() == (1, 0)
    # a capsule never consumed frees it too; a consumed one does not free it twice
    m = f(2, 1.0)
    c = m.__dlpack__()
    del m, c
    gc.collect()
    assert frees() == (2, 0)
    # many calls: each result freed exactly once
    for i in range(50):
        np.from_dlpack(f(3, float(i))).sum()
    gc.collect()
    assert frees() == (52, 0)
    print("PASS")
    """)


def test_strided_and_rank0_results_are_exact():
    _run_on_fake_driver(f"""
    text = {FILL_2D!r}.replace("func.func @main", "func.func private @fill") + '''
    func.func @view(%n: index) -> (memref<?x2xf32, strided<[3, 1], offset: 1>>, memref<f32>,
                                   memref<?x3xf32>) {{
      %x = arith.constant 1.0 : f32
      %m = func.call @fill(%n, %x) : (index, f32) -> memref<?x3xf32>
      %v = memref.subview %m[0, 1][%n, 2][1, 1]
          : memref<?x3xf32> to memref<?x2xf32, strided<[3, 1], offset: 1>>
      %s = memref.alloc() : memref<f32>
      %c = arith.constant 42.0 : f32
      memref.store %c, %s[] : memref<f32>
      return %v, %s, %m : memref<?x2xf32, strided<[3, 1], offset: 1>>, memref<f32>,
                          memref<?x3xf32>
    }}
    '''
    v, s, whole = compile_(text).view(4)
    assert v.shape == (4, 2) and v.strides == (3, 1)
    assert v.owns_memory and not whole.owns_memory   # one allocation, one owner
    a = np.from_dlpack(v)
    assert np.array_equal(a, np.arange(12, dtype=np.float32).reshape(4, 3)[:, 1:])
    assert a.strides == (12, 4)
    assert np.from_dlpack(s).shape == () and float(np.from_dlpack(s)) == 42.0
    assert np.from_dlpack(whole)[3, 0] == 9.0
    del v, a
    gc.collect()
    assert frees() == (0, 0)          # the whole-array view keeps the allocation
    del whole
    gc.collect()
    assert frees() == (1, 0)
    del s
    gc.collect()
    assert frees() == (2, 0)
    print("PASS")
    """)


GPU_FILL = """
func.func @main(%n: index, %v: i32) -> memref<?xi32> {
  %m = gpu.alloc (%n) : memref<?xi32>
  gpu.memset %m, %v : memref<?xi32>, i32
  return %m : memref<?xi32>
}
"""


def test_device_memref_result_on_the_stand_in():
    _run_on_fake_driver(f"""
    FAKE.fake_cuda_live_allocations.restype = ctypes.c_int
    f = compile_({GPU_FILL!r}).main
    m = f(6, 7)
    assert m.__dlpack_device__() == (2, 0) and m.owns_memory
    assert FAKE.fake_cuda_live_allocations() == 1
    cai = m.__cuda_array_interface__
    assert cai["shape"] == (6,) and cai["strides"] == (4,) and cai["typestr"] == "<i4"
    assert cai["version"] == 3 and cai["data"] == (m.data_ptr, False) and cai["stream"] == 1
    # the stand-in's device memory is host memory: read it back
    assert list((ctypes.c_int32 * 6).from_address(m.data_ptr)) == [7] * 6
    for max_version, name in ((None, b"dltensor"), ((1, 0), b"dltensor_versioned"),
                              ((0, 8), b"dltensor")):
        cap = m.__dlpack__(max_version=max_version)
        ctypes.pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
        ctypes.pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]
        assert ctypes.pythonapi.PyCapsule_GetName(cap) == name
    for kwargs, match in (({{"copy": True}}, "copy"), ({{"dl_device": (1, 0)}}, "lives on")):
        try:
            m.__dlpack__(**kwargs)
        except BufferError as exc:
            assert match in str(exc), exc
        else:
            raise AssertionError(kwargs)
    m.__dlpack__(stream=-1)
    m.__dlpack__(stream=1)
    FAKE.fake_cuda_reset()
    cap = m.__dlpack__(stream=2)       # another stream: ordered after the call's stream
    assert FAKE.fake_cuda_calls(b"cuStreamWaitEvent") == 1
    del m
    gc.collect()
    assert FAKE.fake_cuda_live_allocations() == 1 and frees() == (0, 0)  # the capsule holds it
    del cap
    gc.collect()
    assert FAKE.fake_cuda_live_allocations() == 0 and frees() == (0, 1)
    assert FAKE.fake_cuda_calls(b"cuMemFree_v2") == 1
    print("PASS")
    """)


def test_result_viewing_an_argument_keeps_it_alive_on_the_stand_in():
    _run_on_fake_driver(f"""
    FAKE.fake_cuda_live_allocations.restype = ctypes.c_int
    make = compile_({GPU_FILL!r}).main
    tail = compile_('''
    module attributes {{gpu.container_module}} {{
    gpu.module @unused {{ gpu.func @nop() kernel {{ gpu.return }} }}
    func.func @tail(%a: memref<?xi32>) -> memref<?xi32, strided<[1], offset: 2>> {{
      %c0 = arith.constant 0 : index
      %c2 = arith.constant 2 : index
      %n = memref.dim %a, %c0 : memref<?xi32>
      %k = arith.subi %n, %c2 : index
      %v = memref.subview %a[2][%k][1] : memref<?xi32> to memref<?xi32, strided<[1], offset: 2>>
      return %v : memref<?xi32, strided<[1], offset: 2>>
    }}
    }}''').tail
    src = make(8, 3)
    view = tail(src)     # a Memref is itself a DLPack argument (a GPU program: the gpu.module)
    assert not view.owns_memory and view.shape == (6,)
    assert view.data_ptr == src.data_ptr + 8 and view.__dlpack_device__() == (2, 0)
    held = weakref.ref(src)
    del src
    gc.collect()
    assert held() is not None and FAKE.fake_cuda_live_allocations() == 1
    del view
    gc.collect()
    assert held() is None and FAKE.fake_cuda_live_allocations() == 0 and frees() == (0, 1)
    print("PASS")
    """)


# ------------------------------------------------------------------------------------------
# On a GPU: torch, CuPy, JAX, NumPy
# ------------------------------------------------------------------------------------------
GPU_IOTA = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @iota(%a: memref<?x?xf32>, %n: index, %m: index, %s: f32) kernel {
      %i = gpu.block_id x
      %j = gpu.thread_id x
      %in = arith.cmpi ult, %j, %m : index
      scf.if %in {
        %r = arith.muli %i, %m : index
        %l = arith.addi %r, %j : index
        %li = arith.index_cast %l : index to i32
        %f = arith.sitofp %li : i32 to f32
        %v = arith.mulf %f, %s : f32
        memref.store %v, %a[%i, %j] : memref<?x?xf32>
      }
      gpu.return
    }
  }
  func.func @iota(%n: index, %m: index, %s: f32)
      -> (memref<?x?xf32>, memref<2x2xf32, strided<[?, 2], offset: ?>>, f32) {
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %a = gpu.alloc (%n, %m) : memref<?x?xf32>
    gpu.launch_func @k::@iota blocks in (%n, %c1, %c1) threads in (%m, %c1, %c1)
        args(%a : memref<?x?xf32>, %n : index, %m : index, %s : f32)
    %v = memref.subview %a[1, 1][2, 2][1, 2]
        : memref<?x?xf32> to memref<2x2xf32, strided<[?, 2], offset: ?>>
    return %a, %v, %s : memref<?x?xf32>, memref<2x2xf32, strided<[?, 2], offset: ?>>, f32
  }
  func.func @host(%n: index) -> memref<?xf64> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %h = memref.alloc(%n) : memref<?xf64>
    scf.for %i = %c0 to %n step %c1 {
      %ii = arith.index_cast %i : index to i64
      %f = arith.sitofp %ii : i64 to f64
      memref.store %f, %h[%i] : memref<?xf64>
    }
    return %h : memref<?xf64>
  }
}
"""


def test_gpu_iota_module_compiles_here():
    """The module the GPU tests below run compiles without a GPU, with its result kinds."""
    program = api.build(GPU_IOTA, target="sm_90", format="ptx").program()
    iota = next(f for f in program.functions if f.name == "iota")
    a, v, s = iota.results
    assert (a.kind, a.sizes, v.sizes, v.strides, s.scalar) == \
        ("memref", (DYNAMIC, DYNAMIC), (2, 2), (DYNAMIC, 2), "f32")


def _expected(n, m, s):
    return np.arange(n * m, dtype=np.float32).reshape(n, m) * np.float32(s)


@pytest.mark.gpu
def test_results_to_torch_without_copy_and_freed_once(torch_cuda, compile_gpu):
    torch = torch_cuda
    from pywave import _native
    mod = compile_gpu(GPU_IOTA)
    before = _native.result_frees()
    a, v, s = mod.iota(5, 7, 0.5)
    assert s == 0.5 and a.owns_memory and not v.owns_memory
    t = torch.from_dlpack(a)
    tv = torch.from_dlpack(v)
    assert t.device.type == "cuda" and t.data_ptr() == a.data_ptr
    assert tv.data_ptr() == v.data_ptr and tv.shape == (2, 2) and tv.stride() == (7, 2)
    assert np.array_equal(t.cpu().numpy(), _expected(5, 7, 0.5))
    assert np.array_equal(tv.cpu().numpy(), _expected(5, 7, 0.5)[1:3, 1:5:2])
    del a, v
    gc.collect()
    assert _native.result_frees() == before
    del tv
    gc.collect()
    assert _native.result_frees() == before          # t still holds the allocation
    t += 1                                            # still valid memory
    torch.cuda.synchronize()
    del t
    gc.collect()
    assert _native.result_frees() == (before[0], before[1] + 1)


@pytest.mark.gpu
def test_results_to_cupy(cupy_mod, compile_gpu):
    cp = cupy_mod
    from pywave import _native
    mod = compile_gpu(GPU_IOTA)
    before = _native.result_frees()
    a, v, _ = mod.iota(4, 9, 2.0)
    x = cp.from_dlpack(a)
    y = cp.asarray(v)                                 # __cuda_array_interface__
    assert x.data.ptr == a.data_ptr and y.data.ptr == v.data_ptr
    assert y.strides == (36, 8)
    assert np.array_equal(cp.asnumpy(x), _expected(4, 9, 2.0))
    assert np.array_equal(cp.asnumpy(y), _expected(4, 9, 2.0)[1:3, 1:5:2])
    del a, v
    gc.collect()
    assert _native.result_frees() == before
    del x
    gc.collect()
    assert _native.result_frees() == before          # y views the same allocation
    del y
    gc.collect()
    assert _native.result_frees() == (before[0], before[1] + 1)


@pytest.mark.gpu
def test_results_to_jax(jax_gpu, compile_gpu):
    jax = jax_gpu
    from pywave import _native
    mod = compile_gpu(GPU_IOTA)
    before = _native.result_frees()
    a, v, _ = mod.iota(3, 5, 1.0)
    x = jax.dlpack.from_dlpack(a)
    assert np.array_equal(np.asarray(x), _expected(3, 5, 1.0))
    del a, v
    gc.collect()
    x.block_until_ready()
    del x
    gc.collect()
    assert _native.result_frees() == (before[0], before[1] + 1)


@pytest.mark.gpu
def test_host_result_to_numpy_on_a_gpu(torch_cuda, compile_gpu):
    from pywave import _native
    mod = compile_gpu(GPU_IOTA)
    before = _native.result_frees()
    h = mod.host(10)
    assert h.__dlpack_device__() == (1, 0)
    x = np.from_dlpack(h)
    assert np.array_equal(x, np.arange(10, dtype=np.float64))
    del h, x
    gc.collect()
    assert _native.result_frees() == (before[0] + 1, before[1])
