"""Compile isolation (pywave.isolation): crashes and hangs in the compile worker become
CompileErrors naming the stage, the tool's message and a reproducer; the process carries on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import pywave
from pywave import isolation, pipeline
from conftest import ROOT, TESTS

DATA = os.path.join(TESTS, "data")
VECTOR_ADD = open(os.path.join(DATA, "vector_add.mlir"), encoding="utf-8").read()


def program(text: str, *, isolate=None, timeout=None, **options):
    """isolation.program of a Pipeline of ``text`` with ``options``."""
    return isolation.program(pipeline.Pipeline(text, **options), isolate=isolate,
                             timeout=timeout)


def _boot_with(patch: str) -> str:
    """A worker boot line that runs ``patch`` (Python) before serving."""
    return ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
            f"{patch}; from pywave import isolation; isolation.serve()")


CRASH_ON_MARK = ("import os; from pywave.frontend import parse; real = parse.parse; "
                 "parse.parse = lambda text, *a, **k: os.kill(os.getpid(), 11) "
                 "if 'CRASH' in text else real(text, *a, **k)")
HANG_ON_MARK = ("import time; from pywave.host import stage as host; real = host.lower; "
                "host.lower = lambda *a, **k: time.sleep(600) if 'HANG' in k['text'] "
                "else real(*a, **k)")


@pytest.fixture
def patched_worker(monkeypatch, tmp_path):
    """Workers started with a patched boot line; fresh workers before and after."""
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))
    isolation.shutdown()

    def use(patch: str) -> None:
        isolation.shutdown()
        monkeypatch.setattr(isolation.connection, "BOOT", _boot_with(patch))
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
        "import os; from pywave.kernels import nvvm as kernels; "
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


def test_crash_in_a_users_pass_is_a_compile_error_with_a_reproducer(patched_worker):
    """passes= runs in the worker (stage 'passes'); the reproducer keeps the pipeline."""
    patched_worker("import os; from pywave.frontend import passes; "
                   "passes.run = lambda *a, **k: os.abort()")
    user = "builtin.module(func.func(cse))"
    with pytest.raises(pywave.CompileError) as info:
        program(VECTOR_ADD, target="sm_90", format="ptx", passes=user)
    message = str(info.value)
    assert "SIGABRT" in message and "stage 'passes'" in message
    path = message.split("reproducer: ")[1].split()[0]
    meta = json.load(open(path[:-len(".mlir")] + ".json", encoding="utf-8"))
    assert meta["options"]["passes"] == user and meta["stage"] == "passes"


def test_process_carries_on_after_a_crash(patched_worker):
    patched_worker("import os; from pywave.frontend import parse; "
                   "parse.parse = lambda *a, **k: os.kill(os.getpid(), 11)")
    with pytest.raises(pywave.CompileError, match="SIGSEGV.*stage 'parse'"):
        program(VECTOR_ADD, target="sm_90")
    with pytest.raises(pywave.CompileError, match="SIGSEGV"):   # a fresh worker each time
        program(VECTOR_ADD, target="sm_90")


def test_hang_is_killed_at_the_time_limit(patched_worker, monkeypatch):
    patched_worker(HANG_ON_MARK)
    program(VECTOR_ADD, target="sm_90", format="ptx")    # a warm worker
    monkeypatch.setenv("PYWAVE_COMPILE_TIMEOUT", "5")
    with pytest.raises(pywave.CompileError, match=r"time limit of 5 s.*stage 'host'"):
        program(VECTOR_ADD + "// HANG\n", target="sm_90", format="ptx")


def test_untyped_worker_exception_keeps_its_type(patched_worker):
    patched_worker("from pywave.frontend import parse; "
                   "parse.parse = lambda *a, **k: {}['missing']")
    with pytest.raises(KeyError) as info:
        program(VECTOR_ADD, target="sm_90")
    assert any("in the compile worker" in n for n in info.value.__notes__)


def test_in_process_mode_option_and_environment(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the pool must not be used")
    monkeypatch.setattr(isolation.POOL, "run", refuse)
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
    real = isolation.POOL.run

    def run(kind, compiler, limit, workers=None):
        sent.append((kind, compiler))
        return real(kind, compiler, limit, workers=workers)
    monkeypatch.delenv("PYWAVE_ISOLATE", raising=False)
    monkeypatch.setattr(isolation.POOL, "run", run)
    return sent


def test_compile_uses_the_worker_once_and_hits_start_none(requests):
    text = VECTOR_ADD.replace("@add", "@add_hits")
    first = pywave.compile(text, target="sm_90", format="ptx", disk_cache=False)
    again = pywave.compile(text, target="sm_90", format="ptx", disk_cache=False)
    assert again is first and [k for k, _ in requests] == ["program"]


def test_cli_compile_sends_its_lowering_options_to_the_worker(requests, tmp_path, capsys):
    from pywave.entry.cli import main
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
    from pywave.entry.cli import main
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


# --------------------------------------------------------------------------------------------
# The compile server ("zygote"): workers forked from one pre-loaded process per set-up
# --------------------------------------------------------------------------------------------
needs_server = pytest.mark.skipif(not isolation.server_enabled(),
                                  reason="the compile server needs Linux (fork, pidfd)")


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def _fd_targets(pid: int) -> dict[int, str]:
    folder = f"/proc/{pid}/fd"
    return {int(fd): os.readlink(os.path.join(folder, fd)) for fd in os.listdir(folder)}


def _gone(pid: int) -> bool:
    """No such process, or a zombie (exited; its new parent may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _wait_gone(pids, seconds: float) -> list[int]:
    import time
    deadline = time.monotonic() + seconds
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if not _gone(p)]
        time.sleep(0.05)
    return alive


@pytest.fixture
def fresh_pool(monkeypatch, tmp_path):
    """No worker before and after, the compile server enabled and a server of this test's
    own (a boot line no other test uses), stopped afterwards."""
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYWAVE_COMPILE_SERVER", raising=False)
    isolation.shutdown()
    monkeypatch.setattr(isolation.connection, "BOOT", _boot_with(f"tag = {str(tmp_path)!r}"))
    yield isolation.POOL
    isolation.shutdown()
    isolation.stop_server()


def _extra_worker(pool, text: str = VECTOR_ADD):
    """Compile ``text`` while the idle worker is held: a second worker is started; returns
    (held worker, the new worker)."""
    held = pool._idle.pop()
    try:
        program(text.replace("@add", "@add_extra"), target="sm_90", format="ptx")
        (new,) = pool._idle
    finally:
        pool._idle.append(held)
    return held, new


@needs_server
def test_workers_are_forked_by_the_server_and_inherit_no_user_fd(fresh_pool, tmp_path):
    marker = tmp_path / "user-file"
    fd = os.open(marker, os.O_CREAT | os.O_WRONLY)
    os.set_inheritable(fd, True)          # even an inheritable fd must not reach them
    try:
        program(VECTOR_ADD, target="sm_90", format="ptx")
        first, second = _extra_worker(fresh_pool)
    finally:
        os.close(fd)
    server = fresh_pool._server
    assert server is not None and not _gone(server.pid)
    for worker in (first, second):
        assert isinstance(worker, isolation.handles.ForkedWorker)
        assert _parent_of(worker.pid) == server.pid       # forked, not a new interpreter
        targets = _fd_targets(worker.pid)
        assert str(marker) not in targets.values()
        assert targets[3] == "anon_inode:[pidfd]" and len(targets) <= 6, targets
    assert str(marker) not in _fd_targets(server.pid).values()
    assert os.listdir(f"/proc/{server.pid}/task") == [str(server.pid)]   # one thread
    assert _parent_of(server.pid) != os.getpid()          # detached, shared


@needs_server
def test_server_is_shared_by_processes_and_private_to_the_user(fresh_pool):
    program(VECTOR_ADD, target="sm_90", format="ptx")
    server = fresh_pool._server
    folder = os.path.dirname(server.path)
    assert os.stat(folder).st_mode & 0o777 == 0o700
    code = ("import sys, json; from pywave import isolation, pipeline; "
            "isolation.connection.BOOT = sys.argv[1]; "
            "isolation.program(pipeline.Pipeline(sys.stdin.read(), target='sm_90', "
            "format='ptx')); print(isolation.POOL._server.pid)")
    out = subprocess.run([sys.executable, "-c", code, isolation.connection.BOOT],
                         input=VECTOR_ADD.replace("@add", "@add_other"), text=True,
                         capture_output=True, timeout=120, check=True, cwd="/")
    assert int(out.stdout) == server.pid


@needs_server
def test_crash_in_a_forked_worker_leaves_the_server_and_other_workers(patched_worker,
                                                                       monkeypatch):
    monkeypatch.delenv("PYWAVE_COMPILE_SERVER", raising=False)
    patched_worker(CRASH_ON_MARK)
    pool = isolation.POOL
    program(VECTOR_ADD, target="sm_90", format="ptx")
    survivor, victim = _extra_worker(pool)
    server = pool._server
    pool._idle[:] = [survivor, victim]          # the next request takes the victim
    with pytest.raises(pywave.CompileError, match="SIGSEGV.*stage 'parse'"):
        program(VECTOR_ADD + "// CRASH\n", target="sm_90", format="ptx")
    assert _wait_gone([victim.pid], 5) == [] and not _gone(survivor.pid)
    assert pool._server is server and not _gone(server.pid)
    program(VECTOR_ADD.replace("@add", "@add_after"), target="sm_90", format="ptx")
    assert pool._idle == [survivor]
    _, third = _extra_worker(pool)                 # the same server forks a replacement
    assert _parent_of(third.pid) == server.pid
    isolation.stop_server()


@needs_server
def test_killed_server_is_restarted_and_its_workers_go_on(fresh_pool):
    import signal
    program(VECTOR_ADD, target="sm_90", format="ptx")
    old = fresh_pool._server.pid
    orphan = fresh_pool._idle[0]
    os.kill(old, signal.SIGKILL)
    assert _wait_gone([old], 5) == []
    fresh_pool._idle.remove(orphan)                # held: the next compile needs a new one
    program(VECTOR_ADD.replace("@add", "@add_new"), target="sm_90", format="ptx")
    server = fresh_pool._server
    assert server.pid != old and _parent_of(fresh_pool._idle[0].pid) == server.pid
    fresh_pool._idle.append(orphan)                # the old server's worker still compiles
    program(VECTOR_ADD.replace("@add", "@add_orphan"), target="sm_90", format="ptx")
    assert fresh_pool._idle[-1] is orphan and fresh_pool.started() == 2


def test_direct_start_when_the_server_is_off(fresh_pool, monkeypatch):
    monkeypatch.setenv("PYWAVE_COMPILE_SERVER", "0")
    program(VECTOR_ADD, target="sm_90", format="ptx")
    assert fresh_pool._server is None
    assert isinstance(fresh_pool._idle[0], isolation.handles.SpawnedWorker)


@needs_server
def test_direct_start_when_the_server_cannot_start(fresh_pool, monkeypatch, caplog):
    import logging
    monkeypatch.setattr(isolation.connection, "BOOT", _boot_with(       # only the server exits
        "import os; sys.argv[2] == 'server' and os._exit(5)"))
    with caplog.at_level(logging.DEBUG, logger="pywave.isolation"):
        program(VECTOR_ADD, target="sm_90", format="ptx")
    assert isinstance(fresh_pool._idle[0], isolation.handles.SpawnedWorker)
    assert fresh_pool._server is None and fresh_pool._server_broken
    assert any("exited with status 5" in r.getMessage() and "of its own" in r.getMessage()
               for r in caplog.records)


_USER = """
import json, sys, threading, time
from pywave import isolation, pipeline
from pywave.isolation import protocol
from pywave.isolation.interrupts import Shield
isolation.connection.BOOT = sys.argv[1]
text = sys.stdin.read()
pool = isolation.POOL
isolation.program(pipeline.Pipeline(text, target="sm_90", format="ptx"))
idle = pool._idle.pop()                    # one idle worker, one about to hang
isolation.program(pipeline.Pipeline(text.replace("@add", "@b"), target="sm_90", format="ptx"))
busy = pool._idle.pop()
threading.Thread(target=busy.request, daemon=True, args=(
    "program", pipeline.Pipeline(text + "// HANG\\n", target="sm_90", format="ptx"),
    protocol.Deadline(600), Shield(), 600)).start()
print(json.dumps({"server": pool._server.pid, "workers": [busy.pid, idle.pid]}), flush=True)
time.sleep(600)
"""


def test_no_worker_survives_the_users_process_and_the_server_idles_out(tmp_path):
    """The user's process is killed (SIGKILL: no atexit) while one worker is idle and one
    is mid-compile: both exit within seconds; the shared server after its idle time."""
    import signal
    env = dict(os.environ, PYWAVE_CACHE_DIR=str(tmp_path / "cache"),
               PYWAVE_COMPILE_SERVER_IDLE="3")
    boot = _boot_with(f"{HANG_ON_MARK}; tag = {str(tmp_path)!r}")
    user = subprocess.Popen([sys.executable, "-c", _USER, boot],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env, cwd=str(tmp_path))
    try:
        user.stdin.write(VECTOR_ADD)
        user.stdin.close()
        pids = json.loads(user.stdout.readline())
        import time
        time.sleep(1.0)                           # the busy worker enters the hang
    finally:
        user.send_signal(signal.SIGKILL)
        user.wait()
    assert _wait_gone(pids["workers"], 10) == []
    if isolation.server_enabled():
        assert not _gone(pids["server"])
        assert _wait_gone([pids["server"]], 40) == []


_FORKING_USER = """
import json, os, sys
from pywave import isolation, pipeline
isolation.connection.BOOT = sys.argv[1]
text = sys.stdin.read()
def compile_once(name):
    isolation.program(pipeline.Pipeline(text.replace("@add", name), target="sm_90",
                                        format="ptx"))
    return isolation.POOL._server.pid, isolation.POOL._idle[0].pid
server, worker = compile_once("@add_parent")
child = os.fork()
if child == 0:
    assert isolation.POOL._idle == [] and isolation.POOL._server is None
    server, worker = compile_once("@add_child")
    print(json.dumps({"child": os.getpid(), "server": server, "worker": worker}), flush=True)
    isolation.shutdown()
    os._exit(0)
os.waitpid(child, 0)
again, same = compile_once("@add_parent_again")
print(json.dumps({"server": server, "worker": worker, "again": [again, same]}))
"""


@needs_server
def test_forked_user_child_uses_workers_of_its_own(tmp_path):
    env = dict(os.environ, PYWAVE_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("PYWAVE_COMPILE_SERVER", None)
    out = subprocess.run([sys.executable, "-c", _FORKING_USER,
                          _boot_with(f"tag = {str(tmp_path)!r}")], input=VECTOR_ADD,
                         text=True, capture_output=True, timeout=120, env=env, check=True)
    child, parent = (json.loads(line) for line in out.stdout.splitlines())
    assert child["worker"] != parent["worker"]
    assert parent["again"] == [parent["server"], parent["worker"]]   # the parent's intact


def test_a_forked_worker_closes_every_fd_it_was_not_given():
    """The worker's fd cleanup closes what /proc/self/fd lists above the kept ones, without
    looping up to the fd limit (2^30 on some systems)."""
    code = textwrap.dedent("""
        import os
        from pywave.isolation import server
        fds = sorted(os.open(os.devnull, os.O_RDONLY) for _ in range(5))
        server.close_fds_from(fds[2])
        print([fd for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")] == fds[:2])
        """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd="/")
    assert done.stdout.strip() == "True", done.stderr


def test_an_idle_server_takes_its_socket_and_empty_log_along():
    """An exited compile server left srv-<key>.sock's empty srv-<key>.log in the runtime
    folder; it now removes the log with the socket when nothing was written to it (the lock
    file stays: a process may be waiting on it)."""
    import shutil
    import tempfile
    run = Path(tempfile.mkdtemp(prefix="pw-"))      # short: a socket path has 108 bytes
    try:
        _server_leaves(run)
    finally:
        shutil.rmtree(run, ignore_errors=True)


def _server_leaves(run: Path) -> None:
    import time
    env = dict(os.environ, XDG_RUNTIME_DIR=str(run), PYWAVE_ISOLATE="1",
               PYWAVE_COMPILE_SERVER="1", PYWAVE_COMPILE_SERVER_IDLE="1", PYWAVE_CACHE="0")
    code = ("import pywave; pywave.compile(open('%s').read(), target='sm_90')"
            % (ROOT / "examples" / "vector_add.mlir"))
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd="/",
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    folder = run / "pywave"
    assert [p.name for p in folder.glob("srv-*.sock")], "no server was started"
    deadline = time.monotonic() + 60
    while list(folder.glob("srv-*.sock")) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = sorted(p.suffix for p in folder.iterdir())
    assert ".sock" not in left and ".log" not in left, left
