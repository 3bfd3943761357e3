"""Kernels run on a device: an NVIDIA GPU through torch (and cupy / jax where a case needs
them) and, for the tests of what a kernel computes or how its arguments are checked, the CPU
device too (``device`` fixture: NumPy arrays, ``target="cpu"``; tests/conftest.py). Tests of
the GPU driver, its chip, streams or GPU-resident producers are marked ``gpu`` one by one.

Every comparison is exact unless the kernel calls a transcendental (math.exp)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import pywave
from conftest import ROOT



@pytest.fixture
def dev(torch_cuda):
    return torch_cuda.device("cuda", torch_cuda.cuda.current_device())


def full(torch, n, value, dev, dtype=None):
    return torch.full((n,), value, dtype=dtype or torch.float32, device=dev)


def f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


# ----------------------------------------------------------------------------------------
# The compiled-module surface
# ----------------------------------------------------------------------------------------
def test_module_surface(mlir, device):
    mod = device.compile(mlir("named_functions.mlir"))
    assert mod.functions == ["double_it", "negate"]
    assert re.fullmatch(r"<pywave\.CompiledModule functions=\['double_it', 'negate'\] "
                        r"target=(sm_\d+a?|cpu)>", repr(mod))
    a = device.put(np.arange(1000, dtype=np.float32))
    mod.double_it(a)
    mod["negate"](a)
    assert np.array_equal(device.get(a), -2 * np.arange(1000, dtype=np.float32))
    with pytest.raises(pywave.ArgumentError, match="double_it.*negate|call one by name"):
        mod(a)
    with pytest.raises(pywave.NoAttributeError, match="no host function 'nope'; functions"):
        mod.nope                        # an AttributeError too: hasattr works
    assert not hasattr(mod, "nope") and getattr(mod, "nope", None) is None
    with pytest.raises(pywave.NotFoundError, match="no host function 'nope'; functions") as err:
        mod["nope"]
    assert isinstance(err.value, KeyError) and str(err.value).startswith("no host function")
    with pytest.raises(pywave.NoAttributeError):
        mod.helper_not_exported


def test_close_and_context_manager(mlir, device):
    a = device.put(np.ones(300, dtype=np.float32))
    with device.compile(mlir("scale_in_place.mlir")) as mod:
        mod(a, 3.0)
        fn = mod.main
    assert "closed" in repr(mod)
    with pytest.raises(pywave.Error, match="closed"):
        mod(a, 3.0)
    with pytest.raises(pywave.Error):
        fn(a, 3.0)
    mod.close()  # idempotent
    assert np.array_equal(device.get(a), np.full(300, 3.0, dtype=np.float32))


def test_argument_count_and_keywords(mlir, device):
    mod = device.compile(mlir("scale_in_place.mlir"))
    a = device.put(np.ones(10, dtype=np.float32))
    with pytest.raises(pywave.ArgumentError, match="2 arguments.*got 1"):
        mod(a)
    with pytest.raises(pywave.ArgumentError, match="'bogus'"):
        mod(a, 1.0, bogus=1)


# ----------------------------------------------------------------------------------------
# Targets
# ----------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_no_target_takes_the_device_chip(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("scale_in_place.mlir"))
    major, minor = torch.cuda.get_device_capability(dev)
    assert mod.target.startswith(f"sm_{major}{minor}")
    a = full(torch, 1000, 1.0, dev)
    mod(a, 3.0)
    assert torch.equal(a, full(torch, 1000, 3.0, dev))


@pytest.mark.gpu
def test_rocdl_target_on_nvidia_names_module_and_backends(mlir, torch_cuda):
    with pytest.raises(pywave.CompileError) as info:
        pywave.compile(mlir("bad/scale_with_rocdl_target.mlir"))
    msg = str(info.value)
    assert "@kernels" in msg
    assert "rocdl" in msg and "gfx942" in msg
    assert re.search(r"nvvm|NVIDIA|CUDA", msg), msg


def test_empty_gpu_module_is_ignored(mlir, device):
    mod = device.compile(mlir("scale_with_empty_gpu_module.mlir"))
    a = device.put(np.ones(1000, dtype=np.float32))
    mod(a, 3.0)
    assert np.array_equal(device.get(a), np.full(1000, 3.0, dtype=np.float32))


@pytest.mark.gpu
def test_ptx_binary_runs(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("scale_in_place.mlir"), format="ptx")
    assert [b.format for b in mod.binaries] == ["ptx"]
    a = full(torch, 1000, 1.5, dev)
    mod(a, 2.0)
    assert torch.equal(a, full(torch, 1000, 3.0, dev))


# ----------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 255, 256, 257, 100_000])
def test_vector_add(mlir, device, n):
    mod = device.compile(mlir("vector_add.mlir"))
    rng = np.random.default_rng(n)
    a0, b0 = rng.standard_normal((2, n), dtype=np.float32)
    a, b, c = device.put(a0), device.put(b0), device.zeros(n)
    mod(a, b, c)
    assert np.array_equal(device.get(c), a0 + b0)


def test_elementwise_2d(mlir, device):
    mod = device.compile(mlir("elementwise_2d.mlir"))
    rng = np.random.default_rng(2)
    for shape in [(1, 1), (17, 33), (300, 70)]:
        a0, b0 = rng.standard_normal((2, *shape), dtype=np.float32)
        out = device.zeros(shape)
        mod(device.put(a0), device.put(b0), out)
        got = device.get(out)
        # rounding is mulf then addf (or a fused multiply-add); both are within 1 ulp
        fused = (a0.astype(np.float64) * b0 + a0).astype(np.float32)
        assert np.array_equal(got, a0 * b0 + a0) or np.array_equal(got, fused)


def test_multi_kernel_in_order(mlir, device):
    mod = device.compile(mlir("multi_kernel.mlir"))
    a0 = np.arange(-500, 500, dtype=np.float32)
    a, b, c = device.put(a0), device.zeros(1000), device.zeros(1000)
    mod(a, b, c)
    assert np.array_equal(device.get(b), 2 * a0)
    assert np.array_equal(device.get(c), 9 * a0 * a0)


def test_host_loop_launches_repeatedly(mlir, device):
    mod = device.compile(mlir("host_loop.mlir"))
    a = device.zeros(1000)
    mod(a, 10)
    assert np.array_equal(device.get(a), np.full(1000, 10.0, dtype=np.float32))
    mod(a, 0)
    assert np.array_equal(device.get(a), np.full(1000, 10.0, dtype=np.float32))


def test_gpu_launch_region_is_outlined_and_runs(mlir, device):
    mod = device.compile(mlir("launch_outline.mlir"))
    a = device.put(np.arange(777, dtype=np.float32))
    mod(a, 0.5)
    assert np.array_equal(device.get(a), np.arange(777, dtype=np.float32) + 0.5)


def test_static_workgroup_memory_block_reverse(mlir, device):
    mod = device.compile(mlir("block_reverse.mlir"))
    a0 = np.arange(256 * 5, dtype=np.float32)
    a = device.put(a0)
    mod(a)
    assert np.array_equal(device.get(a), a0.reshape(5, 256)[:, ::-1].reshape(-1))


# 12288: exactly 48 KiB dynamic; 16384: the CPU device's whole 64 KiB
@pytest.mark.parametrize("n", [1000, 12288, 16384])
def test_dynamic_shared_memory(mlir, device, n):
    mod = device.compile(mlir("dynamic_smem.mlir"))
    a = device.put(np.arange(n, dtype=np.float32))
    mod(a)
    assert np.array_equal(device.get(a), np.arange(n, dtype=np.float32)[::-1])


@pytest.mark.gpu
def test_dynamic_shared_memory_over_48_kib(mlir, torch_cuda, dev, compile_gpu):
    """96 KiB: over the default 48 KiB, within the opt-in maximum of sm_70 and newer."""
    torch = torch_cuda
    mod = compile_gpu(mlir("dynamic_smem.mlir"))
    a = torch.arange(24576, dtype=torch.float32, device=dev)
    mod(a)
    assert torch.equal(a, torch.arange(24576, dtype=torch.float32, device=dev).flip(0))


def test_dynamic_shared_memory_over_the_device_maximum(mlir, device):
    mod = device.compile(mlir("dynamic_smem.mlir"))
    a0 = np.arange(70000, dtype=np.float32)
    a = device.put(a0)
    with pytest.raises(pywave.ArgumentError) as info:
        mod(a)
    msg = str(info.value)
    assert "280000" in msg and "maximum" in msg
    if device.is_cpu:
        from pywave.kernels import cpu
        assert str(cpu.DYNAMIC_SHARED_BYTES) in msg, msg
    else:
        optin = getattr(device.torch.cuda.get_device_properties(
            device.torch.cuda.current_device()), "shared_memory_per_block_optin", None)
        if optin:
            assert str(optin) in msg
    assert np.array_equal(device.get(a), a0)
    b = device.put(np.arange(12288, dtype=np.float32))
    mod(b)  # the module still works
    assert np.array_equal(device.get(b), np.arange(12288, dtype=np.float32)[::-1])


def test_all_reduce_block_sum(mlir, device):
    mod = device.compile(mlir("reduce_shuffle.mlir"))
    a0 = np.random.default_rng(3).integers(-100, 100, 256 * 7).astype(np.float32)  # exact sums
    out = device.zeros(7)
    mod.block_sum(device.put(a0), out)
    assert np.array_equal(device.get(out), a0.reshape(7, 256).sum(1))


def test_shuffle_xor_swaps_pairs(mlir, device):
    mod = device.compile(mlir("reduce_shuffle.mlir"))
    a0 = np.random.default_rng(4).standard_normal(512, dtype=np.float32)
    out = device.zeros(512)
    mod.swap_pairs(device.put(a0), out)
    assert np.array_equal(device.get(out), a0.reshape(-1, 2)[:, ::-1].reshape(-1))


def test_math_exp(mlir, device):
    mod = device.compile(mlir("exp.mlir"))
    a0 = np.linspace(-20, 20, 4001, dtype=np.float32)
    a0[0] = 0.0
    out = device.zeros(4001)
    mod(device.put(a0), out)
    got = device.get(out)
    assert got[0] == 1.0
    ref = np.exp(a0.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(got, ref, rtol=2.5e-7, atol=0)  # <= 2 ulp (libdevice)


# ----------------------------------------------------------------------------------------
# Async tokens
# ----------------------------------------------------------------------------------------
def _check_async(device, mod):
    """The GPU repeats the program 20 times, as a race between its streams may show only
    sometimes; the CPU device's launches are synchronous, once shows its result."""
    n = 1 << 24
    for _ in range(20 if not device.is_cpu else 1):
        a, b, c = device.zeros(n), device.zeros(n), device.zeros(n)
        mod(a, b, c)
        for got, value in ((c, 5.0), (a, 2.0), (b, 3.0)):
            got = device.get(got)
            assert (got == value).all(), (value, got[got != value][:4])


def test_launch_after_two_async_tokens(mlir, device):
    try:
        mod = device.compile(mlir("async_deps.mlir"))
    except pywave.CompileError as exc:
        assert "gpu.launch_func" in str(exc) and "async dependencies" in str(exc)
        return
    _check_async(device, mod)


def test_async_tokens_joined_by_wait(mlir, device):
    _check_async(device, device.compile(mlir("async_join.mlir")))


# ----------------------------------------------------------------------------------------
# Printf
# ----------------------------------------------------------------------------------------
def test_printf(mlir, device, capfd):
    mod = device.compile(mlir("printf.mlir"))
    capfd.readouterr()
    mod(1.5, 7)
    if not device.is_cpu:
        device.torch.cuda.synchronize()  # device printf is flushed at synchronisation
    out = capfd.readouterr().out
    assert "begin\nx=1.500000 n=7\n" in out


# ----------------------------------------------------------------------------------------
# Launch limits (the CPU device reports CUDA's: libwavert's backend_cpu.c)
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("grid_x, grid_z, block_x, dim, limit", [
    (1, 70000, 256, "grid z", 65535),
    (2 ** 31, 1, 1, "grid x", 2 ** 31 - 1),
    (1, 1, 2048, "block x", 1024),
])
def test_launch_limits(mlir, device, grid_x, grid_z, block_x, dim, limit):
    mod = device.compile(mlir("launch_limits.mlir"))
    a = device.zeros(256)
    with pytest.raises(pywave.ArgumentError) as info:
        mod(a, grid_x, grid_z, block_x)
    msg = str(info.value)
    value = {"grid z": grid_z, "grid x": grid_x, "block x": block_x}[dim]
    assert dim in msg and str(value) in msg and str(limit) in msg, msg
    assert not device.get(a).any()  # untouched
    mod(a, 1, 1, 256)  # a valid launch still works
    assert (device.get(a) == 1.0).all()


def test_empty_grid_is_a_no_op(mlir, device):
    mod = device.compile(mlir("launch_limits.mlir"))
    a = device.zeros(256)
    mod(a, 0, 1, 256)
    mod(a, 1, 0, 256)
    mod(a, 1, 1, 0)
    assert not device.get(a).any()


def test_negative_grid_is_an_error(mlir, device):
    mod = device.compile(mlir("launch_limits.mlir"))
    a = device.zeros(256)
    with pytest.raises(pywave.ArgumentError, match=r"grid x.*-1"):
        mod(a, -1, 1, 256)


# ----------------------------------------------------------------------------------------
# Scalars
# ----------------------------------------------------------------------------------------
#: powers of two in y: y * 0.1 is exact, so a fused multiply-add gives the same result
_X0 = np.array([0.0, 1.0, -2.5, 3.25, 1e6, -7.0], dtype=np.float32)
_Y0 = np.array([0.0, 1.0, 2.0, -4.0, 0.5, 1024.0], dtype=np.float64)


def _scalar_inputs(device):
    return device.put(_X0), device.put(_Y0)


@pytest.mark.parametrize("numpy_scalars", [False, True])
def test_mixed_scalars(mlir, device, numpy_scalars):
    mod = device.compile(mlir("scalars_mixed.mlir"))
    x, y = _scalar_inputs(device)
    args = (2.0, 0.1, -3, 300, True)
    if numpy_scalars:
        args = (np.float32(2.0), np.float64(0.1), np.int8(-3), np.int16(300), np.bool_(True))
    mod(x, y, *args)
    assert np.array_equal(device.get(x), _X0 * np.float32(2.0) + np.float32(-3))
    assert np.array_equal(device.get(y), _Y0 * 0.1 + 300.0)
    mod(x, y, 1.0, 1.0, 0, 300, False)  # flag False: y unchanged
    assert np.array_equal(device.get(y), _Y0 * 0.1 + 300.0)


@pytest.mark.parametrize("index, name, value, kind", [
    (4, "k", 200, "i8"), (4, "k", -129, "i8"), (5, "m", 40000, "i16"),
])
def test_out_of_range_scalar(mlir, device, index, name, value, kind):
    mod = device.compile(mlir("scalars_mixed.mlir"))
    x, y = _scalar_inputs(device)
    args = [x, y, 2.0, 0.1, -3, 300, True]
    args[index] = value
    with pytest.raises(pywave.ArgumentError) as info:
        mod(*args)
    msg = str(info.value)
    assert f"'{name}'" in msg and str(value) in msg and kind in msg, msg
    lo, hi = {"i8": (-128, 127), "i16": (-32768, 32767)}[kind]
    assert str(lo) in msg and str(hi) in msg
    assert np.array_equal(device.get(x), _X0) and np.array_equal(device.get(y), _Y0)


def test_scalar_of_wrong_python_type(mlir, device):
    mod = device.compile(mlir("scalars_mixed.mlir"))
    x, y = _scalar_inputs(device)
    with pytest.raises(pywave.ArgumentError, match=r"'k'.*i8.*str|'k'.*str.*i8"):
        mod(x, y, 2.0, 0.1, "3", 300, True)
    with pytest.raises(pywave.ArgumentError, match=r"'k'"):
        mod(x, y, 2.0, 0.1, 1.5, 300, True)  # a float for an integer


def test_more_scalar_types(mlir, device):
    mod = device.compile(mlir("scalars_more.mlir"))
    ints = device.zeros(3, np.int64)
    floats = device.zeros(2)
    mod(ints, floats, -2 ** 31, 2 ** 63 - 1, 2 ** 40, 1.5, -2.0)
    assert device.get(ints).tolist() == [-2 ** 31, 2 ** 63 - 1, 2 ** 40]
    assert device.get(floats).tolist() == [1.5, -2.0]
    mod(ints, floats, np.int32(7), np.int64(-8), np.intp(9), np.float16(65504.0), 0.0078125)
    assert device.get(ints).tolist() == [7, -8, 9]
    assert device.get(floats).tolist() == [65504.0, 0.0078125]


@pytest.mark.parametrize("position, name, value, kind", [
    (2, "p", 2 ** 31, "i32"), (3, "q", 2 ** 63, "i64"), (5, "h", 1e6, "f16"),
])
def test_more_scalar_types_out_of_range(mlir, device, position, name, value, kind):
    mod = device.compile(mlir("scalars_more.mlir"))
    args = [device.zeros(3, np.int64), device.zeros(2), 1, 2, 3, 1.0, 1.0]
    args[position] = value
    with pytest.raises(pywave.ArgumentError) as info:
        mod(*args)
    msg = str(info.value)
    assert f"'{name}'" in msg and kind in msg, msg


# ----------------------------------------------------------------------------------------
# I1 memrefs
# ----------------------------------------------------------------------------------------
@pytest.fixture
def bool_text(mlir, isolated_build):
    # compiling i1 memrefs once aborted the interpreter (MLIR assertion): check in a child first
    out = isolated_build(mlir("bool_i1.mlir"))
    assert out == "OK", out
    return mlir("bool_i1.mlir")


@pytest.fixture
def bool_module(bool_text, compile_gpu):
    return compile_gpu(bool_text)


def test_bool(device, bool_text):
    mod = device.compile(bool_text)
    flags = device.put(np.array([True, False, True, True]))
    out = device.zeros(4, np.int32)
    mod.widen_ui(flags, out)
    assert device.get(out).tolist() == [1, 0, 1, 1]
    mod.widen_si(flags, out)
    assert device.get(out).tolist() == [-1, 0, -1, -1]


@pytest.mark.gpu
def test_bool_cupy(cupy_mod, bool_module):
    cp = cupy_mod
    flags = cp.asarray([True, False, True, True])
    out = cp.zeros(4, dtype=cp.int32)
    bool_module.widen_ui(flags, out)
    assert out.tolist() == [1, 0, 1, 1]
    bool_module.widen_si(flags, out)
    assert out.tolist() == [-1, 0, -1, -1]


def test_uint8_for_i1_is_a_dtype_error(device, bool_text):
    mod = device.compile(bool_text)
    flags = device.put(np.array([1, 0, 1, 1], dtype=np.uint8))
    out = device.zeros(4, np.int32)
    with pytest.raises(pywave.ArgumentError) as info:
        mod.widen_ui(flags, out)
    msg = str(info.value)
    assert "'in'" in msg and re.search(r"\bi1\b|bool", msg) and re.search(r"uint8|ui8", msg), msg


# ----------------------------------------------------------------------------------------
# Zero-size inputs
# ----------------------------------------------------------------------------------------
def test_dims_of_empty_tensor(mlir, device):
    mod = device.compile(mlir("dims_2d.mlir"))
    out = device.put(np.full(2, -1, dtype=np.int64))
    for a in (device.zeros((0, 3)), device.zeros((4, 3))[4:]):
        mod(a, out)
        assert device.get(out).tolist() == [0, 3]


@pytest.mark.gpu
def test_dims_of_empty_cupy_array(mlir, cupy_mod, compile_gpu):
    cp = cupy_mod
    mod = compile_gpu(mlir("dims_2d.mlir"))
    out = cp.full((2,), -1, dtype=cp.int64)
    mod(cp.empty((0, 3), dtype=cp.float32), out)
    assert out.tolist() == [0, 3]


def test_zero_size_vector_add_is_a_no_op(mlir, device):
    mod = device.compile(mlir("vector_add.mlir"))
    e = device.zeros(0)
    mod(e, e, e)
    assert device.get(e).shape == (0,)


# ----------------------------------------------------------------------------------------
# Strided views
# ----------------------------------------------------------------------------------------
def test_strided_transposed_and_sliced(mlir, device):
    mod = device.compile(mlir("strided.mlir"))
    base = device.put(np.arange(48, dtype=np.float32).reshape(6, 8))
    ref = np.arange(48, dtype=np.float32).reshape(6, 8)
    views = (lambda t: t.T, lambda t: t[1:5, ::2], lambda t: t[2:, 3:].T, lambda t: t[::2, ::3])
    for view in views:
        out = device.put(np.full(view(ref).shape, -1.0, dtype=np.float32))
        mod.copy2d(view(base), out)
        assert np.array_equal(device.get(out), view(ref))
    flat = device.put(np.arange(100, dtype=np.float32))
    out = device.zeros(31)
    mod.copy1d(flat[7::3], out)
    assert np.array_equal(device.get(out), np.arange(100, dtype=np.float32)[7::3])


def test_negative_strides_numpy(mlir):
    """The CPU device (NumPy views may step backwards; torch's may not)."""
    with pywave.compile(mlir("strided.mlir"), target="cpu") as mod:
        a = np.arange(10, dtype=np.float32)[::-1]
        out = np.empty(10, dtype=np.float32)
        mod.copy1d(a, out)
        assert out.tolist() == list(range(9, -1, -1))
        b = np.arange(12, dtype=np.float32).reshape(3, 4)[::-1, ::-2]
        out2 = np.empty(b.shape, dtype=np.float32)
        mod.copy2d(b, out2)
        assert out2.tolist() == b.tolist()


@pytest.mark.gpu
def test_negative_strides_cupy(mlir, cupy_mod, compile_gpu):
    cp = cupy_mod
    mod = compile_gpu(mlir("strided.mlir"))
    a = cp.arange(10, dtype=cp.float32)[::-1]
    out = cp.empty(10, dtype=cp.float32)
    mod.copy1d(a, out)
    assert out.tolist() == list(range(9, -1, -1))
    b = cp.arange(12, dtype=cp.float32).reshape(3, 4)[::-1, ::-2]
    out2 = cp.empty(b.shape, dtype=cp.float32)
    mod.copy2d(b, out2)
    assert out2.tolist() == b.tolist()


def test_identity_layout_rejects_non_contiguous(mlir, device):
    mod = device.compile(mlir("strided.mlir"))
    a0 = np.arange(12, dtype=np.float32).reshape(3, 4).T
    a = device.put(np.arange(12, dtype=np.float32).reshape(3, 4)).T
    out = device.zeros((4, 3))
    with pytest.raises(pywave.ArgumentError) as info:
        mod.copy_compact(a, out)
    msg = str(info.value)
    assert "'a'" in msg and "strides" in msg and "[1, 4]" in msg, msg
    mod.copy_compact(device.put(a0), out)
    assert np.array_equal(device.get(out), a0)


# ----------------------------------------------------------------------------------------
# Compact producers
# ----------------------------------------------------------------------------------------
def test_compact_2d(mlir, device):
    # A producer with strides == NULL cannot be built from Python alone (torch and NumPy
    # always fill strides); libwavert's NULL-strides path is covered by its C tests. Here: a
    # compact tensor and a wrapper object that only forwards the DLPack protocol.
    mod = device.compile(mlir("compact_2d.mlir"))
    a = device.put(f32([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    ref = f32([[1.0, 2.0, 3.0], [14.0, 15.0, 16.0]])

    class Producer:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, **kwargs):
            return self.t.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    for arg in (a, Producer(a)):
        out = device.zeros((2, 3))
        mod(arg, out)
        assert np.array_equal(device.get(out), ref)


def test_static_shape_mismatch(mlir, device):
    mod = device.compile(mlir("compact_2d.mlir"))
    with pytest.raises(pywave.ArgumentError) as info:
        mod(device.zeros((3, 2)), device.zeros((2, 3)))
    msg = str(info.value)
    assert "'a'" in msg and "shape" in msg and "[2, 3]" in msg and "[3, 2]" in msg, msg


# ----------------------------------------------------------------------------------------
# Bf16 and dtype errors
# ----------------------------------------------------------------------------------------
BF16_VALUES = [1.5, -2.0, 3.0, 0.0078125]


def test_f16(mlir, device):
    mod = device.compile(mlir("bf16.mlir"))
    out = device.zeros(4)
    mod.widen_f16(device.put(np.array(BF16_VALUES, dtype=np.float16)), out)
    assert device.get(out).tolist() == BF16_VALUES


@pytest.mark.gpu
def test_bf16(mlir, torch_cuda, dev, compile_gpu):
    """GPU only: NumPy has no bfloat16 dtype to hand the CPU device one."""
    torch = torch_cuda
    mod = compile_gpu(mlir("bf16.mlir"))
    x = torch.tensor(BF16_VALUES, dtype=torch.bfloat16, device=dev)
    out = torch.zeros(4, device=dev)
    mod.widen_bf16(x, out)
    assert out.tolist() == BF16_VALUES


@pytest.mark.gpu
def test_bf16_for_f16_is_a_dtype_error(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("bf16.mlir"))
    x = torch.tensor(BF16_VALUES, dtype=torch.bfloat16, device=dev)
    with pytest.raises(pywave.ArgumentError) as info:
        mod.widen_f16(x, torch.zeros(4, device=dev))
    msg = str(info.value)
    assert "'in'" in msg and re.search(r"bf(loat)?16", msg), msg
    assert re.search(r"(?<![b])f(loat)?16", msg.replace("bfloat16", "").replace("bf16", "")), msg


@pytest.mark.gpu
@pytest.mark.parametrize("dtype_name", ["float8_e8m0fnu", "complex32"])
def test_unmapped_dtype(mlir, torch_cuda, dev, compile_gpu, dtype_name):
    torch = torch_cuda
    dtype = getattr(torch, dtype_name, None)
    if dtype is None:
        pytest.skip(f"torch has no {dtype_name}")
    mod = compile_gpu(mlir("bf16.mlir"))
    x = torch.zeros(4, dtype=dtype, device=dev)
    with pytest.raises(pywave.ArgumentError) as info:
        mod.widen_bf16(x, torch.zeros(4, device=dev))
    msg = str(info.value)
    assert "'in'" in msg, msg
    if "__dlpack__() failed" not in msg:  # torch may refuse to export the dtype at all
        assert "code=" in msg and "bits=" in msg and "lanes=" in msg, msg


# ----------------------------------------------------------------------------------------
# Argument errors
# ----------------------------------------------------------------------------------------
def test_wrong_dtype(mlir, device):
    mod = device.compile(mlir("vector_add.mlir"))
    a = device.zeros(8)
    with pytest.raises(pywave.ArgumentError) as info:
        mod(a, device.zeros(8, np.float64), a)
    msg = str(info.value)
    assert "'b'" in msg and "float32" in msg and "float64" in msg, msg


def test_wrong_rank(mlir, device):
    mod = device.compile(mlir("vector_add.mlir"))
    a = device.zeros(8)
    with pytest.raises(pywave.ArgumentError) as info:
        mod(a, a, device.zeros((2, 4)))
    msg = str(info.value)
    assert "'c'" in msg and "rank" in msg and "1" in msg and "2" in msg, msg


@pytest.mark.gpu
def test_cpu_tensor(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("vector_add.mlir"))
    a = torch.zeros(8, device=dev)
    with pytest.raises(pywave.ArgumentError) as info:
        mod(a, torch.zeros(8), a)
    msg = str(info.value)
    assert "'b'" in msg and "CPU" in msg, msg


@pytest.mark.gpu
def test_numpy_array_for_gpu_memref(mlir, torch_cuda, dev, compile_gpu):
    mod = compile_gpu(mlir("scale_in_place.mlir"))
    with pytest.raises(pywave.ArgumentError, match=r"'a'.*CPU"):
        mod(np.zeros(8, dtype=np.float32), 1.0)


def test_not_a_tensor(mlir, device):
    mod = device.compile(mlir("scale_in_place.mlir"))
    with pytest.raises(pywave.ArgumentError, match=r"'a'.*list"):
        mod([1.0, 2.0], 1.0)


# ----------------------------------------------------------------------------------------
# Immutable producers
# ----------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_jax_array_read_input_works(mlir, torch_cuda, jax_gpu, dev, compile_gpu):
    torch, jnp = torch_cuda, jax_gpu.numpy
    mod = compile_gpu(mlir("vector_add.mlir"))
    a = jnp.arange(1000, dtype=jnp.float32)
    b = jnp.full((1000,), 0.5, dtype=jnp.float32)
    c = torch.empty(1000, device=dev)
    mod(a, b, c)
    assert torch.equal(c.cpu(), torch.arange(1000, dtype=torch.float32) + 0.5)


@pytest.mark.gpu
def test_jax_array_as_written_output_is_an_error(mlir, torch_cuda, jax_gpu, dev, compile_gpu):
    torch, jnp = torch_cuda, jax_gpu.numpy
    mod = compile_gpu(mlir("vector_add.mlir"))
    a = torch.ones(1000, device=dev)
    c = jnp.zeros(1000, dtype=jnp.float32)
    with pytest.raises(pywave.ArgumentError) as info:
        mod(a, a, c)
    msg = str(info.value)
    assert "'c'" in msg and "read-only" in msg, msg
    assert np.array_equal(np.asarray(c), np.zeros(1000, dtype=np.float32))


def test_read_only_numpy_output_is_an_error(mlir):
    """The CPU device: a NumPy array that is not writeable, as the kernel's output."""
    with pywave.compile(mlir("vector_add.mlir"), target="cpu") as mod:
        a = np.ones(1000, dtype=np.float32)
        c = np.zeros(1000, dtype=np.float32)
        c.flags.writeable = False
        with pytest.raises(pywave.ArgumentError) as info:
            mod(a, a, c)
        msg = str(info.value)
        assert "'c'" in msg and "read-only" in msg, msg
        assert not c.any()


@pytest.mark.parametrize("n", [1, 4, 1001, 1 << 20])
def test_vectorized_add_with_tail(device, n):
    """bench/vector_add_v4.mlir: 16-byte vector loads/stores plus a scalar tail."""
    mod = device.compile((ROOT / "bench" / "vector_add_v4.mlir").read_text())
    rng = np.random.default_rng(n)
    a0, b0 = rng.random((2, n), dtype=np.float32)
    c = device.put(np.full(n, -1.0, dtype=np.float32))
    mod(device.put(a0), device.put(b0), c)
    assert np.array_equal(device.get(c), a0 + b0)
