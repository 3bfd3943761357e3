"""The client of compile isolation: leased workers and the connection to the server.

The client side: what runs in the user's process. A pool of leased workers and the
connection to the shared compile server.

Resources this process owns: per worker, the write end of its requests pipe, the read ends
of its replies and status pipes, its stderr file and a pidfd (forked workers) or a Popen
(spawned workers); one socket connected to the compile server. The pool's state is a count
of workers (idle or leased) and the idle list, changed only under its lock and never while
Ctrl-C can interrupt (:mod:`pywave.isolation.interrupts`). A lease ends in one of two ways:
handed back (the request finished and the worker is healthy) or discarded (killed with
SIGKILL through its pidfd, its fds closed, without waiting: the server reaps it). Nothing on
a discard path blocks, so an interrupt, a timeout or a death always returns the slot.
"""

from __future__ import annotations

import array
import errno
import fcntl
import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any

from . import crash, files, options, protocol
from .._version import __version__
from ..errors import Error
from .interrupts import Shield

if TYPE_CHECKING:
    from ..pipeline import Pipeline

log = logging.getLogger("pywave.isolation")

#: The Python line every compile process starts with: ``argv[1]`` is the client's sys.path
#: (JSON), the rest is :func:`pywave.isolation.serve`'s.
BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
        "from pywave import isolation; isolation.serve()")
#: A worker is replaced after this many compiles ...
MAX_COMPILES = 500
#: ... or once its resident size grew this many bytes past its size after its first compile
#: (MLIR contexts keep interned types and attributes: about 80 KiB a module, measured).
MAX_GROWTH = 64 << 20
#: Seconds a compile server may take to start (its imports) before it counts as broken.
SERVER_START_SECONDS = 120.0
#: Seconds a running server may take to answer a fork request before it counts as stuck
#: (a fork takes milliseconds; a stopped or deaf server is then replaced).
FORK_REPLY_SECONDS = 10.0
#: Seconds a connection may take to be accepted and greeted (a stopped server with a full
#: backlog, or a foreign listener that never speaks, is then replaced).
CONNECT_SECONDS = 10.0
#: Seconds a process waits for another process's server start (the start lock) before it
#: stops waiting and starts its workers as interpreters of their own.
START_LOCK_SECONDS = 15.0
#: Seconds after a fallback (no server) before a compile tries the server again.
SERVER_RETRY_SECONDS = 60.0
#: A compile that outlives a limit of at least this many seconds is reported as a hang in
#: MLIR/LLVM, with a reproducer; a shorter limit is the caller's choice, not a bug.
HANG_REPORT_SECONDS = 60.0
_STDERR_TAIL_BYTES = 64 * 1024


class ServerUnavailable(Exception):
    """The compile server could not be started or stopped answering."""


class ServerRefused(ServerUnavailable):
    """The server answered, refusing this client (at its connection limit)."""


class IdentityMismatch(ServerUnavailable):
    """The server at the socket path is another pywave version, ABI or interpreter."""


class NotStarted(Exception):
    """The worker ended before it began the request (it died while idle): safe to retry."""


def _process_env() -> dict[str, str]:
    """The environment a compile process starts with: the user's, compiles in-process, and
    one BLAS thread (numpy, which MLIR's bindings import, otherwise starts a thread per CPU;
    a fork server must hold no thread but its main one)."""
    env = dict(os.environ)
    env[options.ENV_ISOLATE] = "0"
    env["OPENBLAS_NUM_THREADS"] = "1"
    return env


def _stderr_file(prefix: str):
    return tempfile.TemporaryFile(mode="w+b", prefix=prefix)


def _tail(stderr) -> str:
    try:
        size = stderr.seek(0, os.SEEK_END)
        stderr.seek(max(0, size - _STDERR_TAIL_BYTES))
        return stderr.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""


def _close(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


# --------------------------------------------------------------------------------------------
# Workers
# --------------------------------------------------------------------------------------------
class Worker:
    """One worker: its pipes, stderr file and how to tell whether it lives. Subclasses
    start the process."""

    pid: int
    _requests: int
    _replies: int

    def __init__(self) -> None:
        self.stderr = _stderr_file("pywave-worker-")
        self.compiles = 0
        self.baseline_rss: int | None = None
        self.rss = 0
        self._reader: protocol.FrameReader | None = None

    # Life -------------------------------------------------------------------------------
    def alive(self) -> bool:
        raise NotImplementedError

    def kill(self) -> None:
        """SIGKILL, without waiting."""
        raise NotImplementedError

    def exit_code(self, seconds: float) -> int | None:
        """The exit status within ``seconds`` (negative: the signal), None if unknown."""
        raise NotImplementedError

    def _close_own(self) -> None:
        raise NotImplementedError

    def discard(self) -> None:
        """Kill the worker and close what this process holds of it; never blocks."""
        self.kill()
        self.close()

    def close(self) -> None:
        """Close what this process holds (the worker exits at EOF on its requests)."""
        _close(self._requests)
        _close(self._replies)
        self._requests = self._replies = -1
        try:
            self.stderr.close()
        except OSError:
            pass
        self._close_own()

    # One request --------------------------------------------------------------------------
    def request(self, kind: str, compiler: "Pipeline", deadline: protocol.Deadline,
                shield: Shield, limit: float) -> tuple[str, Any]:
        """Run one compile; ("ok", value) or ("error", exception). Raises NotStarted,
        crash.WorkerDied (dead or hung mid-request) or KeyboardInterrupt."""
        self.stderr.seek(0)
        self.stderr.truncate()
        message = {"kind": kind, "pipeline": compiler, "env": dict(os.environ),
                   "cwd": _cwd(), "log_level": log.parent.getEffectiveLevel()}
        self._send(protocol.frame(message), deadline, shield)
        reader = self._reader = self._reader or protocol.FrameReader(self._replies)
        started, finished = False, None
        while True:
            try:
                with shield.waiting():
                    got = reader.next(deadline)
                if got is not None:
                    got = protocol.check_worker_frame(got)
            except TimeoutError:
                self.kill()
                raise _timed_out(limit, started, _next_stage(finished),
                                 self.stderr_tail()) from None
            except protocol.PeerError as exc:
                self.kill()
                raise crash.WorkerDied(f"worker {self.pid} sent {exc} (a foreign process or "
                                       f"another pywave version; this is pywave "
                                       f"{__version__}); it was killed",
                                       _next_stage(finished), self.stderr_tail(),
                                       crash=False) from None
            if got is None:
                if not started:
                    raise NotStarted
                raise crash.died(self.exit_code(10.0), _next_stage(finished),
                                 self.stderr_tail())
            tag = got[0]
            if tag == "start":
                started = True
            elif tag == "stage":
                finished = got[1]
            elif tag == "log":
                record = logging.makeLogRecord(got[1])
                logging.getLogger(record.name).handle(record)
            else:
                _, outcome, value, rss = got
                self._account(rss)
                return outcome, value

    def _account(self, rss: int) -> None:
        self.compiles += 1
        self.rss = rss
        if self.baseline_rss is None:
            self.baseline_rss = rss

    def worn_out(self) -> bool:
        """Whether this worker should be replaced (MAX_COMPILES, MAX_GROWTH)."""
        grown = self.rss - (self.baseline_rss if self.baseline_rss is not None else self.rss)
        return self.compiles >= MAX_COMPILES or grown > MAX_GROWTH

    def stderr_tail(self) -> str:
        return _tail(self.stderr)


    def _send(self, data: bytes, deadline: protocol.Deadline, shield: Shield) -> None:
        """Write a request without blocking past ``deadline`` (a stopped worker leaves a
        full pipe). Raises NotStarted when the worker is gone, WorkerDied at the deadline."""
        os.set_blocking(self._requests, False)
        view = memoryview(data)
        while view:
            try:
                view = view[protocol.write_some(self._requests, view):]
                continue
            except BlockingIOError:
                pass
            except OSError:
                raise NotStarted from None
            with shield.waiting():
                writable = protocol.wait_writable(self._requests, deadline)
            if not writable:
                self.kill()
                raise crash.WorkerDied("did not take the request within the time limit "
                                       "(the worker was stopped or overloaded); it was killed",
                                       "sending", self.stderr_tail(), crash=False)


def _cwd() -> str | None:
    """The working folder the worker should use (None: this process's was removed)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def _timed_out(limit: float, started: bool, stage: str, stderr: str) -> crash.WorkerDied:
    """The WorkerDied for a compile still running at its limit: a hang worth a reproducer
    only when the worker had started it and the limit was long (HANG_REPORT_SECONDS)."""
    reason = (f"did not finish within the time limit of {limit:g} s (timeout= or "
              f"${options.ENV_TIMEOUT}); the worker was killed")
    return crash.WorkerDied(reason, stage, stderr,
                            crash=started and limit >= HANG_REPORT_SECONDS)


def _next_stage(finished: str | None) -> str:
    from ..pipeline import STAGES
    if finished is None:
        return STAGES[0]
    if finished in STAGES and finished != STAGES[-1]:
        return STAGES[STAGES.index(finished) + 1]
    return f"after {finished}"


class ForkedWorker(Worker):
    """A worker forked by the compile server; its exit status arrives on a status pipe."""

    def __init__(self, server: "ServerConnection", deadline: protocol.Deadline,
                 shield: Shield) -> None:
        super().__init__()
        made: list[int] = []
        try:
            for _ in range(3):
                made.extend(os.pipe())
            made.append(os.pidfd_open(os.getpid()))
        except OSError as exc:
            for fd in made:
                os.close(fd)
            self.stderr.close()
            raise crash.limit_error("open the compile worker's pipes", exc) from None
        requests_r, self._requests, self._replies, replies_w, self._status, status_w, \
            client = made
        try:
            self.pid, self._pidfd = server.fork(
                [requests_r, replies_w, self.stderr.fileno(), status_w, client], deadline,
                shield)
        except BaseException:
            for fd in (self._requests, self._replies, self._status):
                _close(fd)
            self.stderr.close()
            raise
        finally:
            for fd in (requests_r, replies_w, status_w, client):
                os.close(fd)
        self._code: int | None = None
        self._gone = False
        log.debug("forked compile worker %d", self.pid)

    def alive(self) -> bool:
        # the pidfd turns readable when the worker exits (its status pipe also ends with
        # its server); poll: any fd number
        return not protocol.readable_now(self._pidfd)

    def kill(self) -> None:
        try:
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass

    def exit_code(self, seconds: float) -> int | None:
        if not self._gone and protocol.wait_readable(self._status, protocol.Deadline(seconds)):
            data = os.read(self._status, protocol.STATUS.size)
            if len(data) == protocol.STATUS.size:
                self._code = os.waitstatus_to_exitcode(protocol.STATUS.unpack(data)[0])
            self._gone = True       # else the server is gone: the status is unknown
        return self._code

    def _close_own(self) -> None:
        _close(self._status)
        _close(self._pidfd)
        self._status = self._pidfd = -1


class SpawnedWorker(Worker):
    """A worker started as an interpreter of its own (where the server cannot be used)."""

    def __init__(self) -> None:
        super().__init__()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", BOOT, json.dumps(sys.path), "worker"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                env=_process_env(), close_fds=True, start_new_session=True)
        except OSError as exc:
            self.stderr.close()
            raise crash.limit_error("start a compile worker", exc) from None
        self._requests = self.proc.stdin.fileno()
        self._replies = self.proc.stdout.fileno()
        self.pid = self.proc.pid
        log.debug("started compile worker %d", self.pid)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except OSError:
                pass

    def exit_code(self, seconds: float) -> int | None:
        try:
            return self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self._requests = self._replies = -1
        try:
            self.stderr.close()
        except OSError:
            pass
        threading.Thread(target=self.proc.wait, daemon=True,   # reaped, never waited for
                         name="pywave-worker-reaper").start()

    def _close_own(self) -> None:
        pass


# --------------------------------------------------------------------------------------------
# The shared compile server
# --------------------------------------------------------------------------------------------
def server_key() -> str:
    """What makes servers interchangeable: the interpreter, where the packages a compile
    imports come from (pywave, MLIR's bindings, llvmlite, numpy), the boot line, the pywave
    version and its installed files (their sizes and times, so an edited checkout gets a
    fresh server). Not the whole sys.path: scripts in different folders share a server."""
    import importlib.util
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    stamp = []
    for root, _dirs, names in os.walk(package):
        for name in sorted(names):
            if name.endswith((".py", ".so")):
                info = os.stat(os.path.join(root, name))
                stamp.append((name, info.st_size, info.st_mtime_ns))
    origins = []
    for name in ("mlir", "llvmlite", "numpy"):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        origins.append(spec.origin if spec is not None else None)
    text = json.dumps([sys.executable, package, origins, BOOT, __version__, sorted(stamp)])
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:20]


class ServerConnection:
    """A connection to the compile server, greeted (:func:`_try_connect`); thread-safe (one
    fork request at a time). Non-blocking: every send and receive waits with a deadline."""

    def __init__(self, sock: socket.socket, path: str, hello: dict[str, Any]) -> None:
        self.sock, self.path, self.hello = sock, path, hello
        self.pid = _peer_creds(sock)[0]      # the server's pid (SO_PEERCRED)
        try:
            self.inode: int | None = os.lstat(path).st_ino
        except OSError:
            self.inode = None
        self._seq = 0
        self._lock = threading.Lock()

    def fork(self, fds: list[int], deadline: protocol.Deadline,
             shield: Shield) -> tuple[int, int]:
        """A worker given ``fds`` (protocol.FORK_FDS); returns (pid, pidfd). Raises
        ServerUnavailable (no answer within FORK_REPLY_SECONDS, half a reply, a reply of
        another shape), WorkerDied (``deadline`` passed first, or the server cannot fork
        for a resource limit); Ctrl-C while waiting to send or for the reply (``shield``)."""
        with self._lock:
            self._seq += 1
            seq = self._seq
            patience = protocol.earliest(deadline, protocol.Deadline(FORK_REPLY_SECONDS))
            try:
                self._send(protocol.FORK.pack(b"F", seq), fds, patience, shield)
                return self._reply(seq, deadline, patience, shield)
            except OSError as exc:
                raise ServerUnavailable(f"compile server at {self.path}: {exc}") from None

    def _send(self, data: bytes, fds: list[int], patience: protocol.Deadline,
              shield: Shield) -> None:
        # sendmsg, not socket.send_fds, which drops its flags: MSG_NOSIGNAL keeps a dead
        # server's socket from raising SIGPIPE (EPIPE instead)
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        while True:
            try:
                sent = self.sock.sendmsg([data], rights, socket.MSG_NOSIGNAL)
                break
            except BlockingIOError:
                pass
            with shield.waiting():
                if not protocol.wait_writable(self.sock.fileno(), patience):
                    raise self._silent("take the request")
        if sent != len(data):
            raise ServerUnavailable(f"compile server {self.pid} took {sent} of a request's "
                                    f"{len(data)} bytes")

    def _silent(self, what: str) -> Exception:
        return ServerUnavailable(f"compile server {self.pid} at {self.path} did not {what} "
                                 f"within {FORK_REPLY_SECONDS:g} s (stopped or overloaded)")

    def _reply(self, seq: int, deadline: protocol.Deadline, patience: protocol.Deadline,
               shield: Shield) -> tuple[int, int]:
        while True:
            try:
                data, fds = recv_exact(self.sock, protocol.FORK_REPLY.size, patience, shield,
                                       max_fds=1)
            except TimeoutError:
                if deadline.passed():
                    raise _no_worker_in_time() from None
                raise self._silent("answer") from None
            except EOFError:
                raise ServerUnavailable(f"compile server {self.pid} at {self.path} closed "
                                        "the connection") from None
            got, pid = protocol.FORK_REPLY.unpack(data)
            if got != seq:          # the reply to an interrupted request
                for fd in fds:
                    os.close(fd)
                if got > seq:
                    raise ServerUnavailable(f"compile server {self.pid} answered request "
                                            f"{got}, not one of the {seq} sent")
                continue
            if pid <= 0:
                for fd in fds:
                    os.close(fd)
                err = -pid
                if err in crash.LIMIT_ERRNOS:
                    from ..errors import CompileError
                    raise CompileError(crash.limit_text(f"fork a compile worker (in the "
                                                        f"compile server {self.pid})", err))
                raise ServerUnavailable(f"compile server cannot fork: "
                                        f"{os.strerror(err) if err else 'no pid'}")
            if len(fds) != 1:
                raise ServerUnavailable(f"compile server {self.pid} sent {len(fds)} pidfds "
                                        "with a reply (1 expected)")
            return pid, fds[0]

    def close(self) -> None:
        self.sock.close()

    def retire(self) -> None:
        """Close, and unlink the socket path if it still names this server's socket."""
        _unlink_if(self.path, self.inode)
        self.close()


def _unlink_if(path: str, inode: int | None) -> None:
    try:
        if inode is not None and os.lstat(path).st_ino == inode:
            os.unlink(path)
    except OSError:
        pass


def recv_exact(sock: socket.socket, size: int, deadline: protocol.Deadline, shield: Shield,
               max_fds: int = 0) -> tuple[bytes, list[int]]:
    """Exactly ``size`` bytes from non-blocking ``sock`` (and the fds that came with them),
    however they are split, waiting at most until ``deadline`` in all (Ctrl-C through
    ``shield``). Raises TimeoutError at the deadline, EOFError at EOF; fds received are
    closed on either."""
    data, fds = b"", []
    try:
        while len(data) < size:
            try:
                chunk, got, _, _ = socket.recv_fds(sock, size - len(data), max_fds)
            except BlockingIOError:
                with shield.waiting():
                    if not protocol.wait_readable(sock.fileno(), deadline):
                        raise TimeoutError from None
                continue
            fds.extend(got)
            if not chunk:
                raise EOFError
            data += chunk
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return data, fds


def _no_worker_in_time() -> crash.WorkerDied:
    return crash.WorkerDied("found no compile worker within the time limit (the compile "
                            "server was starting or did not answer)", "waiting", "",
                            crash=False)


def _peer_creds(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return (int.from_bytes(creds[0:4], sys.byteorder),
            int.from_bytes(creds[4:8], sys.byteorder))


def _try_connect(path: str, shield: Shield, deadline: protocol.Deadline
                 ) -> ServerConnection | None:
    """A greeted connection to the server at ``path``; None when nothing listens there.
    Waits at most CONNECT_SECONDS (and ``deadline``) for the server to accept and greet.
    Raises ServerRefused (at its connection limit), IdentityMismatch (another version, ABI
    or interpreter), ServerUnavailable (another user's, a full backlog, silent, a greeting
    of another shape)."""
    patience = protocol.earliest(deadline, protocol.Deadline(CONNECT_SECONDS))
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    except OSError as exc:
        raise ServerUnavailable(f"no socket for the compile server: {exc}") from None
    try:
        sock.setblocking(False)
        pause = 0.001
        while True:
            try:
                sock.connect(path)
                break
            except BlockingIOError:     # EAGAIN: its backlog is full
                if patience.passed():
                    raise ServerUnavailable(f"compile server at {path} accepted no "
                                            f"connection within {CONNECT_SECONDS:g} s (its "
                                            "backlog is full: stopped or overloaded)") from None
                with shield.waiting():
                    time.sleep(pause)
                pause = min(pause * 2, 0.05)
            except OSError:
                sock.close()
                return None
        if _peer_creds(sock)[1] != os.getuid():
            raise ServerUnavailable(f"{path} is served by another user")
        hello = _greeting(sock, path, patience, shield)
        return ServerConnection(sock, path, hello)
    except BaseException:
        sock.close()
        raise


def _greeting(sock: socket.socket, path: str, patience: protocol.Deadline,
              shield: Shield) -> dict[str, Any]:
    """The server's greeting (protocol.HELLO), checked: its identity must be this
    process's (:func:`protocol.identity`)."""
    try:
        head, _ = recv_exact(sock, protocol.HELLO.size, patience, shield)
        kind, size = protocol.HELLO.unpack(head)
        if kind not in (b"H", b"R") or size > protocol.MAX_HELLO_BYTES:
            raise ValueError(f"a greeting of kind {kind!r} and {size} bytes")
        body, _ = recv_exact(sock, size, patience, shield)
        hello = json.loads(body)
        if not isinstance(hello, dict) or not all(isinstance(v, (str, int))
                                                  for v in hello.values()):
            raise ValueError(f"a greeting of another shape: {body[:120]!r}")
    except TimeoutError:
        raise ServerUnavailable(f"the process at {path} did not greet within "
                                f"{CONNECT_SECONDS:g} s (not a pywave compile server of "
                                "this version, or stopped)") from None
    except EOFError:
        raise ServerUnavailable(f"the process at {path} closed the connection before its "
                                "greeting") from None
    except (ValueError, UnicodeError) as exc:
        raise IdentityMismatch(f"the process at {path} is not a pywave {__version__} "
                               f"compile server: {exc}") from None
    if kind == b"R":
        raise ServerRefused(str(hello.get("reason", "refused")))
    mine = protocol.identity()
    differ = [f"{name} {hello.get(name)!r} (this process: {mine[name]!r})"
              for name in mine if hello.get(name) != mine[name]]
    if differ:
        raise IdentityMismatch(f"compile server {hello.get('pid')} at {path} differs: "
                               + "; ".join(differ))
    return hello


def server_path() -> str:
    """Where this set-up's compile server listens (its private folder is created)."""
    return os.path.join(files.runtime_dir(), f"srv-{server_key()}.sock")


class StartBusy(ServerUnavailable):
    """Another process has been starting the server for longer than this one waits."""


def connect_server(shield: Shield, deadline: protocol.Deadline) -> ServerConnection:
    """A connection to this set-up's compile server, started (detached) when none runs, or
    when the one there is another version, ABI or interpreter (it is retired: the path is
    unlinked). Raises ServerUnavailable when it cannot be started (StartBusy: another
    process holds the start lock past START_LOCK_SECONDS), ServerRefused at its connection
    limit, WorkerDied when ``deadline`` passes first, and CompileError when even a server
    started here is another pywave version (pywave was upgraded under this process)."""
    idle = options.server_idle()        # validated even when a server already runs
    try:
        path = server_path()
    except OSError as exc:
        raise ServerUnavailable(f"no private folder for the server's socket: {exc}") from None
    connection = _connect_mine(path, shield, deadline)
    if connection is not None:
        return connection
    with _Locked(path + ".lock", shield, deadline) as lock_fd:
        connection = _connect_mine(path, shield, deadline)
        if connection is None:
            _start_server(path, idle, lock_fd, shield, deadline)
            try:
                connection = _try_connect(path, shield, deadline)
            except IdentityMismatch as exc:
                from ..errors import CompileError
                raise CompileError(f"this process runs pywave {__version__}, but a compile "
                                   f"server started from its files now is not: {exc}. "
                                   "pywave was upgraded or changed while this process ran; "
                                   "restart the process") from None
    if connection is None:
        raise ServerUnavailable(f"compile server for {path} did not start")
    return connection


def _connect_mine(path: str, shield: Shield, deadline: protocol.Deadline
                  ) -> ServerConnection | None:
    """:func:`_try_connect`, with a server of another identity retired (None then)."""
    try:
        return _try_connect(path, shield, deadline)
    except IdentityMismatch as exc:
        log.warning("%s; starting a compile server of this process's own", exc)
        try:
            _unlink_if(path, os.lstat(path).st_ino)
        except OSError:
            pass
        return None


class _Locked:
    """An exclusive flock on ``path`` (created 0600), waited for interruptibly until
    ``deadline``, and at most START_LOCK_SECONDS (StartBusy then: a start that hangs in
    another process must not hold this one); the context value is the locked fd."""

    def __init__(self, path: str, shield: Shield, deadline: protocol.Deadline) -> None:
        self.path, self.shield, self.deadline = path, shield, deadline

    def __enter__(self) -> int:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                          | os.O_CLOEXEC, 0o600)
        try:
            self._wait()
        except BaseException:
            os.close(self.fd)
            raise
        return self.fd

    def _wait(self) -> None:
        pause = 0.001
        patience = protocol.Deadline(START_LOCK_SECONDS)
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            if self.deadline.passed():
                raise _no_worker_in_time()
            if patience.passed():
                raise StartBusy(f"another process has been starting the compile server "
                                f"for over {START_LOCK_SECONDS:g} s (it holds "
                                f"{self.path})")
            with self.shield.waiting():
                time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def __exit__(self, *exc) -> None:
        os.close(self.fd)


def _start_server(path: str, idle: float, lock_fd: int, shield: Shield,
                  deadline: protocol.Deadline) -> None:
    """Start a server for ``path`` and wait until it listens (its first process exits 0
    once the server has bound the socket, non-zero when it failed). The server's processes
    hold ``lock_fd`` (a flock) until it listens: another process that wants a server
    waits for this one (at most START_LOCK_SECONDS), even when this process stops waiting
    (Ctrl-C, its deadline). A start still running after SERVER_START_SECONDS is killed (its
    session), which frees the lock."""
    try:
        os.unlink(path)             # a dead server's socket: nobody answered on it
    except FileNotFoundError:
        pass
    log_path = path[:-len(".sock")] + ".log"
    try:
        os.unlink(log_path)
    except FileNotFoundError:
        pass
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                 | os.O_CLOEXEC, 0o600)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", BOOT, json.dumps(sys.path), "server", path, repr(idle),
             str(lock_fd)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=fd,
            env=_process_env(), close_fds=True, pass_fds=(lock_fd,), start_new_session=True)
    except OSError as exc:
        raise ServerUnavailable(crash.limit_text("start the compile server", exc.errno)
                                if exc.errno in crash.LIMIT_ERRNOS else
                                f"cannot start the compile server: {exc}") from None
    finally:
        os.close(fd)
    log.debug("starting the compile server for %s", path)
    started = protocol.Deadline(SERVER_START_SECONDS)
    patience = protocol.earliest(deadline, started)
    try:
        with shield.waiting():
            while proc.poll() is None and not patience.passed():
                time.sleep(0.002)
    finally:
        if proc.returncode is None and started.passed():
            try:
                os.killpg(proc.pid, signal.SIGKILL)     # its session: both its processes
            except OSError:
                pass
        if proc.returncode is None:         # not waited for: reaped in the background
            threading.Thread(target=proc.wait, daemon=True, name="pywave-server-reaper").start()
    if proc.returncode is None:
        if deadline.passed():
            raise _no_worker_in_time()
        raise ServerUnavailable(f"compile server did not start within "
                                f"{SERVER_START_SECONDS:g} s; it was killed")
    if proc.returncode != 0:
        said = ""
        try:
            with open(log_path, "rb") as fh:
                said = crash.last_message(fh.read()[-_STDERR_TAIL_BYTES:].decode(
                    "utf-8", "replace"))
        except OSError:
            pass
        raise ServerUnavailable(f"compile server {crash.describe_exit(proc.returncode)}"
                                + (f": {said}" if said else ""))


def stop_server() -> bool:
    """Ask this set-up's compile server to exit; whether one was running."""
    try:
        connection = _try_connect(server_path(), Shield(), protocol.Deadline(5.0))
    except (OSError, ServerUnavailable):
        return False
    if connection is None:
        return False
    try:
        connection.sock.settimeout(5.0)    # a stopped server: do not wait for it
        connection.sock.sendall(protocol.FORK.pack(b"Q", 0), socket.MSG_NOSIGNAL)
        connection.sock.recv(1)     # EOF once it exited
    except OSError:
        pass
    connection.close()
    return True


# --------------------------------------------------------------------------------------------
# The pool
# --------------------------------------------------------------------------------------------
class Pool:
    """At most ``$PYWAVE_COMPILE_WORKERS`` workers (a call may raise the bound for itself);
    thread-safe; forgets its workers in a forked child (their pipes are the parent's)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[Worker] = []
        self._count = 0
        self._server: ServerConnection | None = None
        self._server_lock = threading.Lock()
        self._server_broken: str | None = None
        self._retry_at = 0.0
        self._bursts = 0            # calls running with workers= above the default bound

    # Leases -----------------------------------------------------------------------------
    def run(self, kind: str, compiler: "Pipeline", limit: float, workers: int | None = None):
        """One request on an idle worker, or a new one while fewer than ``workers`` exist;
        else wait for one to become idle. ``limit``: seconds for the whole call."""
        default = options.pool_size()
        size = default if workers is None else workers
        deadline = protocol.Deadline(limit)
        burst = size > default
        with Shield() as shield:
            if burst:
                with self._lock:
                    self._bursts += 1
            try:
                for _attempt in range(3):
                    lease: list[Worker] = []
                    try:
                        self._acquire(size, deadline, shield, lease)
                        outcome, value = lease[0].request(kind, compiler, deadline, shield,
                                                          limit)
                    except NotStarted:
                        self._discard(lease)
                        continue
                    except crash.WorkerDied as dead:
                        self._discard(lease)
                        raise crash.crash_error(dead, compiler.text,
                                                compiler.describe()) from None
                    except BaseException:
                        self._discard(lease)    # interrupted: its pipe is out of step
                        raise
                    self._hand_back(lease[0], burst)
                    burst = False           # its burst ended in _hand_back
                    if outcome == "ok":
                        return value
                    raise value
                raise Error("three compile workers in a row ended before they could start "
                            "the compile; see the log (pywave.isolation at DEBUG)")
            finally:
                if burst:
                    with self._lock:
                        self._bursts -= 1

    def _acquire(self, size: int, deadline: protocol.Deadline, shield: Shield,
                 lease: list[Worker]) -> None:
        """Put a live worker in ``lease``: an idle one, else a new one when fewer than
        ``size`` exist, else wait (polling; interruptible) for one."""
        pause = 0.0005
        while True:
            with self._lock:
                while self._idle:
                    worker = self._idle.pop()
                    if worker.alive():
                        lease.append(worker)
                        return
                    log.debug("compile worker %d died while idle; discarded", worker.pid)
                    self._count -= 1
                    worker.close()
                if self._count < size:
                    self._count += 1
                    break
            if deadline.passed():
                raise crash.WorkerDied("found no free compile worker within the time limit "
                                       f"({size} busy)", "waiting", "", crash=False)
            with shield.waiting():
                time.sleep(pause)
            pause = min(pause * 2, 0.02)
        try:
            lease.append(self._new_worker(shield, deadline))
        except BaseException:
            with self._lock:
                self._count -= 1
            raise

    def _discard(self, lease: list[Worker]) -> None:
        if lease:
            lease[0].discard()
            with self._lock:
                self._count -= 1

    def _hand_back(self, worker: Worker, burst: bool) -> None:
        """Back to the idle list (``burst``: this call raised the bound, and ends its burst
        here). Closed instead when worn out or above the default bound while no burst runs;
        the last burst to end also closes the idle workers above the bound."""
        default = options.pool_size()
        with self._lock:
            if burst:
                self._bursts -= 1
            surplus = self._bursts == 0 and self._count > default
            keep = not surplus and not worker.worn_out()
            if keep:
                self._idle.append(worker)
            else:
                self._count -= 1
            extra = max(0, min(len(self._idle), self._count - default)) \
                if self._bursts == 0 else 0
            closing, self._idle = self._idle[:extra], self._idle[extra:]
            self._count -= extra
        if not keep:
            log.debug("compile worker %d closed after %d compiles%s", worker.pid,
                      worker.compiles, " (above the pool's bound)" if surplus else "")
            worker.close()
        for idle in closing:
            idle.close()

    # Workers ----------------------------------------------------------------------------
    def _new_worker(self, shield: Shield, deadline: protocol.Deadline) -> Worker:
        """A worker forked by the compile server (connected, or started, on first use; once
        more when it stopped answering), else one started directly."""
        for _attempt in range(2):
            server = self._connection(shield, deadline)
            if server is None:
                break
            try:
                return ForkedWorker(server, deadline, shield)
            except ServerUnavailable as exc:
                self._drop_server(server, exc)
        return SpawnedWorker()

    def _connection(self, shield: Shield, deadline: protocol.Deadline
                    ) -> ServerConnection | None:
        """The server connection, or None: workers are then started directly. A server that
        cannot be had (it cannot start, another process's start hangs, it refuses this
        client at its connection limit) is said once in the log (WARNING), and tried again
        SERVER_RETRY_SECONDS later."""
        if not options.server_enabled():
            return None
        with self._server_lock:
            if self._server is None and (self._server_broken is None
                                         or self._retry_at <= time.monotonic()):
                try:
                    self._server = connect_server(shield, deadline)
                    self._server_broken = None
                except (ServerUnavailable, OSError) as exc:
                    self._retry_at = time.monotonic() + SERVER_RETRY_SECONDS
                    level = logging.DEBUG if self._server_broken is not None else \
                        logging.WARNING
                    self._server_broken = str(exc)
                    log.log(level, "compile server unavailable (%s); starting each compile "
                            "worker as an interpreter of its own", exc)
            return self._server

    def _drop_server(self, server: ServerConnection, exc: Exception) -> None:
        """``server`` failed a fork: forget it, and take its socket path from it (a stuck
        server would answer the next connection the same way; it exits once it notices)."""
        with self._server_lock:
            if self._server is server:
                self._server = None
        log.warning("compile server %d: %s; starting another", server.pid, exc)
        server.retire()

    # Whole pool -------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Close the idle workers and the server connection (the server lingers for its
        idle time, for other processes)."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for worker in idle:
            worker.close()
        with self._server_lock:
            server, self._server = self._server, None
            self._server_broken = None
        if server is not None:
            server.close()

    def trim(self) -> None:
        """Close idle workers beyond ``$PYWAVE_COMPILE_WORKERS`` (after a ``workers=``
        burst)."""
        keep = options.pool_size()
        with self._lock:
            extra = max(0, min(len(self._idle), self._count - keep))
            closing, self._idle = self._idle[:extra], self._idle[extra:]
            self._count -= extra
        for worker in closing:
            worker.close()

    def started(self) -> int:
        """Workers alive now (idle or leased)."""
        with self._lock:
            return self._count

    def forget(self) -> None:
        """In a forked child: the workers and the connection are the parent's. Their fds
        are closed here (the parent's copies stay open) and the pool starts afresh."""
        for worker in self._idle:
            if isinstance(worker, SpawnedWorker):
                continue            # Popen objects are the parent's to reap
            worker.close()
        if self._server is not None:
            self._server.sock.close()
        self.__init__()
