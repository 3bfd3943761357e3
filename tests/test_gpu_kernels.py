"""Kernels run on an NVIDIA GPU through torch (and cupy / jax where a case needs them).

Every comparison is exact unless the kernel calls a transcendental (math.exp)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import pywave

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).parent.parent


@pytest.fixture
def dev(torch_cuda):
    return torch_cuda.device("cuda", torch_cuda.cuda.current_device())


def full(torch, n, value, dev, dtype=None):
    return torch.full((n,), value, dtype=dtype or torch.float32, device=dev)


# ----------------------------------------------------------------------------------------
# The compiled-module surface
# ----------------------------------------------------------------------------------------
def test_module_surface(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("named_functions.mlir"))
    assert mod.functions == ["double_it", "negate"]
    assert re.fullmatch(r"<pywave\.CompiledModule functions=\['double_it', 'negate'\] "
                        r"target=sm_\d+a?>", repr(mod))
    a = torch.arange(1000, dtype=torch.float32, device=dev)
    mod.double_it(a)
    mod["negate"](a)
    assert torch.equal(a, -2 * torch.arange(1000, dtype=torch.float32, device=dev))
    with pytest.raises(pywave.ArgumentError, match="double_it.*negate|call one by name"):
        mod(a)
    with pytest.raises(AttributeError, match="nope"):
        mod.nope
    with pytest.raises(KeyError, match="nope"):
        mod["nope"]
    with pytest.raises(AttributeError):
        mod.helper_not_exported


def test_close_and_context_manager(mlir, torch_cuda, dev):
    torch = torch_cuda
    a = full(torch, 300, 1.0, dev)
    with pywave.compile(mlir("scale_in_place.mlir")) as mod:
        mod(a, 3.0)
        fn = mod.main
    assert "closed" in repr(mod)
    with pytest.raises(pywave.Error, match="closed"):
        mod(a, 3.0)
    with pytest.raises(pywave.Error):
        fn(a, 3.0)
    mod.close()  # idempotent
    assert torch.equal(a, full(torch, 300, 3.0, dev))


def test_argument_count_and_keywords(mlir, torch_cuda, dev, compile_gpu):
    mod = compile_gpu(mlir("scale_in_place.mlir"))
    a = full(torch_cuda, 10, 1.0, dev)
    with pytest.raises(pywave.ArgumentError, match="2 arguments.*got 1"):
        mod(a)
    with pytest.raises(pywave.ArgumentError, match="'bogus'"):
        mod(a, 1.0, bogus=1)


# ----------------------------------------------------------------------------------------
# Targets
# ----------------------------------------------------------------------------------------
def test_no_target_takes_the_device_chip(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("scale_in_place.mlir"))
    major, minor = torch.cuda.get_device_capability(dev)
    assert mod.target.startswith(f"sm_{major}{minor}")
    a = full(torch, 1000, 1.0, dev)
    mod(a, 3.0)
    assert torch.equal(a, full(torch, 1000, 3.0, dev))


def test_rocdl_target_on_nvidia_names_module_and_backends(mlir, torch_cuda):
    with pytest.raises(pywave.CompileError) as info:
        pywave.compile(mlir("bad/scale_with_rocdl_target.mlir"))
    msg = str(info.value)
    assert "@kernels" in msg
    assert "rocdl" in msg and "gfx942" in msg
    assert re.search(r"nvvm|NVIDIA|CUDA", msg), msg


def test_empty_gpu_module_is_ignored(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("scale_with_empty_gpu_module.mlir"))
    a = full(torch, 1000, 1.0, dev)
    mod(a, 3.0)
    assert torch.equal(a, full(torch, 1000, 3.0, dev))


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
def test_vector_add(mlir, torch_cuda, dev, compile_gpu, n):
    torch = torch_cuda
    mod = compile_gpu(mlir("vector_add.mlir"))
    a = torch.randn(n, device=dev)
    b = torch.randn(n, device=dev)
    c = torch.empty(n, device=dev)
    mod(a, b, c)
    assert torch.equal(c, a + b)


def test_elementwise_2d(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("elementwise_2d.mlir"))
    for shape in [(1, 1), (17, 33), (300, 70)]:
        a = torch.randn(shape, device=dev)
        b = torch.randn(shape, device=dev)
        out = torch.empty(shape, device=dev)
        mod(a, b, out)
        # rounding is mulf then addf (or a fused multiply-add); both are within 1 ulp
        ref = (a.double() * b.double() + a.double())
        assert torch.equal(out, (a * b + a)) or torch.equal(out, ref.float())


def test_multi_kernel_in_order(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("multi_kernel.mlir"))
    a = torch.arange(-500, 500, dtype=torch.float32, device=dev)
    b = torch.empty_like(a)
    c = torch.empty_like(a)
    mod(a, b, c)
    assert torch.equal(b, 2 * a)
    assert torch.equal(c, 9 * a * a)


def test_host_loop_launches_repeatedly(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("host_loop.mlir"))
    a = torch.zeros(1000, device=dev)
    mod(a, 10)
    assert torch.equal(a, full(torch, 1000, 10.0, dev))
    mod(a, 0)
    assert torch.equal(a, full(torch, 1000, 10.0, dev))


def test_gpu_launch_region_is_outlined_and_runs(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("launch_outline.mlir"))
    a = torch.arange(777, dtype=torch.float32, device=dev)
    mod(a, 0.5)
    assert torch.equal(a, torch.arange(777, dtype=torch.float32, device=dev) + 0.5)


def test_static_workgroup_memory_block_reverse(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("block_reverse.mlir"))
    a = torch.arange(256 * 5, dtype=torch.float32, device=dev)
    ref = a.view(5, 256).flip(1).reshape(-1).clone()
    mod(a)
    assert torch.equal(a, ref)


@pytest.mark.parametrize("n", [1000, 12288, 24576])  # 12288: exactly 48 KiB dynamic
def test_dynamic_shared_memory(mlir, torch_cuda, dev, compile_gpu, n):
    torch = torch_cuda
    mod = compile_gpu(mlir("dynamic_smem.mlir"))
    a = torch.arange(n, dtype=torch.float32, device=dev)
    mod(a)
    assert torch.equal(a, torch.arange(n, dtype=torch.float32, device=dev).flip(0))


def test_dynamic_shared_memory_over_the_device_maximum(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("dynamic_smem.mlir"))
    a = torch.arange(70000, dtype=torch.float32, device=dev)
    with pytest.raises(pywave.ArgumentError) as info:
        mod(a)
    msg = str(info.value)
    assert "280000" in msg and "maximum" in msg
    optin = getattr(torch.cuda.get_device_properties(dev), "shared_memory_per_block_optin", None)
    if optin:
        assert str(optin) in msg
    assert torch.equal(a, torch.arange(70000, dtype=torch.float32, device=dev))
    b = torch.arange(12288, dtype=torch.float32, device=dev)
    mod(b)  # the module still works
    assert torch.equal(b, torch.arange(12288, dtype=torch.float32, device=dev).flip(0))


def test_all_reduce_block_sum(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("reduce_shuffle.mlir"))
    a = torch.randint(-100, 100, (256 * 7,), device=dev).float()  # integer sums are exact
    out = torch.empty(7, device=dev)
    mod.block_sum(a, out)
    assert torch.equal(out, a.view(7, 256).sum(1))


def test_shuffle_xor_swaps_pairs(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("reduce_shuffle.mlir"))
    a = torch.randn(512, device=dev)
    out = torch.empty_like(a)
    mod.swap_pairs(a, out)
    assert torch.equal(out, a.view(-1, 2).flip(1).reshape(-1))


def test_math_exp(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("exp.mlir"))
    a = torch.linspace(-20, 20, 4001, device=dev)
    a[0] = 0.0
    out = torch.empty_like(a)
    mod(a, out)
    assert out[0].item() == 1.0
    ref = torch.from_numpy(np.exp(a.cpu().numpy().astype(np.float64)).astype(np.float32))
    torch.testing.assert_close(out.cpu(), ref, rtol=2.5e-7, atol=0)  # <= 2 ulp (libdevice)


# ----------------------------------------------------------------------------------------
# Async tokens
# ----------------------------------------------------------------------------------------
def _check_async(torch, mod, dev):
    n = 1 << 24
    five = full(torch, n, 5.0, dev)
    for _ in range(20):
        a = torch.zeros(n, device=dev)
        b = torch.zeros(n, device=dev)
        c = torch.zeros(n, device=dev)
        mod(a, b, c)
        assert torch.equal(c, five)
        assert torch.equal(a, full(torch, n, 2.0, dev))
        assert torch.equal(b, full(torch, n, 3.0, dev))


def test_launch_after_two_async_tokens(mlir, torch_cuda, dev, compile_gpu):
    try:
        mod = compile_gpu(mlir("async_deps.mlir"))
    except pywave.CompileError as exc:
        assert "gpu.launch_func" in str(exc) and "async dependencies" in str(exc)
        return
    _check_async(torch_cuda, mod, dev)


def test_async_tokens_joined_by_wait(mlir, torch_cuda, dev, compile_gpu):
    _check_async(torch_cuda, compile_gpu(mlir("async_join.mlir")), dev)


# ----------------------------------------------------------------------------------------
# Printf
# ----------------------------------------------------------------------------------------
def test_printf(mlir, torch_cuda, compile_gpu, capfd):
    torch = torch_cuda
    mod = compile_gpu(mlir("printf.mlir"))
    capfd.readouterr()
    mod(1.5, 7)
    torch.cuda.synchronize()  # device printf is flushed at synchronisation
    out = capfd.readouterr().out
    assert "begin\nx=1.500000 n=7\n" in out


# ----------------------------------------------------------------------------------------
# Launch limits
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("grid_x, grid_z, block_x, dim, limit", [
    (1, 70000, 256, "grid z", 65535),
    (2 ** 31, 1, 1, "grid x", 2 ** 31 - 1),
    (1, 1, 2048, "block x", 1024),
])
def test_launch_limits(mlir, torch_cuda, dev, compile_gpu, grid_x, grid_z, block_x, dim, limit):
    torch = torch_cuda
    mod = compile_gpu(mlir("launch_limits.mlir"))
    a = torch.zeros(256, device=dev)
    with pytest.raises(pywave.ArgumentError) as info:
        mod(a, grid_x, grid_z, block_x)
    msg = str(info.value)
    value = {"grid z": grid_z, "grid x": grid_x, "block x": block_x}[dim]
    assert dim in msg and str(value) in msg and str(limit) in msg, msg
    assert torch.equal(a, torch.zeros(256, device=dev))  # untouched
    mod(a, 1, 1, 256)  # a valid launch still works
    assert torch.equal(a, torch.ones(256, device=dev))


def test_empty_grid_is_a_no_op(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("launch_limits.mlir"))
    a = torch.zeros(256, device=dev)
    mod(a, 0, 1, 256)
    mod(a, 1, 0, 256)
    mod(a, 1, 1, 0)
    assert torch.equal(a, torch.zeros(256, device=dev))


def test_negative_grid_is_an_error(mlir, torch_cuda, dev, compile_gpu):
    mod = compile_gpu(mlir("launch_limits.mlir"))
    a = torch_cuda.zeros(256, device=dev)
    with pytest.raises(pywave.ArgumentError, match=r"grid x.*-1"):
        mod(a, -1, 1, 256)


# ----------------------------------------------------------------------------------------
# Scalars
# ----------------------------------------------------------------------------------------
def _scalar_inputs(torch, dev):
    x = torch.tensor([0.0, 1.0, -2.5, 3.25, 1e6, -7.0], dtype=torch.float32, device=dev)
    # powers of two: y * 0.1 is exact, so a fused multiply-add gives the same result
    y = torch.tensor([0.0, 1.0, 2.0, -4.0, 0.5, 1024.0], dtype=torch.float64, device=dev)
    return x, y


@pytest.mark.parametrize("numpy_scalars", [False, True])
def test_mixed_scalars(mlir, torch_cuda, dev, compile_gpu, numpy_scalars):
    torch = torch_cuda
    mod = compile_gpu(mlir("scalars_mixed.mlir"))
    x, y = _scalar_inputs(torch, dev)
    x0, y0 = x.cpu().numpy(), y.cpu().numpy()
    args = (2.0, 0.1, -3, 300, True)
    if numpy_scalars:
        args = (np.float32(2.0), np.float64(0.1), np.int8(-3), np.int16(300), np.bool_(True))
    mod(x, y, *args)
    assert np.array_equal(x.cpu().numpy(), x0 * np.float32(2.0) + np.float32(-3))
    assert np.array_equal(y.cpu().numpy(), y0 * 0.1 + 300.0)
    mod(x, y, 1.0, 1.0, 0, 300, False)  # flag False: y unchanged
    assert np.array_equal(y.cpu().numpy(), y0 * 0.1 + 300.0)


@pytest.mark.parametrize("index, name, value, kind", [
    (4, "k", 200, "i8"), (4, "k", -129, "i8"), (5, "m", 40000, "i16"),
])
def test_out_of_range_scalar(mlir, torch_cuda, dev, compile_gpu, index, name, value, kind):
    torch = torch_cuda
    mod = compile_gpu(mlir("scalars_mixed.mlir"))
    x, y = _scalar_inputs(torch, dev)
    args = [x, y, 2.0, 0.1, -3, 300, True]
    args[index] = value
    with pytest.raises(pywave.ArgumentError) as info:
        mod(*args)
    msg = str(info.value)
    assert f"'{name}'" in msg and str(value) in msg and kind in msg, msg
    lo, hi = {"i8": (-128, 127), "i16": (-32768, 32767)}[kind]
    assert str(lo) in msg and str(hi) in msg
    x1, y1 = _scalar_inputs(torch, dev)
    assert torch.equal(x, x1) and torch.equal(y, y1)


def test_scalar_of_wrong_python_type(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("scalars_mixed.mlir"))
    x, y = _scalar_inputs(torch, dev)
    with pytest.raises(pywave.ArgumentError, match=r"'k'.*i8.*str|'k'.*str.*i8"):
        mod(x, y, 2.0, 0.1, "3", 300, True)
    with pytest.raises(pywave.ArgumentError, match=r"'k'"):
        mod(x, y, 2.0, 0.1, 1.5, 300, True)  # a float for an integer


def test_more_scalar_types(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("scalars_more.mlir"))
    ints = torch.zeros(3, dtype=torch.int64, device=dev)
    floats = torch.zeros(2, dtype=torch.float32, device=dev)
    mod(ints, floats, -2 ** 31, 2 ** 63 - 1, 2 ** 40, 1.5, -2.0)
    assert ints.tolist() == [-2 ** 31, 2 ** 63 - 1, 2 ** 40]
    assert floats.tolist() == [1.5, -2.0]
    mod(ints, floats, np.int32(7), np.int64(-8), np.intp(9), np.float16(65504.0), 0.0078125)
    assert ints.tolist() == [7, -8, 9]
    assert floats.tolist() == [65504.0, 0.0078125]


@pytest.mark.parametrize("position, name, value, kind", [
    (2, "p", 2 ** 31, "i32"), (3, "q", 2 ** 63, "i64"), (5, "h", 1e6, "f16"),
])
def test_more_scalar_types_out_of_range(mlir, torch_cuda, dev, compile_gpu, position, name, value,
                                        kind):
    torch = torch_cuda
    mod = compile_gpu(mlir("scalars_more.mlir"))
    args = [torch.zeros(3, dtype=torch.int64, device=dev),
            torch.zeros(2, dtype=torch.float32, device=dev), 1, 2, 3, 1.0, 1.0]
    args[position] = value
    with pytest.raises(pywave.ArgumentError) as info:
        mod(*args)
    msg = str(info.value)
    assert f"'{name}'" in msg and kind in msg, msg


# ----------------------------------------------------------------------------------------
# I1 memrefs
# ----------------------------------------------------------------------------------------
@pytest.fixture
def bool_module(mlir, compile_gpu, isolated_build):
    # compiling i1 memrefs once aborted the interpreter (MLIR assertion): check in a child first
    out = isolated_build(mlir("bool_i1.mlir"))
    assert out == "OK", out
    return compile_gpu(mlir("bool_i1.mlir"))


def test_bool_torch(torch_cuda, dev, bool_module):
    torch = torch_cuda
    flags = torch.tensor([True, False, True, True], device=dev)
    out = torch.zeros(4, dtype=torch.int32, device=dev)
    bool_module.widen_ui(flags, out)
    assert out.tolist() == [1, 0, 1, 1]
    bool_module.widen_si(flags, out)
    assert out.tolist() == [-1, 0, -1, -1]


def test_bool_cupy(cupy_mod, bool_module):
    cp = cupy_mod
    flags = cp.asarray([True, False, True, True])
    out = cp.zeros(4, dtype=cp.int32)
    bool_module.widen_ui(flags, out)
    assert out.tolist() == [1, 0, 1, 1]
    bool_module.widen_si(flags, out)
    assert out.tolist() == [-1, 0, -1, -1]


def test_uint8_for_i1_is_a_dtype_error(torch_cuda, dev, bool_module):
    torch = torch_cuda
    flags = torch.tensor([1, 0, 1, 1], dtype=torch.uint8, device=dev)
    out = torch.zeros(4, dtype=torch.int32, device=dev)
    with pytest.raises(pywave.ArgumentError) as info:
        bool_module.widen_ui(flags, out)
    msg = str(info.value)
    assert "'in'" in msg and re.search(r"\bi1\b|bool", msg) and re.search(r"uint8|ui8", msg), msg


# ----------------------------------------------------------------------------------------
# Zero-size inputs
# ----------------------------------------------------------------------------------------
def test_dims_of_empty_torch_tensor(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("dims_2d.mlir"))
    out = torch.full((2,), -1, dtype=torch.int64, device=dev)
    for a in (torch.empty((0, 3), device=dev), torch.empty((4, 3), device=dev)[4:]):
        mod(a, out)
        assert out.tolist() == [0, 3]


def test_dims_of_empty_cupy_array(mlir, cupy_mod, compile_gpu):
    cp = cupy_mod
    mod = compile_gpu(mlir("dims_2d.mlir"))
    out = cp.full((2,), -1, dtype=cp.int64)
    mod(cp.empty((0, 3), dtype=cp.float32), out)
    assert out.tolist() == [0, 3]


def test_zero_size_vector_add_is_a_no_op(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("vector_add.mlir"))
    e = torch.empty(0, device=dev)
    mod(e, e, e)
    torch.cuda.synchronize()


# ----------------------------------------------------------------------------------------
# Strided views
# ----------------------------------------------------------------------------------------
def test_strided_transposed_and_sliced_torch(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("strided.mlir"))
    base = torch.arange(48, dtype=torch.float32, device=dev).reshape(6, 8)
    for view in (base.t(), base[1:5, ::2], base[2:, 3:].t(), base[::2, ::3]):
        out = torch.full(view.shape, -1.0, device=dev)
        mod.copy2d(view, out)
        assert torch.equal(out, view.contiguous())
    flat = torch.arange(100, dtype=torch.float32, device=dev)
    view = flat[7::3]
    out = torch.empty(view.shape, device=dev)
    mod.copy1d(view, out)
    assert torch.equal(out, view.contiguous())


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


def test_identity_layout_rejects_non_contiguous(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("strided.mlir"))
    a = torch.arange(12, dtype=torch.float32, device=dev).reshape(3, 4).t()
    out = torch.empty((4, 3), device=dev)
    with pytest.raises(pywave.ArgumentError) as info:
        mod.copy_compact(a, out)
    msg = str(info.value)
    assert "'a'" in msg and "strides" in msg and "[1, 4]" in msg, msg
    mod.copy_compact(a.contiguous(), out)
    assert torch.equal(out, a)


# ----------------------------------------------------------------------------------------
# Compact producers
# ----------------------------------------------------------------------------------------
def test_compact_2d(mlir, torch_cuda, dev, compile_gpu):
    # A producer with strides == NULL cannot be built from Python alone (torch always fills
    # strides); libwavert's NULL-strides path is covered by its C tests. Here: a compact
    # torch tensor and a wrapper object that only forwards the DLPack protocol.
    torch = torch_cuda
    mod = compile_gpu(mlir("compact_2d.mlir"))
    a = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device=dev)
    ref = torch.tensor([[1.0, 2.0, 3.0], [14.0, 15.0, 16.0]], device=dev)

    class Producer:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, **kwargs):
            return self.t.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    for arg in (a, Producer(a)):
        out = torch.zeros((2, 3), device=dev)
        mod(arg, out)
        assert torch.equal(out, ref)


def test_static_shape_mismatch(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("compact_2d.mlir"))
    with pytest.raises(pywave.ArgumentError) as info:
        mod(torch.zeros((3, 2), device=dev), torch.zeros((2, 3), device=dev))
    msg = str(info.value)
    assert "'a'" in msg and "shape" in msg and "[2, 3]" in msg and "[3, 2]" in msg, msg


# ----------------------------------------------------------------------------------------
# Bf16 and dtype errors
# ----------------------------------------------------------------------------------------
BF16_VALUES = [1.5, -2.0, 3.0, 0.0078125]


def test_bf16(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("bf16.mlir"))
    x = torch.tensor(BF16_VALUES, dtype=torch.bfloat16, device=dev)
    out = torch.zeros(4, device=dev)
    mod.widen_bf16(x, out)
    assert out.tolist() == BF16_VALUES
    h = torch.tensor(BF16_VALUES, dtype=torch.float16, device=dev)
    mod.widen_f16(h, out.zero_())
    assert out.tolist() == BF16_VALUES


def test_bf16_for_f16_is_a_dtype_error(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("bf16.mlir"))
    x = torch.tensor(BF16_VALUES, dtype=torch.bfloat16, device=dev)
    with pytest.raises(pywave.ArgumentError) as info:
        mod.widen_f16(x, torch.zeros(4, device=dev))
    msg = str(info.value)
    assert "'in'" in msg and re.search(r"bf(loat)?16", msg), msg
    assert re.search(r"(?<![b])f(loat)?16", msg.replace("bfloat16", "").replace("bf16", "")), msg


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
def test_wrong_dtype(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("vector_add.mlir"))
    a = torch.zeros(8, device=dev)
    with pytest.raises(pywave.ArgumentError) as info:
        mod(a, torch.zeros(8, dtype=torch.float64, device=dev), a)
    msg = str(info.value)
    assert "'b'" in msg and "float32" in msg and "float64" in msg, msg


def test_wrong_rank(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("vector_add.mlir"))
    a = torch.zeros(8, device=dev)
    with pytest.raises(pywave.ArgumentError) as info:
        mod(a, a, torch.zeros((2, 4), device=dev))
    msg = str(info.value)
    assert "'c'" in msg and "rank" in msg and "1" in msg and "2" in msg, msg


def test_cpu_tensor(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("vector_add.mlir"))
    a = torch.zeros(8, device=dev)
    with pytest.raises(pywave.ArgumentError) as info:
        mod(a, torch.zeros(8), a)
    msg = str(info.value)
    assert "'b'" in msg and "CPU" in msg, msg


def test_numpy_array_for_gpu_memref(mlir, torch_cuda, dev, compile_gpu):
    mod = compile_gpu(mlir("scale_in_place.mlir"))
    with pytest.raises(pywave.ArgumentError, match=r"'a'.*CPU"):
        mod(np.zeros(8, dtype=np.float32), 1.0)


def test_not_a_tensor(mlir, torch_cuda, dev, compile_gpu):
    mod = compile_gpu(mlir("scale_in_place.mlir"))
    with pytest.raises(pywave.ArgumentError, match=r"'a'.*list"):
        mod([1.0, 2.0], 1.0)


# ----------------------------------------------------------------------------------------
# Immutable producers
# ----------------------------------------------------------------------------------------
def test_jax_array_read_input_works(mlir, torch_cuda, jax_gpu, dev, compile_gpu):
    torch, jnp = torch_cuda, jax_gpu.numpy
    mod = compile_gpu(mlir("vector_add.mlir"))
    a = jnp.arange(1000, dtype=jnp.float32)
    b = jnp.full((1000,), 0.5, dtype=jnp.float32)
    c = torch.empty(1000, device=dev)
    mod(a, b, c)
    assert torch.equal(c.cpu(), torch.arange(1000, dtype=torch.float32) + 0.5)


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


@pytest.mark.parametrize("n", [1, 4, 1001, 1 << 20])
def test_vectorized_add_with_tail(torch_cuda, dev, compile_gpu, n):
    """bench/vector_add_v4.mlir: 16-byte vector loads/stores plus a scalar tail."""
    torch = torch_cuda
    mod = compile_gpu((ROOT / "bench" / "vector_add_v4.mlir").read_text())
    a = torch.rand(n, device=dev)
    b = torch.rand(n, device=dev)
    c = torch.full((n,), -1.0, device=dev)
    mod(a, b, c)
    assert torch.equal(c, a + b)
