"""Precompiled kernels: input modules holding gpu.binary ops, and replacing one gpu.module's
binary from a file (compile(..., binaries=...)). Compile-only tests need no GPU."""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import pywave
from pywave import api, image_params
from pywave.kernels import images
from conftest import TESTS

DATA = TESTS / "data"
VECTOR_ADD = (DATA / "vector_add.mlir").read_text()

#: The kernels as written, without the block-coarsened copy of `add`
#: (pywave.kernels.rewrites.coarsen): the images these tests read hold `add` alone.
AS_WRITTEN = {"coarsen_threads": 0}


def mlir_string(data: bytes) -> str:
    return "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else f"\\{c:02X}"
                   for c in data)


@pytest.fixture(scope="module")
def ptx() -> bytes:
    """PTX of vector_add's kernels with MLIR's kernel ABI (every descriptor word), from a
    real compile (without the final NUL): what code built outside pywave takes."""
    [binary] = api.build(VECTOR_ADD, target="sm_90", format="ptx",
                         lowering={"keep_kernel_params": True, **AS_WRITTEN}).binaries
    return binary.data.rstrip(b"\0")


@pytest.fixture(scope="module")
def own_ptx() -> bytes:
    """PTX of vector_add's kernels as pywave builds it: only the parameters they read."""
    [binary] = api.build(VECTOR_ADD, target="sm_90", format="ptx", lowering=AS_WRITTEN).binaries
    return binary.data.rstrip(b"\0")


def test_pywave_ptx_takes_only_the_parameters_read(ptx, own_ptx):
    """vector_add's kernel reads a, b, c through their aligned pointers, and n: 4 of the 16
    words MLIR's ABI passes."""
    assert image_params.ptx_counts(ptx) == {"add": 16}
    assert image_params.ptx_counts(own_ptx) == {"add": 4}


def with_binary(ptx: bytes, key: str = "assembly") -> str:
    """vector_add.mlir with its gpu.module replaced by a gpu.binary holding ``ptx``."""
    start = VECTOR_ADD.index("  gpu.module @kernels")
    end = VECTOR_ADD.index("  func.func @main")
    op = (f'  gpu.binary @kernels [#gpu.object<#nvvm.target<chip = "sm_90">, '
          f'{key} = "{mlir_string(ptx)}">]\n')
    return VECTOR_ADD[:start] + op + VECTOR_ADD[end:]


def test_embedded_ptx_binary_builds(ptx):
    art = api.build(with_binary(ptx), target="sm_90")
    [binary] = art.binaries
    assert binary.name == "kernels" and binary.format == "ptx"
    assert binary.data == ptx + b"\0"
    [main] = art.host.functions
    assert [p.name for p in main.params] == ["a", "b", "c"]
    assert art.object_code


def test_embedded_pywave_ptx_is_refused_with_the_remedy(own_ptx):
    """A gpu.binary of the input takes MLIR's ABI: PTX whose kernel takes fewer parameters
    than the launch passes is a CompileError naming both counts and the option."""
    with pytest.raises(pywave.CompileError, match=r"passes 16 kernel parameters, but kernel add "
                       r"in the ptx image takes 4.*keep_kernel_params"):
        api.build(with_binary(own_ptx), target="sm_90")


def test_embedded_offload_object_is_rejected(ptx):
    with pytest.raises(pywave.CompileError, match="format"):
        api.build(with_binary(b"BC\xc0\xde", key="offload"), target="sm_90")


def test_replace_binary_from_ptx_file(tmp_path, ptx):
    path = tmp_path / "tuned.ptx"
    tuned = ptx.replace(b"// .globl", b"// hand-tuned\n// .globl")
    path.write_bytes(tuned)
    art = api.build(VECTOR_ADD, target="sm_90", format="ptx", binaries={"kernels": str(path)})
    [binary] = art.binaries
    assert binary.format == "ptx" and binary.data == tuned + b"\0"
    assert tuned in art.object_code        # the image embedded in the host object


def test_replace_binary_keeps_host_code(tmp_path, own_ptx):
    """pywave's own PTX given back (hand-tuned, say) keeps the parameters pywave kept."""
    plain = api.build(VECTOR_ADD, target="sm_90", format="ptx", lowering=AS_WRITTEN)
    path = tmp_path / "k.ptx"
    path.write_bytes(own_ptx)
    replaced = api.build(VECTOR_ADD, target="sm_90", binaries={"kernels": path})
    assert replaced.binaries == plain.binaries and replaced.binaries[0].params
    assert replaced.host.functions == plain.host.functions
    assert replaced.host.llvm_ir == plain.host.llvm_ir


def test_replacement_with_mlirs_abi_gets_every_parameter(tmp_path, ptx):
    """A replacement whose kernel takes MLIR's whole ABI gets every word at each launch."""
    path = tmp_path / "k.ptx"
    path.write_bytes(ptx)
    art = api.build(VECTOR_ADD, target="sm_90", binaries={"kernels": path})
    assert art.binaries[0].params == ()
    helper = re.search(r"define internal i32 @__pywave_launch_0\(([^)]*)\)", art.host.llvm_ir)
    assert helper and helper.group(1).count(",") + 1 == 6 + 16   # grid, block, 16 words


def test_replacement_with_another_parameter_count_is_refused(tmp_path, own_ptx):
    path = tmp_path / "k.ptx"
    path.write_bytes(own_ptx.replace(b".param .u64 add_param_3",
                                     b".param .u64 add_param_3,\n\t.param .u64 x"))
    with pytest.raises(pywave.CompileError, match="takes 5"):
        api.build(VECTOR_ADD, target="sm_90", binaries={"kernels": path})


def test_replace_binary_unknown_name(tmp_path, ptx):
    path = tmp_path / "k.ptx"
    path.write_bytes(ptx)
    with pytest.raises(pywave.CompileError, match=r"no gpu.module or gpu.binary @nope.*@kernels"):
        api.build(VECTOR_ADD, target="sm_90", binaries={"nope": str(path)})


def test_replace_binary_missing_file(tmp_path):
    with pytest.raises(pywave.CompileError, match="cannot read"):
        api.build(VECTOR_ADD, target="sm_90", binaries={"kernels": str(tmp_path / "x.ptx")})


def elf(machine: int) -> bytes:
    head = bytearray(64)
    head[:4] = b"\x7fELF"
    head[4], head[5] = 2, 1
    struct.pack_into("<H", head, 18, machine)
    return bytes(head)


def test_format_detection():
    assert images.detect(elf(images.EM_CUDA)) == "cubin"
    assert images.detect(elf(images.EM_AMDGPU)) == "hsaco"
    assert images.detect(struct.pack("<I", images.FATBIN_MAGIC) + b"\0" * 12) == "fatbin"
    assert images.detect(b"//\n.version 8.0\n.target sm_90\n") == "ptx"
    assert images.detect(b"// nothing but a comment\n", "k.ptx") == "ptx"
    with pytest.raises(pywave.CompileError, match="machine 62"):
        images.detect(elf(62))
    with pytest.raises(pywave.CompileError, match="cannot tell"):
        images.detect(b"hello", "k.bin")


def test_replace_with_hsaco_on_nvidia_is_an_error():
    with pytest.raises(pywave.CompileError, match="hsaco image"):
        api.build(VECTOR_ADD, target="sm_90", binaries={"kernels": elf(images.EM_AMDGPU)})


def test_replace_binary_changes_the_cache_key(tmp_path, ptx, monkeypatch):
    pytest.importorskip("pywave._native")
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "k.ptx"
    path.write_bytes(ptx)
    plain = pywave.compile(VECTOR_ADD, target="sm_90", format="ptx")
    replaced = pywave.compile(VECTOR_ADD, target="sm_90", format="ptx",
                              binaries={"kernels": str(path)})
    try:
        assert replaced is not plain
        assert replaced.binaries[0].data == ptx + b"\0"
    finally:
        plain.close()
        replaced.close()


def test_cli_binary_option(tmp_path, ptx):
    path = tmp_path / "k.ptx"
    path.write_bytes(ptx)
    here = str(Path(api.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-m", "pywave", "compile", str(DATA / "vector_add.mlir"),
                           "--target", "sm_90", "--binary", f"kernels={path}"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"kernel binary @kernels: ptx, {len(ptx) + 1} bytes" in proc.stdout


@pytest.mark.gpu
def test_embedded_ptx_runs(torch_cuda, compile_gpu, ptx):
    torch = torch_cuda
    mod = compile_gpu(with_binary(ptx))
    a, b = torch.rand(1000, device="cuda"), torch.rand(1000, device="cuda")
    c = torch.empty_like(a)
    mod(a, b, c)
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["mlir_abi", "pywave"])
def test_replaced_binary_runs(torch_cuda, compile_gpu, ptx, own_ptx, tmp_path, which):
    torch = torch_cuda
    path = tmp_path / "k.ptx"
    path.write_bytes(ptx if which == "mlir_abi" else own_ptx)
    mod = compile_gpu(VECTOR_ADD, binaries={"kernels": str(path)}, disk_cache=False)
    assert mod.binaries[0].format == "ptx"
    a, b = torch.rand(4097, device="cuda"), torch.rand(4097, device="cuda")
    c = torch.empty_like(a)
    mod(a, b, c)
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)



@pytest.mark.xfail(raises=pywave.CompileError, strict=True, reason=(
    "k.so: an ELF file for machine 62, neither a CUDA cubin (EM_CUDA = 190) nor an AMD hsaco "
    "(EM_AMDGPU = 224)"))
def test_replaced_binary_runs_on_the_cpu_device(tmp_path):
    """The CPU device's own image (a host shared object, format cpu-so) given back with
    binaries=: the embedded and replaced PTX above are GPU-only by subject (a CPU cannot run
    PTX), and binaries= does not take a CPU image yet."""
    import numpy as np
    [binary] = api.build(VECTOR_ADD, target="cpu").binaries
    assert binary.format == "cpu-so"
    path = tmp_path / "k.so"
    path.write_bytes(binary.data)
    with pywave.compile(VECTOR_ADD, target="cpu", binaries={"kernels": str(path)},
                        disk_cache=False) as mod:
        rng = np.random.default_rng(1)
        a, b = rng.random((2, 4097), dtype=np.float32)
        c = np.zeros(4097, dtype=np.float32)
        mod(a, b, c)
        assert np.array_equal(c, a + b)

# --------------------------------------------------------------------------------------------
# Every format round-trips: the parameters a launch passes are read from the image itself
# --------------------------------------------------------------------------------------------

ROUND_TRIPS = [(fmt, keep) for fmt in ("ptx", "cubin", "fatbin") for keep in (False, True)]


def own_image(fmt: str, keep: bool) -> bytes:
    """vector_add's kernel image as `pywave compile --format fmt [--keep-kernel-params]`
    writes it (pywave's own)."""
    if fmt != "ptx" and not api_toolkit():
        pytest.skip("no ptxas: cubin and fatbin images need a CUDA toolkit")
    [binary] = api.build(VECTOR_ADD, target="sm_90", format=fmt,
                         lowering={"keep_kernel_params": keep, **AS_WRITTEN}).binaries
    return binary.data


def api_toolkit() -> bool:
    from pywave.kernels import toolkit
    return toolkit.find_toolkit() is not None


def launch_words(art) -> int:
    """How many kernel parameters the first launch helper passes (after grid and block)."""
    helper = re.search(r"define internal i32 @__pywave_launch_0\(([^)]*)\)", art.host.llvm_ir)
    assert helper
    return helper.group(1).count(",") + 1 - 6


@pytest.mark.parametrize("fmt,keep", ROUND_TRIPS)
def test_each_image_declares_its_parameter_count(fmt, keep):
    counts = image_params.param_counts(fmt, own_image(fmt, keep))
    assert counts == {"add": 16 if keep else 4}


@pytest.mark.parametrize("fmt,keep", ROUND_TRIPS)
def test_own_image_given_back_passes_what_it_declares(tmp_path, fmt, keep):
    """An image pywave made, given back with binaries= to a compile of the same module: each
    launch passes exactly the parameters the image declares. Given to a compile with
    keep_kernel_params (MLIR's ABI at every launch), an image of 4 parameters is refused."""
    path = tmp_path / f"k.{fmt}"
    path.write_bytes(own_image(fmt, keep))
    art = api.build(VECTOR_ADD, target="sm_90", binaries={"kernels": str(path)})
    assert art.binaries[0].format == fmt
    assert launch_words(art) == (16 if keep else 4)
    if keep:
        art = api.build(VECTOR_ADD, target="sm_90", binaries={"kernels": str(path)},
                        lowering={"keep_kernel_params": True})
        assert launch_words(art) == 16
    else:
        with pytest.raises(pywave.CompileError, match=rf"passes 16 kernel parameters, but "
                           rf"kernel add in the {fmt} image takes 4.*without that option"):
            api.build(VECTOR_ADD, target="sm_90", binaries={"kernels": str(path)},
                      lowering={"keep_kernel_params": True})


def test_hsaco_round_trips():
    try:
        [own] = api.build(VECTOR_ADD, target="gfx942").binaries
    except pywave.CompileError as exc:
        pytest.skip(f"no AMD toolchain here: {exc}")
    assert image_params.param_counts("hsaco", own.data) == {"add": 4}
    [full] = api.build(VECTOR_ADD, target="gfx942",
                       lowering={"keep_kernel_params": True}).binaries
    assert image_params.param_counts("hsaco", full.data) == {"add": 16}
    for data, words in ((own.data, 4), (full.data, 16)):
        art = api.build(VECTOR_ADD, target="gfx942", binaries={"kernels": data})
        assert launch_words(art) == words


def test_cubin_with_another_count_is_refused():
    """A cubin whose kernel takes neither pywave's count nor MLIR's: a CompileError naming
    the kernel, the three counts and the fix (here: the kernel of a module with one more
    parameter)."""
    own_image("cubin", False)   # skips without ptxas
    other = VECTOR_ADD.replace("%n: index) kernel", "%n: index, %m: index) kernel", 1) \
        .replace("%n : index)", "%n : index, %n : index)", 1)
    assert other.count("%m: index") == 1 and other.count("%n : index, %n : index") == 1
    [binary] = api.build(other, target="sm_90", format="cubin",
                         lowering={"keep_kernel_params": True}).binaries
    with pytest.raises(pywave.CompileError, match=r"kernel add in the cubin takes 17 parameters"
                       r", but a launch passes either the 4 pywave kept or MLIR's 16"):
        api.build(VECTOR_ADD, target="sm_90", binaries={"kernels": binary.data})


def test_embedded_cubin_is_checked():
    """A gpu.binary of the input holding pywave's own cubin (4 parameters) is launched with
    MLIR's ABI (16): refused at compile time, not an illegal address on the GPU."""
    data = own_image("cubin", False)
    with pytest.raises(pywave.CompileError, match=r"passes 16 kernel parameters, but kernel add "
                       r"in the cubin image takes 4"):
        api.build(with_binary(data, key="bin"), target="sm_90")


def test_compressed_fatbin_is_refused_where_counts_differ():
    data = bytearray(own_image("fatbin", False))
    _, _, header, _ = struct.unpack_from("<IHHQ", data, 0)
    flags, = struct.unpack_from("<Q", data, header + 40)
    struct.pack_into("<Q", data, header + 40, flags | 0x2000)
    assert image_params.param_counts("fatbin", bytes(data)) is None
    with pytest.raises(pywave.CompileError, match=r"compressed.*4 parameters pywave kept or "
                       r"MLIR's 16.*keep_kernel_params"):
        api.build(VECTOR_ADD, target="sm_90", binaries={"kernels": bytes(data)})


@pytest.mark.parametrize("fmt", ["cubin", "fatbin", "hsaco"])
def test_damaged_images_are_compile_errors(fmt):
    """Truncated or scrambled images: a CompileError (or counts), never a struct.error."""
    if fmt == "hsaco":
        try:
            [binary] = api.build(VECTOR_ADD, target="gfx942").binaries
        except pywave.CompileError as exc:
            pytest.skip(f"no AMD toolchain here: {exc}")
        data = binary.data
    else:
        data = own_image(fmt, False)
    import random
    rng = random.Random(7)
    cuts = [len(data) // 2, 70, 17, len(data) - 1]
    for case in [data[:n] for n in cuts] + [bytes(rng.randrange(256) if rng.random() < 0.05
                                                  else c for c in data) for _ in range(50)]:
        try:
            image_params.param_counts(fmt, case)
        except pywave.CompileError as exc:
            assert "damaged" in str(exc) or "disagree" in str(exc)


# Each round trip runs in its own process: a wrong launch faults the CUDA context.
ROUND_TRIP_PROGRAM = """
import sys, torch, pywave
fmt, keep, path = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
text = open(sys.argv[4]).read()
mod = pywave.compile(text, binaries={"kernels": path}, disk_cache=False)
a, b = torch.rand(4097, device="cuda"), torch.rand(4097, device="cuda")
c = torch.empty_like(a)
mod(a, b, c)
torch.cuda.synchronize()
assert torch.equal(c, a + b), (c - (a + b)).abs().max()
print("PASS")
"""


@pytest.mark.gpu
@pytest.mark.parametrize("fmt,keep", ROUND_TRIPS)
def test_own_image_round_trip_runs(torch_cuda, tmp_path, fmt, keep):
    """`pywave compile --format fmt` then binaries= and a call on torch tensors, in a fresh
    process, with and without keep_kernel_params: c == a + b exactly."""
    [binary] = api.build(VECTOR_ADD, target=device_chip(torch_cuda), format=fmt,
                         lowering={"keep_kernel_params": keep, **AS_WRITTEN}).binaries
    path = tmp_path / f"k.{fmt}"
    path.write_bytes(binary.data)
    proc = subprocess.run([sys.executable, "-c", ROUND_TRIP_PROGRAM, fmt, str(int(keep)),
                           str(path), str(DATA / "vector_add.mlir")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("PASS"), \
        proc.stdout[-2000:] + proc.stderr[-3000:]


def device_chip(torch) -> str:
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"
