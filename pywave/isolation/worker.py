"""The worker process: runs compile requests from one client, one at a time.

Its fds 0 and 1 are the requests and replies pipes, fd 2 a stderr file the client reads
after a crash. It reads a request, answers ``("start",)``, runs the pipeline on a thread
with a 1 GiB stack (deeply nested input overflows 8 MiB in MLIR's parser; under an
address-space or thread limit a smaller stack, else the main thread: :func:`run_build`),
forwarding stage and log frames, and answers ``("done", ...)`` with its resident size. It exits at EOF on
its requests, and when the client's process is gone (a pidfd of the client, else polling
its parent). SIGINT is ignored: Ctrl-C belongs to the client, which kills a worker it no
longer waits for.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import pickle
import select
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable

from . import protocol, trace
from ..errors import CompileError, Error
from .._version import __version__
from .options import ENV_ISOLATE

log = logging.getLogger("pywave.isolation")

#: Stack of the build thread: deep nesting recurses in MLIR's parser and verifier.
STACK_BYTES = 1 << 30


def main(client_pidfd: int | None) -> None:
    """Serve requests on fds 0/1 until EOF; exit when the client is gone (``client_pidfd``:
    a pidfd of the client's process, else the parent is the client)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())     # not the client's blocked signals
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    trace.event("worker", "worker starts")
    faulthandler.enable()   # a fatal signal's name and traceback on stderr: the client quotes
    watch_client(client_pidfd)   # them even when the exit status is lost with the server
    global _CLIENT_PID
    _CLIENT_PID = _pidfd_pid(client_pidfd)
    serve()


def serve() -> None:
    """The request loop. Stray writes to fd 1 by native code go to stderr (fd 1 is the
    protocol)."""
    from .. import pipeline
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    requests = os.fdopen(0, "rb", closefd=False)
    lock = threading.Lock()

    def send(value: tuple) -> None:
        with lock:
            channel.write(protocol.frame(value))
            channel.flush()

    pipeline.on_stage(lambda stage: send(("stage", stage)))
    log.parent.addHandler(_ForwardHandler(send))
    while True:
        try:
            request = _next_request(requests, pipeline.Pipeline)
        except protocol.PeerError as exc:
            # not a client of this version: say so (the client raises it) and stop, since
            # the rest of the stream cannot be trusted to be in step
            trace.event("worker", f"bad request: {exc}")
            try:
                send(("done", "error", CompileError(
                    f"the compile worker {os.getpid()} got {exc} from its client "
                    f"({_client_name()}), which is not pywave {__version__}'s protocol; "
                    "nothing was compiled"), protocol.rss_bytes()))
            except OSError:
                pass                    # the client is gone too
            return
        if request is None:
            return
        trace.event("worker", "request received")
        send(("start",))
        log.parent.setLevel(request["log_level"])
        result: list[tuple] = []
        run_build(lambda: result.append(_serve_one(request)))
        if not result:                  # the thread died outside _serve_one's handler
            result.append(("error", CompileError("the compile worker's build thread ended "
                                                 "without a result; see its stderr")))
        trace.event("worker", "request done")
        send(("done", *result[0], protocol.rss_bytes()))


def _next_request(requests: Any, pipeline_type: type) -> dict | None:
    """The next request on ``requests`` (a buffered binary file), checked
    (:func:`protocol.check_request`); None at EOF before a frame starts. PeerError for a
    frame over :data:`protocol.MAX_FRAME_BYTES`, one cut short by EOF, one that does not
    decode or one of another shape."""
    header = requests.read(protocol.HEADER.size)
    if not header:
        return None
    if len(header) < protocol.HEADER.size:
        raise protocol.PeerError(f"a frame header of {len(header)} bytes, then the end of "
                                 f"the stream ({protocol.HEADER.size} expected)")
    (size,) = protocol.HEADER.unpack(header)
    if size > protocol.MAX_FRAME_BYTES:
        raise protocol.PeerError(f"a frame of {size} bytes (the limit is "
                                 f"{protocol.MAX_FRAME_BYTES})")
    body = requests.read(size)
    if len(body) < size:
        raise protocol.PeerError(f"a frame of {len(body)} of its {size} bytes, then the end "
                                 "of the stream")
    try:
        value = pickle.loads(body)
    except Exception as exc:  # noqa: BLE001 - any decoding failure
        raise protocol.PeerError(f"a frame that does not decode ({type(exc).__name__}: "
                                 f"{protocol.short(str(exc))})") from None
    return protocol.check_request(value, pipeline_type)


def _client_name() -> str:
    """Who writes this worker's requests: the client's process as far as it is known."""
    return f"the process that started it, pid {os.getppid()}" if _CLIENT_PID is None \
        else f"pid {_CLIENT_PID}"


#: The client's pid when this worker was given its pidfd (read from /proc), else None.
_CLIENT_PID: int | None = None


def _pidfd_pid(pidfd: int | None) -> int | None:
    """The pid a pidfd refers to (its /proc fdinfo ``Pid:`` line), None when unknown."""
    if pidfd is None:
        return None
    try:
        with open(f"/proc/self/fdinfo/{pidfd}", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Pid:"):
                    pid = int(line.split()[1])
                    return pid if pid > 0 else None
    except (OSError, ValueError, IndexError):
        pass
    return None


#: Stacks tried for the build thread, largest first: under an address-space limit
#: (``ulimit -v``) or a thread limit (``ulimit -u``) a smaller one may still start, and
#: none at all means the build runs on the main thread (its stack: ``ulimit -s``).
_STACKS = (STACK_BYTES, 256 << 20, 64 << 20, 0)


def run_build(target: Callable[[], None]) -> None:
    """Run ``target`` on a thread with the largest stack of :data:`_STACKS` that can be
    created, else on this thread (a thread that cannot start is a resource limit, not a
    reason to die: the compile itself may still fit)."""
    for size in _STACKS:
        try:
            threading.stack_size(size)
            thread = threading.Thread(target=target, name="pywave-compile")
            thread.start()
        except (RuntimeError, MemoryError, ValueError) as exc:
            log.debug("compile thread with a %d-byte stack cannot start: %s", size, exc)
            continue
        finally:
            threading.stack_size(0)
        thread.join()
        return
    target()


def watch_client(pidfd: int | None) -> None:
    """Exit when the client's process is gone (a build in progress would otherwise run on,
    orphaned): wait on ``pidfd``, else poll whether the parent changed."""
    parent = os.getppid()

    def wait() -> None:
        poller = select.poll()          # poll, not select: the pidfd may be any fd number
        poller.register(pidfd, select.POLLIN)
        while not poller.poll():
            pass
        os._exit(3)

    def poll() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)
    try:
        threading.Thread(target=wait if pidfd is not None else poll,
                         name="pywave-client-watch", daemon=True).start()
    except RuntimeError as exc:     # a thread limit (ulimit -u): EOF on the requests pipe
        log.debug("no client watch thread: %s", exc)    # still ends an idle worker


def preload() -> None:
    """Import what every compile needs and initialise llvmlite's targets once, before the
    first request (in the compile server every forked worker then starts with them)."""
    try:
        from mlir import ir, passmanager  # noqa: F401
        from mlir.dialects import arith, builtin, func, gpu, llvm, memref, nvvm  # noqa: F401

        from .. import dump
        from .. import pipeline
        from ..frontend import parse
        from ..host import jit, stage  # noqa: F401
        from ..host import signature  # noqa: F401
        from ..kernels import compile_flags as kernel_options, nvvm
        from ..kernels.rewrites import nvvm_wmma  # noqa: F401
        from ..kernels.rewrites import semantics, subgroups
        from ..llvm import all_targets
        all_targets()          # llvmlite.binding and every LLVM target (GPU data layouts)
        jit.initialise()       # the host target (object code)
    except ImportError as exc:  # reported by the first request, in context
        log.debug("worker preload failed: %s", exc)


#: The module :func:`warm_up` compiles: one kernel and a host function launching it, so that
#: every stage of an NVIDIA compile runs once (parse, prepare, signatures and launchers, the
#: kernel lowering and serialisation, the host lowering, LLVM's code generation).
WARM_UP_MLIR = """
module attributes {gpu.container_module} {
  gpu.module @pywave_warm_up {
    gpu.func @k(%a: memref<?xf32>, %n: index) kernel {
      %i = gpu.thread_id x
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %x = memref.load %a[%i] : memref<?xf32>
        %y = arith.addf %x, %x : f32
        memref.store %y, %a[%i] : memref<?xf32>
      }
      gpu.return
    }
  }
  func.func @main(%a: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = memref.dim %a, %c0 : memref<?xf32>
    gpu.launch_func @pywave_warm_up::@k blocks in (%c1, %c1, %c1) threads in (%n, %c1, %c1)
        args(%a : memref<?xf32>, %n : index)
    return
  }
}
"""
#: The chip :func:`warm_up` compiles for (any NVIDIA chip runs the same passes; no driver is
#: asked: a fork server must not open one).
WARM_UP_CHIP = "sm_90"


def warm_up() -> bool:
    """Compile :data:`WARM_UP_MLIR` once, in this process: what each compile otherwise pays
    on first use (dialects loaded into a context, pass pipelines parsed, LLVM's NVPTX and host
    target machines, the CUDA toolkit found and its ptxas release read) is then done, and a
    worker forked from the compile server starts with it. Nothing is written (no dump, no
    cache); a failure is logged at debug level and left to the first request to report.
    Returns whether the module compiled."""
    from .. import pipeline
    from ..errors import Error
    try:
        compiler = pipeline.Pipeline(WARM_UP_MLIR, target=WARM_UP_CHIP, launchers=True,
                                     filename="<pywave warm-up>")
        compiler.dump_root = None       # $PYWAVE_DUMP_DIR is the user's compiles' only
        compiler.run()
        return True
    except (Error, ImportError, OSError) as exc:
        log.debug("compile server warm-up failed: %s", exc)
        return False


def _serve_one(request: dict[str, Any]) -> tuple:
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ[ENV_ISOLATE] = "0"
    if request["cwd"] is not None:      # None: the client's working folder was removed
        try:
            os.chdir(request["cwd"])
        except OSError as exc:
            log.debug("worker cannot enter %s: %s", request["cwd"], exc)
    try:
        done = request["pipeline"].run()
        return ("ok", done.program() if request["kind"] == "program" else done)
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the client
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


class _ForwardHandler(logging.Handler):
    """Sends the worker's ``pywave`` log records to the client (message formatted here)."""

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
