"""The client's handle on one compile worker: its pipes, its stderr file, one request at a time.

What runs in the user's process (:mod:`pywave.isolation.pool` leases the handles). Resources
each handle owns: the write end of the worker's requests pipe, the read ends of its replies
and status pipes, its stderr file and a pidfd (:class:`ForkedWorker`, forked by the compile
server through :mod:`pywave.isolation.connection`) or a Popen (:class:`SpawnedWorker`, an
interpreter of its own). A discarded worker is killed with SIGKILL through its pidfd and its
fds closed, without waiting: the server reaps it. Nothing on a discard path blocks.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import tempfile
from typing import TYPE_CHECKING, Any

from . import connection, crash, options, protocol, trace
from .._version import __version__
from .interrupts import Shield

if TYPE_CHECKING:
    from ..pipeline import Pipeline

log = logging.getLogger("pywave.isolation")

#: A worker is replaced after this many compiles ...
MAX_COMPILES = 500

#: ... or once its resident size grew this many bytes past its size after its first compile
#: (MLIR contexts keep interned types and attributes: about 80 KiB a module, measured).
MAX_GROWTH = 64 << 20

#: A compile that outlives a limit of at least this many seconds is reported as a hang in
#: MLIR/LLVM, with a reproducer; a shorter limit is the caller's choice, not a bug.
HANG_REPORT_SECONDS = 60.0


class NotStarted(Exception):
    """The worker ended before it began the request (it died while idle): safe to retry."""


def _stderr_file(prefix: str):
    return tempfile.TemporaryFile(mode="w+b", prefix=prefix)


def _tail(stderr) -> str:
    try:
        size = stderr.seek(0, os.SEEK_END)
        stderr.seek(max(0, size - connection.STDERR_TAIL_BYTES))
        return stderr.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""


def _close(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


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
        trace.event("client", f"request sent to worker {self.pid}")
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
                trace.event("client", f"worker {self.pid} started the request")
            elif tag == "stage":
                finished = got[1]
                trace.event("client", f"worker {self.pid} finished stage {finished}")
            elif tag == "log":
                record = logging.makeLogRecord(got[1])
                logging.getLogger(record.name).handle(record)
            else:
                _, outcome, value, rss = got
                trace.event("client", f"worker {self.pid} done ({outcome})")
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

    def __init__(self, server: "connection.ServerConnection", deadline: protocol.Deadline,
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
        trace.event("client", f"server forked worker {self.pid}")

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
                connection.boot_command("worker"),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                env=connection.process_env(), close_fds=True, start_new_session=True)
        except OSError as exc:
            self.stderr.close()
            raise crash.limit_error("start a compile worker", exc) from None
        self._requests = self.proc.stdin.fileno()
        self._replies = self.proc.stdout.fileno()
        self.pid = self.proc.pid
        log.debug("started compile worker %d", self.pid)
        trace.event("client", f"spawned worker {self.pid} (an interpreter of its own)")

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
        connection.reap_later(self.proc, "pywave-worker-reaper")    # never waited for

    def _close_own(self) -> None:
        pass
