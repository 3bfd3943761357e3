"""Compile isolation: the MLIR and LLVM work of a compile runs in a worker process.

A crash, abort, stack overflow or hang in MLIR or LLVM then costs the worker, not the
user's process: it becomes a :class:`~pywave.errors.CompileError` naming the stage the
worker was in, quoting the last message the tool wrote to stderr (an assertion, ``LLVM
ERROR: ...``) and the path of a saved reproducer.

Processes (one module each)
---------------------------
- **client** (in the user's process): a pool (:mod:`.pool`) of at most
  ``$PYWAVE_COMPILE_WORKERS`` (default 2) workers (:mod:`.handles`), leased one per compile,
  and a connection to the compile server (:mod:`.connection`). It never imports MLIR.
- **server** (:mod:`.server`): one per user and interpreter set-up (interpreter,
  ``sys.path``, pywave's files), shared by every process of that user, detached (its own
  session), listening on ``srv-<key>.sock`` in the user's private runtime folder
  (:func:`.files.runtime_dir`). It has MLIR, llvmlite and pywave's stages imported and
  forks a worker per request in milliseconds. Idle cost: after
  ``$PYWAVE_COMPILE_SERVER_TRIM`` seconds (default 5) without a fork it gives back its
  memory (:func:`.server.trim`: about 170 MB resident -> about 40 MB, measured; the next
  worker reads the libraries' pages again from the page cache); it exits after
  ``$PYWAVE_COMPILE_SERVER_IDLE`` seconds (default 600, at least 1) with no client
  connected (a client's connection closes when its interpreter ends), taking its socket,
  its empty log and the start lock along (no ``srv-*`` file stays; a log with text does).
- **timeline**: ``$PYWAVE_TRACE=1`` (the client's events on stderr) or a file path (every
  process's events appended there), :mod:`.trace`.
- **worker** (:mod:`.worker`): serves compiles for one client, one at a time, until the
  client closes its requests pipe or its process is gone.
- **crash records** (:mod:`.crash`): the CompileError of a dead or hung worker and its
  reproducer, written only into a folder this user owns (0700), ``O_EXCL | O_NOFOLLOW``.

Who owns what: the client owns its ends of each worker's pipes, the worker's stderr file
and a pidfd of it; the server owns the status pipe's write end (it reaps its workers and
writes each exit status there); the worker owns nothing of the client's (every other fd is
closed). The wire formats are in :mod:`.protocol`.

A compile, as the client sees it: lease a worker (an idle one that is still alive, else
fork a new one; wait while ``workers`` are busy) -> send the request -> ``start`` -> stage
and log frames -> ``done``; hand the worker back, or replace it after ``MAX_COMPILES``
compiles or ``MAX_GROWTH`` bytes of growth (:mod:`.pool`, :mod:`.handles`).

What each event does:

- **Ctrl-C** (KeyboardInterrupt, main thread): raised only while the client waits (for a
  slot, the server, the worker); bookkeeping never sees it (:mod:`.interrupts`). The leased
  worker is killed and its slot returned; the call raises KeyboardInterrupt once; the next
  compile takes its normal time. Servers and workers ignore SIGINT (no terminal: they run
  in a session of their own).
- **timeout** (``timeout=`` or ``$PYWAVE_COMPILE_TIMEOUT``, any finite float > 0, default
  300 s, bounding the whole call): the leased worker is killed through its pidfd (never
  another process) and a CompileError names the stage.
- **a worker dies while idle**: found dead at the next lease and replaced; nothing reported.
- **a worker dies before it started a request** (between the check and the send): the
  request goes to a fresh worker; nothing reported.
- **a worker dies mid-request**: a CompileError naming its signal and stage, with a
  reproducer, unless the signal is one that other processes send (SIGKILL: the OOM killer;
  SIGTERM, SIGHUP, SIGQUIT), which is no compiler crash and writes none.
- **the server dies**: the next fork finds its connection closed, reconnects and starts a
  new server; workers it forked go on.
- **the user's process dies**: its workers see its pidfd (forked) or their parent change
  (spawned) and exit; the server lingers for its idle time.
- **fork() in the user's process**: the child forgets the parent's workers and connection
  and makes its own.

Limits (issue 34)
-----------------
- **fds**: every wait is poll(2) or epoll (:mod:`selectors`), never select(): any fd number
  works (a process with thousands of open files compiles). The server raises its
  RLIMIT_NOFILE soft limit to the hard one and serves that many clients less
  ``server.FD_RESERVE`` (64), 10,000 and more where the hard limit allows; a client past that
  is greeted with a refusal naming the limit and starts its workers directly (said once in
  its log, WARNING). The server never blocks on a client: its sockets are non-blocking, a
  client that sends without reading (its socket full) or half a request is dropped.
- **deadlines**: each wait is bounded by the call's ``timeout`` and its own patience:
  connecting (``connection.CONNECT_SECONDS``, 10: a full backlog of a stopped server), the
  greeting (the same), each fork reply however it is split (``FORK_REPLY_SECONDS``, 10),
  another process's server start (``START_LOCK_SECONDS``, 15; then this process starts its
  workers directly and says so once; the server is tried again after
  ``SERVER_RETRY_SECONDS``, 60), a start of its own (``SERVER_START_SECONDS``, 120; a start
  still running then is killed). Ctrl-C interrupts every one of them.
- **identity**: the server greets each client with pywave's version, the host ABI and the
  executable (:func:`.protocol.identity`); a server that differs, greets otherwise or not at
  all is retired (its path unlinked) and a server of this process's own started. When even
  that one differs, pywave's files changed under this process: a CompileError says to
  restart it. Every frame is checked before use (size at most ``protocol.MAX_FRAME_BYTES``,
  tag, arity, field types): another shape is a CompileError naming the worker (no
  reproducer).
- **resource limits**: a worker that cannot start (fork/clone EAGAIN: RLIMIT_NPROC or the
  cgroup's pids.max; EMFILE: RLIMIT_NOFILE; ENOMEM) is a CompileError naming the limit and
  its value and ``isolate=False``; the build thread's 1 GiB stack shrinks to 256 or 64 MiB,
  else the build runs on the worker's main thread, under ``ulimit -v``/``-u``; a worker that
  dies out of memory under a limit is reported as that limit, never as a compiler crash.

Where the server cannot run (not Linux, ``$PYWAVE_COMPILE_SERVER=0``, no private runtime
folder, or it fails to start) each worker is started directly as ``python -c BOOT``.
``PYWAVE_ISOLATE=0`` or ``isolate=False`` compiles in-process (for debuggers).
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import TYPE_CHECKING

from . import interrupts, options  # noqa: F401 - options: pywave.isolation.options
from .connection import stop_server
from .crash import describe_exit, last_message
from .options import enabled, server_enabled, time_limit
from .pool import Pool

if TYPE_CHECKING:
    from ..pipeline import Artifacts, Pipeline
    from ..program import Program

__all__ = ["artifacts", "program", "shutdown", "trim", "stop_server", "enabled",
           "server_enabled", "time_limit", "describe_exit", "last_message", "serve"]

POOL = Pool()


def _after_fork_in_child() -> None:
    interrupts.after_fork_in_child()
    POOL.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def artifacts(compiler: "Pipeline", *, isolate: bool | None = None,
              timeout: float | None = None) -> "Artifacts":
    """``compiler.run()`` (:class:`pywave.pipeline.Artifacts`), in a worker unless isolation
    is off (``isolate=False`` or ``$PYWAVE_ISOLATE=0``). ``timeout``: seconds (default
    ``$PYWAVE_COMPILE_TIMEOUT``, else 300). Raises CompileError for a crash or a hang."""
    return _run("artifacts", compiler, isolate, timeout)


def program(compiler: "Pipeline", *, isolate: bool | None = None,
            timeout: float | None = None, workers: int | None = None) -> "Program":
    """``compiler.run().program()`` (:class:`pywave.program.Program`, what the compile cache
    stores), as :func:`artifacts`. ``workers``: the bound on concurrent workers while this
    call waits for one (default ``$PYWAVE_COMPILE_WORKERS``, else 2). Thread-safe."""
    return _run("program", compiler, isolate, timeout, workers)


def _run(kind: str, compiler: "Pipeline", isolate: bool | None, timeout: float | None,
         workers: int | None = None):
    limit = time_limit(timeout)
    if not enabled(isolate):
        done = compiler.run()
        return done.program() if kind == "program" else done
    return POOL.run(kind, compiler, limit, workers=workers)


def shutdown() -> None:
    """Close this process's idle workers and its server connection (a later compile starts
    again). The shared server stays for other processes; :func:`stop_server` stops it."""
    POOL.shutdown()


def trim() -> None:
    """Close the idle workers above ``$PYWAVE_COMPILE_WORKERS`` (after a ``workers=``
    burst)."""
    POOL.trim()


def serve() -> None:
    """Entry of a compile process (``connection.BOOT``): ``argv[2]`` is ``server`` (with the
    socket path and idle seconds) or ``worker`` (serving its parent on fds 0 and 1)."""
    if sys.argv[2] == "server":
        from . import server
        server.main(sys.argv[3], float(sys.argv[4]), int(sys.argv[5]))
    else:
        from . import worker
        worker.main(None)


atexit.register(POOL.shutdown)
