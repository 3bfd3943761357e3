"""The wire formats between the three processes (see :mod:`pywave.isolation`).

Client <-> worker, over two pipes: frames of a little-endian u64 length and a pickle. The
client sends one request (a dict); the worker answers ``("start",)`` when it has read it,
then any number of ``("stage", name)`` and ``("log", fields)``, then
``("done", "ok" | "error", value, rss_bytes)``.

Client <-> server, over a Unix stream socket: a request is one ``sendmsg`` of 9 bytes
(``b"F"`` and a u64 sequence number) carrying five fds (SCM_RIGHTS: the worker's requests
pipe, replies pipe, stderr file, status pipe, and the client's pidfd); the reply is 16 bytes
(the sequence number and the worker's pid, or -errno) carrying the worker's pidfd when the
pid is > 0. A client that was interrupted leaves replies unread: it skips replies whose
sequence number is not the one it waits for (closing their fds). ``b"Q"`` + u64 asks the
server to exit. When a worker exits, the server writes its wait status (i64) to the
worker's status pipe and closes it.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import time

HEADER = struct.Struct("<Q")
FORK = struct.Struct("<cQ")
FORK_REPLY = struct.Struct("<Qq")
STATUS = struct.Struct("<q")
#: fds carried by a fork request, in this order.
FORK_FDS = ("requests", "replies", "stderr", "status", "client")
#: Longest single wait: select() takes no larger timeout on every platform.
_MAX_WAIT = 3600.0


def frame(value: object) -> bytes:
    """``value`` as one frame."""
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(payload)) + payload


class Deadline:
    """A point in time.monotonic(); ``None`` seconds means never."""

    def __init__(self, seconds: float | None) -> None:
        self.at = None if seconds is None else time.monotonic() + seconds

    def left(self) -> float | None:
        return None if self.at is None else max(0.0, self.at - time.monotonic())

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at


def earliest(*deadlines: Deadline) -> Deadline:
    """The deadline that comes first."""
    first = Deadline(None)
    ats = [d.at for d in deadlines if d.at is not None]
    first.at = min(ats) if ats else None
    return first


def _wait(fd: int, deadline: Deadline, write: bool) -> bool:
    while True:
        left = deadline.left()
        chunk = _MAX_WAIT if left is None else min(left, _MAX_WAIT)
        ready = select.select([], [fd], [], chunk)[1] if write else \
            select.select([fd], [], [], chunk)[0]
        if ready:
            return True
        if left is not None and left <= _MAX_WAIT:
            return False


def wait_readable(fd: int, deadline: Deadline) -> bool:
    """Whether ``fd`` became readable before ``deadline``. Interruptible (KeyboardInterrupt
    from the main thread), and any deadline works, 1e300 s included."""
    return _wait(fd, deadline, write=False)


def wait_writable(fd: int, deadline: Deadline) -> bool:
    """Whether ``fd`` became writable before ``deadline`` (as :func:`wait_readable`)."""
    return _wait(fd, deadline, write=True)


class FrameReader:
    """Frames from a pipe fd, buffered."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""

    def next(self, deadline: Deadline) -> tuple | None:
        """The next frame; None at EOF. Raises TimeoutError when ``deadline`` passes."""
        while True:
            if len(self._buffer) >= HEADER.size:
                (size,) = HEADER.unpack_from(self._buffer)
                end = HEADER.size + size
                if len(self._buffer) >= end:
                    body, self._buffer = self._buffer[HEADER.size:end], self._buffer[end:]
                    return pickle.loads(body)
            if not wait_readable(self.fd, deadline):
                raise TimeoutError
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return None
            self._buffer += chunk


def write_some(fd: int, data: memoryview) -> int:
    """``os.write`` that never raises SIGPIPE (a program may have restored its default action,
    which ends the process): a closed reader is BrokenPipeError. SIGPIPE is blocked on this
    thread for the write, and one it raised is taken before unblocking."""
    if not hasattr(signal, "pthread_sigmask"):
        return os.write(fd, data)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPIPE})
    try:
        return os.write(fd, data)
    except BrokenPipeError:
        if signal.SIGPIPE not in old:
            signal.sigtimedwait({signal.SIGPIPE}, 0)
        raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def rss_bytes() -> int:
    """This process's resident set size in bytes (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
