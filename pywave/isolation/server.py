"""The compile server ("zygote"): one per user and interpreter set-up, shared by processes.

Started by the first client that finds none (``python -c BOOT ... server PATH``, in a new
session, detached: it forks once and the first process exits). It imports MLIR, llvmlite
and pywave's stages once (:func:`pywave.isolation.worker.preload`), checks that it holds no
thread but its main one (a fork copies only the calling thread), binds its Unix socket at
``PATH`` (bound under a temporary name, then renamed into place, so a client never meets a
half-started server) and forks a worker for each request (milliseconds, instead of an
interpreter's start and imports). It accepts connections only from its own user
(SO_PEERCRED). Once no request waits and its first workers have ended, it compiles a small
module itself (:func:`pywave.isolation.worker.warm_up`): later workers start without the first-use
costs of a compile. It reaps its workers and writes each one's wait status to the status pipe
that came with it. After ``$PYWAVE_COMPILE_SERVER_TRIM`` seconds (default 5) without a fork request it gives
its memory back (:func:`trim`). It exits after ``$PYWAVE_COMPILE_SERVER_IDLE`` seconds
(default 600) with no client connected, on a ``Q`` request, or when its socket path no
longer names its socket (a newer server took the name), unlinking its socket, its log when
empty and the start lock when free (:func:`remove_lock`). SIGINT and SIGHUP are ignored: it belongs to no terminal.
Workers live on without it (they end with their client).

Limits: it waits through epoll (:mod:`selectors`), raises its RLIMIT_NOFILE soft limit to
the hard one (:func:`raise_fd_limit`) and serves that many connections less
:data:`FD_RESERVE`; it greets each (``protocol.HELLO``) or refuses one past the limit with
the reason (and with a spare fd when even accept() fails with EMFILE), never dying. Its
sockets are non-blocking: a client that does not read its replies, or sends half a request,
is dropped; nobody else waits for it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import gc
import json
import os
import resource
import selectors
import signal
import socket
import sys
import time
import traceback

from . import options, protocol, trace, worker

#: How often an idle server checks that its socket path still names its socket.
_CHECK_SECONDS = 30.0
#: Connections waiting to be accepted (the kernel caps it at net.core.somaxconn).
BACKLOG = 4096
#: File descriptors kept free for requests in flight; the rest serve connections.
FD_RESERVE = 64
#: Seconds a new server waits for its first request before it warms up anyway (the client
#: that started it asks within milliseconds; the warm-up must not delay that request).
WARM_UP_QUIET = 1.0
#: Seconds the warm-up compile may take before the server ends itself (a hang in MLIR/LLVM).
WARM_UP_SECONDS = 120


def main(path: str, idle: float, lock_fd: int) -> None:
    """Run the server for socket ``path`` (see the module docstring). Never returns.
    ``lock_fd``: the client's flock on the start lock, held until the socket is bound."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())     # not the client's blocked signals
    ready_r, ready_w = os.pipe()
    if os.fork() > 0:           # detach; this first process exits once the server listens
        os.close(ready_w)
        os._exit(0 if os.read(ready_r, 1) == b"R" else 1)
    os.close(ready_r)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    trace.event("server", "preload (imports) begins")
    worker.preload()
    trace.event("server", "preload done")
    _check_one_thread()
    gc.freeze()                 # imported objects: not touched (copied) by a worker's gc
    listener, inode = _bind(path)
    os.close(lock_fd)
    trace.event("server", f"listening on {path}")
    os.write(ready_w, b"R")
    os.close(ready_w)
    _Loop(listener, path, inode, idle).run()


def _check_one_thread() -> None:
    threads = os.listdir("/proc/self/task")
    if len(threads) != 1:
        names = [_thread_name(t) for t in threads]
        sys.stderr.write(f"pywave compile server: {len(threads)} threads after the imports "
                         f"({', '.join(names)}); a fork server needs exactly one\n")
        sys.stderr.flush()
        os._exit(4)


def _thread_name(tid: str) -> str:
    try:
        with open(f"/proc/self/task/{tid}/comm", encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return tid


def _bind(path: str) -> tuple[socket.socket, int]:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    temporary = os.path.join(os.path.dirname(path), f".{os.getpid()}.tmp")
    listener.bind(temporary)
    listener.listen(BACKLOG)
    listener.setblocking(False)
    os.rename(temporary, path)
    return listener, os.lstat(path).st_ino


def raise_fd_limit() -> int:
    """Raise this process's RLIMIT_NOFILE soft limit to its hard limit (allowed without
    privileges); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= hard:
        return soft if soft != resource.RLIM_INFINITY else hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    except (ValueError, OSError):
        return soft


def greeting(kind: bytes, body: dict) -> bytes:
    """A greeting (protocol.HELLO): ``b"H"`` with this server's identity or ``b"R"`` with
    the reason it refuses the connection."""
    data = json.dumps(body).encode("utf-8", "surrogatepass")
    return protocol.HELLO.pack(kind, len(data)) + data


class _Loop:
    """The server's loop (epoll through :mod:`selectors`: any fd number, any count) over
    its listener, its connections and SIGCHLD. Connections are non-blocking: a client that
    sends without reading, or half a request, costs only its own connection."""

    def __init__(self, listener: socket.socket, path: str, inode: int, idle: float) -> None:
        self.listener, self.path, self.inode, self.idle = listener, path, inode, idle
        self.limit = raise_fd_limit()
        #: Clients served at once: the fd limit less what a request needs in flight (the
        #: five fds it carries, a pidfd, the status pipes of running workers).
        self.capacity = max(1, self.limit - FD_RESERVE)
        self.connections: set[socket.socket] = set()
        self.status: dict[int, int] = {}        # worker pid -> its status pipe
        self.selector = selectors.DefaultSelector()
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.selector.register(self.wake_r, selectors.EVENT_READ)
        self.hello = greeting(b"H", {**protocol.identity(), "pid": os.getpid()})
        self.spare: int | None = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self.quiet_since = time.monotonic()
        self.trim_after = options.server_trim()
        self.last_fork = time.monotonic()
        self.trimmed = False
        self.warm = False
        self.forked = False
        self.started = time.monotonic()

    def run(self) -> None:
        while True:
            wait = min(_CHECK_SECONDS, self.idle)
            if not self.warm and not self.status:   # waiting requests are forked first
                wait = 0.0 if self.forked else max(
                    0.0, min(wait, self.started + WARM_UP_QUIET - time.monotonic()))
            elif not self.trimmed:
                wait = max(0.0, min(wait, self.last_fork + self.trim_after - time.monotonic()))
            events = self.selector.select(wait)
            for key, _mask in events:
                if key.fileobj is self.wake_r:
                    self._drain_wake()
                    self._reap()
                elif key.fileobj is self.listener:
                    self._accept()
                elif key.fileobj in self.connections:
                    self._request(key.fileobj)
            if not self.warm and not events and not self.status and (
                    self.forked or time.monotonic() - self.started >= WARM_UP_QUIET):
                self._warm_up()
            if not self.connections:
                self._maybe_exit()
            else:
                self.quiet_since = time.monotonic()
            if not self.trimmed and time.monotonic() - self.last_fork >= self.trim_after:
                self.trimmed = True
                before = protocol.rss_bytes()
                trim()
                trace.event("server", f"trimmed: resident {before >> 20} MiB -> "
                            f"{protocol.rss_bytes() >> 20} MiB")

    def _warm_up(self) -> None:
        """Once, when no request waits and no worker runs (the first ones were forked cold
        and have ended: a crash of the warm-up, which ends the server, loses no worker's
        status): compile a small module here (:func:`pywave.isolation.worker.warm_up`), so
        each later worker starts with what a compile pays on first use. A request arriving
        meanwhile waits for it (less than the first-use cost its worker would pay). One that
        hangs ends the server after WARM_UP_SECONDS (SIGALRM; clients start another)."""
        self.warm = True
        trace.event("server", "warm-up compile begins")
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(WARM_UP_SECONDS)
        worker.warm_up()
        signal.alarm(0)
        _check_one_thread()
        gc.freeze()
        trace.event("server", "warm-up compile done")

    def _drop(self, conn: socket.socket) -> None:
        self.connections.discard(conn)
        try:
            self.selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()

    def _drain_wake(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _accept(self) -> None:
        for _ in range(64):             # a burst of connections, without starving the rest
            try:
                conn, _ = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    self._refuse_one(f"the compile server is out of file descriptors "
                                     f"({os.strerror(exc.errno)})")
                return
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
            if int.from_bytes(creds[4:8], sys.byteorder) != os.getuid():
                conn.close()
                continue
            conn.setblocking(False)
            if len(self.connections) >= self.capacity:
                self._refuse(conn, f"compile server {os.getpid()} serves "
                             f"{len(self.connections)} clients, its limit (RLIMIT_NOFILE "
                             f"{self.limit} less {FD_RESERVE} kept for requests)")
                continue
            if not self._send(conn, self.hello):
                conn.close()
                continue
            self.connections.add(conn)
            self.selector.register(conn, selectors.EVENT_READ)

    def _refuse(self, conn: socket.socket, reason: str) -> None:
        self._send(conn, greeting(b"R", {"reason": reason, "pid": os.getpid()}))
        conn.close()

    def _refuse_one(self, reason: str) -> None:
        """Accept and refuse one waiting connection although no fd is free: the spare fd
        makes room for it (else the listener would stay readable and spin the loop)."""
        if self.spare is None:
            return
        os.close(self.spare)
        self.spare = None
        try:
            conn, _ = self.listener.accept()
            conn.setblocking(False)
            self._refuse(conn, reason)
        except OSError:
            pass
        try:
            self.spare = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self.spare = None

    @staticmethod
    def _send(conn: socket.socket, data: bytes, fds: list[int] | None = None) -> bool:
        """Send all of ``data`` without blocking; False when it does not fit at once (a
        client that does not read its replies) or the client is gone."""
        try:
            sent = socket.send_fds(conn, [data], fds or [],
                                   socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
        except OSError:
            return False
        return sent == len(data)

    def _request(self, conn: socket.socket) -> None:
        try:
            message, fds, _, _ = socket.recv_fds(conn, protocol.FORK.size,
                                                 len(protocol.FORK_FDS))
        except BlockingIOError:
            return
        except OSError:
            message, fds = b"", []
        if len(message) != protocol.FORK.size:
            for fd in fds:              # EOF, or half a request: the client is out of step
                os.close(fd)
            self._drop(conn)
            return
        kind, seq = protocol.FORK.unpack(message)
        if kind == b"Q":
            self._exit()
        if kind != b"F" or len(fds) != len(protocol.FORK_FDS):
            for fd in fds:
                os.close(fd)
            self._reply(conn, seq, -errno.EINVAL, None)
            return
        pid = self._fork(fds)
        self.forked = True
        self.last_fork = time.monotonic()
        self.trimmed = False
        trace.event("server", f"forked worker {pid}")
        pidfd = None
        if pid > 0:
            self.status[pid] = fds[3]
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:         # it exited already: its status is on the way
                pidfd = None
        else:
            os.close(fds[3])
        os.close(fds[4])
        self._reply(conn, seq, pid, pidfd)
        if pidfd is not None:
            os.close(pidfd)
        self._reap()

    def _reply(self, conn: socket.socket, seq: int, pid: int, pidfd: int | None) -> None:
        """The reply, never blocking: a client whose socket is full (it does not read) is
        dropped; its worker sees EOF and exits."""
        if not self._send(conn, protocol.FORK_REPLY.pack(seq, pid),
                          [pidfd] if pidfd is not None else []):
            self._drop(conn)

    def _fork(self, fds: list[int]) -> int:
        """A worker with ``fds[:3]`` as its 0, 1, 2 and the client's pidfd as 3; every other
        fd of the server closed in it. Returns its pid, or -errno."""
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as exc:
            pid = -(exc.errno or 1)
        if pid == 0:
            self._become_worker(fds)
        for fd in fds[:3]:
            os.close(fd)
        return pid

    def _become_worker(self, fds: list[int]) -> None:
        code = 0
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for target, fd in enumerate(fds[:3]):
                os.dup2(fd, target)
            os.dup2(fds[4], 3)
            close_fds_from(4)
            worker.main(3)
        except BaseException:  # noqa: BLE001 - the worker must not return into the server
            traceback.print_exc()
            code = 1
        finally:
            sys.stderr.flush()
            os._exit(code)

    def _reap(self) -> None:
        """Collect exited workers; send each one's wait status on its status pipe."""
        while True:
            try:
                pid, raw = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            fd = self.status.pop(pid, None)
            if fd is not None:
                try:
                    os.write(fd, protocol.STATUS.pack(raw))
                except OSError:     # the client closed its end: nobody asks
                    pass
                os.close(fd)

    def _maybe_exit(self) -> None:
        if not self._owns_path():
            self._exit()
        if time.monotonic() - self.quiet_since >= self.idle:
            self._exit()

    def _owns_path(self) -> bool:
        try:
            return os.lstat(self.path).st_ino == self.inode
        except OSError:
            return False

    def _exit(self) -> None:
        """Exit, taking along what this server left in the runtime folder: its socket, its
        log when empty (a log with text stays, to be read) and the start lock when no other
        process holds it (unlinked while this process holds it: a client that opened the
        old file sees its inode gone after its flock and opens the path again)."""
        trace.event("server", "exits")
        if self._owns_path():
            try:
                os.unlink(self.path)
                log_path = self.path.removesuffix(".sock") + ".log"
                if os.lstat(log_path).st_size == 0:     # its stderr: nothing was written
                    os.unlink(log_path)
            except OSError:
                pass
            remove_lock(self.path + ".lock")
        os._exit(0)


def remove_lock(path: str) -> bool:
    """Unlink the start lock ``path`` if no process holds it (flock, non-blocking), while
    holding it; whether it was removed. A process that waits for the lock checks, once it
    holds it, that its file is still the one at ``path`` (:class:`.connection._Locked`)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_ino != os.lstat(path).st_ino:
            return False
        os.unlink(path)
        return True
    except OSError:         # held: a client is starting a server, which will use it
        return False
    finally:
        os.close(fd)


#: madvise(2) advice: drop the range's pages from this process (a private file mapping
#: refaults them from the file: its contents only where no page of it was written).
MADV_DONTNEED = 4
#: madvise(2) advice: reclaim the range's pages now (Linux 5.4), those mapped by this
#: process alone; written (copied) pages go to swap where there is swap, else they stay.
MADV_PAGEOUT = 21


def trim() -> None:
    """Give back the memory an idle server can: the C heap's free pages (malloc_trim(3),
    glibc) and its resident pages of mapped files (the shared libraries of MLIR, LLVM and
    Python's extension modules: a worker forked later reads what it uses again from the
    page cache, minor faults). A file mapping none of whose pages was written (smaps(5)
    ``Anonymous: 0 kB``: code, read-only data) is dropped with MADV_DONTNEED, which
    refaults the same bytes from the file; one with written pages (relocated data, RELRO)
    only with MADV_PAGEOUT, which keeps its contents. Python's own objects stay (a fork
    then copies nothing new). Errors are ignored: an older kernel (EINVAL) or another C
    library simply trims less."""
    gc.collect()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return
    malloc_trim = getattr(libc, "malloc_trim", None)
    if malloc_trim is not None:
        malloc_trim.argtypes = [ctypes.c_size_t]
        malloc_trim(0)
    madvise = libc.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for start, end, written in _file_mappings():
        madvise(start, end - start, MADV_PAGEOUT if written else MADV_DONTNEED)


def _file_mappings() -> list[tuple[int, int, bool]]:
    """(start, end, whether any page was written) of each mapping of a file, from
    /proc/self/smaps (empty where it is missing)."""
    found: list[tuple[int, int, bool]] = []
    try:
        with open("/proc/self/smaps", encoding="utf-8", errors="replace") as fh:
            lines = fh.readlines()
    except OSError:
        return found
    current: list | None = None
    for line in lines:
        fields = line.split()
        if not fields:
            continue
        if "-" in fields[0] and not fields[0].endswith(":"):      # a mapping's header
            current = None
            if len(fields) >= 6 and fields[5].startswith("/"):
                start, end = (int(part, 16) for part in fields[0].split("-"))
                current = [start, end, True]    # written until smaps says otherwise
                found.append(current)           # type: ignore[arg-type]
        elif fields[0] == "Anonymous:" and current is not None:
            current[2] = fields[1] != "0"
    return [(start, end, written) for start, end, written in found]


def close_fds_from(first: int) -> None:
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
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20
