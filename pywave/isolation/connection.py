"""The client's connection to the compile server: started when none runs, greeted, asked to fork.

What runs in the user's process (:mod:`pywave.isolation.pool` leases the workers,
:mod:`pywave.isolation.handles` holds each). The resource this module owns: one socket
connected to the compile server (:class:`ServerConnection`), thread-safe, non-blocking, every
wait bounded by a deadline. Also how every compile process starts (:data:`BOOT`, with
:func:`process_env`), the server's key and socket path (:func:`server_key`,
:func:`server_path`), the start of a server under a lock (:func:`connect_server`) and its
stop (:func:`stop_server`).
"""

from __future__ import annotations

import array
import fcntl
import functools
import hashlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from . import crash, files, options, protocol, trace
from .._version import __version__
from .interrupts import Shield

log = logging.getLogger("pywave.isolation")

#: The Python line every compile process starts with (:func:`boot_command`): ``argv[1]`` is
#: the client's sys.path (JSON), the rest is :func:`pywave.isolation.serve`'s.
BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
        "from pywave import isolation; isolation.serve()")

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

STDERR_TAIL_BYTES = 64 * 1024


class ServerUnavailable(Exception):
    """The compile server could not be started or stopped answering."""


class ServerRefused(ServerUnavailable):
    """The server answered, refusing this client (at its connection limit)."""


class IdentityMismatch(ServerUnavailable):
    """The server at the socket path is another pywave version, ABI or interpreter."""


def boot_command(*args: str) -> list[str]:
    """The command line of a compile process: this interpreter running :data:`BOOT` with this
    process's sys.path, then ``args``. With ``-S`` (no ``site``: its ``.pth`` files cost
    25-40 ms a start, measured on the CI machine and the H200 host) when every package a
    compile imports is found on that sys.path by Python's own path finder, i.e. no import
    hook that only ``site`` installs (an editable install's loader) is needed."""
    flags = ["-S"] if plain_imports() else []
    return [sys.executable, *flags, "-c", BOOT, json.dumps(sys.path), *args]


@functools.cache
def plain_imports() -> bool:
    """Whether pywave, MLIR's bindings, llvmlite and numpy are each where
    ``importlib.machinery.PathFinder`` finds them on sys.path (see :func:`boot_command`)."""
    import importlib.machinery
    import importlib.util
    for name in ("pywave", "mlir", "llvmlite", "numpy"):
        try:
            found = importlib.util.find_spec(name)
            plain = importlib.machinery.PathFinder.find_spec(name, sys.path)
        except (ImportError, ValueError):
            return False
        if _where(found) != _where(plain):
            return False
    return True


def _where(spec) -> tuple | None:
    """Where a module spec points: its file, or a namespace package's folders."""
    if spec is None:
        return None
    return spec.origin, tuple(spec.submodule_search_locations or ())


def process_env() -> dict[str, str]:
    """The environment a compile process starts with: the user's, compiles in-process, and
    one BLAS thread (numpy, which MLIR's bindings import, otherwise starts a thread per CPU;
    a fork server must hold no thread but its main one)."""
    env = dict(os.environ)
    env[options.ENV_ISOLATE] = "0"
    env["OPENBLAS_NUM_THREADS"] = "1"
    return env


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
    text = json.dumps([sys.executable, package, origins, BOOT, plain_imports(), __version__,
                       sorted(stamp)])
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
        while True:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                              | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
            try:
                self._wait()
                if _same_file(self.fd, self.path):
                    return self.fd
            except BaseException:
                os.close(self.fd)
                raise
            os.close(self.fd)   # an exiting server removed it while we waited: again

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


def _same_file(fd: int, path: str) -> bool:
    """Whether ``fd`` is still the file at ``path`` (not unlinked or replaced)."""
    try:
        return os.fstat(fd).st_ino == os.lstat(path).st_ino
    except OSError:
        return False


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
            boot_command("server", path, repr(idle), str(lock_fd)),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=fd,
            env=process_env(), close_fds=True, pass_fds=(lock_fd,), start_new_session=True)
    except OSError as exc:
        raise ServerUnavailable(crash.limit_text("start the compile server", exc.errno)
                                if exc.errno in crash.LIMIT_ERRNOS else
                                f"cannot start the compile server: {exc}") from None
    finally:
        os.close(fd)
    log.debug("starting the compile server for %s", path)
    trace.event("client", f"spawned compile server {proc.pid}")
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
            reap_later(proc, "pywave-server-reaper")
    if proc.returncode is None:
        if deadline.passed():
            raise _no_worker_in_time()
        raise ServerUnavailable(f"compile server did not start within "
                                f"{SERVER_START_SECONDS:g} s; it was killed")
    trace.event("client", f"compile server listens ({proc.returncode})")
    if proc.returncode != 0:
        said = ""
        try:
            with open(log_path, "rb") as fh:
                said = crash.last_message(fh.read()[-STDERR_TAIL_BYTES:].decode(
                    "utf-8", "replace"))
        except OSError:
            pass
        raise ServerUnavailable(f"compile server {crash.describe_exit(proc.returncode)}"
                                + (f": {said}" if said else ""))


def reap_later(proc: subprocess.Popen, name: str) -> None:
    """Reap ``proc`` when it exits, without waiting here: on a thread of its own, or where
    no thread can start (a thread limit, ``ulimit -u``: RuntimeError) by :mod:`subprocess`
    itself, which reaps a dropped Popen that still runs at its next start of a process."""
    try:
        threading.Thread(target=proc.wait, daemon=True, name=name).start()
    except RuntimeError as exc:
        log.debug("no thread to reap process %d (%s): left to subprocess", proc.pid, exc)
        proc.poll()


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
