"""Compile isolation: the MLIR and LLVM work of a compile runs in a worker process.

A crash, abort, stack overflow or hang in MLIR or LLVM then costs the worker, not the
user's process: it becomes a :class:`~pywave.errors.CompileError` naming the stage the
worker was in, quoting the last message the tool wrote to stderr (an assertion, ``LLVM
ERROR: ...``) and the path of a saved reproducer (the input text and the options).

Design (measured in the issue notes): a small pool of warm workers serving compiles over a
pipe (length-prefixed pickles). The first time the pool needs a worker it starts one compile
server ("zygote"): a ``python -c`` child of the same interpreter and ``sys.path`` that imports
MLIR, llvmlite and pywave's stages once, holds no thread but its main one (checked), and
forks a worker for each request on a Unix socket, in milliseconds instead of an
interpreter's start and imports (0.75 s, 1.5-2 s when 16-32 start at once). The request
carries the worker's pipes and stderr file (SCM_RIGHTS); the server reaps its workers and
sends each one's exit status back on a status pipe, so a crash is still named by its
signal. Workers close every fd but their own (nothing of the user's process reaches them)
and exit when the user's process is gone (a pidfd), as does the server; a killed server is
restarted by the next worker start. Where the server cannot run (not Linux, or it fails to
start) workers start directly as a ``python -c`` child each. A request is
a :class:`pywave.pipeline.Pipeline` (plain data: the text, the target resolved in the
parent, the options, the loaded replacement images); the answer is its
:class:`~pywave.pipeline.Artifacts` or :class:`~pywave.program.Program` (plain data too),
or the exception it raised. Each request carries the parent's environment and working
folder. The worker's ``pywave`` log records are re-emitted in the
parent, at the parent's level. A worker that died is replaced on the next compile; the
parent never imports MLIR. The worker runs each build on a thread with a large stack, so
deeply nested input that overflows an 8 MiB stack compiles or fails with a typed error.

Environment: ``PYWAVE_ISOLATE=0`` compiles in-process (for debuggers), as does
``isolate=False``; ``PYWAVE_COMPILE_TIMEOUT`` (seconds, default 300) bounds one compile;
``PYWAVE_COMPILE_WORKERS`` (default 2) bounds the number of concurrent workers; a call may
raise that bound for itself (``workers=``, used by :func:`pywave.compile_many`), and
:func:`trim` then stops the idle workers above the default bound; ``PYWAVE_COMPILE_SERVER=0``
starts each worker directly instead of forking it from the compile server.
"""

from __future__ import annotations

import atexit
import errno
import json
import logging
import os
import pickle
import re
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable

from . import validate
from .errors import CompileError, Error

if TYPE_CHECKING:
    from .pipeline import Artifacts, Pipeline
    from .program import Program

log = logging.getLogger("pywave.isolation")

ENV_ISOLATE = "PYWAVE_ISOLATE"
ENV_TIMEOUT = "PYWAVE_COMPILE_TIMEOUT"
ENV_WORKERS = "PYWAVE_COMPILE_WORKERS"
ENV_SERVER = "PYWAVE_COMPILE_SERVER"
DEFAULT_TIMEOUT = 300.0
DEFAULT_WORKERS = 2
#: Stack of the worker's build thread: deep nesting recurses in MLIR's parser and verifier.
WORKER_STACK_BYTES = 1 << 30
_HEADER = struct.Struct("<Q")
_STDERR_TAIL_BYTES = 64 * 1024
_MESSAGE_PATTERNS = (re.compile(r"Assertion .* failed"), re.compile(r"LLVM ERROR:"),
                     re.compile(r"terminate called|what\(\):"),
                     re.compile(r"Fatal Python error"), re.compile(r"\berror\b", re.I))


# --------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------
def enabled(isolate: bool | None) -> bool:
    """Whether a compile runs in a worker: ``isolate`` if given, else ``$PYWAVE_ISOLATE``."""
    validate.isolate(isolate)
    if isolate is not None:
        return isolate
    value = os.environ.get(ENV_ISOLATE, "1").strip().lower()
    return value not in ("0", "false", "no", "off")


def server_enabled() -> bool:
    """Whether workers are forked by the compile server: on Linux (fork, pidfd, fd passing)
    unless ``$PYWAVE_COMPILE_SERVER`` is 0; else each worker starts its own interpreter."""
    import socket
    if not (hasattr(os, "fork") and hasattr(os, "pidfd_open")
            and hasattr(socket, "send_fds") and hasattr(signal, "pidfd_send_signal")):
        return False
    value = os.environ.get(ENV_SERVER, "1").strip().lower()
    return value not in ("0", "false", "no", "off")


def time_limit(timeout: float | None) -> float:
    """Seconds one isolated compile may take: ``timeout``, else ``$PYWAVE_COMPILE_TIMEOUT``."""
    if timeout is not None:
        return validate.timeout(timeout)
    raw = os.environ.get(ENV_TIMEOUT)
    if raw is None:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise Error(f"{ENV_TIMEOUT}={raw!r} is not a number of seconds") from None
    return validate.timeout(value, ENV_TIMEOUT)


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------
def artifacts(compiler: "Pipeline", *, isolate: bool | None = None,
              timeout: float | None = None) -> "Artifacts":
    """``compiler.run()`` (:class:`pywave.pipeline.Artifacts`), in a worker unless isolation
    is off (``isolate=False`` or ``$PYWAVE_ISOLATE=0``). ``timeout``: seconds (default
    ``$PYWAVE_COMPILE_TIMEOUT``, else 300). The parent imports no MLIR on this path."""
    return _run("artifacts", compiler, isolate, timeout)


def program(compiler: "Pipeline", *, isolate: bool | None = None,
            timeout: float | None = None, workers: int | None = None) -> "Program":
    """``compiler.run().program()`` (:class:`pywave.program.Program`, what the compile cache
    stores), in a worker unless isolation is off; as :func:`artifacts`. ``workers``: the
    bound on concurrent workers while this call waits for one (default
    ``$PYWAVE_COMPILE_WORKERS``, else 2); thread-safe."""
    return _run("program", compiler, isolate, timeout, workers)


def _run(kind: str, compiler: "Pipeline", isolate: bool | None, timeout: float | None,
         workers: int | None = None):
    limit = time_limit(timeout)
    if not enabled(isolate):
        return _build_here(kind, compiler)
    if workers is None:
        return _POOL.run(kind, compiler, limit)
    return _POOL.run(kind, compiler, limit, workers=workers)


def _build_here(kind: str, compiler: "Pipeline"):
    done = compiler.run()
    return done.program() if kind == "program" else done


# --------------------------------------------------------------------------------------------
# Stage reporting (called by api.build)
# --------------------------------------------------------------------------------------------
_stage_listener: Callable[[str], None] | None = None


def stage_finished(stage: str) -> None:
    """Hook of :class:`pywave.pipeline.Recorder`: ``stage`` is done (a worker tells its
    parent, which then knows the stage a crash or hang happened in)."""
    if _stage_listener is not None:
        _stage_listener(stage)


def next_stage(finished: str | None) -> str:
    """The stage running after ``finished`` (None: nothing finished yet)."""
    from .pipeline import STAGES
    if finished is None:
        return STAGES[0]
    if finished in STAGES and finished != STAGES[-1]:
        return STAGES[STAGES.index(finished) + 1]
    return f"after {finished}"


# --------------------------------------------------------------------------------------------
# Parent side: workers and the pool
# --------------------------------------------------------------------------------------------
class WorkerDied(Exception):
    """The worker exited, was killed or timed out; carries what the parent knows."""

    def __init__(self, reason: str, stage: str, stderr: str) -> None:
        super().__init__(reason)
        self.reason, self.stage, self.stderr = reason, stage, stderr


_BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
         "from pywave import isolation; isolation.serve()")


def _process_env() -> dict[str, str]:
    """The environment a compile process starts with: the user's, compiles in-process, and
    one BLAS thread (numpy, which MLIR's Python bindings import, otherwise starts a thread
    per CPU in each process; a fork server must hold no thread but its main one)."""
    env = dict(os.environ)
    env[ENV_ISOLATE] = "0"
    env["OPENBLAS_NUM_THREADS"] = "1"
    return env


class _Worker:
    """One warm worker: a request pipe, a reply pipe and stderr in a temporary file
    (truncated before each request). Subclasses start the process and know its exit."""

    pid: int
    stderr: Any

    def __init__(self) -> None:
        self._buffer = b""

    def _send(self, data: bytes) -> None:
        raise NotImplementedError

    def _reply_fd(self) -> int:
        raise NotImplementedError

    def exit_code(self) -> int | None:
        """The worker's exit status once it is gone (negative: the signal), None if unknown;
        kills it if it does not exit within 10 s."""
        raise NotImplementedError

    def kill(self) -> None:
        raise NotImplementedError

    def discard(self) -> None:
        """Kill the worker and close its pipes and stderr file."""
        raise NotImplementedError

    def close(self) -> None:
        """Ask the worker to exit (EOF on its requests), then make sure it did."""
        raise NotImplementedError

    def request(self, kind: str, compiler: "Pipeline", limit: float):
        """Send one compile; return ("ok", value) or ("error", exception). Stage frames
        track progress, log frames are re-emitted here."""
        self.stderr.seek(0)
        self.stderr.truncate()
        message = {"kind": kind, "pipeline": compiler, "env": dict(os.environ),
                   "cwd": os.getcwd(), "log_level": log.parent.getEffectiveLevel()}
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        finished: str | None = None
        deadline = time.monotonic() + limit
        try:
            self._send(_HEADER.pack(len(payload)) + payload)
        except OSError:
            raise self._died(next_stage(finished)) from None
        while True:
            frame = self._read_frame(deadline, finished, limit)
            tag = frame[0]
            if tag == "stage":
                finished = frame[1]
                continue
            if tag == "log":
                record = logging.makeLogRecord(frame[1])
                logging.getLogger(record.name).handle(record)
                continue
            return frame

    def _read_frame(self, deadline: float, finished: str | None, limit: float) -> tuple:
        while True:
            if len(self._buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(self._buffer)
                if len(self._buffer) >= _HEADER.size + size:
                    body = self._buffer[_HEADER.size:_HEADER.size + size]
                    self._buffer = self._buffer[_HEADER.size + size:]
                    return pickle.loads(body)
            left = deadline - time.monotonic()
            fd = self._reply_fd()
            ready, _, _ = select.select([fd], [], [], max(left, 0.0))
            if not ready:
                self.kill()
                raise WorkerDied(f"did not finish within the time limit of {limit:g} s "
                                 f"(timeout= or ${ENV_TIMEOUT}); the worker was killed",
                                 next_stage(finished), self.stderr_tail())
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise self._died(next_stage(finished))
            self._buffer += chunk

    def _died(self, stage: str) -> WorkerDied:
        return WorkerDied(describe_exit(self.exit_code()), stage, self.stderr_tail())

    def stderr_tail(self) -> str:
        return _tail(self.stderr)


def _tail(stderr) -> str:
    """The last ``_STDERR_TAIL_BYTES`` of a process's stderr file ("" when unreadable)."""
    try:
        size = stderr.seek(0, os.SEEK_END)
        stderr.seek(max(0, size - _STDERR_TAIL_BYTES))
        return stderr.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""


def _stderr_file(prefix: str = "pywave-worker-"):
    import tempfile
    return tempfile.TemporaryFile(mode="w+b", prefix=prefix)


class _SpawnedWorker(_Worker):
    """A worker started directly: ``python -c BOOT`` with stdin/stdout pipes (the fallback
    when the compile server cannot be used; about 0.75 s to start, MLIR imported)."""

    def __init__(self) -> None:
        super().__init__()
        self.stderr = _stderr_file()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, json.dumps(sys.path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
            env=_process_env(), close_fds=True)
        self.pid = self.proc.pid
        log.debug("started compile worker %d", self.pid)

    def _send(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def _reply_fd(self) -> int:
        return self.proc.stdout.fileno()

    def exit_code(self) -> int | None:
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def discard(self) -> None:
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout, self.stderr):
            try:
                stream.close()
            except OSError:
                pass

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()
        self.proc.stdout.close()
        self.stderr.close()


class ServerUnavailable(Exception):
    """The compile server could not be started or stopped answering."""


class _Server:
    """The pre-loaded compile server ("zygote"): a ``python -c BOOT`` child that imports
    what a compile needs once, holds no thread but its main one, and forks a warm worker
    (milliseconds) for each request on a Unix socket; the request carries the worker's
    pipes and stderr file (SCM_RIGHTS). It reaps its workers and writes each one's wait
    status to the status pipe that came with it. Thread-safe (one request at a time)."""

    #: Seconds to wait for a reply: the first waits for the server's imports.
    REPLY_TIMEOUT = 120.0

    def __init__(self) -> None:
        import socket
        self._socket_module = socket
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.stderr = _stderr_file("pywave-server-")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, json.dumps(sys.path), str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.stderr,
                env=_process_env(), close_fds=True, pass_fds=(theirs.fileno(),))
        except BaseException:
            ours.close()
            self.stderr.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.pid = self.proc.pid
        self.forked = False
        self._lock = threading.Lock()
        log.debug("started compile server %d", self.pid)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self, fds: list[int]) -> int:
        """A new worker with ``fds`` (requests, replies, stderr, status) as its fds 0, 1, 2
        and the status pipe; returns its pid. Raises ServerUnavailable."""
        with self._lock:
            try:
                self._socket_module.send_fds(self.sock, [b"F"], fds)
                reply = self._receive(_PID.size)
            except OSError as exc:
                raise self._failure(str(exc)) from None
        (pid,) = _PID.unpack(reply)
        if pid <= 0:
            raise ServerUnavailable(f"server {self.pid} cannot fork: {os.strerror(-pid)}")
        self.forked = True
        return pid

    def _receive(self, size: int) -> bytes:
        data = b""
        deadline = time.monotonic() + self.REPLY_TIMEOUT
        while len(data) < size:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.sock], [], [], max(left, 0.0))
            if not ready:
                raise ServerUnavailable(f"server {self.pid} did not answer within "
                                        f"{self.REPLY_TIMEOUT:g} s")
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise self._failure("closed its socket")
            data += chunk
        return data

    def _failure(self, detail: str) -> ServerUnavailable:
        """What is known of a server that stopped answering: ``detail``, its exit, the
        last line it wrote to stderr."""
        try:
            code: int | None = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        said = last_message(self.stderr_tail())
        return ServerUnavailable(f"server {self.pid} {describe_exit(code)} ({detail})"
                                 + (f": {said}" if said else ""))

    def stderr_tail(self) -> str:
        return _tail(self.stderr)

    def close(self) -> None:
        """Stop the server (EOF on its socket; killed after 5 s). Its workers live on until
        their requests pipe closes or the user's process exits."""
        self.sock.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


_PID = struct.Struct("<q")
_STATUS = struct.Struct("<q")


class _ForkedWorker(_Worker):
    """A worker forked by the compile server: pipes made here, passed to the server; its
    exit status arrives on a status pipe (the server is its parent and reaps it)."""

    def __init__(self, server: _Server) -> None:
        super().__init__()
        self.stderr = _stderr_file()
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        status_r, status_w = os.pipe()
        try:
            self.pid = server.fork([requests_r, replies_w, self.stderr.fileno(), status_w])
        except BaseException:
            for fd in (requests_w, replies_r, status_r):
                os.close(fd)
            self.stderr.close()
            raise
        finally:
            for fd in (requests_r, replies_w, status_w):
                os.close(fd)
        self._requests = os.fdopen(requests_w, "wb")
        self._replies, self._status = replies_r, status_r
        self._code: int | None = None
        self._gone = False
        try:
            self._pidfd: int | None = os.pidfd_open(self.pid)
        except OSError:     # it already exited (and was reaped): the status pipe says how
            self._pidfd = None
        log.debug("forked compile worker %d from server %d", self.pid, server.pid)

    def _send(self, data: bytes) -> None:
        self._requests.write(data)
        self._requests.flush()

    def _reply_fd(self) -> int:
        return self._replies

    def _wait_status(self, seconds: float) -> bool:
        """Read the exit status the server sends (False: none within ``seconds``)."""
        if self._gone:
            return True
        ready, _, _ = select.select([self._status], [], [], seconds)
        if not ready:
            return False
        data = os.read(self._status, _STATUS.size)
        if len(data) == _STATUS.size:
            self._code = os.waitstatus_to_exitcode(_STATUS.unpack(data)[0])
        self._gone = True           # else the server is gone: the status is unknown
        return True

    def exit_code(self) -> int | None:
        if not self._wait_status(10.0):
            self.kill()
        return self._code

    def kill(self) -> None:
        if self._gone:
            return
        if self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._wait_status(10.0)
        self._gone = True

    def _close_fds(self) -> None:
        for close in (self._requests.close, self.stderr.close):
            try:
                close()
            except OSError:
                pass
        for fd in (self._replies, self._status, self._pidfd):
            if fd is not None:
                os.close(fd)

    def discard(self) -> None:
        self.kill()
        self._close_fds()

    def close(self) -> None:
        try:
            self._requests.close()
        except OSError:
            pass
        if not self._wait_status(5.0):
            self.kill()
        self._close_fds()


def describe_exit(code: int | None) -> str:
    """``crashed with SIGSEGV (signal 11)`` / ``exited with status 3``."""
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (a stack overflow or an invalid memory access)" if -code == signal.SIGSEGV \
            else ""
        return f"crashed with {name} (signal {-code}){hint}"
    return f"exited with status {code}"


def last_message(stderr: str) -> str:
    """The most telling line a dying tool wrote: an assertion, ``LLVM ERROR``, a C++
    exception, else the last non-empty line (at most 600 characters)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for pattern in _MESSAGE_PATTERNS:
        for line in reversed(lines):
            if pattern.search(line):
                return line[:600]
    return lines[-1][:600] if lines else ""


class _Pool:
    """At most ``$PYWAVE_COMPILE_WORKERS`` workers; thread-safe; forgets its workers in a
    forked child (the pipes belong to the parent)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._count = 0
        self._pid = os.getpid()
        self._server_lock = threading.Lock()
        self._server: _Server | None = None
        self._server_broken = False

    def _size(self) -> int:
        raw = os.environ.get(ENV_WORKERS, str(DEFAULT_WORKERS))
        try:
            size = int(raw)
        except ValueError:
            raise Error(f"{ENV_WORKERS}={raw!r} is not a whole number") from None
        if size < 1:
            raise Error(f"{ENV_WORKERS} must be >= 1, got {size}")
        return size

    def _acquire(self, size: int) -> _Worker:
        with self._cond:
            while not self._idle and self._count >= size:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._count += 1
        try:
            return self._new_worker()
        except BaseException:
            self._release(None)
            raise

    def _new_worker(self) -> _Worker:
        """A worker forked by the compile server (started on first use, restarted when it
        died), else, when the server cannot be used, one started directly."""
        for _attempt in range(2):
            server = self._live_server()
            if server is None:
                break
            try:
                return _ForkedWorker(server)
            except ServerUnavailable as exc:
                self._drop_server(server, exc)
        return _SpawnedWorker()

    def _live_server(self) -> _Server | None:
        if not server_enabled():
            return None
        with self._server_lock:
            if self._server is not None and not self._server.alive():
                log.debug("compile server %d is gone (%s); starting another",
                          self._server.pid, describe_exit(self._server.proc.returncode))
                self._server.close()
                self._server = None
            if self._server is None and not self._server_broken:
                try:
                    self._server = _Server()
                except OSError as exc:
                    log.debug("cannot start the compile server: %s", exc)
                    self._server_broken = True
            return self._server

    def _drop_server(self, server: _Server, exc: ServerUnavailable) -> None:
        """``server`` failed a request: close it; one that never forked a worker is not
        started again in this process (workers are then started directly)."""
        with self._server_lock:
            if self._server is server:
                self._server = None
                if not server.forked:
                    self._server_broken = True
        log.debug("compile server unavailable (%s)%s", exc,
                  "" if server.forked else "; starting workers directly from now on")
        server.close()

    def _release(self, worker: _Worker | None) -> None:
        with self._cond:
            if worker is not None:
                self._idle.append(worker)
            else:
                self._count -= 1
            self._cond.notify()

    def run(self, kind: str, compiler: "Pipeline", limit: float, workers: int | None = None):
        """One request on an idle worker, or a new one while fewer than ``workers`` (default
        ``$PYWAVE_COMPILE_WORKERS``) exist; else wait for one to become idle."""
        worker = self._acquire(self._size() if workers is None else workers)
        try:
            tag, value = worker.request(kind, compiler, limit)
        except WorkerDied as dead:
            worker.discard()
            self._release(None)
            raise crash_error(dead, compiler.text, compiler.describe()) from None
        except BaseException:
            worker.discard()        # interrupted mid-request: its pipe is out of step
            self._release(None)
            raise
        self._release(worker)
        if tag == "ok":
            return value
        raise value

    def shutdown(self) -> None:
        with self._cond:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for worker in idle:
            worker.close()
        with self._server_lock:
            server, self._server = self._server, None
            self._server_broken = False
        if server is not None:
            server.close()

    def trim(self) -> None:
        """Stop idle workers beyond ``$PYWAVE_COMPILE_WORKERS`` (left by a larger ``workers=``)."""
        keep = self._size()
        with self._cond:
            extra = max(0, min(len(self._idle), self._count - keep))
            closing, self._idle = self._idle[:extra], self._idle[extra:]
            self._count -= extra
        for worker in closing:
            worker.close()

    def started(self) -> int:
        """Workers alive now (idle or busy)."""
        with self._cond:
            return self._count

    def forget(self) -> None:
        """In a forked child: the workers are the parent's; start afresh."""
        self._cond = threading.Condition()
        self._idle, self._count, self._pid = [], 0, os.getpid()
        self._server_lock = threading.Lock()
        self._server, self._server_broken = None, False


_POOL = _Pool()
atexit.register(_POOL.shutdown)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL.forget)


def shutdown() -> None:
    """Stop the idle workers and the compile server (restarted by the next compile)."""
    _POOL.shutdown()


def trim() -> None:
    """Stop the idle workers above ``$PYWAVE_COMPILE_WORKERS`` (after a ``workers=`` burst)."""
    _POOL.trim()


# --------------------------------------------------------------------------------------------
# Crash reports
# --------------------------------------------------------------------------------------------
def crash_error(dead: WorkerDied, text: str, options: dict[str, Any]) -> CompileError:
    """The CompileError for a worker that died or hung, with a saved reproducer (``options``:
    the compile's options as plain data, :meth:`pywave.pipeline.Pipeline.describe`)."""
    path = save_reproducer(text, options, dead)
    message = f"the compiler {dead.reason} during stage '{dead.stage}'"
    quoted = last_message(dead.stderr)
    if quoted:
        message += f": {quoted}"
    message += (f"\n  reproducer: {path}" if path else
                "\n  (the reproducer could not be saved)")
    message += "\n  this is a bug in MLIR/LLVM or in pywave's checks; please report it"
    return CompileError(message)


def reproducer_dir() -> str:
    """``<cache dir>/crashes`` when the compile cache is usable, else a temp folder."""
    import tempfile

    from . import cache
    root = cache.directory()
    base = os.path.join(root, "crashes") if root else \
        os.path.join(tempfile.gettempdir(), f"pywave-crashes-{os.getuid()}")
    os.makedirs(base, mode=0o700, exist_ok=True)
    return base


def save_reproducer(text: str, options: dict[str, Any], dead: WorkerDied) -> str | None:
    """Write ``crash-<hash>.mlir`` and ``crash-<hash>.json`` (options, stage, reason, stderr
    tail); returns the .mlir path, or None when nothing could be written."""
    import hashlib  # here, not at import: hashlib loads OpenSSL (a warm start needs none)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    try:
        base = reproducer_dir()
        stem = os.path.join(base, f"crash-{digest}")
        with open(stem + ".mlir", "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(text.encode("utf-8", "surrogatepass").decode("utf-8", "surrogateescape"))
        meta = {"options": options, "stage": dead.stage,
                "reason": dead.reason, "stderr_tail": dead.stderr[-8000:],
                "python": sys.executable, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
        with open(stem + ".json", "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=2)
        return stem + ".mlir"
    except OSError as exc:
        log.warning("cannot save the compile reproducer: %s", exc)
        return None


# --------------------------------------------------------------------------------------------
# Worker side
# --------------------------------------------------------------------------------------------
def serve() -> None:
    """Entry of a compile process (``_BOOT``): the compile server when ``sys.argv[2]`` is
    its socket's fd, else a worker serving requests on stdin until EOF."""
    if len(sys.argv) > 2:
        _serve_forks(int(sys.argv[2]))
        return
    _watch_user(os.getppid())
    _preload()
    _work()


def _work() -> None:
    """The worker's loop: read a request from fd 0, build, write frames to fd 1, until EOF.
    Stray writes to fd 1 by native code go to stderr (fd 1 is the protocol)."""
    global _stage_listener
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    requests = os.fdopen(0, "rb", closefd=False)
    threading.stack_size(WORKER_STACK_BYTES)

    lock = threading.Lock()

    def send(frame: tuple) -> None:
        payload = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
        with lock:
            channel.write(_HEADER.pack(len(payload)) + payload)
            channel.flush()

    _stage_listener = lambda stage: send(("stage", stage))  # noqa: E731
    log.parent.addHandler(_ForwardHandler(send))
    while True:
        header = requests.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        (size,) = _HEADER.unpack(header)
        request = pickle.loads(requests.read(size))
        log.parent.setLevel(request["log_level"])
        result: list[tuple] = []
        thread = threading.Thread(target=lambda: result.append(_serve_one(request)),
                                  name="pywave-compile")
        thread.start()
        thread.join()
        send(result[0])


def _serve_forks(sock_fd: int) -> None:
    """The compile server's loop (see :class:`_Server`): imports, then one ``F`` request
    at a time on the socket, each with 4 fds; answers the forked worker's pid (or -errno).
    Exits at EOF on the socket or when the user's process (its parent) is gone."""
    import gc
    import socket
    user = os.getppid()
    user_fd = os.pidfd_open(user)
    if os.getppid() != user:        # the user died before the pidfd was opened
        os._exit(3)
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C is the user's, not ours
    _preload()
    threads = os.listdir("/proc/self/task")
    if len(threads) != 1:           # forking would copy a process whose threads are lost
        names = [_thread_name(t) for t in threads]
        sys.stderr.write(f"pywave compile server: {len(threads)} threads after the imports "
                         f"({', '.join(names)}); a fork server needs exactly one\n")
        sys.stderr.flush()
        os._exit(4)
    gc.freeze()                     # imported objects: not touched (copied) by a worker's gc
    sock = socket.socket(fileno=sock_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    status: dict[int, int] = {}     # worker pid -> its status pipe
    while True:
        ready, _, _ = select.select([sock, wake_r, user_fd], [], [])
        if user_fd in ready:
            os._exit(0)
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
            _reap(status)
        if sock in ready:
            message, fds, _, _ = socket.recv_fds(sock, 1, 4)
            if not message:
                os._exit(0)
            if len(fds) != 4:
                for fd in fds:
                    os.close(fd)
                sock.sendall(_PID.pack(-errno.EINVAL))
                continue
            pid = _fork_worker(fds, user_fd, sock)
            if pid > 0:
                status[pid] = fds[3]
            else:
                os.close(fds[3])
            sock.sendall(_PID.pack(pid))
            _reap(status)


def _thread_name(tid: str) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return tid


def _reap(status: dict[int, int]) -> None:
    """Collect exited workers; send each one's wait status on its status pipe."""
    while True:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = status.pop(pid, None)
        if fd is not None:
            try:
                os.write(fd, _STATUS.pack(raw))
            except OSError:         # the user closed its end: nobody asks
                pass
            os.close(fd)


def _fork_worker(fds: list[int], user_fd: int, sock: Any) -> int:
    """Fork a worker whose fds 0, 1, 2 are ``fds[:3]`` and 3 the user's pidfd; every other
    fd of the server is closed in it. Returns its pid (-errno if fork failed); the
    server keeps only ``fds[3]`` (the status pipe)."""
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError as exc:
        pid = -(exc.errno or 1)
    if pid == 0:
        code = 0
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            sock.detach()
            for target, fd in enumerate(fds[:3]):
                os.dup2(fd, target)
            os.dup2(user_fd, 3)
            _close_fds_from(4)
            _watch_user(None, pidfd=3)
            _work()
        except BaseException:  # noqa: BLE001 - the worker must not return into the server
            traceback.print_exc()
            code = 1
        finally:
            sys.stderr.flush()
            os._exit(code)
    for fd in fds[:3]:
        os.close(fd)
    return pid


def _close_fds_from(first: int) -> None:
    """Close every open fd >= ``first``: the ones /proc/self/fd lists (a loop up to the fd
    limit, which some systems set to 2^30, would take minutes where the kernel lacks
    close_range), else os.closerange up to the limit."""
    try:
        open_fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except (OSError, ValueError):
        os.closerange(first, _max_fd())
        return
    for fd in open_fds:
        if fd >= first:
            try:
                os.close(fd)
            except OSError:         # the listing's own fd, already closed
                pass


def _max_fd() -> int:
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


class _ForwardHandler(logging.Handler):
    """Sends the worker's ``pywave`` log records to the parent (message formatted here)."""

    def __init__(self, send: Callable[[tuple], None]) -> None:
        super().__init__()
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = {"name": record.name, "levelno": record.levelno,
                      "levelname": record.levelname, "msg": record.getMessage(),
                      "pathname": record.pathname, "lineno": record.lineno,
                      "funcName": record.funcName, "created": record.created,
                      "msecs": record.msecs, "threadName": "pywave-compile-worker"}
            self._send(("log", fields))
        except Exception:  # noqa: BLE001 - logging must never break the compile
            self.handleError(record)


def _watch_user(parent: int | None, pidfd: int | None = None) -> None:
    """Exit when the user's process is gone (a build in progress would otherwise run on,
    orphaned, until it ends): wait on ``pidfd`` (a pidfd of the user's process), else
    poll whether ``parent`` is still this process's parent."""
    def wait() -> None:
        select.select([pidfd], [], [])
        os._exit(3)

    def poll() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)
    threading.Thread(target=wait if pidfd is not None else poll, name="pywave-parent-watch",
                     daemon=True).start()


def _preload() -> None:
    """Import what every compile needs, and initialise llvmlite's LLVM targets, once, before
    the first request arrives: in the compile server every forked worker starts with them
    (a worker's first compile otherwise pays about 80 ms more here, on top of the imports)."""
    try:
        from mlir import ir, passmanager  # noqa: F401
        from mlir.dialects import arith, gpu, llvm, nvvm  # noqa: F401

        from . import dump, host, jit, kernels, parse, pipeline, signature  # noqa: F401
        from . import subgroups  # noqa: F401
        jit.all_targets()      # llvmlite.binding and every LLVM target (GPU data layouts)
        jit.initialise()       # the host target (object code)
    except ImportError as exc:  # reported by the first request, in context
        log.debug("worker preload failed: %s", exc)


def _serve_one(request: dict[str, Any]) -> tuple:
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ[ENV_ISOLATE] = "0"
    try:
        os.chdir(request["cwd"])
    except OSError as exc:
        log.debug("worker cannot enter %s: %s", request["cwd"], exc)
    try:
        value = _build_here(request["kind"], request["pipeline"])
        return ("ok", value)
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        return ("error", _portable(exc))


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it pickles (with the worker's traceback as a note unless it is a pywave
    error), else a CompileError carrying its text."""
    if not isinstance(exc, Error):
        exc.add_note("in the compile worker:\n" + "".join(
            traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip())
    exc.__traceback__ = None
    exc.__cause__ = exc.__context__ = None
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - any pickling failure
        return CompileError(f"{type(exc).__name__}: {exc}")
