"""Ahead-of-time export for C (pywave.export): export, compile C against it, run it. The
export and the error paths need no GPU; the GPU variant runs examples/aot end to end."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pywave
from pywave import runtime
from pywave.program import BACKENDS
from conftest import ROOT, TESTS

DATA = TESTS / "data"
EXAMPLE = ROOT / "examples" / "aot"

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None,
                                reason="needs a C compiler (cc)")


def cuda_devices() -> int:
    try:
        return runtime.device_count(BACKENDS["nvvm"].device_type)
    except pywave.Error:
        return 0


def cflags(out: Path, name: str) -> list[str]:
    """pkg-config --cflags --libs NAME for an export in ``out`` (parsed by hand when
    pkg-config is missing)."""
    if shutil.which("pkg-config"):
        env = dict(os.environ, PKG_CONFIG_PATH=str(out))
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", name], env=env,
                               capture_output=True, text=True, check=True).stdout.split()
        return flags
    return [f"-I{out}", f"-L{out}", f"-l{name}", "-lwavert", f"-Wl,-rpath,{out}"]


def build_c(source: Path, out: Path, name: str, exe: str) -> Path:
    target = out / exe
    cc = os.environ.get("CC", "cc").split()
    proc = subprocess.run(cc + ["-O2", "-Wall", "-Wextra", "-Werror", "-o", str(target),
                                str(source)] + cflags(out, name),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return target


@pytest.fixture(scope="module")
def saxpy(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("aot")
    done = pywave.export((EXAMPLE / "saxpy.mlir").read_text(), out, "aot_saxpy",
                         target="sm_90", filename="saxpy.mlir")
    assert done.functions == ("aot_saxpy_saxpy",)
    assert done.target == "sm_90"
    return out


def test_export_writes_library_header_and_pkgconfig(saxpy):
    for name in ("libaot_saxpy.so", "aot_saxpy.h", "aot_saxpy.pc", "wavert.h",
                 "libwavert.so", "aot_saxpy_wrapper.c", "aot_saxpy_host.o"):
        assert (saxpy / name).is_file(), name
    header = (saxpy / "aot_saxpy.h").read_text()
    assert ("int32_t aot_saxpy_saxpy(float alpha, const DLTensor *x, const DLTensor *y, "
            "void *stream);") in header
    assert "void aot_saxpy_unload(void);" in header
    wrapper = (saxpy / "aot_saxpy_wrapper.c").read_text()
    assert "void aot_saxpy_unload(void) { _pywave_release_kernels(); }" in wrapper
    assert "y: memref<?xf32> (written)" in header
    pc = (saxpy / "aot_saxpy.pc").read_text()
    assert f"prefix={saxpy}" in pc and "-laot_saxpy -lwavert" in pc


def test_export_takes_a_path_as_compile_does(tmp_path):
    done = pywave.export(EXAMPLE / "saxpy.mlir", tmp_path, "from_path", target="sm_90")
    assert done.functions == ("from_path_saxpy",)
    assert "saxpy.mlir" in (tmp_path / "from_path.pc").read_text()


def test_export_generates_the_host_code_once(tmp_path, monkeypatch):
    from pywave.host import jit
    calls = []
    real = jit.compile_object

    def counting(*args, **kwargs):
        calls.append(kwargs.get("library"))
        return real(*args, **kwargs)

    monkeypatch.setenv("PYWAVE_ISOLATE", "0")     # the count is taken in this process
    monkeypatch.setattr(jit, "compile_object", counting)
    pywave.export((EXAMPLE / "saxpy.mlir").read_text(), tmp_path, "once", target="sm_90")
    assert calls == [True]


def test_library_exports_only_the_entry_points(saxpy):
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("needs nm")
    symbols = subprocess.run([nm, "-D", "--defined-only", str(saxpy / "libaot_saxpy.so")],
                             capture_output=True, text=True, check=True).stdout.split()
    exported = {s for s in symbols if s.startswith(("aot_", "_pywave", "__pywave", "saxpy"))}
    assert exported == {"aot_saxpy_saxpy", "aot_saxpy_last_error", "aot_saxpy_unload"}


def test_example_runs_or_reports_no_gpu(saxpy):
    exe = build_c(EXAMPLE / "main.c", saxpy, "aot_saxpy", "aot_saxpy")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, cwd="/")
    if cuda_devices():
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "PASS" in proc.stdout
    else:
        assert proc.returncode == 77, proc.stdout + proc.stderr
        assert "no CUDA GPU" in proc.stdout
        assert "libcuda" in proc.stdout or "device" in proc.stdout


ERRORS_C = r"""
#include <stdio.h>
#include <string.h>
#include "aot_saxpy.h"

int main(void) {
  static float host[4];
  int64_t shape[1] = {4};
  DLTensor x = {host, {kDLCUDA, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLTensor y = x;
  DLTensor ints = {host, {kDLCUDA, 0}, 1, {kDLInt, 32, 1}, shape, NULL, 0};
  DLTensor cpu = {host, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLTensor other = {host, {kDLCUDA, 1}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  int32_t s;
  s = aot_saxpy_saxpy(1.0f, NULL, &y, NULL);
  printf("null %d %s\n", s, aot_saxpy_last_error());
  s = aot_saxpy_saxpy(1.0f, &ints, &y, NULL);
  printf("dtype %d %s\n", s, aot_saxpy_last_error());
  s = aot_saxpy_saxpy(1.0f, &cpu, &y, NULL);
  printf("cpu %d %s\n", s, aot_saxpy_last_error());
  s = aot_saxpy_saxpy(1.0f, &x, &other, NULL);
  printf("mixed %d %s\n", s, aot_saxpy_last_error());
  s = aot_saxpy_saxpy(1.0f, &x, &y, NULL);
  printf("driver %d %s\n", s, aot_saxpy_last_error());
  aot_saxpy_unload();
  return 0;
}
"""


def test_entry_point_errors_without_a_gpu(saxpy, tmp_path):
    if cuda_devices():
        pytest.skip("checks the no-driver path; a GPU is present")
    source = tmp_path / "errors.c"
    source.write_text(ERRORS_C)
    exe = build_c(source, saxpy, "aot_saxpy", "errors")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["null"].startswith("1 aot_saxpy_saxpy: argument 'x' is NULL")
    assert lines["dtype"].startswith("1 aot_saxpy_saxpy: argument 'x':")
    assert lines["cpu"].startswith("1 ") and "device type 1" in lines["cpu"]
    assert lines["mixed"].startswith("1 ") and "different devices" in lines["mixed"]
    assert lines["driver"].startswith("4 ") and "CUDA driver" in lines["driver"]


def test_export_scalar_types(mlir, tmp_path):
    done = pywave.export(mlir("scalars_mixed.mlir"), tmp_path, "mixed",
                         target="sm_90")
    header = Path(done.header).read_text()
    assert ("int32_t mixed_main(const DLTensor *x, const DLTensor *y, float a, double b, "
            "int8_t k, int16_t m, bool flag, void *stream);") in header


def test_export_rejects_bad_name(tmp_path):
    with pytest.raises(pywave.CompileError, match="not a C identifier"):
        pywave.export((EXAMPLE / "saxpy.mlir").read_text(), tmp_path, "lib-x", target="sm_90")


def test_cli_export(tmp_path):
    here = str(Path(pywave.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.run([sys.executable, "-m", "pywave", "export",
                           str(EXAMPLE / "saxpy.mlir"), "--target", "sm_90", "--name", "sx",
                           "-o", str(tmp_path), "--runtime", "link"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "entry points: sx_saxpy" in proc.stdout
    assert (tmp_path / "libsx.so").is_file() and not (tmp_path / "libwavert.so").exists()
    assert os.path.dirname(runtime.LIBRARY) in (tmp_path / "sx.pc").read_text()


@pytest.mark.gpu
def test_example_passes_on_gpu(saxpy):
    if not cuda_devices():
        pytest.skip("needs an NVIDIA GPU")
    exe = build_c(EXAMPLE / "main.c", saxpy, "aot_saxpy", "aot_saxpy_gpu")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "PASS" in proc.stdout, proc.stdout + proc.stderr


def test_wrapper_fixed_c_comes_from_the_template(saxpy):
    # Every line of the template without a placeholder is in the generated wrapper as
    # written, and the Python module holds none of that C (only the per-function parts).
    from pywave import layout
    from pywave.entry import c_export

    template = Path(layout.required_file(c_export.WRAPPER_TEMPLATE)).read_text()
    wrapper = (saxpy / "aot_saxpy_wrapper.c").read_text()
    fixed = [line for line in template.splitlines() if "@" not in line and line.strip()]
    assert len(fixed) > 30
    missing = [line for line in fixed if line not in wrapper.splitlines()]
    assert missing == []
    assert re.search(r"@[A-Z_]+@", wrapper) is None
    source = Path(c_export.__file__).read_text()
    assert "static int32_t pw_fail" not in source and "static int32_t pw_device" not in source


def test_template_placeholders_must_match_what_pywave_fills():
    from pywave.entry import c_export

    with pytest.raises(pywave.CompileError, match=r"placeholders \['DECLARATIONS', "
                                                  r".*but pywave fills \['NAME'\]"):
        c_export.render(c_export.WRAPPER_TEMPLATE, {"NAME": "x"})
    assert c_export.render(c_export.WAVE_TEMPLATE, {}).startswith("/* Helpers of the entry")


CPU_C = r"""
#include <stdio.h>
#include "vadd.h"

int main(void) {
  enum { N = 1003 };
  static float a[N], b[N], c[N];
  for (int i = 0; i < N; ++i) { a[i] = (float)i * 0.5f; b[i] = (float)(N - i); c[i] = -1.0f; }
  int64_t shape[1] = {N};
  DLTensor ta = {a, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLTensor tb = ta, tc = ta;
  tb.data = b;
  tc.data = c;
  int32_t status = vadd_main(&ta, &tb, &tc, NULL);
  if (status != WAVERT_OK) {
    printf("status %d: %s\n", (int)status, vadd_last_error());
    return 1;
  }
  for (int i = 0; i < N; ++i)
    if (c[i] != a[i] + b[i]) { printf("c[%d] = %g, want %g\n", i, c[i], a[i] + b[i]); return 1; }
  vadd_unload();
  printf("PASS\n");
  return 0;
}
"""


def test_export_for_the_cpu_device_runs_on_kdlcpu_tensors(tmp_path):
    """target="cpu": the C entry points take kDLCPU DLTensors and run the kernel on the CPU
    device (no GPU, no driver)."""
    done = pywave.export((ROOT / "examples" / "vector_add.mlir").read_text(), tmp_path, "vadd",
                         target="cpu")
    assert done.target == "cpu" and done.functions == ("vadd_main",)
    source = tmp_path / "cpu.c"
    source.write_text(CPU_C)
    exe = build_c(source, tmp_path, "vadd", "cpu")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, cwd="/")
    assert proc.returncode == 0 and proc.stdout == "PASS\n", proc.stdout + proc.stderr
