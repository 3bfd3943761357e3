"""Compile isolation at its limits (issue 34): any fd number, thousands of server clients,
a deadline on every wait (connect, greeting, half a reply, another process's start), the
handshake's identity check, frames of another shape, and resource limits. Each case runs
in a fresh process with its own runtime folder and a subprocess timeout (never hangs CI)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from conftest import TESTS

DATA = os.path.join(TESTS, "data")
VECTOR_ADD = os.path.join(DATA, "vector_add.mlir")

PRELUDE = textwrap.dedent(f"""
    import json, logging, os, socket, struct, sys, threading, time
    logging.basicConfig(level=logging.WARNING, format="LOG %(levelname)s %(message)s")
    import pywave
    from pywave.isolation import connection, protocol
    TEXT = open({VECTOR_ADD!r}).read()
    def compile(**kw):
        return pywave.compile(TEXT, target="sm_90", format="ptx", disk_cache=False, **kw)
""")


@pytest.fixture
def env(tmp_path):
    """A fresh runtime folder (own compile server) and cache; its server stopped after."""
    run = tempfile.mkdtemp(prefix="rt", dir="/tmp")     # short: a socket path's 108 bytes
    environment = dict(os.environ, XDG_RUNTIME_DIR=run, PYWAVE_CACHE_DIR=str(tmp_path / "c"),
                       PYWAVE_COMPILE_SERVER_IDLE="30")
    yield environment
    subprocess.run([sys.executable, "-c", "from pywave.isolation import connection; "
                    "connection.stop_server()"], env=environment, timeout=30)


def script(body: str, env: dict, timeout: float = 240, prefix: str = "",
           **kw) -> subprocess.CompletedProcess:
    """Run PRELUDE + ``prefix`` + ``body`` (dedented) in a fresh interpreter, bounded."""
    return subprocess.run([sys.executable, "-c", PRELUDE + prefix + textwrap.dedent(body)],
                          env=env,
                          capture_output=True, text=True, timeout=timeout, **kw)


def test_compile_with_more_than_1024_open_files(env):
    done = script("""
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
        keep = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
        assert max(keep) > 1024
        print(compile())
        print(compile(isolate=True))
    """, env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("functions=['main']") == 2


def _greetings(n: int, path: str) -> tuple[list, dict, str]:
    socks, kinds, reason = [], {}, ""
    for _ in range(n):
        s = socket_connect(path)
        head = _recv(s, 5)
        kind, size = __import__("struct").unpack("<cI", head)
        body = _recv(s, size)
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind == b"R":
            reason = __import__("json").loads(body)["reason"]
            s.close()
        else:
            socks.append(s)
    return socks, kinds, reason


def socket_connect(path: str):
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(path)
    return s


def _recv(s, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = s.recv(size - len(data))
        assert chunk, "the server closed a connection"
        data += chunk
    return data


def _start_server(env, fd_limit: int | None = None) -> str:
    def limit():
        if fd_limit is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))
    done = script("compile(); print(connection.server_path())", env, preexec_fn=limit)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def _raise_own_fd_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))


def test_server_serves_10000_clients(env):
    _raise_own_fd_limit(10_300)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    path = _start_server(env, fd_limit=None if hard == resource.RLIM_INFINITY else hard)
    socks, kinds, _ = _greetings(10_000, path)
    try:
        assert kinds == {b"H": 10_000}
        done = script("print(compile())", env)      # served while they are all connected
        assert done.returncode == 0, done.stderr[-2000:]
        assert "unavailable" not in done.stderr
    finally:
        for s in socks:
            s.close()


def test_server_refuses_clients_past_its_fd_limit_and_lives(env):
    _raise_own_fd_limit(2_400)
    path = _start_server(env, fd_limit=1_000)
    socks, kinds, reason = _greetings(1_100, path)
    try:
        assert kinds[b"H"] == 1_000 - 64 and kinds[b"R"] == 100 + 64
        assert "RLIMIT_NOFILE 1000" in reason
        done = script("print(compile()); print(compile())", env)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stderr.count("compile server unavailable") == 1     # said once
        assert "RLIMIT_NOFILE 1000" in done.stderr
    finally:
        for s in socks:
            s.close()
    assert script("compile(); print('ok')", env).stdout.strip() == "ok"   # still serving


def test_a_client_that_never_reads_stalls_nobody(env):
    path = _start_server(env)
    hog = socket_connect(path)
    hog.setblocking(False)
    sent = 0
    try:                        # requests without fds: each gets a reply it never reads
        while sent < 1_000_000:
            sent += hog.send(b"F" + bytes(8) * 1)
    except BlockingIOError:
        pass
    start = time.monotonic()
    done = script("print(compile())", env)
    took = time.monotonic() - start
    hog.close()
    assert done.returncode == 0, done.stderr[-2000:]
    assert took < 60, took


def test_slow_clients_during_a_compile_leave_its_result_intact(env):
    """While other connections of the shared server write without reading (four of them,
    flooding until dropped, then reconnecting), hold half a request, or stay silent, a
    second process's compiles through the same server all return the same PTX as one done
    before the hogs started, and the server still serves afterwards. The subprocess
    timeouts are the watchdog; nothing here is a timing."""
    import threading
    path = _start_server(env)
    body = "import hashlib; print(hashlib.sha256(compile().binaries[0].data).hexdigest())"
    want = script(body, env)
    assert want.returncode == 0, want.stderr[-2000:]
    stop = threading.Event()
    dropped = []

    def flood():
        while not stop.is_set():
            try:
                s = socket_connect(path)
            except OSError:
                continue
            s.setblocking(False)
            try:
                while not stop.is_set():
                    try:
                        s.send(b"F" + bytes(8) * 64)       # requests, replies never read
                    except BlockingIOError:
                        time.sleep(0.001)
            except OSError:
                dropped.append(1)                       # the server dropped it
            finally:
                s.close()
    halves = [socket_connect(path) for _ in range(20)]
    for h in halves:
        h.send(b"F\0\0\0")                               # half a request, held open
    silent = [socket_connect(path) for _ in range(200)]
    floods = [threading.Thread(target=flood, daemon=True) for _ in range(4)]
    for t in floods:
        t.start()
    try:
        got = script("for _ in range(5):\n    " + body.replace("; ", "\n    "), env, timeout=180)
    finally:
        stop.set()
        for t in floods:
            t.join(30)
        for s in halves + silent:
            s.close()
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.split() == want.stdout.split() * 5, (got.stdout, want.stdout)
    assert dropped, "no flooding connection was dropped: the hogs did not hog"
    again = script(body, env)
    assert again.stdout.split() == want.stdout.split(), again.stderr[-2000:]


FAKE_SERVER = """
    path = connection.server_path()
    try: os.unlink(path)
    except FileNotFoundError: pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(BACKLOG)
    held = []
    def serve():
        while ACCEPT:
            conn, _ = listener.accept()
            held.append(conn)
            body = json.dumps(IDENTITY).encode()
            conn.sendall(struct.pack("<cI", b"H", len(body)) + body)
            socket.recv_fds(conn, 9, 5)
            conn.sendall(b"\\0" * 8)          # half a reply, then nothing
    threading.Thread(target=serve, daemon=True).start()
"""


def _fake(identity: str = "protocol.identity()", backlog: int = 8, accept: bool = True):
    return (f"IDENTITY = {identity}\nBACKLOG = {backlog}\nACCEPT = {accept}\n"
            + textwrap.dedent(FAKE_SERVER))


def test_half_a_reply_is_bounded_by_the_time_limit(env):
    done = script("""
        t = time.monotonic()
        try:
            compile(timeout=3)
        except pywave.CompileError as exc:
            print("CompileError", round(time.monotonic() - t, 1), exc)
    """, env, prefix=_fake(), timeout=60)
    assert "CompileError" in done.stdout, done.stderr[-2000:]
    assert float(done.stdout.split()[1]) < 6
    assert "time limit" in done.stdout


def test_half_a_reply_then_the_server_is_replaced(env):
    done = script("""
        t = time.monotonic()
        print(compile(timeout=120), round(time.monotonic() - t, 1))
    """, env, prefix=_fake(), timeout=200)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "did not answer within 10 s" in done.stderr
    assert float(done.stdout.split()[-1]) < 100


def test_ctrl_c_interrupts_the_wait_for_half_a_reply(env):
    proc = subprocess.Popen([sys.executable, "-c", PRELUDE + _fake() + textwrap.dedent("""
        print("waiting", flush=True)
        try:
            compile(timeout=100)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "waiting"
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert "interrupted" in out, err[-2000:]


def test_a_server_with_a_full_backlog_is_bounded(env):
    done = script("""
        for _ in range(4):              # fill the backlog of a server that never accepts
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.setblocking(False)
            try: s.connect(path)
            except BlockingIOError: break
            held.append(s)
        t = time.monotonic()
        try:
            compile(timeout=3)
            print("done", round(time.monotonic() - t, 1))
        except pywave.CompileError as exc:
            print("CompileError", round(time.monotonic() - t, 1), exc)
    """, env, prefix=_fake(backlog=0, accept=False), timeout=60)
    assert done.stdout.split()[:1] in (["done"], ["CompileError"]), done.stderr[-2000:]
    assert float(done.stdout.split()[1]) < 6


def test_a_start_that_hangs_elsewhere_makes_this_process_fall_back(env):
    holder = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent("""
        import fcntl
        fd = os.open(connection.server_path() + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        print("holding", flush=True)
        time.sleep(120)
    """)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        done = script("""
            connection.START_LOCK_SECONDS = 2.0
            t = time.monotonic()
            print(compile(timeout=60)); print(compile(timeout=60))
            print(round(time.monotonic() - t, 1))
        """, env, timeout=120)
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.count("compile server unavailable") == 1
    assert "starting the compile server for over 2 s" in done.stderr


def test_a_server_of_another_version_is_replaced(env):
    done = script("""
        print(compile(timeout=60))
        print(connection.server_path() and os.path.exists(connection.server_path()))
    """, env, prefix=_fake('dict(protocol.identity(), pywave="0.0.1")'), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pywave '0.0.1'" in done.stderr and "differs" in done.stderr


def test_a_foreign_listener_that_never_greets_is_replaced(env):
    done = script("""
        print(compile(timeout=60))
    """, env, timeout=120,
              prefix=_fake().replace("conn.sendall(struct", "0 and conn.sendall(struct"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "did not greet" in done.stderr


@pytest.mark.parametrize("frame", ['("start", "extra")', '("stage", 5)', '"junk"',
                                   '("done", "maybe", 1, 2)'])
def test_a_worker_frame_of_another_shape_is_a_typed_error(env, frame):
    boot = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
            "from pywave.isolation import protocol; real = protocol.frame; "
            f"protocol.frame = lambda v: real({frame}) if v == ('start',) else real(v); "
            "from pywave import isolation; isolation.serve()")
    done = script(f"""
        connection.BOOT = {boot!r}
        try:
            compile(timeout=60)
        except pywave.CompileError as exc:
            print("CompileError:", exc)
    """, dict(env, PYWAVE_COMPILE_SERVER="0"), timeout=120)
    assert "CompileError:" in done.stdout, done.stderr[-2000:]
    assert "sent a" in done.stdout and "reproducer" not in done.stdout


def _ulimit(option: str, value: str, body: str, env) -> subprocess.CompletedProcess:
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run(["bash", "-c", f'ulimit {option} {value} && exec "$0" -c "$1"',
                           sys.executable, code], env=env, capture_output=True, text=True,
                          timeout=300)


RESULT = """
    for isolate in (True, False):
        try:
            print(isolate, "ok", compile(isolate=isolate))
        except pywave.CompileError as exc:
            print(isolate, "CompileError", exc)
"""


def test_an_address_space_limit_is_no_false_crash(env):
    done = _ulimit("-v", "1500000", RESULT, env)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("True ok") or ("RLIMIT_AS" in lines[0]
                                              and "isolate=False" in lines[0]), lines
    assert "crashed" not in done.stdout and "reproducer" not in done.stdout


def test_a_process_limit_is_a_typed_error_naming_it(env):
    done = _ulimit("-u", "10", RESULT, env)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    first = done.stdout.splitlines()[0]
    assert first.startswith("True ok") or ("RLIMIT_NPROC" in first
                                           and "isolate=False" in first), first
    assert done.stdout.splitlines()[1].startswith("False ok")


#: The unprivileged user the RLIMIT_NPROC test runs as (root is exempt from that limit:
#: the kernel does not count its processes).
NPROC_USER = "pywave-nproc"


@pytest.fixture
def unprivileged(tmp_path):
    """(uid, gid, runtime folder, cache folder) of :data:`NPROC_USER`, created with
    ``useradd`` when missing. Skips unless this is root with useradd and setpriv."""
    import pwd
    import shutil
    if os.geteuid() != 0:
        pytest.skip("RLIMIT_NPROC binds only a non-root user: creating one needs root")
    for tool in ("useradd", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"no {tool} on PATH: cannot run a compile as a non-root user")
    try:
        user = pwd.getpwnam(NPROC_USER)
    except KeyError:
        made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                               "/usr/sbin/nologin", NPROC_USER], capture_output=True,
                              text=True, timeout=60)
        if made.returncode != 0:
            pytest.skip(f"useradd {NPROC_USER} failed: {made.stderr.strip()}")
        user = pwd.getpwnam(NPROC_USER)
    run = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    cache = str(tmp_path / "cache")
    os.mkdir(cache)
    for folder in (run, cache):
        os.chown(folder, user.pw_uid, user.pw_gid)
    os.chmod(tmp_path, 0o755)
    yield user.pw_uid, user.pw_gid, run, cache


def _as_user(ids, nproc: int | None, body: str) -> subprocess.CompletedProcess:
    """``body`` after PRELUDE in a fresh interpreter run as the unprivileged user (keeping
    only CAP_DAC_READ_SEARCH, so an interpreter under /root stays readable; no
    CAP_SYS_RESOURCE, so RLIMIT_NPROC binds), under ``ulimit -u nproc``."""
    uid, gid, run, cache = ids
    env = dict(os.environ, XDG_RUNTIME_DIR=run, PYWAVE_CACHE_DIR=cache, HOME=run,
               PYWAVE_COMPILE_SERVER_IDLE="30",
               OPENBLAS_NUM_THREADS="1")   # numpy's own import needs a thread per CPU
    limit = f"ulimit -u {nproc} && " if nproc is not None else ""
    return subprocess.run(
        ["bash", "-c", limit + 'exec setpriv --reuid="$2" --regid="$3" --clear-groups '
         '--inh-caps=+dac_read_search --ambient-caps=+dac_read_search "$0" -c "$1"',
         sys.executable, PRELUDE + textwrap.dedent(body), str(uid), str(gid)],
        env=env, capture_output=True, text=True, timeout=300, cwd="/")


@pytest.mark.parametrize("nproc", [1, 2, 3, 10])
def test_a_process_limit_as_a_non_root_user_is_a_typed_error_naming_it(unprivileged, nproc):
    """As a non-root user under ``ulimit -u``: an isolated compile either works or is a
    CompileError naming RLIMIT_NPROC, its value and isolate=False (never a raw
    BlockingIOError/RuntimeError, a traceback or a crash report); in-process it works.
    At 1 (this process alone) no worker can start: that one must be the CompileError."""
    try:
        check = _as_user(unprivileged, None, "print(os.getuid())")
        assert check.stdout.strip() == str(unprivileged[0]), check.stderr[-2000:]
        done = _as_user(unprivileged, nproc, RESULT)
    finally:
        _as_user(unprivileged, None, "connection.stop_server()")
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2, (done.stdout, done.stderr[-2000:])
    if nproc == 1:
        assert lines[0].startswith("True CompileError"), lines[0]
    assert lines[0].startswith("True ok") or (
        f"RLIMIT_NPROC, `ulimit -u`: {nproc})" in lines[0] and "isolate=False" in lines[0]
        and "crashed" not in lines[0] and "reproducer" not in lines[0]), lines[0]
    assert lines[1].startswith("False ok"), lines[1]


def test_pywave_changed_under_the_process_is_a_compile_error_saying_restart(env):
    done = script("""
        protocol.identity()
        protocol._IDENTITY["pywave"] = "0.0.9"     # what this process loaded, say
        try:
            compile(timeout=120)
        except pywave.CompileError as exc:
            print("CompileError:", exc)
    """, env, timeout=200)
    assert "CompileError:" in done.stdout, done.stderr[-2000:]
    assert "restart the process" in done.stdout and "'0.0.9'" in done.stdout
