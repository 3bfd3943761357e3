"""Per-kernel figures (issue #24, item 1): ptxas' own report is read at compile time into
``Binary.kernels`` and ``mod.kernel_attributes()`` (registers, spills, local, shared and
constant memory; no GPU needed; kept in the compile cache), the driver's attributes where a
GPU is present, ptxas' warnings logged at WARNING, ``pywave compile`` printing the figures
and writing the images with ``-o``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest

import pywave
from pywave import api
from pywave.kernels import nvvm, ptxas, toolkit
from pywave.program import KernelInfo

from conftest import DATA, need_fake_driver

needs_ptxas = pytest.mark.skipif(not nvvm.has_ptxas(toolkit.cuda_toolkit()),
                                 reason="needs ptxas from a CUDA toolkit")


def pressure_kernel(n: int = 48) -> str:
    """A kernel holding ``n`` loaded floats live across ``n`` stores to another memref (which
    may alias, so no load moves past a store): it spills under a small register limit."""
    loads = "\n".join(f"      %i{i} = arith.constant {i} : index\n"
                      f"      %v{i} = memref.load %a[%i{i}] : memref<?xf32>" for i in range(n))
    stores = "\n".join(f"      %p{i} = arith.mulf %v{i}, %v{(i * 7 + 3) % n} : f32\n"
                       f"      memref.store %p{i}, %b[%i{i}] : memref<?xf32>" for i in range(n))
    return f"""module attributes {{gpu.container_module}} {{
  gpu.module @kernels {{
    gpu.func @pressure(%a: memref<?xf32>, %b: memref<?xf32>) kernel {{
{loads}
{stores}
      gpu.return
    }}
  }}
}}"""


def _cli(*args: str, cwd: str = "/") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pywave", *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd)


# ---- the ptxas report, parsed -----------------------------------------------------------------
REPORT = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'first' for 'sm_90'
ptxas info    : Function properties for first
    312 bytes stack frame, 352 bytes spill stores, 348 bytes spill loads
ptxas info    : Used 24 registers, used 1 barriers, 4096 bytes smem, 480 bytes cmem[0]
ptxas info    : Function properties for helper
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'second' for 'sm_90'
ptxas info    : Function properties for second
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers
"""


def test_report_gives_each_entry_its_figures():
    figures = ptxas.figures(REPORT, b".version 9.0\n.target sm_90\n", "sm_90")
    assert figures == (KernelInfo("first", "sm_90", 24, 352, 348, 312, 4096, 480, 90, 90, 90),
                       KernelInfo("second", "sm_90", 12, 0, 0, 0, 0, 0, 90, 90, 90))


def test_target_options_are_read_as_mlir_prints_them():
    t = ptxas.TargetOptions.parse('#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx90", '
                                  'flags = {"ptxas-cmd-options" = ["-lineinfo", "-v"]}>')
    assert t == ptxas.TargetOptions("sm_90a", 3, ("-lineinfo", "-v"))
    assert ptxas.TargetOptions.parse("#nvvm.target") == ptxas.TargetOptions("sm_50", 2, ())
    args = ptxas.arguments("ptxas", t, "in.ptx", "out.cubin")
    assert args.count("-v") == 1 and args[:5] == ["ptxas", "-arch", "sm_90a", "--opt-level", "3"]


# ---- compile-time figures ---------------------------------------------------------------------
@needs_ptxas
def test_spills_are_figures_and_a_warning(caplog):
    with caplog.at_level(logging.INFO, logger="pywave.ptxas"):
        art = api.build(pressure_kernel(), target="sm_90",
                        lowering={"max_registers": 24, "ptxas_options": ["--warn-on-spills"]})
    (binary,) = art.binaries
    (info,) = binary.kernels
    assert (info.name, info.chip, info.binary_version) == ("pressure", "sm_90", 90)
    assert info.registers <= 24
    assert info.spill_stores > 0 and info.spill_loads > 0 and info.local_bytes > 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("Registers are spilled to local memory in function 'pressure'" in w and
               f"{info.spill_stores} bytes spill stores" in w and "@kernels" in w
               for w in warnings), warnings
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("Compiling entry function 'pressure' for 'sm_90'" in m for m in infos)


@needs_ptxas
def test_static_shared_memory_is_a_figure():
    art = api.build((DATA / "block_reverse.mlir").read_text(), target="sm_90")
    (info,) = art.binaries[0].kernels
    assert info.name == "reverse" and info.shared_bytes == 256 * 4
    assert info.spill_stores == 0 and info.ptx_isa >= 78


@needs_ptxas
def test_kernel_attributes_without_a_gpu_and_after_a_cache_hit(tmp_path):
    code = textwrap.dedent(f"""
        import logging, pywave
        logging.basicConfig(level=logging.INFO)
        mod = pywave.compile(open({str(DATA / 'block_reverse.mlir')!r}).read(), target="sm_90")
        print(mod.kernel_attributes("reverse"))
        print(mod.binaries[0].kernels)
    """)
    env = dict(os.environ, PYWAVE_CACHE_DIR=str(tmp_path))
    first, second = (subprocess.run([sys.executable, "-c", code], capture_output=True,
                                    text=True, timeout=600, cwd="/", env=env)
                     for _ in range(2))
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert "source='ptxas', registers=" in first.stdout and "shared_bytes=1024" in first.stdout
    assert "disk cache hit" not in first.stderr and "disk cache hit" in second.stderr


@needs_ptxas
def test_kernel_attributes_errors_name_the_kernel_and_chip():
    mod = pywave.compile((DATA / "vector_add.mlir").read_text(), target="sm_90",
                         disk_cache=False)
    assert mod.kernel_attributes("kernels::add") == mod.kernel_attributes("add")
    with pytest.raises(pywave.ArgumentError, match=r"'nope' is not a kernel.*kernels::add"):
        mod.kernel_attributes("nope")
    with pytest.raises(pywave.ArgumentError, match=r"chip='sm_80' is not one of its chips"):
        mod.kernel_attributes("add", chip="sm_80")
    with pytest.raises(TypeError, match="device"):
        mod.kernel_attributes("add", device="0")
    ptx = pywave.compile((DATA / "vector_add.mlir").read_text(), target="sm_90", format="ptx",
                         disk_cache=False)
    assert ptx.binaries[0].kernels == ()
    with pytest.raises(pywave.ArgumentError, match="not assembled by pywave's ptxas"):
        ptx.kernel_attributes("add")


@needs_ptxas
def test_driver_attributes_come_from_the_driver():
    """Against the driver stand-in (its function attributes: 16 registers, 1024 threads,
    48 KiB dynamic shared memory), not ptxas' figures (12 registers)."""
    fake = need_fake_driver()
    code = textwrap.dedent(f"""
        import pywave
        mod = pywave.compile(open({str(DATA / 'vector_add.mlir')!r}).read(), target="sm_90",
                             disk_cache=False)
        a = mod.kernel_attributes("add", device=1)
        print(a.source, a.registers, a.max_threads_per_block, a.max_dynamic_shared_bytes)
        try:
            mod.kernel_attributes("add", device=7)
        except pywave.DeviceError as exc:
            print("DeviceError", exc)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, cwd="/", env=dict(os.environ, WAVERT_CUDA_LIBRARY=str(fake)))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "driver 16 1024 49152"
    assert lines[1].startswith("DeviceError") and "7" in lines[1]


# ---- the command line -------------------------------------------------------------------------
@needs_ptxas
def test_cli_prints_figures_and_ptxas_warnings(tmp_path):
    source = tmp_path / "pressure.mlir"
    source.write_text(pressure_kernel())
    proc = _cli("compile", str(source), "--target", "sm_90", "--max-registers", "24",
                "--ptxas-option=--warn-on-spills")
    assert proc.returncode == 0, proc.stderr
    assert "Registers are spilled to local memory in function 'pressure'" in proc.stderr
    line = next(x for x in proc.stdout.splitlines() if "kernel @pressure (sm_90)" in x)
    assert "registers" in line and "bytes spill stores" in line and " 0 bytes spill" not in line
    quiet = _cli("compile", str(DATA / "vector_add.mlir"), "--target", "sm_90")
    assert "ptxas info" not in quiet.stderr
    verbose = _cli("compile", "-v", str(DATA / "vector_add.mlir"), "--target", "sm_90")
    assert "Compiling entry function 'add' for 'sm_90'" in verbose.stderr


@needs_ptxas
def test_cli_output_writes_the_image(tmp_path):
    out = tmp_path / "add.cubin"
    proc = _cli("compile", str(DATA / "vector_add.mlir"), "--target", "sm_90", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:4] == b"\x7fELF" and f"wrote: {out}" in proc.stdout
    ptx = tmp_path / "add.ptx"
    proc = _cli("compile", str(DATA / "vector_add.mlir"), "--target", "sm_90", "--format",
                "ptx", "-o", str(ptx))
    assert proc.returncode == 0, proc.stderr
    assert b".entry add" in ptx.read_bytes() and not ptx.read_bytes().endswith(b"\0")


@needs_ptxas
def test_cli_output_of_several_modules_is_a_folder(tmp_path):
    two = (DATA / "vector_add.mlir").read_text().replace("@kernels", "@first", 1)
    two = two.replace("gpu.launch_func @kernels::", "gpu.launch_func @first::")
    second = "\n  gpu.module @second {\n    gpu.func @nothing() kernel {\n      gpu.return\n" \
             "    }\n  }\n"
    idx = two.index("  func.func")
    source = tmp_path / "two.mlir"
    source.write_text(two[:idx] + second + two[idx:])
    taken = tmp_path / "file"
    taken.write_text("")
    proc = _cli("compile", str(source), "--target", "sm_90", "-o", str(taken))
    assert proc.returncode == 1
    assert "2 kernel images (@first, @second)" in proc.stderr and "takes a folder" in proc.stderr
    folder = tmp_path / "images"
    proc = _cli("compile", str(source), "--target", "sm_90", "-o", str(folder))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["first.cubin", "second.cubin"]


# ---- on a GPU ---------------------------------------------------------------------------------
@pytest.mark.gpu
def test_driver_attributes_on_the_gpu(torch_cuda):
    from pywave import runtime
    chip = runtime.device_chip()
    mod = pywave.compile((DATA / "block_reverse.mlir").read_text(), disk_cache=False)
    compiled = mod.kernel_attributes("reverse")
    driver = mod.kernel_attributes("reverse", device=0)
    assert driver.source == "driver" and driver.chip == chip
    assert driver.binary_version == int(chip[3:5]) == compiled.binary_version
    assert driver.registers == compiled.registers
    assert driver.shared_bytes == compiled.shared_bytes == 1024
    assert driver.local_bytes == compiled.local_bytes
    assert driver.spill_stores == compiled.spill_stores
    assert 0 < driver.max_threads_per_block <= 1024 and driver.max_dynamic_shared_bytes > 0
