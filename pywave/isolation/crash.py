"""What the client says when a worker dies or hangs: the CompileError and its reproducer.

Reproducers (the input text and a JSON record of the options, stage, exit and stderr tail)
go to ``<cache dir>/crashes`` when the compile cache is usable, else to
``<temp dir>/pywave-crashes-<uid>``, only when that folder is this user's private folder
(:func:`pywave.isolation.files.private_dir`); otherwise to a fresh ``mkdtemp`` folder. Files
are created with ``O_EXCL | O_NOFOLLOW``, never overwritten.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import signal
import sys
import tempfile
import time
from typing import Any

from . import files
from .. import files as cache_folder
from ..errors import CompileError

log = logging.getLogger("pywave.isolation")

_MESSAGE_PATTERNS = (re.compile(r"Assertion .* failed"), re.compile(r"LLVM ERROR:"),
                     re.compile(r"terminate called|what\(\):"),
                     re.compile(r"Fatal Python error"), re.compile(r"\berror\b", re.I))
#: What a crashing compiler writes last (an assertion, LLVM's fatal error, a C++ exception,
#: Python's fault handler naming a fatal signal).
_CRASH_WORDS = re.compile(r"Assertion .* failed|LLVM ERROR:|terminate called|what\(\):|"
                          r"Fatal Python error")
#: Signals that other processes send (the OOM killer, a user's kill): a worker that died of
#: one was killed, it did not crash, and no reproducer is written.
EXTERNAL_SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class WorkerDied(Exception):
    """The worker exited, was killed or timed out during a request it had started.
    ``crash``: whether MLIR/LLVM may be to blame (a reproducer is worth saving)."""

    def __init__(self, reason: str, stage: str, stderr: str, crash: bool = True) -> None:
        super().__init__(reason)
        self.reason, self.stage, self.stderr, self.crash = reason, stage, stderr, crash


def describe_exit(code: int | None) -> str:
    """``crashed with SIGSEGV (signal 11)`` / ``exited with status 3``."""
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (a stack overflow or an invalid memory access)" if -code == signal.SIGSEGV \
            else ""
        return f"crashed with {name} (signal {-code}){hint}"
    return f"exited with status {code}"


#: errnos that mean a resource limit, not a fault: fork/clone/thread (EAGAIN), memory
#: (ENOMEM), this process's fds (EMFILE), the system's (ENFILE).
LIMIT_ERRNOS = (errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE)
#: What a worker that ran out of memory writes (C++ std::bad_alloc, Python, LLVM).
_OUT_OF_MEMORY = re.compile(r"bad_alloc|MemoryError|Cannot allocate memory|out of memory|"
                            r"can't start new thread|Resource temporarily unavailable", re.I)
IN_PROCESS_HINT = ("compile in-process instead with isolate=False or PYWAVE_ISOLATE=0 (no "
                   "worker process or thread is needed)")


def _rlimit(name: str, unit: str = "") -> str:
    import resource
    soft, _hard = resource.getrlimit(getattr(resource, name))
    if soft == resource.RLIM_INFINITY:
        return "unlimited"
    if unit == "KiB":
        return f"{soft // 1024} KiB"
    return str(soft)


def _cgroup(name: str) -> str | None:
    """This process's cgroup v2 limit ``name`` (``pids.max``, ``memory.max``), None when
    unset or unknown."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("0::"):
                    with open(f"/sys/fs/cgroup{line[3:].strip()}/{name}",
                              encoding="utf-8") as limit:
                        value = limit.read().strip()
                    return None if value == "max" else value
    except OSError:
        pass
    return None


def limit_text(action: str, err: int | None) -> str:
    """'cannot ACTION: why' naming the limit an errno of :data:`LIMIT_ERRNOS` means, its
    value here, and the in-process option."""
    reason = os.strerror(err) if err else "a resource limit"
    if err == errno.EAGAIN:
        pids = _cgroup("pids.max")
        which = (f"the per-user process and thread limit (RLIMIT_NPROC, `ulimit -u`: "
                 f"{_rlimit('RLIMIT_NPROC')})" + (f" or the cgroup's pids.max ({pids})"
                                                  if pids else ""))
    elif err == errno.EMFILE:
        which = f"the open-file limit (RLIMIT_NOFILE, `ulimit -n`: {_rlimit('RLIMIT_NOFILE')})"
    elif err == errno.ENFILE:
        which = "the system's open-file table (fs.file-max)"
    else:
        which = memory_limit()
    return f"cannot {action}: {reason}; {which} is reached; {IN_PROCESS_HINT}"


def memory_limit() -> str:
    """The memory limits in force, named (for an out-of-memory report)."""
    mem = _cgroup("memory.max")
    return (f"the address-space limit (RLIMIT_AS, `ulimit -v`: {_rlimit('RLIMIT_AS', 'KiB')})"
            f" or the data limit (RLIMIT_DATA: {_rlimit('RLIMIT_DATA', 'KiB')})"
            + (f" or the cgroup's memory.max ({mem} bytes)" if mem else ""))


def limited() -> bool:
    """Whether a memory or process limit is set on this process (ulimit or cgroup)."""
    import resource
    for name in ("RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_NPROC"):
        if resource.getrlimit(getattr(resource, name))[0] != resource.RLIM_INFINITY:
            return True
    return _cgroup("memory.max") is not None or _cgroup("pids.max") is not None


def limit_error(action: str, exc: OSError) -> CompileError:
    """The CompileError for an OSError of starting a worker (its pipes, its process)."""
    if exc.errno in LIMIT_ERRNOS:
        return CompileError(limit_text(action, exc.errno))
    return CompileError(f"cannot {action}: {exc.strerror or exc}; {IN_PROCESS_HINT}")


def died(code: int | None, stage: str, stderr: str) -> WorkerDied:
    """The WorkerDied for a worker that ended with ``code`` (None: unknown) mid-request. One
    that ran out of memory or threads under a limit (its last words say so, and a limit
    is set) is a resource limit, not a crash: no reproducer."""
    if code is not None and code != 0 and _OUT_OF_MEMORY.search(stderr[-4096:]) \
            and limited():
        return WorkerDied(f"worker ran out of memory or threads ({describe_exit(code)}: "
                          f"{last_message(stderr)}); {memory_limit()}, or the process limit "
                          f"(RLIMIT_NPROC: {_rlimit('RLIMIT_NPROC')}), is in force; "
                          f"{IN_PROCESS_HINT}", stage, stderr, crash=False)
    if code is None:
        said = last_message(stderr)
        if _CRASH_WORDS.search(said):   # its exit status is lost, its last words are not
            return WorkerDied("crashed (its exit status is unknown: the compile server that "
                              "reaps it is gone)", stage, stderr)
        return WorkerDied("worker ended and its exit status is unknown (the compile server "
                          "that reaps it is gone too: a logout, the OOM killer or a kill of "
                          "its process group), and it wrote no crash message, so this is not "
                          "counted as a compiler crash; compiling again starts a new worker",
                          stage, stderr, crash=False)
    if code < 0 and -code in EXTERNAL_SIGNALS:
        name = signal.Signals(-code).name
        return WorkerDied(f"worker was killed by {name} (signal {-code}) from outside "
                          "(the OOM killer or another process), which is not a compiler "
                          "crash; compiling again starts a new worker", stage, stderr,
                          crash=False)
    return WorkerDied(describe_exit(code), stage, stderr)


def last_message(stderr: str) -> str:
    """The most telling line a dying tool wrote: an assertion, ``LLVM ERROR``, a C++
    exception, else the last non-empty line (at most 600 characters)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for pattern in _MESSAGE_PATTERNS:
        for line in reversed(lines):
            if pattern.search(line):
                return line[:600]
    return lines[-1][:600] if lines else ""


def crash_error(dead: WorkerDied, text: str, options: dict[str, Any]) -> CompileError:
    """The CompileError for a worker that died or hung, with a saved reproducer when the
    compiler may be to blame (``options``: :meth:`pywave.pipeline.Pipeline.describe`)."""
    if not dead.crash:
        return CompileError(f"the compile {dead.reason} (during stage '{dead.stage}')")
    path = save_reproducer(text, options, dead)
    message = f"the compiler {dead.reason} during stage '{dead.stage}'"
    quoted = last_message(dead.stderr)
    if quoted:
        message += f": {quoted}"
    message += (f"\n  reproducer: {path}" if path else
                "\n  (the reproducer could not be saved)")
    message += "\n  this is a bug in MLIR/LLVM or in pywave's checks; please report it"
    return CompileError(message)


def reproducer_dir() -> str:
    """The folder reproducers go to (see the module docstring); created if missing."""
    root = cache_folder.directory()
    base = os.path.join(root, "crashes") if root else \
        os.path.join(tempfile.gettempdir(), f"pywave-crashes-{os.getuid()}")
    try:
        return files.private_dir(base)
    except OSError as exc:
        fresh = tempfile.mkdtemp(prefix="pywave-crashes-")
        log.warning("not writing reproducers to %s (%s); using %s", base, exc, fresh)
        return fresh


def save_reproducer(text: str, options: dict[str, Any], dead: WorkerDied) -> str | None:
    """Write ``crash-<hash>.mlir`` and ``crash-<hash>.json`` (a ``-N`` suffix when taken);
    returns the .mlir path, or None when nothing could be written."""
    import hashlib  # here, not at import: hashlib loads OpenSSL (a warm start needs none)
    data = text.encode("utf-8", "surrogatepass")
    stem = f"crash-{hashlib.sha256(data).hexdigest()[:12]}"
    meta = {"options": options, "stage": dead.stage,
            "reason": dead.reason, "stderr_tail": dead.stderr[-8000:],
            "python": sys.executable, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    try:
        base = reproducer_dir()
        path = files.create_pair(base, stem, (".mlir", data),
                                 (".json", json.dumps(meta, indent=2).encode("utf-8")))
        return path
    except OSError as exc:
        log.warning("cannot save the compile reproducer: %s", exc)
        return None
