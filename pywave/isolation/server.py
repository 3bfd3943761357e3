"""The compile server ("zygote"): one per user and interpreter set-up, shared by processes.

Started by the first client that finds none (``python -c BOOT ... server PATH``, in a new
session, detached: it forks once and the first process exits). It imports MLIR, llvmlite
and pywave's stages once (:func:`pywave.isolation.worker.preload`), checks that it holds no
thread but its main one (a fork copies only the calling thread), binds its Unix socket at
``PATH`` (bound under a temporary name, then renamed into place, so a client never meets a
half-started server) and forks a worker for each request (milliseconds, instead of an
interpreter's start and imports). It accepts connections only from its own user
(SO_PEERCRED). It reaps its workers and writes each one's wait status to the status pipe
that came with it. It exits after ``$PYWAVE_COMPILE_SERVER_IDLE`` seconds (default 600) with
no client connected, on a ``Q`` request, or when its socket path no longer names its socket
(a newer server took the name). SIGINT and SIGHUP are ignored: it belongs to no terminal.
Workers live on without it (they end with their client).
"""

from __future__ import annotations

import errno
import gc
import os
import select
import signal
import socket
import sys
import time
import traceback

from . import protocol, worker

#: How often an idle server checks that its socket path still names its socket.
_CHECK_SECONDS = 30.0


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
    worker.preload()
    _check_one_thread()
    gc.freeze()                 # imported objects: not touched (copied) by a worker's gc
    listener, inode = _bind(path)
    os.close(lock_fd)
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
    listener.listen(64)
    os.rename(temporary, path)
    return listener, os.lstat(path).st_ino


class _Loop:
    """The server's select loop over its listener, its connections and SIGCHLD."""

    def __init__(self, listener: socket.socket, path: str, inode: int, idle: float) -> None:
        self.listener, self.path, self.inode, self.idle = listener, path, inode, idle
        self.connections: list[socket.socket] = []
        self.status: dict[int, int] = {}        # worker pid -> its status pipe
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.quiet_since = time.monotonic()

    def run(self) -> None:
        while True:
            ready, _, _ = select.select([self.listener, self.wake_r, *self.connections],
                                        [], [], min(_CHECK_SECONDS, self.idle))
            if self.wake_r in ready:
                self._drain_wake()
                self._reap()
            if self.listener in ready:
                self._accept()
            for conn in [c for c in self.connections if c in ready]:
                self._request(conn)
            if not self.connections:
                self._maybe_exit()
            else:
                self.quiet_since = time.monotonic()

    def _drain_wake(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        uid = int.from_bytes(creds[4:8], sys.byteorder)
        if uid != os.getuid():
            conn.close()
            return
        self.connections.append(conn)

    def _request(self, conn: socket.socket) -> None:
        try:
            message, fds, _, _ = socket.recv_fds(conn, protocol.FORK.size,
                                                 len(protocol.FORK_FDS))
        except OSError:
            message, fds = b"", []
        if len(message) != protocol.FORK.size:
            for fd in fds:
                os.close(fd)
            self.connections.remove(conn)
            conn.close()
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
        try:
            socket.send_fds(conn, [protocol.FORK_REPLY.pack(seq, pid)],
                            [pidfd] if pidfd is not None else [])
        except OSError:             # the client went away; its worker sees EOF and exits
            pass

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
        if self._owns_path():
            try:
                os.unlink(self.path)
                log_path = self.path.removesuffix(".sock") + ".log"
                if os.lstat(log_path).st_size == 0:     # its stderr: nothing was written
                    os.unlink(log_path)
            except OSError:
                pass
        os._exit(0)


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
    import resource
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20
