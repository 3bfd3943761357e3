"""Compile isolation under the ways people break it: Ctrl-C (once, twice, during the first
compile), workers and the server killed idle or busy, any timeout, hostile crash folders,
worker growth. Black-box: each test drives a user process or the public API and checks
what the user sees (issue: "Compile isolation you can lean on")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import pywave
from pywave import isolation, pipeline
from conftest import TESTS

DATA = os.path.join(TESTS, "data")
VECTOR_ADD = open(os.path.join(DATA, "vector_add.mlir"), encoding="utf-8").read()
SLOW_ON_MARK = ("import time; from pywave.host import stage as host; real = host.lower; "
                "host.lower = lambda *a, **k: (time.sleep(3) if 'SLOW' in k['text'] "
                "else None, real(*a, **k))[1]")
HANG_ON_MARK = ("import time; from pywave.host import stage as host; real = host.lower; "
                "host.lower = lambda *a, **k: time.sleep(600) if 'HANG' in k['text'] "
                "else real(*a, **k)")
CRASH_ON_MARK = ("import os; from pywave.frontend import parse; real = parse.parse; "
                 "parse.parse = lambda text, *a, **k: os.kill(os.getpid(), 11) "
                 "if 'CRASH' in text else real(text, *a, **k)")


def boot(patch: str, tag: str) -> str:
    """A boot line running ``patch``; ``tag`` makes its compile server one of its own."""
    return ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
            f"{patch}; tag = {tag!r}; from pywave import isolation; isolation.serve()")


def user_process(script: str, patch: str, tmp_path, timeout: float = 240,
                 **env) -> dict:
    """Run ``script`` in a fresh interpreter whose workers run ``patch``; its last stdout
    line is JSON."""
    prelude = textwrap.dedent("""
        import json, os, signal, sys, threading, time
        from pywave import isolation, pipeline
        isolation.connection.BOOT = sys.argv[1]
        TEXT = sys.stdin.read()
        def build(name, mark="", **kw):
            text = TEXT.replace("@add", "@" + name) + mark
            return isolation.program(pipeline.Pipeline(text, target="sm_90", format="ptx"),
                                     **kw)
        def absorb(fn, *args):
            while True:
                try:
                    return fn(*args)
                except KeyboardInterrupt:
                    pass
        """)
    environ = dict(os.environ, PYWAVE_CACHE_DIR=str(tmp_path / "cache"), **env)
    environ.pop("PYWAVE_COMPILE_SERVER", None) if "PYWAVE_COMPILE_SERVER" not in env else None
    done = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(script),
                           boot(patch, str(tmp_path))], input=VECTOR_ADD, text=True,
                          capture_output=True, timeout=timeout, env=environ, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _stop_servers(tmp_path) -> None:
    isolation.connection.BOOT, saved = boot("pass", str(tmp_path)), isolation.connection.BOOT
    try:
        isolation.stop_server()
    finally:
        isolation.connection.BOOT = saved


_TWICE = """
import random
random.seed(int(sys.argv[2]) if len(sys.argv) > 2 else 7)
build("warm")
rounds = []
for r in range(ROUNDS):
    first, second = random.uniform(0.05, 1.2), random.uniform(0.0, 0.3)
    def press():
        time.sleep(first)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(second)
        os.kill(os.getpid(), signal.SIGINT)
    presser = threading.Thread(target=press)
    outcome = "late"
    try:
        try:
            presser.start()
            build(f"slow{r}", "// SLOW\\n")
            outcome = "finished"
        except KeyboardInterrupt:
            outcome = "interrupted"
        presser.join()
    except KeyboardInterrupt:
        pass
    absorb(presser.join)
    absorb(time.sleep, 0.1)
    started = time.monotonic()
    build(f"after{r}", timeout=60)
    rounds.append({"outcome": outcome, "after_s": time.monotonic() - started,
                   "workers": isolation.POOL.started(), "idle": len(isolation.POOL._idle)})
print(json.dumps(rounds))
"""


def test_ctrl_c_twice_during_compiles_leaks_no_worker(tmp_path):
    """Two Ctrl-C presses at random points of a 3 s compile, ten times: each call raises
    KeyboardInterrupt, the pool never holds more than its 2 workers, and the next compile
    takes its normal time (it waited forever after two leaks before)."""
    rounds = user_process(_TWICE.replace("ROUNDS", "10"), SLOW_ON_MARK, tmp_path)
    assert [r["outcome"] for r in rounds] == ["interrupted"] * 10
    assert all(r["workers"] <= 2 and r["idle"] == r["workers"] for r in rounds), rounds
    assert max(r["after_s"] for r in rounds) < 10, rounds
    _stop_servers(tmp_path)


_FIRST = """
def press(delay):
    time.sleep(delay)
    os.kill(os.getpid(), signal.SIGINT)
presser = threading.Thread(target=press, args=(float(sys.argv[2]),))
first = "late"
try:
    try:
        presser.start()
        build("first")
        first = "finished"
    except KeyboardInterrupt:
        first = "interrupted"
    presser.join()
except KeyboardInterrupt:       # the first compile was done before the press
    pass
absorb(presser.join)
absorb(time.sleep, 0.2)
other = {}
def valid():
    started = time.monotonic()
    build("valid", "// SLOW\\n", timeout=60)
    other["seconds"] = time.monotonic() - started
helper = threading.Thread(target=valid)
helper.start()
time.sleep(0.3)
started = time.monotonic()
try:
    build("hang", "// HANG\\n", timeout=1.5)
    hang = "returned"
except Exception as exc:
    hang = str(exc)
hang_s = time.monotonic() - started
helper.join()
print(json.dumps({"first": first, "hang": hang, "hang_s": hang_s, "valid": other}))
"""


@pytest.mark.parametrize("delay", [0.02, 0.3, 0.7])
def test_ctrl_c_during_the_first_compile_then_a_timeout_kills_its_own_worker(tmp_path,
                                                                            delay):
    """Ctrl-C while the server starts or forks the first worker; then a 1.5 s timeout
    beside a valid compile: the timeout returns within about a second of its limit and
    the valid compile is not the one killed (a stale fork reply once swapped them)."""
    patch = SLOW_ON_MARK + "; " + HANG_ON_MARK.replace("real = host.lower", "real2 = "
                                                        "host.lower").replace(
        "else real(", "else real2(")
    got = user_process(_FIRST.replace("sys.argv[2]", repr(delay)), patch, tmp_path)
    assert "time limit of 1.5 s" in got["hang"], got
    assert got["hang_s"] < 3.0, got
    assert got["valid"].get("seconds", 99) < 20, got
    _stop_servers(tmp_path)


@pytest.fixture
def own_server(monkeypatch, tmp_path):
    """A pool with a compile server of this test's own; ``use(patch)`` patches workers."""
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))
    isolation.shutdown()

    def use(patch: str = "pass") -> None:
        isolation.shutdown()
        monkeypatch.setattr(isolation.connection, "BOOT", boot(patch, str(tmp_path)))
    use()
    yield use
    isolation.stop_server()
    isolation.shutdown()
    monkeypatch.undo()


def _crash_files(tmp_path) -> list[str]:
    folder = tmp_path / "cache" / "crashes"
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def _gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.02)
    return False


def _build(name: str, mark: str = "", **kw):
    return isolation.program(pipeline.Pipeline(VECTOR_ADD.replace("@add", "@" + name) + mark,
                                               target="sm_90", format="ptx"), **kw)


@pytest.mark.parametrize("server", ["1", "0"])
def test_worker_killed_while_idle_is_replaced_without_a_report(own_server, monkeypatch,
                                                               tmp_path, server):
    monkeypatch.setenv("PYWAVE_COMPILE_SERVER", server)
    _build("idle1")
    (worker,) = isolation.POOL._idle
    os.kill(worker.pid, signal.SIGKILL)
    assert _gone(worker.pid)
    _build("idle2")                                  # a valid compile: no crash
    assert isolation.POOL._idle[0].pid != worker.pid
    assert _crash_files(tmp_path) == []


def test_worker_killed_from_outside_mid_compile_is_no_crash(own_server, tmp_path):
    marker = tmp_path / "lowering"
    own_server(SLOW_ON_MARK.replace("time.sleep(3)", f"(open({str(marker)!r}, 'w').close(), "
                                    "time.sleep(3))"))
    _build("warm")
    (worker,) = isolation.POOL._idle

    def kill_once_lowering() -> None:    # the worker is inside the compile, whatever the load
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(worker.pid, signal.SIGKILL)
    threading.Thread(target=kill_once_lowering).start()
    with pytest.raises(pywave.CompileError, match="killed by SIGKILL.*not a compiler crash"):
        _build("slow", "// SLOW\n")
    assert _crash_files(tmp_path) == []
    _build("after")
    assert isolation.POOL.started() == 1


def test_crash_mid_compile_still_writes_a_reproducer(own_server, tmp_path):
    own_server(CRASH_ON_MARK)
    with pytest.raises(pywave.CompileError, match="SIGSEGV"):
        _build("crash", "// CRASH\n")
    files = _crash_files(tmp_path)
    assert len(files) == 2 and files[0].endswith(".json") and files[1].endswith(".mlir")
    assert os.stat(tmp_path / "cache" / "crashes").st_mode & 0o777 == 0o700


@pytest.mark.skipif(not isolation.server_enabled(), reason="needs the compile server")
def test_server_killed_idle_or_busy_then_the_next_compile_works(own_server):
    own_server(SLOW_ON_MARK)
    _build("first")
    server = isolation.POOL._server.pid
    os.kill(server, signal.SIGKILL)
    assert _gone(server)
    _drop_idle()                                     # force a fork from the dead server
    _build("second")
    busy_server = isolation.POOL._server.pid
    assert busy_server != server
    threading.Timer(0.5, os.kill, (busy_server, signal.SIGKILL)).start()
    _drop_idle()
    _build("third", "// SLOW\n")                     # its worker outlives the server
    _build("fourth")
    assert isolation.POOL.started() == 1


def _drop_idle() -> None:
    """Close the pool's idle workers, keeping its count right."""
    pool = isolation.POOL
    with pool._lock:
        idle, pool._idle = pool._idle, []
        pool._count -= len(idle)
    for worker in idle:
        worker.close()


@pytest.mark.parametrize("value", [1e300, 1e18, 2 ** 70])
def test_any_large_timeout_works(value, monkeypatch, tmp_path):
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))
    _build(f"t{int(value) % 997}", timeout=value)
    monkeypatch.setenv("PYWAVE_COMPILE_TIMEOUT", repr(value))
    _build(f"e{int(value) % 997}")


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "soon"])
def test_bad_timeout_environment_is_a_pywave_error(value, monkeypatch):
    monkeypatch.setenv("PYWAVE_COMPILE_TIMEOUT", value)
    with pytest.raises(pywave.Error, match="PYWAVE_COMPILE_TIMEOUT"):
        _build("bad_env")


def test_timeout_kills_only_its_own_worker_and_returns_promptly(own_server):
    own_server(HANG_ON_MARK)
    _build("w1")
    survivor = isolation.POOL._idle[0]
    isolation.POOL._idle.clear()                     # the hang gets a new worker
    started = time.monotonic()
    with pytest.raises(pywave.CompileError, match="time limit of 2 s"):
        _build("hang", "// HANG\n", timeout=2)
    assert time.monotonic() - started < 3.5
    assert not _gone(survivor.pid, 0.2)
    isolation.POOL._idle.append(survivor)
    _build("w2")


def test_workers_are_replaced_after_their_compile_budget(own_server, monkeypatch):
    monkeypatch.setattr(isolation.handles, "MAX_COMPILES", 3)
    pids = []
    for i in range(7):
        _build(f"budget{i}")
        pids.append(isolation.POOL._idle[0].pid if isolation.POOL._idle else None)
    assert pids[0] == pids[1] and pids[2] is None       # retired after its third compile
    assert pids[3] == pids[4] != pids[0] and isolation.POOL.started() <= 1


def test_workers_are_replaced_after_memory_growth(own_server, monkeypatch):
    monkeypatch.setattr(isolation.handles, "MAX_GROWTH", 1)   # any growth at all
    _build("grow0")
    first = isolation.POOL._idle[0].pid
    for i in range(1, 4):
        _build(f"grow{i}")
    now = isolation.POOL._idle[0].pid if isolation.POOL._idle else None
    assert now != first


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make a folder of another user")
def test_crash_records_never_follow_a_planted_symlink(monkeypatch, tmp_path):
    """A crash folder pre-created by another user, holding a symlink where the reproducer
    goes: the victim file is untouched and the reproducer lands in a private folder."""
    import hashlib
    text = VECTOR_ADD.replace("@add", "@planted") + "// CRASH\n"
    stem = "crash-" + hashlib.sha256(text.encode()).hexdigest()[:12]
    temp = tmp_path / "tmp"
    planted = temp / f"pywave-crashes-{os.getuid()}"
    planted.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (planted / f"{stem}.mlir").symlink_to(victim)
    os.chown(planted, 65534, 65534)
    os.chmod(planted, 0o777)
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setenv("PYWAVE_CACHE", "0")
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    isolation.shutdown()
    monkeypatch.setattr(isolation.connection, "BOOT", boot(CRASH_ON_MARK, str(tmp_path)))
    try:
        with pytest.raises(pywave.CompileError, match="SIGSEGV") as info:
            isolation.program(pipeline.Pipeline(text, target="sm_90", format="ptx"))
    finally:
        isolation.stop_server()
        isolation.shutdown()
    assert victim.read_text() == "precious"
    path = str(info.value).split("reproducer: ")[1].split()[0]
    # a whole-name check: the fallback mkdtemp folder may start with the planted name
    assert os.path.dirname(path) != str(planted)
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    assert open(path, encoding="utf-8").read() == text


def test_own_crash_folder_with_a_symlink_inside_is_not_followed(own_server, tmp_path):
    import hashlib
    own_server(CRASH_ON_MARK)
    text = VECTOR_ADD.replace("@add", "@inside") + "// CRASH\n"
    stem = "crash-" + hashlib.sha256(text.encode()).hexdigest()[:12]
    folder = tmp_path / "cache" / "crashes"
    folder.mkdir(parents=True, mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (folder / f"{stem}.mlir").symlink_to(victim)
    with pytest.raises(pywave.CompileError, match="SIGSEGV") as info:
        isolation.program(pipeline.Pipeline(text, target="sm_90", format="ptx"))
    assert victim.read_text() == "precious"
    assert str(info.value).split("reproducer: ")[1].split()[0].endswith(f"{stem}-1.mlir")


_MANY = """
import pywave
threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
texts = [TEXT.replace("@add", f"@many{i}") + "// SLOW\\n" for i in range(8)]
started = time.monotonic()
try:
    pywave.compile_many(texts, jobs=JOBS, target="sm_90", format="ptx", disk_cache=False)
    outcome = "finished"
except KeyboardInterrupt:
    outcome = "interrupted"
interrupted_after = time.monotonic() - started
absorb(time.sleep, 3.5)                  # the two running compiles finish on their threads
started = time.monotonic()
build("after_many", timeout=60)
print(json.dumps({"outcome": outcome, "after": interrupted_after,
                  "next": time.monotonic() - started, "workers": isolation.POOL.started()}))
"""


@pytest.mark.parametrize("jobs", [2, 4])
def test_ctrl_c_stops_compile_many_at_once(tmp_path, jobs):
    """8 compiles of 3 s on 2 or 4 workers, Ctrl-C after 1 s: KeyboardInterrupt within a
    second (not after the remaining compiles), and once the running ones end the pool is back
    within its default bound of 2 (4 workers stayed after an interrupted jobs=4)."""
    got = user_process(_MANY.replace("JOBS", str(jobs)), SLOW_ON_MARK, tmp_path)
    assert got["outcome"] == "interrupted" and got["after"] < 2.5, got
    assert got["next"] < 10 and got["workers"] <= 2, got
    _stop_servers(tmp_path)


_NO_SIGPIPE = """
signal.signal(signal.SIGPIPE, signal.SIG_DFL)     # as CLI tools piping into `head` do
build("first")
server = isolation.POOL._server.pid
(worker,) = isolation.POOL._idle
os.kill(server, signal.SIGKILL)
os.kill(worker.pid, signal.SIGKILL)
time.sleep(0.3)
build("second")                                   # writes to the dead server and worker
print(json.dumps({"ok": True}))
"""


def test_a_dead_server_never_raises_sigpipe_in_the_users_process(tmp_path):
    """With SIGPIPE's default action restored, the writes to a dead server's socket and a dead
    worker's pipe ended the user's process (status 141); they are errors pywave handles."""
    assert user_process(_NO_SIGPIPE, "pass", tmp_path) == {"ok": True}
    _stop_servers(tmp_path)


def test_compile_from_a_removed_working_folder(own_server, tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    _build("from_nowhere")
    assert _crash_files(tmp_path) == []


def test_compile_from_a_removed_working_folder_with_it_on_sys_path(tmp_path):
    """``python -c``, stdin and the REPL put '' (the working folder) first on sys.path; the
    toolkit search resolved it and raised FileNotFoundError once the folder was removed."""
    gone = tmp_path / "gone"
    gone.mkdir()
    code = ("import os, sys, pywave; os.rmdir(os.getcwd()); "
            "pywave.compile(sys.stdin.read(), target='sm_90', format='ptx', "
            "disk_cache=False, isolate=False); print('ok')")
    done = subprocess.run([sys.executable, "-c", code], input=VECTOR_ADD, text=True,
                          capture_output=True, timeout=120, cwd=str(gone))
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_crash_is_named_when_its_exit_status_is_lost(own_server, tmp_path):
    """The server (which reaps workers) killed, then the reused worker crashes mid-compile:
    its fault handler's words on stderr still make it a crash, with a reproducer."""
    own_server(CRASH_ON_MARK)
    _build("before")
    os.kill(isolation.POOL._server.pid, signal.SIGKILL)
    time.sleep(0.3)
    with pytest.raises(pywave.CompileError, match="crashed.*exit status is unknown"):
        _build("crash_orphan", "// CRASH\n")
    assert len(_crash_files(tmp_path)) == 2


def test_socket_paths_are_counted_in_bytes(monkeypatch, tmp_path):
    from pywave.isolation import files
    wide = tmp_path / ("\u00e9" * 40)             # 40 characters, 80 bytes
    wide.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(wide))
    monkeypatch.setenv("TMPDIR", str(wide))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    folder = files.runtime_dir()
    assert len(os.fsencode(os.path.join(folder, "srv-" + "0" * 20 + ".sock"))) <= 107
