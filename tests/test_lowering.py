"""Kernel compile options (pywave.lowering.LoweringOptions): line info, fast math, a register
limit, the kernel optimisation level and extra ptxas options. Compile-only: each option is
checked in the PTX or cubin it produces, in the cache key, and in its errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import pywave
from pywave import api, lowering, pipeline
from pywave.kernels import rocdl, toolkit
from pywave.lowering import LoweringOptions

DATA = Path(__file__).parent / "data"

#: exp(a / a) per element: an f32 division and a libdevice call.
DIV_EXP = (DATA / "exp.mlir").read_text().replace(
    "%e = math.exp %v : f32", "%d = arith.divf %v, %v : f32\n        %e = math.exp %d : f32")

needs_ptxas = pytest.mark.skipif(
    not (toolkit.find_toolkit() and toolkit.find_toolkit().ptxas),
    reason="needs ptxas from a CUDA toolkit (CUDA_HOME, PYWAVE_CUDA_PATH or nvidia-cuda-nvcc)")


def _amd_tools_missing() -> bool:
    return rocdl.linker() is None or rocdl.device_library_dir() is None


def image(text: str, fmt: str = "ptx", target: str = "sm_90", **options) -> bytes:
    art = api.build(text, target=target, format=fmt, lowering=LoweringOptions(**options))
    assert len(art.binaries) == 1
    return art.binaries[0].data


def ptx(text: str = DIV_EXP, **options) -> str:
    return image(text, "ptx", **options).decode(errors="replace")


# -- validation ---------------------------------------------------------------------------------

@pytest.mark.parametrize("options, words", [
    ({"max_registers": 0}, ["max_registers", "[1, 255]", "0"]),
    ({"max_registers": 256}, ["max_registers", "256"]),
    ({"max_registers": True}, ["max_registers", "True"]),
    ({"max_registers": "32"}, ["max_registers", "'32'"]),
    ({"fast_math": 1}, ["fast_math", "bool"]),
    ({"line_info": "yes"}, ["line_info", "bool"]),
    ({"ptxas_options": "-v"}, ["ptxas_options", "list of strings"]),
    ({"ptxas_options": ["-v --x"]}, ["ptxas_options[0]", "'-v --x'"]),
    ({"ptxas_options": ['--x="a"']}, ["ptxas_options[0]", "one ptxas option"]),
    ({"ptxas_options": ["-v", "warn"]}, ["ptxas_options[1]", "'warn'"]),
    ({"ptxas_options": ["-v", 3]}, ["ptxas_options[1]", "3"]),
    ({"ptxas_options": ["--x}, canonicalize"]}, ["ptxas_options[0]"]),
    ({"ptxas_options": ["-arch=sm_80"]}, ["-arch", "target="]),
    ({"ptxas_options": ["--maxrregcount=8"]}, ["--maxrregcount", "max_registers="]),
    ({"ptxas_options": ["-O1"]}, ["-O1", "kernel_opt_level="]),
    ({"ptxas_options": ["--options-file=x"]}, ["--options-file"]),
    ({"ptxas_options": ["-lineinfo"]}, ["-lineinfo", "line_info=True"]),
])
def test_bad_options_are_compile_errors_naming_option_and_value(options, words):
    with pytest.raises(pywave.CompileError) as err:
        LoweringOptions(**options)
    for word in words:
        assert word in str(err.value)


def test_a_dict_with_an_unknown_option_names_it():
    with pytest.raises(pywave.CompileError, match="'max_regs'.*max_registers"):
        lowering.options_of({"max_regs": 32})
    assert lowering.options_of({"ptxas_options": ["-v"]}).ptxas_options == ("-v",)


@pytest.mark.parametrize("options", [
    {"line_info": True}, {"fast_math": True}, {"max_registers": 64},
    {"ptxas_options": ("--warn-on-spills",)}, {"kernel_opt_level": 1}])
def test_each_option_is_in_the_cache_key(options):
    plain = pipeline.Pipeline("module {}", target="sm_90").options()
    other = pipeline.Pipeline("module {}", target="sm_90",
                              lowering=LoweringOptions(**options)).options()
    assert "lowering" not in plain
    name, value = next(iter(options.items()))
    assert other["lowering"][name] == value


# -- what each option does ------------------------------------------------------------------------

def test_fast_math_approximates_division_and_math_and_flushes_denormals():
    precise, fast = ptx(), ptx(fast_math=True)
    assert "div.rn.f32" in precise and "div.approx" not in precise
    assert "div.approx.ftz.f32" in fast and "div.rn.f32" not in fast
    # __nv_fast_expf: one multiply by log2(e) and ex2.approx, flushed to zero
    assert "mul.rn.ftz.f32" in fast and "mul.rn.ftz.f32" not in precise


def test_fast_math_keeps_nan_checks():
    """afn/contract only: math.isnan is not folded away (no finite-math assumption)."""
    text = DIV_EXP.replace("%e = math.exp %d : f32",
                           "%nan = math.isnan %d : f32\n"
                           "        %z = arith.constant 0.0 : f32\n"
                           "        %e = arith.select %nan, %z, %d : f32")
    assert "setp.num.ftz.f32" in ptx(text, fast_math=True)   # x == x: not folded to true


def test_line_info_writes_line_directives_of_the_source():
    plain, lines = ptx(), ptx(line_info=True)
    assert ".loc" not in plain
    divide = DIV_EXP.splitlines().index(next(line for line in DIV_EXP.splitlines()
                                             if "arith.divf" in line)) + 1
    assert f".loc\t1 {divide} " in lines
    assert ".target sm_90, debug" not in lines   # directives only, no DWARF debug target


@needs_ptxas
def test_line_info_puts_a_line_table_into_the_cubin():
    assert b".nv_debug_line_sass" in image(DIV_EXP, "cubin", line_info=True)
    assert b".nv_debug_line_sass" not in image(DIV_EXP, "cubin")


def test_max_registers_limits_every_kernel_and_keeps_a_smaller_own_limit():
    assert ".maxnreg 40" in ptx(max_registers=40)
    assert ".maxnreg" not in ptx()
    own = DIV_EXP.replace("%n: index) kernel {", "%n: index) kernel attributes "
                          "{nvvm.maxnreg = 24 : i32} {")
    assert ".maxnreg 24" in ptx(own, max_registers=40)
    assert ".maxnreg 32" in ptx(own.replace("= 24", "= 64"), max_registers=32)


@needs_ptxas
def test_ptxas_options_reach_ptxas_as_separate_arguments():
    assert image(DIV_EXP, "cubin", ptxas_options=["--warn-on-spills",
                                                  "--def-load-cache=cg"])
    with pytest.raises(pywave.CompileError, match="Invalid default cache modifier.*bogus"):
        image(DIV_EXP, "cubin", ptxas_options=["--def-load-cache=bogus"])


def test_ptxas_options_with_ptx_format_are_an_error():
    with pytest.raises(pywave.CompileError, match="ptxas_options.*format='ptx'"):
        ptx(ptxas_options=["-v"])


@needs_ptxas
def test_options_reach_a_module_with_its_own_target():
    own = DIV_EXP.replace("gpu.module @kernels {",
                          'gpu.module @kernels [#nvvm.target<chip = "sm_90">] {')
    with pytest.raises(pywave.CompileError, match="bogus"):
        image(own, "cubin", ptxas_options=["--def-load-cache=bogus"])
    assert b".nv_debug_line_sass" in image(own, "cubin", line_info=True)
    flagged = own.replace('chip = "sm_90"', 'chip = "sm_90", flags = {fast}')
    with pytest.raises(pywave.CompileError, match="flags of its own"):
        image(flagged, "cubin", line_info=True)


@needs_ptxas
def test_kernel_opt_level_reaches_ptxas():
    assert image(DIV_EXP, "cubin", kernel_opt_level=0) != image(DIV_EXP, "cubin")


# -- AMD --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [{"fast_math": True}, {"max_registers": 32},
                                     {"ptxas_options": ["-v"]}, {"features": "+ptx80"},
                                     {"index_bitwidth": 32}, {"kernel_bare_ptr": True}])
def test_nvidia_only_options_on_an_amd_target_are_errors(options):
    """The NVVM pipeline's options were ignored on AMD, kernel_bare_ptr only by the kernels:
    the host code launched them with bare pointers where they read memref descriptors."""
    name = next(iter(options))
    with pytest.raises(pywave.CompileError, match=f"{name}=.*NVIDIA targets only.*gfx942"):
        image(DIV_EXP, "auto", target="gfx942", **options)


@pytest.mark.skipif(_amd_tools_missing(), reason="needs ld.lld and the ROCm device libraries")
def test_amd_line_info_and_kernel_opt_level():
    plain = image(DIV_EXP, "auto", target="gfx942")
    assert b".debug_line" in image(DIV_EXP, "auto", target="gfx942", line_info=True)
    assert b".debug_line" not in plain
    assert image(DIV_EXP, "auto", target="gfx942", kernel_opt_level=0) != plain


# -- CLI --------------------------------------------------------------------------------------------

def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pywave", *args], capture_output=True,
                          text=True, timeout=300, cwd="/")


def test_cli_compile_takes_the_kernel_options(tmp_path):
    source = tmp_path / "k.mlir"
    source.write_text(DIV_EXP)
    proc = _cli("compile", str(source), "--target", "sm_90", "--format", "ptx",
                "--fast-math", "--line-info", "--max-registers", "48", "--print-ir")
    assert proc.returncode == 0, proc.stderr
    assert ".maxnreg 48" in proc.stdout or "nvvm.maxnreg = 48" in proc.stdout
    bad = _cli("compile", str(source), "--target", "sm_90", "--max-registers", "0")
    assert bad.returncode != 0 and "max_registers" in bad.stderr and "[1, 255]" in bad.stderr
    bad = _cli("compile", str(source), "--target", "sm_90", "--ptxas-option=-arch=sm_80")
    assert bad.returncode != 0 and "-arch" in bad.stderr


@needs_ptxas
def test_export_takes_the_kernel_options(tmp_path):
    source = tmp_path / "k.mlir"
    source.write_text(DIV_EXP)
    proc = _cli("export", str(source), "--target", "sm_90", "--name", "kx", "-o",
                str(tmp_path / "out"), "--runtime", "link", "--line-info",
                "--ptxas-option=--def-load-cache=bogus")
    assert proc.returncode != 0 and "bogus" in proc.stderr
    done = pywave.export(DIV_EXP, tmp_path / "ok", "kx", target="sm_90", runtime_mode="link",
                         lowering={"line_info": True, "max_registers": 64})
    assert done.functions == ("kx_main",)


def test_the_ptxas_version_is_remembered_across_processes(tmp_path, monkeypatch):
    """A warm start keys its cache lookup on the ptxas release without running ptxas: the
    release is kept in the cache folder per binary (path, size, mtime, inode)."""
    import os
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))
    runs = tmp_path / "runs"
    ptxas = tmp_path / "ptxas"
    ptxas.write_text(f"#!/bin/sh\necho run >> {runs}\necho 'Cuda compilation tools, "
                     "release 12.3, V12.3.45'\n")
    ptxas.chmod(0o755)
    assert toolkit.ptxas_version(str(ptxas)) == "12.3.45"
    assert toolkit.ptxas_version(str(ptxas)) == "12.3.45"
    assert runs.read_text().count("run") == 1
    stat = ptxas.stat()
    os.utime(ptxas, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))   # a replaced binary
    assert toolkit.ptxas_version(str(ptxas)) == "12.3.45"
    assert runs.read_text().count("run") == 2
    (tmp_path / "cache" / toolkit.VERSIONS_FILE).write_text("{not json")  # damaged: run again
    assert toolkit.ptxas_version(str(ptxas)) == "12.3.45"
    assert runs.read_text().count("run") == 3


def test_a_toolkit_found_early_spares_the_later_searches(tmp_path, monkeypatch):
    """The first root holding libdevice wins, and the searches after it are not run (a warm
    start finds its toolkit without looking through PATH)."""
    import os
    import shutil
    root = tmp_path / "cuda"
    (root / toolkit.LIBDEVICE).parent.mkdir(parents=True)
    (root / toolkit.LIBDEVICE).write_bytes(b"")
    monkeypatch.delenv("PYWAVE_CUDA_PATH", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(root))
    monkeypatch.setattr(shutil, "which", lambda *a, **k: pytest.fail("PATH was searched"))
    found = toolkit.find_toolkit()
    assert (found.root, found.source, found.ptxas) == (os.path.realpath(root), "CUDA_HOME", None)


def test_a_toolkit_on_path_is_found(tmp_path, monkeypatch):
    """The PATH step of the toolkit search: ptxas on PATH names its toolkit."""
    import os
    root = tmp_path / "cuda"
    (root / toolkit.LIBDEVICE).parent.mkdir(parents=True)
    (root / toolkit.LIBDEVICE).write_bytes(b"")
    (root / "bin").mkdir()
    (root / "bin" / "ptxas").write_text("#!/bin/sh\necho 'Cuda compilation tools, V12.8.93'\n")
    (root / "bin" / "ptxas").chmod(0o755)
    for variable in ("PYWAVE_CUDA_PATH", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'empty'}:{root / 'bin'}:/usr/bin:/bin")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    found = toolkit.find_toolkit()
    assert (found.root, found.source, found.version) == (os.path.realpath(root), "PATH",
                                                        "12.8.93")
