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
from pywave import api
from pywave.kernels import images

DATA = Path(__file__).parent / "data"
VECTOR_ADD = (DATA / "vector_add.mlir").read_text()


def mlir_string(data: bytes) -> str:
    return "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else f"\\{c:02X}"
                   for c in data)


@pytest.fixture(scope="module")
def ptx() -> bytes:
    """PTX of vector_add's kernels with MLIR's kernel ABI (every descriptor word), from a
    real compile (without the final NUL): what code built outside pywave takes."""
    [binary] = api.build(VECTOR_ADD, target="sm_90", format="ptx",
                         lowering={"keep_kernel_params": True}).binaries
    return binary.data.rstrip(b"\0")


@pytest.fixture(scope="module")
def own_ptx() -> bytes:
    """PTX of vector_add's kernels as pywave builds it: only the parameters they read."""
    [binary] = api.build(VECTOR_ADD, target="sm_90", format="ptx").binaries
    return binary.data.rstrip(b"\0")


def test_pywave_ptx_takes_only_the_parameters_read(ptx, own_ptx):
    """vector_add's kernel reads a, b, c through their aligned pointers, and n: 4 of the 16
    words MLIR's ABI passes."""
    assert images.ptx_entry_params(ptx) == {"add": 16}
    assert images.ptx_entry_params(own_ptx) == {"add": 4}


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
    with pytest.raises(pywave.CompileError, match=r"passes 16 kernel parameters, but the PTX "
                       r"kernel .entry add takes 4.*keep_kernel_params"):
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
    plain = api.build(VECTOR_ADD, target="sm_90", format="ptx")
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
