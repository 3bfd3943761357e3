"""pywave.export against hostile names and environments (issue 12, item 5): C keywords and
library names as argument names, helper-name clashes, an output folder that looks like an
option, an unrelated libwavert.so first on LD_LIBRARY_PATH, two exports in one process.

Needs a C compiler. Programs that run host code use the driver stand-in
(build/*/libwavert/tests/libfake_cuda.so) when it is built, else check the no-driver status.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pywave
from conftest import fake_driver

CC = os.environ.get("CC", "cc")
pytestmark = pytest.mark.skipif(shutil.which(CC.split()[0]) is None,
                                reason="needs a C compiler (cc)")

HOSTILE = """
func.func @main(%int64_t: memref<?xf32>, %memcpy: f32, %pw_fail: i32, %stream: i64,
                %errno: f64, %arg0: i32, %static: i8, %pw_slots: i16, %size_t: index,
                %va_start: i1, %class: f32, %NULL: i32, %pw_arg0: i32, %x: i32) {
  return
}
"""
SCALARS = """
func.func @{fn}(%k: i32, %x: f32) {{
  return
}}
"""


def _fake_driver() -> str | None:
    found = fake_driver()
    return str(found) if found else None


def _compile_c(source: str, exe: Path, *flags: str) -> None:
    src = exe.with_suffix(".c")
    src.write_text(textwrap.dedent(source))
    proc = subprocess.run(CC.split() + ["-std=c11", "-Wall", "-Wextra", "-Werror", "-o",
                                        str(exe), str(src), *flags],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _link_flags(out: Path, name: str) -> list[str]:
    """What <name>.pc says, without pkg-config (the .pc's Libs line, ${libdir} expanded)."""
    libs = next(line for line in (out / f"{name}.pc").read_text().splitlines()
                if line.startswith("Libs:"))
    return [f"-I{out}"] + libs[5:].replace("${libdir}", str(out)).split()


def _run(exe: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_hostile_argument_names_compile_and_keep_readable_names(tmp_path):
    done = pywave.export(HOSTILE, tmp_path, "hostile", target="sm_90")
    header = Path(done.header).read_text()
    proto = next(line for line in header.splitlines() if "hostile_main(" in line)
    # unsafe names become arg<i>, safe ones stay; the MLIR name is in the comment
    assert ("const DLTensor *arg0, float arg1, int32_t arg2, int64_t arg3, double arg4, "
            "int32_t arg5, int8_t arg6, int16_t arg7, int64_t arg8, bool arg9, float arg10, "
            "int32_t arg11, int32_t arg12, int32_t x, void *stream") in proto
    assert "arg1 (%memcpy): f32" in header and "arg0 (%int64_t): memref<?xf32>" in header
    wrapper = (tmp_path / "hostile_wrapper.c").read_text()
    assert "pw_arg13" in wrapper and '"int64_t"' in wrapper   # messages keep the MLIR name
    # The header compiles in a program as C (strict) and, where there is one, as C++.
    _compile_c("""
        #include <errno.h>
        #include <stdio.h>
        #include <string.h>
        #include "hostile.h"
        int main(void) {
          int32_t s = hostile_main(NULL, 1.0f, 2, 3, 4.0, 5, 6, 7, 8, true, 1.0f, 0, 0, 9, NULL);
          printf("%d %s\\n", (int)s, hostile_last_error());
          return 0;
        }
        """, tmp_path / "prog", *_link_flags(tmp_path, "hostile"))
    proc = _run(tmp_path / "prog")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("1 hostile_main: argument 'int64_t' is NULL"), procout(proc)
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx:
        src = tmp_path / "cxx.cc"
        src.write_text('#include "hostile.h"\nauto *entry = &hostile_main;\n'
                       'int main() { return entry(nullptr, 1, 2, 3, 4, 5, 6, 7, 8, true, 1, 0, '
                       '0, 9, nullptr) == 0; }\n')
        r = subprocess.run([cxx, "-std=c++17", "-Wall", "-Werror", "-fsyntax-only",
                            f"-I{tmp_path}", str(src)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def procout(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("name, fn, clash", [
    ("wavert", "main", "collides"), ("pw", "main", "collides"), ("size_t", "main", "collides"),
    ("va", "start", "va_start"), ("lib", "unload", "lib_unload"),
    ("lib", "last_error", "lib_last_error"), ("AX", "TARGET", "AX_TARGET"), ("AX", "H", "AX_H"),
])
def test_global_name_clashes_are_compile_errors(tmp_path, name, fn, clash):
    with pytest.raises(pywave.CompileError, match=clash):
        pywave.export(SCALARS.format(fn=fn), tmp_path, name, target="sm_90")


@pytest.mark.parametrize("folder", ["-foo", "-o", "--help", "-foo.bar"])
def test_output_folder_that_looks_like_an_option(tmp_path, monkeypatch, folder):
    monkeypatch.chdir(tmp_path)
    done = pywave.export(SCALARS.format(fn="main"), folder, "opt", target="sm_90")
    library = tmp_path / folder / "libopt.so"
    assert Path(done.library) == library and library.stat().st_size > 1000
    nm = shutil.which("nm")
    if nm:
        syms = subprocess.run([nm, "-D", "--defined-only", str(library)], capture_output=True,
                              text=True, check=True).stdout
        assert "opt_main" in syms


# ------------------------------------------------------------- issue 24: paths and options

@pytest.mark.parametrize("folder, char", [
    ("a b", "' '"), ("-foo,bar", "','"), ('q"uote', "'\"'"), ("caf\u00e9", "'\u00e9'"),
    ("line\nLibs: -lpwned", "'\\n'"), ("d$x", "'$'"), ("h#x", "'#'"), ("c:d", "':'")])
def test_output_folder_a_pc_file_cannot_carry_is_refused(tmp_path, folder, char):
    """Each of these folders gave a .pc whose flags break (or inject lines); now a
    CompileError names the character, and nothing is written."""
    out = tmp_path / folder
    with pytest.raises(pywave.CompileError, match="export output folder .* holds " +
                       re.escape(char)):
        pywave.export(SCALARS.format(fn="main"), out, "pc", target="sm_90")
    assert not out.exists()


def test_source_file_name_is_escaped_in_the_pc_file(tmp_path):
    """A newline in the file name injected `Libs: -lpwned`; a non-UTF-8 name ended in a
    traceback after linking and a truncated .pc. Both now give one Description line."""
    for i, raw in enumerate([b"x\nLibs: -lpwned.mlir", b"caf\xe9 $x #y.mlir"]):
        source = os.path.join(os.fsencode(tmp_path), raw)
        with open(source, "wb") as fh:
            fh.write(SCALARS.format(fn="main").encode())
        out = tmp_path / f"out{i}"
        pywave.export(Path(os.fsdecode(source)), out, "pc", target="sm_90")
        lines = (out / "pc.pc").read_text(encoding="ascii").splitlines()
        assert [line for line in lines if line.startswith("Libs:")] == [
            next(line for line in lines if line.startswith("Libs:"))]
        assert not any("pwned" in line for line in lines if not line.startswith("Desc"))
        (description,) = [line for line in lines if line.startswith("Description:")]
        assert ("x\\x0aLibs: -lpwned.mlir" if i == 0 else
                "caf\\udce9 \\x24x \\x23y.mlir") in description
        pkg_config = shutil.which("pkg-config")
        if pkg_config:
            proc = subprocess.run([pkg_config, "--libs", "pc"], capture_output=True,
                                  text=True, env={**os.environ, "PKG_CONFIG_PATH": str(out)})
            assert proc.returncode == 0 and "pwned" not in proc.stdout, proc.stderr


def test_export_name_too_long_for_a_file_name(tmp_path):
    name = "n" * 300
    with pytest.raises(pywave.CompileError, match="300 characters long; at most 245"):
        pywave.export(SCALARS.format(fn="main"), tmp_path / "out", name, target="sm_90")
    pywave.export(SCALARS.format(fn="main"), tmp_path / "out", "n" * 245, target="sm_90")


@pytest.mark.parametrize("where", ["file", "proc"])
def test_output_folder_that_cannot_be_made_is_a_compile_error(tmp_path, where):
    out = tmp_path / "a_file" if where == "file" else Path("/proc/pywave-export-test")
    if where == "file":
        out.write_text("")
    with pytest.raises(pywave.CompileError, match="cannot write into the output folder " +
                       re.escape(str(out))):
        pywave.export(SCALARS.format(fn="main"), out, "pc", target="sm_90")


@pytest.mark.parametrize("cc, message", [('"', "is not a command line: No closing quotation"),
                                         ("  ", "names no C compiler")])
def test_unusable_cc_is_a_compile_error(tmp_path, cc, message):
    with pytest.raises(pywave.CompileError, match=re.escape(message)):
        pywave.export(SCALARS.format(fn="main"), tmp_path / "out", "pc", target="sm_90", cc=cc)


def _unrelated_libwavert(tmp_path: Path) -> Path:
    bogus = tmp_path / "bogus"
    bogus.mkdir()
    (bogus / "x.c").write_text("int unrelated_library(void) { return 42; }\n")
    subprocess.run(CC.split() + ["-shared", "-fPIC", "-Wl,-soname,libwavert.so", "-o",
                                 str(bogus / "libwavert.so"), str(bogus / "x.c")], check=True)
    return bogus


TWO_C = """
#include <stdio.h>
#include "one.h"
#include "two.h"
int main(void) {
  int32_t a = one_first(1, 2.0f, NULL), b = two_second(3, 4.0f, NULL);
  printf("%d %d|%s|%s\\n", (int)a, (int)b, one_last_error(), two_last_error());
  return 0;
}
"""


#: What TWO_C prints first: SCALARS is a host program (no GPU op), so its calls open no
#: driver and succeed (0) under the stand-in and without any driver alike.
HOST_CALLS_OK = "0 0|"


def _driver_env() -> dict:
    fake = _fake_driver()
    if fake:
        return {"WAVERT_CUDA_LIBRARY": fake, "WAVERT_HIP_LIBRARY": "/nonexistent"}
    if pywave_has_gpu():
        pytest.skip("checks the stand-in or no-driver path; a GPU is present")
    return {}


def pywave_has_gpu() -> bool:
    from pywave import runtime
    from pywave.program import BACKENDS
    try:
        return bool(runtime.device_count(BACKENDS["nvvm"].device_type))
    except pywave.Error:
        return False


@pytest.fixture
def two_exports(tmp_path) -> tuple[Path, Path]:
    one, two = tmp_path / "one", tmp_path / "two"
    pywave.export(SCALARS.format(fn="first"), one, "one", target="sm_90")
    pywave.export(SCALARS.format(fn="second"), two, "two", target="sm_90")
    return one, two


def test_unrelated_libwavert_first_on_ld_library_path(two_exports, tmp_path):
    one, two = two_exports
    bogus = _unrelated_libwavert(tmp_path)
    _compile_c(TWO_C, tmp_path / "two_prog", *_link_flags(one, "one"), *_link_flags(two, "two"))
    env = {**_driver_env(), "LD_LIBRARY_PATH": f"{bogus}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    proc = _run(tmp_path / "two_prog", env)
    assert proc.returncode == 0, proc.stderr                 # no "undefined symbol"
    assert proc.stdout.startswith(HOST_CALLS_OK), procout(proc)


def test_exported_host_program_needs_no_driver(two_exports, tmp_path):
    """An exported host program's entry points run with no GPU driver on the machine: they
    open no device (a host-only call)."""
    one, two = two_exports
    _compile_c(TWO_C, tmp_path / "two_prog", *_link_flags(one, "one"), *_link_flags(two, "two"))
    env = {"WAVERT_CUDA_LIBRARY": "/nonexistent/libcuda.so.1",
           "WAVERT_HIP_LIBRARY": "/nonexistent/libamdhip64.so"}
    proc = _run(tmp_path / "two_prog", env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(HOST_CALLS_OK), procout(proc)


def test_two_exports_load_in_one_python_process(two_exports, tmp_path):
    one, two = two_exports
    bogus = _unrelated_libwavert(tmp_path)
    code = f"""
    import ctypes
    one = ctypes.CDLL({str(one / 'libone.so')!r})
    two = ctypes.CDLL({str(two / 'libtwo.so')!r})
    for lib, fn in ((one, one.one_first), (two, two.two_second)):
        fn.argtypes = [ctypes.c_int32, ctypes.c_float, ctypes.c_void_p]
    print(one.one_first(1, 2.0, None), two.two_second(3, 4.0, None))
    """
    env = {**os.environ, **_driver_env(),
           "LD_LIBRARY_PATH": f"{bogus}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == HOST_CALLS_OK.rstrip("|").split()   # host programs: no driver


def test_library_run_path_is_searched_before_ld_library_path(two_exports):
    readelf = shutil.which("readelf")
    if not readelf:
        pytest.skip("needs readelf")
    one, _ = two_exports
    dyn = subprocess.run([readelf, "-d", str(one / "libone.so")], capture_output=True,
                         text=True, check=True).stdout
    assert "(RPATH)" in dyn and "$ORIGIN" in dyn and "(RUNPATH)" not in dyn
