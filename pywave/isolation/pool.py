"""The pool of compile workers in the user's process: leases, hand-backs, the server link.

The client side of compile isolation: a pool of leased workers (:mod:`.handles`) and the
connection to the shared compile server (:mod:`.connection`). The pool's state is a count
of workers (idle or leased) and the idle list, changed only under its lock and never while
Ctrl-C can interrupt (:mod:`pywave.isolation.interrupts`). A lease ends in one of two ways:
handed back (the request finished and the worker is healthy) or discarded (killed with
SIGKILL through its pidfd, its fds closed, without waiting: the server reaps it). Nothing on
a discard path blocks, so an interrupt, a timeout or a death always returns the slot.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from . import crash, options, protocol, trace
from ..errors import Error
from .connection import ServerConnection, ServerUnavailable, connect_server
from .handles import ForkedWorker, NotStarted, SpawnedWorker, Worker
from .interrupts import Shield

if TYPE_CHECKING:
    from ..pipeline import Pipeline

log = logging.getLogger("pywave.isolation")

#: Seconds after a fallback (no server) before a compile tries the server again.
SERVER_RETRY_SECONDS = 60.0


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
        trace.event("client", f"{kind} compile requested")
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
