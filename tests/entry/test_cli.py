"""The command line as a user runs it: --version, info, cache, bad input files, pipes, -v."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pywave
from pywave import cache
from pywave.entry.cli import main
from pywave.kernels import toolkit
from conftest import TESTS

DATA = TESTS / "data"


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pywave", *args], capture_output=True,
                          text=True, timeout=300, cwd="/", env=env)


def test_version():
    proc = run("--version")
    assert (proc.returncode, proc.stdout) == (0, f"pywave {pywave.__version__}\n")


def test_info_json_names_versions_toolkit_devices_and_cache(tmp_path):
    proc = run("info", "--json", env=dict(os.environ, PYWAVE_CACHE_DIR=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["versions"]["pywave"] == pywave.__version__
    assert set(data["versions"]) >= {"mlir (xtc-mlir-python-bindings)", "llvmlite"}
    assert data["installation"]["libwavert"].endswith("libwavert.so")
    assert "found" in data["cuda toolkit"]
    assert isinstance(data["devices"], list)
    assert data["cache"] == {"directory": str(tmp_path), "entries": 0, "bytes": 0,
                             "max bytes": cache.max_bytes()}


def test_info_text(tmp_path):
    proc = run("info", env=dict(os.environ, PYWAVE_CACHE_DIR=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    assert "cuda toolkit:" in proc.stdout and f"directory: {tmp_path}" in proc.stdout


def test_cache_info_list_clear(mlir, tmp_path, monkeypatch):
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path))
    pywave.compile(mlir("vector_add.mlir"), target="sm_90", format="ptx")
    (tmp_path / ".tmp-left-over.pwc").write_bytes(b"x")
    env = dict(os.environ)
    info = run("cache", "info", env=env)
    assert info.returncode == 0 and "entries: 1\n" in info.stdout
    listed = run("cache", "list", env=env)
    (line,) = listed.stdout.splitlines()
    assert line.endswith(" sm_90 main") and len(line.split()[0]) == 64
    memo = (tmp_path / toolkit.VERSIONS_FILE).exists()   # where this process ran ptxas
    cleared = run("cache", "clear", env=env)
    assert cleared.returncode == 0 and \
        cleared.stdout.startswith(f"removed 1 entry ({2 + memo} files, ")
    assert list(tmp_path.iterdir()) == []


def test_cache_off(monkeypatch):
    proc = run("cache", "list", env=dict(os.environ, PYWAVE_CACHE="0"))
    assert proc.returncode == 0 and "off" in proc.stdout


def test_non_utf8_input_is_a_clear_error(tmp_path):
    bad = tmp_path / "latin1.mlir"
    bad.write_bytes(b"// caf\xe9\nmodule {}\n")
    for command in (["compile", str(bad), "--target", "sm_90"],
                    ["export", str(bad), "--target", "sm_90", "--name", "x", "-o",
                     str(tmp_path / "out")]):
        proc = run(*command)
        assert proc.returncode == 1
        assert proc.stderr == (f"error: {bad} is not UTF-8 text: byte 0xe9 at offset 6 "
                               "(line 1) cannot be decoded; MLIR files are UTF-8\n")


def test_missing_input_is_a_clear_error(tmp_path):
    proc = run("compile", str(tmp_path / "none.mlir"), "--target", "sm_90")
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: cannot read ") and "Traceback" not in proc.stderr


def test_closed_stdout_ends_quietly():
    proc = subprocess.Popen([sys.executable, "-m", "pywave", "compile",
                             str(DATA / "vector_add.mlir"), "--target", "sm_90", "--print-ir"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    proc.stdout.close()            # the reader is gone before anything is written
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141
    assert stderr == ""


def test_closed_stdout_in_process(monkeypatch):
    read, write = os.pipe()
    os.close(read)
    stream = os.fdopen(write, "w")
    monkeypatch.setattr(sys, "stdout", stream)
    assert main(["cache", "info"]) == 141


def test_verbose_levels(tmp_path):
    env = dict(os.environ, PYWAVE_CACHE="0")
    args = ["compile", str(DATA / "vector_add.mlir"), "--target", "sm_90", "--format", "ptx"]
    quiet, info, debug = run(*args, env=env), run(*args, "-v", env=env), \
        run(*args, "-vv", env=env)
    assert quiet.stderr == ""
    assert "pywave: compiled " in info.stderr and "stage parse" not in info.stderr
    assert "pywave: stage parse: " in debug.stderr


def test_compile_logs_misses_and_hits(mlir, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path))
    text = mlir("vector_add.mlir") + "// log test\n"
    with caplog.at_level(logging.DEBUG, logger="pywave"):
        mod = pywave.compile(text, target="sm_90", format="ptx")
        again = pywave.compile(text, target="sm_90", format="ptx")
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("pywave")]
    assert mod is again
    assert any("compiled (cache miss) for sm_90 in" in m for m in messages)
    assert any(m.endswith("in-memory cache hit") for m in messages)
    assert any(m.startswith("stage kernels: ") for m in messages)


def _fake_wheel(site: Path, rel: str, version: str) -> Path:
    root = site / rel
    (root / "bin").mkdir(parents=True)
    (root / "nvvm" / "libdevice").mkdir(parents=True)
    (root / "nvvm" / "libdevice" / "libdevice.10.bc").write_bytes(b"BC")
    ptxas = root / "bin" / "ptxas"
    ptxas.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release 1, V{version}'\n")
    ptxas.chmod(0o755)
    return root


@pytest.mark.parametrize("rel", ["nvidia/cu13", "nvidia/cuda_nvcc"])
def test_toolkit_from_nvidia_wheel(tmp_path, monkeypatch, rel):
    root = _fake_wheel(tmp_path / "site", rel, "99.1.2")
    for var in ("PYWAVE_CUDA_PATH", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")] + sys.path)
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", None)   # the scan, not pathfinder
    found = toolkit.find_toolkit()
    assert (found.root, found.source, found.version) == (str(root), "wheel", "99.1.2")
    assert found.ptxas == str(root / "bin" / "ptxas")


def test_toolkit_version_is_in_the_cache_key(tmp_path, monkeypatch):
    from pywave import pipeline
    root = _fake_wheel(tmp_path, "tk", "98.7.6")
    monkeypatch.setenv("PYWAVE_CUDA_PATH", str(root))
    options = pipeline.Pipeline("module {}", target="sm_90").options()
    assert options["cuda_toolkit"] == "98.7.6"
    assert "cuda_toolkit" not in pipeline.Pipeline("module {}", target="gfx942").options()



@pytest.mark.parametrize("args, usage", [
    (["compile", "x.mlir", "--bogus"], "usage: pywave compile "),
    (["cache", "info", "--bogus"], "usage: pywave cache "),
    (["--bogus", "cache", "info"], "usage: pywave [-h]")])
def test_a_bad_flag_prints_the_usage_of_the_command_it_was_given_to(capsys, args, usage):
    """`pywave compile x.mlir --bogus` printed the top-level usage (`pywave [-h] ...
    COMMAND ...`); the usage is now the subcommand's, exit status 2."""
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and "unrecognized arguments: --bogus" in err


def test_info_says_why_the_driver_is_missing(monkeypatch, capsys):
    """`pywave info` showed the driver as `-` with no reason: it now says what failed."""
    import ctypes
    from pywave.entry import info

    def no_library(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")
    monkeypatch.setattr(info, "cuda_driver_version", lambda: None)
    monkeypatch.setattr(ctypes, "CDLL", no_library)
    driver = info.cuda_driver()
    assert driver["cuda"] is None
    assert driver["cuda missing"].startswith("no NVIDIA driver: libcuda.so.1: cannot open")
    monkeypatch.setattr(info, "cuda_driver_version", lambda: "13.0")
    assert info.cuda_driver() == {"cuda": "13.0", "cuda missing": None}
