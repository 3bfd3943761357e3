"""AMD kernels without an AMD GPU: every kernel file of the suite compiles for gfx942 into an
hsaco whose ELF header, symbols and AMDGPU metadata note agree with what the host side passes
(memref descriptor fields as 8-byte values, scalars at their sizes). No AMD hardware runs them
here; libwavert's HIP launch path runs real kernels in libwavert/tests/test_hip_over_cuda.c."""

from __future__ import annotations

import struct

import pytest

import pywave
from pywave import image_params
from pywave.api import build
from pywave.kernels import rocdl
from conftest import TESTS

DATA = TESTS / "data"
KERNEL_FILES = sorted(p.name for p in DATA.glob("*.mlir"))

EM_AMDGPU = 224
NT_AMDGPU_METADATA = 32
EF_AMDGPU_MACH = {"gfx90a": 0x03F, "gfx942": 0x04C, "gfx1100": 0x041}
EF_AMDGPU_MACH_MASK = 0xFF

#: Bytes per kernel argument of a scalar type, as the host side packs it.
SCALAR_SIZES = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "index": 8,
                "f16": 2, "bf16": 2, "f32": 4, "f64": 8}


def _tools_missing() -> str | None:
    if rocdl.linker() is None:
        return "no ld.lld (apt-get install lld, or pip install ziglang)"
    if rocdl.device_library_dir() is None:
        return "no ROCm device libraries (apt-get install rocm-device-libs, or set ROCM_PATH)"
    return None


pytestmark = pytest.mark.skipif(_tools_missing() is not None, reason=str(_tools_missing()))


# --------------------------------------------------------------------------------------------
# A small ELF64 + msgpack reader
# --------------------------------------------------------------------------------------------
class Elf:
    def __init__(self, data: bytes) -> None:
        assert data[:4] == b"\x7fELF", "not an ELF file"
        assert data[4] == 2 and data[5] == 1, "not a little-endian ELF64 file"
        self.data = data
        (self.type, self.machine, _, _, _, shoff, self.flags, _, _, _, shentsize, shnum,
         shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", data, 16)
        self.sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                         for i in range(shnum)]
        names = self.sections[shstrndx]
        self.names = [self._str(names[4], s[0]) for s in self.sections]

    def _str(self, offset: int, index: int) -> str:
        end = self.data.index(b"\0", offset + index)
        return self.data[offset + index:end].decode()

    def symbols(self) -> set[str]:
        out = set()
        for s in self.sections:
            if s[1] in (2, 11):  # SHT_SYMTAB, SHT_DYNSYM
                strtab = self.sections[s[6]]
                for off in range(s[4], s[4] + s[5], 24):
                    name = struct.unpack_from("<I", self.data, off)[0]
                    if name:
                        out.add(self._str(strtab[4], name))
        return out

    def undefined(self) -> set[str]:
        """Names of the symbol tables' undefined symbols (section index 0)."""
        out = set()
        for s in self.sections:
            if s[1] in (2, 11):  # SHT_SYMTAB, SHT_DYNSYM
                strtab = self.sections[s[6]]
                for off in range(s[4], s[4] + s[5], 24):
                    name, _, _, shndx = struct.unpack_from("<IBBH", self.data, off)
                    if name and shndx == 0:
                        out.add(self._str(strtab[4], name))
        return out

    def notes(self) -> list[tuple[str, int, bytes]]:
        out = []
        for s in self.sections:
            if s[1] != 7:  # SHT_NOTE
                continue
            pos, end = s[4], s[4] + s[5]
            while pos < end:
                namesz, descsz, ntype = struct.unpack_from("<III", self.data, pos)
                pos += 12
                name = self.data[pos:pos + namesz].rstrip(b"\0").decode()
                pos += (namesz + 3) & ~3
                out.append((name, ntype, self.data[pos:pos + descsz]))
                pos += (descsz + 3) & ~3
        return out


def metadata(elf: Elf) -> dict:
    notes = [d for name, t, d in elf.notes() if name == "AMDGPU" and t == NT_AMDGPU_METADATA]
    assert len(notes) == 1, "no NT_AMDGPU_METADATA note"
    return image_params.amdgpu_metadata(elf.data)   # the decoder the launch path reads


# --------------------------------------------------------------------------------------------
# What the host side passes per kernel
# --------------------------------------------------------------------------------------------
def kernel_arg_sizes(text: str) -> dict[str, list[int]]:
    """{kernel: [bytes per LLVM argument]} from the kernels' MLIR signatures (after outlining):
    a rank-r memref is 3 + 2r 8-byte fields, a scalar its own size."""
    from mlir import ir

    from pywave import mlirutil
    from pywave.frontend import parse, prepare

    out = {}
    with ir.Context() as ctx:
        module = parse.parse(text, ctx)
        prepare.widen_bool_memrefs(module)
        mlirutil.run_pipeline(module, prepare.PREPARE_PIPELINE, "prepare")
        for gmod in mlirutil.gpu_modules(module):
            for k in mlirutil.kernels_of(gmod):
                name = mlirutil.sym_name(k)
                ftype = ir.FunctionType(ir.TypeAttr(k.attributes["function_type"]).value)
                sizes = []
                for t in ftype.inputs:
                    if isinstance(t, ir.MemRefType):
                        sizes += [8] * (3 + 2 * t.rank)
                    else:
                        sizes.append(SCALAR_SIZES[str(t)])
                out[name] = sizes
    return out


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", KERNEL_FILES)
def test_suite_kernel_compiles_to_a_valid_gfx942_hsaco(mlir, name):
    text = mlir(name)
    art = build(text, target="gfx942")
    assert art.target.backend == "rocdl" and art.target.chip == "gfx942"
    assert art.binaries
    expected = kernel_arg_sizes(text)
    seen = set()
    for binary in art.binaries:
        assert binary.format == "hsaco" and binary.chip == "gfx942"
        elf = Elf(binary.data)
        assert elf.machine == EM_AMDGPU
        assert elf.type == 3, "an hsaco is a shared object (ET_DYN)"
        assert elf.flags & EF_AMDGPU_MACH_MASK == EF_AMDGPU_MACH["gfx942"]
        symbols = elf.symbols()
        meta = metadata(elf)
        kept = {}   # kernels that lost unread parameters (pywave.kernels.unused_params)
        for kname, count, indices in binary.params:
            assert count == len(expected[kname]), kname
            kept[kname] = indices
        assert "amdgcn-amd-amdhsa--gfx942" in meta["amdhsa.target"]
        for kernel in meta["amdhsa.kernels"]:
            kname = kernel[".name"]
            seen.add(kname)
            assert kname in symbols and kname + ".kd" in symbols
            assert kernel[".symbol"] == kname + ".kd"
            # Launch sizes are chosen at run time: the whole range, unless the block size
            # is known (outlined gpu.launch: reqd_workgroup_size).
            fixed = kernel.get(".reqd_workgroup_size")
            assert kernel[".max_flat_workgroup_size"] == \
                (fixed[0] * fixed[1] * fixed[2] if fixed else 1024)
            args = [a for a in kernel.get(".args", [])
                    if not a[".value_kind"].startswith("hidden_")]
            want = expected[kname]
            if kname in kept:
                want = [want[i] for i in kept[kname]]
            assert [a[".size"] for a in args] == want, kname
            offsets = [a[".offset"] for a in args]
            assert offsets == sorted(offsets)
    assert seen == set(expected)


@pytest.mark.parametrize("chip", ["gfx90a", "gfx942", "gfx1100"])
def test_targets(chip, mlir):
    art = build(mlir("vector_add.mlir"), target=chip)
    elf = Elf(art.binaries[0].data)
    assert elf.flags & EF_AMDGPU_MACH_MASK == EF_AMDGPU_MACH[chip]
    kernel = metadata(elf)["amdhsa.kernels"][0]
    assert kernel[".wavefront_size"] == (32 if chip == "gfx1100" else 64)


AMDGPU_OPS = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @load(%buf: memref<64xf32>, %out: memref<64xf32>) kernel {
      %i = gpu.thread_id x
      %j = arith.index_cast %i : index to i32
      %v = amdgpu.raw_buffer_load %buf[%j] : memref<64xf32>, i32 -> f32
      amdgpu.sched_barrier allow = <none>
      memref.store %v, %out[%i] : memref<64xf32>
      gpu.return
    }
  }
}
"""


def test_amdgpu_dialect_ops_are_lowered_for_amd_targets():
    """convert-gpu-to-rocdl lowers the amdgpu dialect: validation lets it through."""
    art = build(AMDGPU_OPS, target="gfx942", keep_stages=True)
    assert [b.format for b in art.binaries] == ["hsaco"]


def test_rocdl_target_attribute_is_honoured(mlir):
    text = mlir("bad/scale_with_rocdl_target.mlir")
    art = build(text, target="gfx942")
    assert [b.format for b in art.binaries] == ["hsaco"]
    gfx90a = text.replace('#rocdl.target<chip = "gfx942">', '#rocdl.target<chip = "gfx90a">')
    art = build(gfx90a)                     # no target=: the chip the IR names
    assert Elf(art.binaries[0].data).flags & EF_AMDGPU_MACH_MASK == EF_AMDGPU_MACH["gfx90a"]


def test_requested_chip_wins_over_the_rocdl_target_with_a_warning(mlir, caplog):
    """README "Targets and chips": target= wins over the IR's chips, and a warning names both."""
    import logging
    gfx90a = mlir("bad/scale_with_rocdl_target.mlir").replace(
        '#rocdl.target<chip = "gfx942">', '#rocdl.target<chip = "gfx90a">')
    with caplog.at_level(logging.WARNING, logger="pywave"):
        art = build(gfx90a, target="gfx942")
    assert Elf(art.binaries[0].data).flags & EF_AMDGPU_MACH_MASK == EF_AMDGPU_MACH["gfx942"]
    assert "gfx90a" in caplog.text and "gfx942" in caplog.text


def test_device_library_is_linked_for_math(mlir):
    art = build(mlir("exp.mlir"), target="gfx942", keep_stages=True)
    elf = Elf(art.binaries[0].data)
    assert not any(s.startswith("__ocml") for s in elf.symbols()), "ocml left undefined"


def test_nvidia_format_for_amd_target_is_an_error(mlir):
    with pytest.raises(pywave.CompileError, match="hsaco"):
        build(mlir("vector_add.mlir"), target="gfx942", format="cubin")


def test_missing_linker_is_a_compile_error_naming_the_install(mlir, monkeypatch):
    monkeypatch.setattr(rocdl, "linker", lambda: None)
    with pytest.raises(pywave.CompileError, match="ld.lld.*apt-get install lld"):
        build(mlir("vector_add.mlir"), target="gfx942")


def test_missing_device_libraries_is_a_compile_error(mlir, monkeypatch):
    monkeypatch.setattr(rocdl, "device_library_dir", lambda: None)
    with pytest.raises(pywave.CompileError, match="rocm-device-libs") as error:
        build(mlir("exp.mlir"), target="gfx942")
    # It read "gpu.module @kernels call the ROCm device library": now a sentence.
    assert "@kernels needs the ROCm device library (it calls __o" in str(error.value)
    assert " call the " not in str(error.value)


def test_unknown_chip_is_a_compile_error(mlir):
    with pytest.raises(pywave.CompileError, match="gfx9zz"):
        build(mlir("vector_add.mlir"), target="gfx9zz")


def test_isa_versions():
    assert rocdl.isa_version("gfx942") == 9402
    assert rocdl.isa_version("gfx90a") == 9010
    assert rocdl.isa_version("gfx1100") == 11000


def test_gpu_assert_compiles_to_a_gfx942_hsaco():
    """A kernel with cf.assert (gpu.assert's lowering) becomes a loadable gfx942 code object:
    the message printed through HIP's printf (ockl) and llvm.trap (issue: ROCm gpu.assert
    failed with 'llvm.mlir.addressof' op must reference a global)."""
    from test_semantics import ASSERT
    art = build(ASSERT, target="gfx942")
    (binary,) = art.binaries
    assert binary.format == "hsaco"
    elf = Elf(binary.data)
    assert elf.flags & EF_AMDGPU_MACH_MASK == EF_AMDGPU_MACH["gfx942"]
    assert not elf.undefined(), f"undefined symbols: {elf.undefined()}"
    assert any(s.startswith("__ockl_printf") for s in elf.symbols())   # linked in

