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

On accepting a connection the server speaks first: a greeting of :data:`HELLO` (``b"H"``
and the size of a JSON body: :func:`identity` and the server's pid) or, at its connection
limit, ``b"R"`` and a JSON body with the reason. Waits use poll(2) (any fd number); every
frame is checked before use (:data:`MAX_FRAME_BYTES`, :func:`check_worker_frame` on the
client, :func:`check_request` in the worker) and a peer that breaks the format is
:class:`PeerError`: the client raises it as a WorkerDied naming the worker, the worker
answers it with a ``done`` frame carrying a CompileError naming its client, and exits.
"""

from __future__ import annotations

import math
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
#: The server's greeting header: b"H" (hello) or b"R" (refused) and the JSON body's size.
HELLO = struct.Struct("<cI")
#: Largest greeting body a client reads (a greeting is a few hundred bytes).
MAX_HELLO_BYTES = 1 << 16
#: fds carried by a fork request, in this order.
FORK_FDS = ("requests", "replies", "stderr", "status", "client")
#: Largest frame a client or worker accepts (a compiled program with its kernel images is
#: megabytes; a size above this is a foreign or corrupt peer, refused before it is read).
MAX_FRAME_BYTES = 1 << 32
#: Longest single poll(): its timeout is a C int of milliseconds.
_MAX_WAIT = 3600.0


class PeerError(Exception):
    """A peer (worker or server) sent something that is not pywave's protocol: a frame of
    another shape, type or size (a foreign process or another pywave version)."""


def frame(value: object) -> bytes:
    """``value`` as one frame."""
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(payload)) + payload


def identity() -> dict[str, str]:
    """Who a compile process is, as the handshake compares it: pywave's version, the host
    ABI (interpreter implementation and version, SOABI, machine, pointer size, byte order)
    and the Python executable."""
    global _IDENTITY
    if _IDENTITY is None:
        import importlib.machinery
        import sys
        from .._version import __version__
        # EXTENSION_SUFFIXES[0] holds the SOABI (".cpython-312-x86_64-linux-gnu.so") and
        # os.uname() the machine: what sysconfig and platform give, without importing them
        abi = "-".join([sys.implementation.cache_tag or sys.implementation.name,
                        importlib.machinery.EXTENSION_SUFFIXES[0], os.uname().machine,
                        str(struct.calcsize("P") * 8), sys.byteorder])
        _IDENTITY = {"pywave": __version__, "abi": abi, "executable": sys.executable}
    return dict(_IDENTITY)


_IDENTITY: dict[str, str] | None = None


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


def _wait(fd: int, deadline: Deadline, events: int) -> bool:
    """poll(2) on one fd (any fd number: select() stops at FD_SETSIZE, 1024) until
    ``deadline``, in waits of at most an hour; a signal handler's exception (Ctrl-C) ends
    it. POLLHUP/POLLERR count as ready: the next read or write reports them."""
    poller = select.poll()
    poller.register(fd, events)
    while True:
        left = deadline.left()
        chunk = _MAX_WAIT if left is None else min(left, _MAX_WAIT)
        if poller.poll(math.ceil(chunk * 1000)):
            return True
        if left is not None and left <= _MAX_WAIT:
            return False


def wait_readable(fd: int, deadline: Deadline) -> bool:
    """Whether ``fd`` became readable before ``deadline``. Interruptible (KeyboardInterrupt
    from the main thread), and any deadline works, 1e300 s included."""
    return _wait(fd, deadline, select.POLLIN)


def wait_writable(fd: int, deadline: Deadline) -> bool:
    """Whether ``fd`` became writable before ``deadline`` (as :func:`wait_readable`)."""
    return _wait(fd, deadline, select.POLLOUT)


def readable_now(fd: int) -> bool:
    """Whether ``fd`` is readable (or at EOF / hung up) without waiting."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


#: What a worker may send: tag -> the types of the fields after it.
_WORKER_FRAMES = {"start": (), "stage": (str,), "log": (dict,),
                  "done": (str, object, int)}


def check_worker_frame(value: object) -> tuple:
    """``value`` if it is a frame a worker sends (:data:`_WORKER_FRAMES`: a tuple of a
    known tag and fields of the right types; ``done`` with ``ok`` or ``error`` and an
    exception for ``error``), else PeerError naming what came."""
    if not isinstance(value, tuple) or not value or value[0] not in _WORKER_FRAMES:
        raise PeerError(f"a frame that is not pywave's: {short(value)}")
    kinds = _WORKER_FRAMES[value[0]]
    if len(value) != 1 + len(kinds) or not all(
            isinstance(field, kind) for field, kind in zip(value[1:], kinds)):
        raise PeerError(f"a {value[0]!r} frame of another shape: {short(value)}")
    if value[0] == "done" and (value[1] not in ("ok", "error") or (
            value[1] == "error" and not isinstance(value[2], BaseException))):
        raise PeerError(f"a 'done' frame of another shape: {short(value)}")
    return value


#: What a client's request holds: key -> the types its value may have (``pipeline``: a
#: :class:`pywave.pipeline.Pipeline`, checked by the worker, which imports it).
REQUEST_KEYS = {"kind": (str,), "pipeline": (object,), "env": (dict,),
                "cwd": (str, type(None)), "log_level": (int,)}
#: What a request may ask for (:func:`pywave.isolation._run`).
REQUEST_KINDS = ("artifacts", "program")


def check_request(value: object, pipeline_type: type) -> dict:
    """``value`` if it is a request a client of this version sends (a dict of exactly
    :data:`REQUEST_KEYS`, of those types: ``kind`` one of :data:`REQUEST_KINDS`, ``env`` of
    str to str, ``log_level`` a logging level 0..50, ``pipeline`` a ``pipeline_type``),
    else PeerError naming the first thing that differs."""
    if not isinstance(value, dict):
        raise PeerError(f"a request that is not a dict: {short(value)}")
    keys = set(value)
    if keys != set(REQUEST_KEYS):
        missing = sorted(map(str, set(REQUEST_KEYS) - keys))
        extra = sorted(map(repr, keys - set(REQUEST_KEYS)))
        raise PeerError(f"a request with keys of another version (missing: "
                        f"{', '.join(missing) or 'none'}; unknown: {', '.join(extra) or 'none'})")
    for key, kinds in REQUEST_KEYS.items():
        if not isinstance(value[key], kinds) or isinstance(value[key], bool):
            raise PeerError(f"a request whose {key!r} is {type(value[key]).__name__}: "
                            f"{short(value[key])}")
    if value["kind"] not in REQUEST_KINDS:
        raise PeerError(f"a request of kind {short(value['kind'])} (expected one of "
                        f"{', '.join(REQUEST_KINDS)})")
    if not all(isinstance(k, str) and isinstance(v, str) and k and "\0" not in k + v and "=" not in k
               for k, v in value["env"].items()):
        raise PeerError("a request whose 'env' is not str names to str values")
    if not 0 <= value["log_level"] <= 50:
        raise PeerError(f"a request whose 'log_level' is {value['log_level']} (0..50)")
    if value["cwd"] is not None and "\0" in value["cwd"]:
        raise PeerError("a request whose 'cwd' holds a NUL")
    if not isinstance(value["pipeline"], pipeline_type):
        raise PeerError(f"a request whose 'pipeline' is {type(value['pipeline']).__name__}, "
                        f"not {pipeline_type.__module__}.{pipeline_type.__name__}")
    return value


def short(value: object) -> str:
    """A peer's value for a message: its repr, at most 120 characters (its type when the
    repr fails)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a foreign object's repr
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 120 else text[:117] + "..."


class FrameReader:
    """Frames from a pipe fd, buffered; each is checked against :data:`MAX_FRAME_BYTES`
    before it is read, and decoded without letting a decoding error escape untyped."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()

    def next(self, deadline: Deadline) -> tuple | None:
        """The next frame (not yet shape-checked: :func:`check_worker_frame`); None at EOF.
        Raises TimeoutError when ``deadline`` passes (a partial frame included), PeerError
        for an oversized or undecodable frame."""
        while True:
            if len(self._buffer) >= HEADER.size:
                (size,) = HEADER.unpack_from(self._buffer)
                if size > MAX_FRAME_BYTES:
                    raise PeerError(f"a frame of {size} bytes (the limit is "
                                    f"{MAX_FRAME_BYTES})")
                end = HEADER.size + size
                if len(self._buffer) >= end:
                    body = bytes(self._buffer[HEADER.size:end])
                    del self._buffer[:end]
                    try:
                        return pickle.loads(body)
                    except Exception as exc:  # noqa: BLE001 - any decoding failure
                        raise PeerError(f"a frame that does not decode "
                                        f"({type(exc).__name__}: {exc})") from None
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
