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
from pywave import isolation, pipeline

DATA = os.path.join(os.path.dirname(__file__), "data")
VECTOR_ADD = open(os.path.join(DATA, "vector_add.mlir"), encoding="utf-8").read()


def program(text: str, *, isolate=None, timeout=None, **options):
    """isolation.program of a Pipeline of ``text`` with ``options``."""
    return isolation.program(pipeline.Pipeline(text, **options), isolate=isolate,
                             timeout=timeout)


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
    iso = program(VECTOR_ADD, target="sm_90", format="ptx")
    here = program(VECTOR_ADD, target="sm_90", format="ptx", isolate=False)
    assert iso == here          # target, images, signatures (Params), object code


def test_pipeline_and_its_outputs_pickle():
    """What crosses the worker's pipe: the Pipeline (lowering options, resolved target,
    loaded replacements) and the Artifacts (Binary, HostModule, HostSignature, Param)."""
    import pickle

    from pywave.lowering import LoweringOptions
    text = VECTOR_ADD[:VECTOR_ADD.rfind("}")] + "  func.func @entry() {\n    return\n  }\n}\n"
    ptx = pipeline.Pipeline(text, target="sm_90", format="ptx").run().binaries[0].data
    made = pipeline.Pipeline(text, target="sm_90", format="ptx", keep_stages=True,
                             replacements={"kernels": ptx}, run_entry="entry",
                             lowering=LoweringOptions(index_bitwidth=32, features="+ptx80"))
    copy = pickle.loads(pickle.dumps(made))
    assert copy.options() == made.options() and copy.describe() == made.describe()
    assert copy.lowering == made.lowering and copy.replacements == made.replacements
    art = isolation.artifacts(made)
    assert art.host.run_result == "void" and art.stages["parse"]
    assert art.binaries[0].data == ptx
    assert pickle.loads(pickle.dumps(art)) == art
    params = art.host.functions[0].params
    assert params[0].kind == "memref" and params[0].dtype == (2, 32, 1)


def test_parent_imports_no_mlir():
    code = ("import sys, pywave; pywave.compile(sys.stdin.read(), target='sm_90', "
            "disk_cache=False); print('mlir' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], input=VECTOR_ADD, text=True,
                         capture_output=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_typed_errors_keep_their_location():
    with pytest.raises(pywave.CompileError) as info:
        program(VECTOR_ADD.replace("arith.addf", "arith.addff"), target="sm_90")
    assert (info.value.line, info.value.column) == (14, 14)
    assert "arith.addff" in info.value.source_line


def test_abort_becomes_compile_error_naming_stage_message_and_reproducer(patched_worker):
    patched_worker(
        "import os; from pywave import kernels; "
        "kernels.lower_nvvm = lambda *a, **k: (os.write(2, b\"python: X.cpp:1: f(): "
        "Assertion `x' failed.\\n\"), os.abort())")
    with pytest.raises(pywave.CompileError) as info:
        program(VECTOR_ADD, target="sm_90", format="ptx")
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
        program(VECTOR_ADD, target="sm_90")
    with pytest.raises(pywave.CompileError, match="SIGSEGV"):   # a fresh worker each time
        program(VECTOR_ADD, target="sm_90")


def test_hang_is_killed_at_the_time_limit(patched_worker, monkeypatch):
    patched_worker("import time; from pywave import host; real = host.lower; "
                   "host.lower = lambda *a, **k: time.sleep(600) if 'HANG' in k['text'] "
                   "else real(*a, **k)")
    program(VECTOR_ADD, target="sm_90", format="ptx")    # a warm worker
    monkeypatch.setenv("PYWAVE_COMPILE_TIMEOUT", "5")
    with pytest.raises(pywave.CompileError, match=r"time limit of 5 s.*stage 'host'"):
        program(VECTOR_ADD + "// HANG\n", target="sm_90", format="ptx")


def test_untyped_worker_exception_keeps_its_type(patched_worker):
    patched_worker("from pywave import parse; "
                   "parse.parse = lambda *a, **k: {}['missing']")
    with pytest.raises(KeyError) as info:
        program(VECTOR_ADD, target="sm_90")
    assert any("in the compile worker" in n for n in info.value.__notes__)


def test_in_process_mode_option_and_environment(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the pool must not be used")
    monkeypatch.setattr(isolation._POOL, "run", refuse)
    program(VECTOR_ADD, target="sm_90", format="ptx", isolate=False)
    pywave.compile(VECTOR_ADD.replace("@add", "@add_opt"), target="sm_90", format="ptx",
                   disk_cache=False, isolate=False)
    monkeypatch.setenv("PYWAVE_ISOLATE", "0")
    pywave.compile(VECTOR_ADD.replace("@add", "@add_env"), target="sm_90", format="ptx",
                   disk_cache=False)
    with pytest.raises(AssertionError):
        program(VECTOR_ADD, target="sm_90", isolate=True)


def test_concurrent_compiles_from_threads():
    errors, programs = [], []

    def one(i: int) -> None:
        try:
            programs.append(program(VECTOR_ADD.replace("@add", f"@add{i}"),
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
        program(VECTOR_ADD, target="sm_90", timeout=timeout)


def test_last_message_prefers_the_assertion():
    tail = ("python: a.cpp:3: f(): Assertion `ok' failed.\nPLEASE submit a bug report\n"
            "Stack dump:\n0. Program arguments: python\n")
    assert isolation.last_message(tail) == "python: a.cpp:3: f(): Assertion `ok' failed."
    assert isolation.last_message("LLVM ERROR: out of memory\n #0 0x1\n") == \
        "LLVM ERROR: out of memory"
    assert isolation.last_message("") == ""


@pytest.fixture
def requests(monkeypatch):
    """The Pipelines sent to compile workers in this process, (kind, pipeline) each."""
    sent = []
    real = isolation._POOL.run

    def run(kind, compiler, limit):
        sent.append((kind, compiler))
        return real(kind, compiler, limit)
    monkeypatch.delenv("PYWAVE_ISOLATE", raising=False)
    monkeypatch.setattr(isolation._POOL, "run", run)
    return sent


def test_compile_uses_the_worker_once_and_hits_start_none(requests):
    text = VECTOR_ADD.replace("@add", "@add_hits")
    first = pywave.compile(text, target="sm_90", format="ptx", disk_cache=False)
    again = pywave.compile(text, target="sm_90", format="ptx", disk_cache=False)
    assert again is first and [k for k, _ in requests] == ["program"]


def test_cli_compile_sends_its_lowering_options_to_the_worker(requests, tmp_path, capsys):
    from pywave.__main__ import main
    path = tmp_path / "v.mlir"
    path.write_text(VECTOR_ADD)
    assert main(["compile", str(path), "--target", "sm_90", "--format", "ptx",
                 "--index-bitwidth", "32"]) == 0
    assert "kernel binary @kernels: ptx" in capsys.readouterr().out
    (kind, sent), = requests
    assert kind == "artifacts" and sent.lowering.index_bitwidth == 32
    assert sent.filename == str(path)


def test_cli_run_compiles_its_entry_in_the_worker(requests, tmp_path):
    """``pywave run`` compiles through the worker with its entry and lowering options (the
    run itself needs a GPU; without one the command reports the missing device)."""
    from pywave.__main__ import main
    path = os.path.join(DATA, "runner", "host_memref.mlir")
    main(["run", path, "--target", "sm_90", "--format", "ptx", "--kernel-opt-level", "1"])
    (kind, sent), = requests
    assert kind == "artifacts" and sent.run_entry == "main"
    assert sent.lowering.kernel_opt_level == 1


@pytest.mark.skipif(__import__("shutil").which(os.environ.get("CC", "cc")) is None,
                    reason="needs a C compiler")
def test_export_builds_its_library_code_in_the_worker(requests, tmp_path):
    done = pywave.export(VECTOR_ADD, tmp_path, "iso", target="sm_90", format="ptx")
    (kind, sent), = requests
    assert kind == "artifacts" and sent.library is True
    assert os.path.isfile(done.library)


def test_worker_log_records_reach_the_parent(requests, caplog):
    import logging
    with caplog.at_level(logging.DEBUG, logger="pywave"):
        program(VECTOR_ADD.replace("@add", "@add_log"), target="sm_90", format="ptx")
    stages = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stage ")]
    assert [s.split(":")[0] for s in stages] == ["stage " + s for s in pipeline.STAGES]
