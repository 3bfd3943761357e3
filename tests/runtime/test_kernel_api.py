"""The Python launch API of kernels: mod.kernels["add"](..., grid=, block=, shared_mem=,
stream=). Compile-only tests here (launcher generation, the table, errors raised before any
device work); the GPU tests are marked ``gpu`` and compare exact results."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import pywave
from pywave import api
from pywave.runtime import kernel_api
from conftest import TESTS

DATA = TESTS / "data"

#: Kernels only: no host function at all. @scale2d uses a 2-D grid and block.
KERNELS_ONLY = r"""
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @fill(%out: memref<?xi32>, %value: i32, %n: index) kernel {
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t = arith.muli %bid, %bdim : index
      %i = arith.addi %t, %tid : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        memref.store %value, %out[%i] : memref<?xi32>
      }
      gpu.return
    }
    gpu.func @index2d(%out: memref<?x?xi32>) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %rows = memref.dim %out, %c0 : memref<?x?xi32>
      %cols = memref.dim %out, %c1 : memref<?x?xi32>
      %by = gpu.block_id y
      %bx = gpu.block_id x
      %dy = gpu.block_dim y
      %dx = gpu.block_dim x
      %ty = gpu.thread_id y
      %tx = gpu.thread_id x
      %r0 = arith.muli %by, %dy : index
      %r = arith.addi %r0, %ty : index
      %q0 = arith.muli %bx, %dx : index
      %q = arith.addi %q0, %tx : index
      %rin = arith.cmpi ult, %r, %rows : index
      %qin = arith.cmpi ult, %q, %cols : index
      %in = arith.andi %rin, %qin : i1
      scf.if %in {
        %w = arith.muli %r, %cols : index
        %lin = arith.addi %w, %q : index
        %v = arith.index_cast %lin : index to i32
        memref.store %v, %out[%r, %q] : memref<?x?xi32>
      }
      gpu.return
    }
    gpu.func @with_vector(%v: vector<4xf32>) kernel {
      gpu.return
    }
  }
  gpu.module @other {
    gpu.func @fill(%out: memref<4xf32>) kernel {
      gpu.return
    }
    gpu.func @flags(%out: memref<?xi1>, %n: index) kernel {
      gpu.return
    }
  }
}
"""


def compile_sm90(text: str, **kw) -> pywave.CompiledModule:
    return pywave.compile(text, target="sm_90", format="ptx", disk_cache=False, **kw)


def test_each_launchable_kernel_gets_a_launcher_and_no_host_function():
    mod = compile_sm90(KERNELS_ONLY)
    assert mod.functions == []
    assert list(mod.kernels) == ["k::fill", "k::index2d", "other::fill", "other::flags"]
    assert mod.kernels["index2d"] is mod.kernels["k::index2d"] is mod.kernel("index2d")
    with pytest.raises(pywave.NotFoundError, match="ambiguous: k::fill, other::fill"):
        mod.kernels["fill"]
    with pytest.raises(pywave.NotFoundError, match="no launchable kernel 'with_vector'"):
        mod.kernels["with_vector"]          # vector arguments: no launcher
    assert repr(mod.kernels) == ("<pywave.Kernels ['k::fill', 'k::index2d', 'other::fill', "
                                 "'other::flags']>")
    assert repr(mod.kernels["k::fill"]) == ("<pywave.KernelLauncher k::fill(out: "
                                            "memref<?xi32>, value: i32, n: index) device=cuda>")


def test_launcher_parameters_keep_kernel_names_types_and_bool_tensors():
    flags = inspect.signature(compile_sm90(KERNELS_ONLY).kernels["flags"])
    assert flags.parameters["out"].annotation.dtype == "bool"
    params = compile_sm90(KERNELS_ONLY).kernels["k::fill"].function.params
    assert [p.name for p in params] == ["out", "value", "n", "grid[0]", "grid[1]", "grid[2]",
                                        "block[0]", "block[1]", "block[2]",
                                        "shared_mem[bytes]"]
    assert [p.type for p in params[3:]] == ["index"] * 6 + ["i32"]


def test_launchers_are_for_python_only(mlir, tmp_path):
    text = mlir("vector_add.mlir")
    assert [f.name for f in api.build(text, target="sm_90", format="ptx").host.functions] == \
        ["main"]
    done = pywave.export(text, tmp_path, "va", target="sm_90", format="ptx",
                         runtime_mode="link")
    assert done.functions == ("va_main",)
    mod = compile_sm90(text)
    assert mod.functions == ["main"] and list(mod.kernels) == ["kernels::add"]


def test_the_launchers_survive_the_disk_cache(mlir, tmp_path, monkeypatch):
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path))
    text = mlir("vector_add.mlir") + "// launcher cache test\n"
    first = pywave.compile(text, target="sm_90", format="ptx")
    first.close()
    again = pywave.compile(text, target="sm_90", format="ptx")
    assert again is not first and list(again.kernels) == ["kernels::add"]


def test_a_gpu_binary_kernel_launched_by_the_host_gets_a_launcher(mlir):
    [binary] = api.build(mlir("vector_add.mlir"), target="sm_90", format="ptx",
                         lowering={"keep_kernel_params": True}).binaries   # MLIR's ABI
    text = mlir("vector_add.mlir")
    start, end = text.index("  gpu.module @kernels"), text.index("  func.func @main")
    data = "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else f"\\{c:02X}"
                   for c in binary.data.rstrip(b"\0"))
    text = text[:start] + (f'  gpu.binary @kernels [#gpu.object<#nvvm.target<chip = '
                           f'"sm_90">, assembly = "{data}">]\n') + text[end:]
    add = compile_sm90(text).kernels["add"]
    assert [p.name for p in add.function.params[:4]] == ["arg0", "arg1", "arg2", "arg3"]
    assert all(p.written for p in add.function.params[:3])     # unknown: taken as written


@pytest.mark.parametrize("kwargs, message", [
    ({"block": 1}, r"k::fill\(\) needs grid="),
    ({"grid": 1}, r"needs block="),
    ({"grid": (1, 2, 3, 4), "block": 1}, r"grid must be an int or a tuple of 1 to 3 ints"),
    ({"grid": (), "block": 1}, r"grid must be an int or a tuple of 1 to 3 ints"),
    ({"grid": (1, 0), "block": 1}, r"grid\[1\] = 0 is out of range \[1, "),
    ({"grid": 1, "block": -5}, r"block = -5 is out of range \[1, "),
    ({"grid": 1, "block": (32, 2.0)}, r"block\[1\] must be an int, got 2.0"),
    ({"grid": True, "block": 1}, r"grid must be an int, got True"),
    ({"grid": "1", "block": 1}, r"grid must be an int, got '1'"),
    ({"grid": 1, "block": 1, "shared_mem": -1}, r"shared_mem = -1 is out of range \[0, "),
    ({"grid": 1, "block": 1, "shared_mem": 2**31}, r"shared_mem = 2147483648 is out of range"),
    ({"grid": 1, "block": 1, "threads": 4}, r"unexpected keyword argument 'threads'"),
])
def test_bad_launch_configuration_is_an_argument_error(kwargs, message):
    fill = compile_sm90(KERNELS_ONLY).kernels["k::fill"]
    with pytest.raises(pywave.ArgumentError, match=message):
        fill(object(), 1, 4, **kwargs)


def test_argument_count_and_types_are_checked_as_for_host_functions():
    fill = compile_sm90(KERNELS_ONLY).kernels["k::fill"]
    with pytest.raises(pywave.ArgumentError, match=r"takes 3 kernel arguments, got 2"):
        fill(object(), 1, grid=1, block=1)
    with pytest.raises(pywave.ArgumentError, match=r"argument 'out' \(#0\)"):
        fill(object(), 1, 4, grid=1, block=1)


def test_a_closed_module_refuses_its_kernels():
    mod = compile_sm90(KERNELS_ONLY)
    fill = mod.kernels["k::fill"]
    mod.close()
    with pytest.raises(pywave.Error, match="closed"):
        mod.kernels["k::fill"]
    with pytest.raises(pywave.ArgumentError, match="closed"):
        fill(object(), 1, 4, grid=1, block=1)


def test_workgroup_attributions_are_not_launcher_arguments(mlir):
    """A kernel's workgroup attributions follow its arguments in the entry block; the
    launcher takes the arguments only."""
    reverse = compile_sm90(mlir("dynamic_smem.mlir")).kernels["reverse_all"]
    assert list(inspect.signature(reverse).parameters)[:2] == ["a", "n"]
    assert [p.name for p in reverse.function.params][:3] == ["a", "n", "grid[0]"]


def test_launcher_names():
    assert kernel_api.launcher_name("k", "add") == "_pywave_kernel$k$add"
    assert kernel_api.kernel_of("_pywave_kernel$k$add") == "k::add"
    assert kernel_api.kernel_of("main") is None
    assert kernel_api.launcher_name("a$b", "add") is None


# -- on the GPU -------------------------------------------------------------------------------


@pytest.fixture
def dev(torch_cuda):
    return torch_cuda.device("cuda", torch_cuda.cuda.current_device())


def test_vector_add_launched_from_python(mlir, device):
    add = device.compile(mlir("vector_add.mlir")).kernels["add"]
    n = 1000
    a0 = np.arange(n, dtype=np.float32)
    a, b = device.put(a0), device.put(np.full(n, 0.5, dtype=np.float32))
    c = device.zeros(n)
    add(a, b, c, n, grid=((n + 255) // 256, 1, 1), block=(256, 1, 1))
    assert np.array_equal(device.get(c), a0 + 0.5)
    c = device.zeros(n)
    add(a, b, c, 300, grid=2, block=128)          # ints: y and z are 1; only 256 threads
    got = device.get(c)
    assert np.array_equal(got[:256], a0[:256] + 0.5) and not got[256:].any()


def test_two_dimensional_grid(device):
    index2d = device.compile(KERNELS_ONLY).kernels["index2d"]
    out = device.put(np.full((37, 70), -1, dtype=np.int32))
    index2d(out, grid=(3, 5), block=(32, 8))       # 96 x 40 threads cover 70 x 37
    assert np.array_equal(device.get(out), np.arange(37 * 70, dtype=np.int32).reshape(37, 70))


def test_dynamic_shared_memory(mlir, device):
    reverse = device.compile(mlir("dynamic_smem.mlir")).kernels["reverse_all"]
    n = 5000
    a = device.put(np.arange(n, dtype=np.float32))
    reverse(a, n, grid=1, block=1024, shared_mem=4 * n)
    assert np.array_equal(device.get(a), np.arange(n - 1, -1, -1, dtype=np.float32))
    with pytest.raises(pywave.ArgumentError, match="shared memory"):
        reverse(a, n, grid=1, block=1024, shared_mem=2**30)


@pytest.mark.gpu
def test_launch_on_a_stream_and_the_device_limits(torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    fill = compile_gpu(KERNELS_ONLY).kernels["k::fill"]
    out = torch.zeros(1 << 20, dtype=torch.int32, device=dev)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        out.fill_(5)                                # pending on s
    fill(out[:1000], 7, 1000, grid=4, block=256, stream=s)
    s.synchronize()
    assert torch.equal(out[:1000], torch.full((1000,), 7, dtype=torch.int32, device=dev))
    assert torch.equal(out[1000:], torch.full((out.numel() - 1000,), 5, dtype=torch.int32,
                                              device=dev))
    with pytest.raises(pywave.ArgumentError, match="threads per block.*exceeds"):
        fill(out, 1, 4, grid=1, block=(1024, 2))


def test_a_launcher_needs_the_launch_parameters(mlir):
    from pywave import _native
    main = compile_sm90(mlir("vector_add.mlir")).main
    with pytest.raises(TypeError, match="does not end in the launch parameters"):
        _native.KernelLauncher(main, "kernels::add")
