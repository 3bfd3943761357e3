"""Start-up of compile isolation (issue 35, items 1-3): the PYWAVE_TRACE timeline, the idle
compile server's lifetime, files and memory, and the first compile of a machine. No timing
is asserted: each case checks behaviour, in a fresh process with a runtime folder of its
own and a subprocess timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from pywave.isolation import options, server

from conftest import DATA

VECTOR_ADD = os.path.join(DATA, "vector_add.mlir")

needs_server = pytest.mark.skipif(not options.server_enabled(),
                                  reason="the compile server needs Linux (fork, pidfd)")

COMPILE = textwrap.dedent(f"""
    import os, pywave
    from pywave.isolation import POOL
    pywave.compile(open({VECTOR_ADD!r}).read(), target="sm_90", format="ptx",
                   disk_cache=False)
    print(POOL._server.pid if POOL._server is not None else 0)
""")


@pytest.fixture
def env(tmp_path):
    """A fresh runtime folder (a server of its own, idle 2 s) and cache."""
    run = tempfile.mkdtemp(prefix="rt", dir="/tmp")     # short: a socket path's 108 bytes
    environment = dict(os.environ, XDG_RUNTIME_DIR=run, PYWAVE_CACHE_DIR=str(tmp_path / "c"),
                       PYWAVE_COMPILE_SERVER_IDLE="2", PYWAVE_COMPILE_SERVER_TRIM="1")
    environment.pop("PYWAVE_ISOLATE", None)
    environment.pop("PYWAVE_COMPILE_SERVER", None)
    yield environment
    subprocess.run([sys.executable, "-c", "from pywave.isolation import connection; "
                    "connection.stop_server()"], env=environment, timeout=30)


def _run(env: dict, code: str = COMPILE) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pid: int, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if _gone(pid):
            return True
        time.sleep(0.1)
    return _gone(pid)


def _resident(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) << 10
    raise AssertionError("no VmRSS")


@needs_server
def test_server_exits_after_its_idle_time_and_leaves_no_file(env):
    first = int(_run(env).stdout.split()[-1])
    assert first > 0 and not _gone(first)                  # it outlives its first client
    folder = os.path.join(env["XDG_RUNTIME_DIR"], "pywave")
    assert any(name.startswith("srv-") for name in os.listdir(folder))
    assert _wait_gone(first, 30), "the server did not exit after its idle time of 2 s"
    assert os.listdir(folder) == []                         # no .sock, .log nor .lock


@needs_server
def test_a_server_started_by_the_first_compile_serves_later_processes(env):
    first = int(_run(env).stdout.split()[-1])
    second = int(_run(env).stdout.split()[-1])
    assert first > 0 and second == first


@needs_server
def test_an_idle_server_gives_back_its_memory_and_still_forks(env):
    pid = int(_run(dict(env, PYWAVE_COMPILE_SERVER_IDLE="60")).stdout.split()[-1])
    before = _resident(pid)
    end = time.monotonic() + 30
    while _resident(pid) > before // 2 and time.monotonic() < end:
        time.sleep(0.2)
    after = _resident(pid)
    assert after <= before // 2, (before, after)            # trimmed after 1 s without forks
    assert int(_run(env).stdout.split()[-1]) == pid          # and its workers still compile


def test_trim_keeps_a_process_working():
    code = textwrap.dedent(f"""
        from pywave.isolation import server, worker
        from pywave import api
        worker.preload()
        server.trim()
        art = api.build(open({VECTOR_ADD!r}).read(), target="sm_90", format="ptx")
        print(len(art.binaries))
    """)
    done = _run(dict(os.environ), code)
    assert done.stdout.split()[-1] == "1"


def test_the_lock_is_removed_only_when_nobody_holds_it(tmp_path):
    import fcntl
    path = str(tmp_path / "srv-x.sock.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    assert not server.remove_lock(path) and os.path.exists(path)
    os.close(fd)
    assert server.remove_lock(path) and not os.path.exists(path)
    assert not server.remove_lock(path)


def test_trace_lines_of_the_client_and_of_every_process_in_a_file(env, tmp_path):
    to_stderr = _run(dict(env, PYWAVE_TRACE="1"))
    lines = [line for line in to_stderr.stderr.splitlines() if line.startswith("pywave-trace")]
    assert lines and all(line.split()[3] == "client" for line in lines)
    assert any("done (ok)" in line for line in lines)
    trace_file = tmp_path / "trace.txt"
    _run(dict(env, PYWAVE_TRACE=str(trace_file)))
    roles = {line.split()[3] for line in trace_file.read_text().splitlines()}
    assert roles >= {"client", "worker"}
    stamps = [float(line.split()[1]) for line in trace_file.read_text().splitlines()]
    assert stamps and min(stamps) > 0


def test_trim_setting_is_validated(monkeypatch):
    from pywave.errors import Error
    monkeypatch.setenv(options.ENV_SERVER_TRIM, "soon")
    with pytest.raises(Error, match="PYWAVE_COMPILE_SERVER_TRIM='soon'"):
        options.server_trim()
    monkeypatch.setenv(options.ENV_SERVER_TRIM, "2.5")
    assert options.server_trim() == 2.5
    monkeypatch.delenv(options.ENV_SERVER_TRIM)
    assert options.server_trim() == options.DEFAULT_SERVER_TRIM


def test_warm_up_compiles_every_stage_and_leaves_one_thread():
    """The compile server's warm-up (a fork server: one thread before and after) compiles
    its module, and a compile after it still works."""
    code = textwrap.dedent(f"""
        import os
        from pywave.isolation import worker
        from pywave import api
        worker.preload()
        assert worker.warm_up()
        assert len(os.listdir("/proc/self/task")) == 1, os.listdir("/proc/self/task")
        art = api.build(open({VECTOR_ADD!r}).read(), target="sm_90", format="ptx")
        print(len(art.binaries), sorted(art.seconds))
    """)
    # as in a server (connection.process_env): no OpenBLAS thread pool from NumPy
    done = _run(dict(os.environ, PYWAVE_DUMP_DIR="", OPENBLAS_NUM_THREADS="1"), code)
    assert done.stdout.split()[0] == "1"


@needs_server
def test_the_server_warms_up_after_forking_the_first_worker(env, tmp_path):
    """The first request is forked before the warm-up (which must not delay it); the next
    process's worker is forked from the warmed server."""
    trace_file = tmp_path / "trace.txt"
    traced = dict(env, PYWAVE_TRACE=str(trace_file))
    _run(traced)
    end = time.monotonic() + 60
    while "warm-up compile done" not in trace_file.read_text() and time.monotonic() < end:
        time.sleep(0.1)
    _run(traced)
    events = [line.split(None, 4)[4] for line in sorted(
        trace_file.read_text().splitlines(), key=lambda line: float(line.split()[1]))
        if line.split()[3] == "server"]
    forks = [i for i, e in enumerate(events) if e.startswith("forked worker")]
    begins, done = events.index("warm-up compile begins"), events.index("warm-up compile done")
    assert len(forks) == 2 and forks[0] < begins < done < forks[1], events
