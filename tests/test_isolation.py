"""Compile isolation (pywave.isolation): crashes and hangs in the compile worker become
CompileErrors naming the stage, the tool's message and a reproducer; the process carries on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

import pywave
from pywave import isolation

DATA = os.path.join(os.path.dirname(__file__), "data")
VECTOR_ADD = open(os.path.join(DATA, "vector_add.mlir"), encoding="utf-8").read()


def _boot_with(patch: str) -> str:
    """A worker boot line that runs ``patch`` (Python) before serving."""
    return ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
            f"{patch}; from pywave import isolation; isolation.serve()")


@pytest.fixture
def patched_worker(monkeypatch, tmp_path):
    """Workers started with a patched boot line; fresh workers before and after."""
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))
    isolation.shutdown()

    def use(patch: str) -> None:
        isolation.shutdown()
        monkeypatch.setattr(isolation, "_BOOT", _boot_with(patch))
    yield use
    monkeypatch.undo()
    isolation.shutdown()


def test_isolated_result_equals_in_process():
    iso = isolation.program(VECTOR_ADD, target="sm_90", format="ptx")
    here = isolation.program(VECTOR_ADD, target="sm_90", format="ptx", isolate=False)
    assert iso.binaries == here.binaries
    assert iso.functions == here.functions
    assert iso.kernel_slots == here.kernel_slots


def test_parent_imports_no_mlir():
    code = ("import sys, pywave; pywave.compile(sys.stdin.read(), target='sm_90', "
            "disk_cache=False); print('mlir' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], input=VECTOR_ADD, text=True,
                         capture_output=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_typed_errors_keep_their_location():
    with pytest.raises(pywave.CompileError) as info:
        isolation.program(VECTOR_ADD.replace("arith.addf", "arith.addff"), target="sm_90")
    assert (info.value.line, info.value.column) == (14, 14)
    assert "arith.addff" in info.value.source_line


def test_abort_becomes_compile_error_naming_stage_message_and_reproducer(patched_worker):
    patched_worker(
        "import os; from pywave import kernels; "
        "kernels.lower_nvvm = lambda *a, **k: (os.write(2, b\"python: X.cpp:1: f(): "
        "Assertion `x' failed.\\n\"), os.abort())")
    with pytest.raises(pywave.CompileError) as info:
        isolation.program(VECTOR_ADD, target="sm_90", format="ptx")
    message = str(info.value)
    assert "SIGABRT" in message and "stage 'kernels'" in message
    assert "Assertion `x' failed." in message
    path = message.split("reproducer: ")[1].split()[0]
    assert open(path, encoding="utf-8").read() == VECTOR_ADD
    meta = json.load(open(path[:-len(".mlir")] + ".json", encoding="utf-8"))
    assert meta["options"]["target"] == "sm_90" and meta["stage"] == "kernels"


def test_process_carries_on_after_a_crash(patched_worker):
    patched_worker("import os; from pywave import parse; "
                   "parse.parse = lambda *a, **k: os.kill(os.getpid(), 11)")
    with pytest.raises(pywave.CompileError, match="SIGSEGV.*stage 'parse'"):
        isolation.program(VECTOR_ADD, target="sm_90")
    with pytest.raises(pywave.CompileError, match="SIGSEGV"):   # a fresh worker each time
        isolation.program(VECTOR_ADD, target="sm_90")


def test_hang_is_killed_at_the_time_limit(patched_worker, monkeypatch):
    patched_worker("import time; from pywave import host; real = host.lower; "
                   "host.lower = lambda *a, **k: time.sleep(600) if 'HANG' in k['text'] "
                   "else real(*a, **k)")
    isolation.program(VECTOR_ADD, target="sm_90", format="ptx")    # a warm worker
    monkeypatch.setenv("PYWAVE_COMPILE_TIMEOUT", "5")
    with pytest.raises(pywave.CompileError, match=r"time limit of 5 s.*stage 'host'"):
        isolation.program(VECTOR_ADD + "// HANG\n", target="sm_90", format="ptx")


def test_untyped_worker_exception_keeps_its_type(patched_worker):
    patched_worker("from pywave import parse; "
                   "parse.parse = lambda *a, **k: {}['missing']")
    with pytest.raises(KeyError) as info:
        isolation.program(VECTOR_ADD, target="sm_90")
    assert any("in the compile worker" in n for n in info.value.__notes__)


def test_in_process_mode_option_and_environment(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the pool must not be used")
    monkeypatch.setattr(isolation._POOL, "run", refuse)
    isolation.program(VECTOR_ADD, target="sm_90", format="ptx", isolate=False)
    monkeypatch.setenv("PYWAVE_ISOLATE", "0")
    pywave.compile(VECTOR_ADD.replace("@add", "@add_env"), target="sm_90", format="ptx",
                   disk_cache=False)
    with pytest.raises(AssertionError):
        isolation.program(VECTOR_ADD, target="sm_90", isolate=True)


def test_concurrent_compiles_from_threads():
    errors, programs = [], []

    def one(i: int) -> None:
        try:
            programs.append(isolation.program(VECTOR_ADD.replace("@add", f"@add{i}"),
                                              target="sm_90", format="ptx"))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(programs) == 5


@pytest.mark.parametrize("timeout, exc", [(0, pywave.Error), (-1, pywave.Error),
                                          (float("nan"), pywave.Error), ("5", TypeError),
                                          (True, TypeError)])
def test_timeout_validated(timeout, exc):
    with pytest.raises(exc, match="timeout"):
        isolation.program(VECTOR_ADD, target="sm_90", timeout=timeout)


def test_last_message_prefers_the_assertion():
    tail = ("python: a.cpp:3: f(): Assertion `ok' failed.\nPLEASE submit a bug report\n"
            "Stack dump:\n0. Program arguments: python\n")
    assert isolation.last_message(tail) == "python: a.cpp:3: f(): Assertion `ok' failed."
    assert isolation.last_message("LLVM ERROR: out of memory\n #0 0x1\n") == \
        "LLVM ERROR: out of memory"
    assert isolation.last_message("") == ""
