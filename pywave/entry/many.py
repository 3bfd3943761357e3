"""Parallel and ahead-of-time compile: :func:`compile_many` (and ``python -m pywave precompile``).

Each input is keyed as :func:`pywave.compile` keys it (the text, the options, the tool
versions); inputs already in the in-memory or disk cache start no worker; the others are
compiled concurrently, each in a compile worker process of :mod:`pywave.isolation` (MLIR
and LLVM hold process-wide locks, so threads would not run them in parallel), at most
``jobs`` workers at once. The threads here only wait on the workers' pipes.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from .. import api, cache, lookup, pipeline
from ..errors import ArgumentError, CompileError, Error
from ..frontend import validate
from ..frontend.source import MlirModule, text_and_name
from ..lowering import LoweringOptions, options_of
from ..program import Program

log = logging.getLogger("pywave.many")

#: ``Outcome.status`` values.
CACHED, COMPILED, FAILED = "cached", "compiled", "error"


@dataclass
class Outcome:
    """What :func:`compile_many` did with one input.

    ``index``: position in the input sequence; ``name``: the file name, or ``<input N>``
    for a text; ``status``: ``"cached"`` (a cache hit, no worker), ``"compiled"`` or
    ``"error"``; ``key``: the compile-cache key (None when the input could not be read or
    its options were refused); ``seconds``: wall time of its compile (0 for a hit);
    ``error``: the exception of a failed input, else None.
    """

    index: int
    name: str
    status: str
    seconds: float = 0.0
    error: Exception | None = None
    program: Program | None = None
    request: "lookup.Request | None" = field(default=None, repr=False)

    @property
    def key(self) -> str | None:
        return self.request.key if self.request is not None else None


class CompileManyError(CompileError):
    """One or more inputs of :func:`compile_many` failed; every other input was compiled
    (and cached) all the same.

    Attributes
    ----------
    failures : list[tuple[int, str, Exception]]
        ``(index, name, error)`` of each failed input, in input order: ``name`` is its file
        name or ``<input N>``; ``error`` is the input's own exception (usually a
        :class:`CompileError`).
    results : list
        What :func:`compile_many` would have returned, with None at each failed index.
    """

    def __init__(self, failures: list[tuple[int, str, Exception]], results: list,
                 total: int) -> None:
        lines = [f"compile_many: {len(failures)} of {total} inputs failed"]
        for index, name, error in failures:
            first = " ".join(line.strip() for line in str(error).strip().splitlines()[:2])
            lines.append(f"  [{index}] {name}: {type(error).__name__}: {first}")
        super().__init__("\n".join(lines))
        self.failures = failures
        self.results = results


def default_jobs() -> int:
    """``os.cpu_count()`` (1 when unknown): the default number of concurrent workers."""
    return os.cpu_count() or 1


def check_jobs(jobs: object) -> int:
    """``jobs`` as an int >= 1 (None: :func:`default_jobs`); ArgumentError/TypeError naming it."""
    if jobs is None:
        return default_jobs()
    if isinstance(jobs, bool) or not isinstance(jobs, int):
        raise TypeError(f"compile_many(): jobs must be an int >= 1 or None, got {jobs!r}")
    if jobs < 1:
        raise ArgumentError(f"compile_many(): jobs must be >= 1, got {jobs}")
    return jobs


def check_inputs(texts: object) -> None:
    """``texts`` is a sequence (list, tuple, ...) of inputs, not one text, path or module:
    TypeError naming what is accepted (a str is itself a sequence, of characters)."""
    if isinstance(texts, (str, bytes, bytearray, os.PathLike)) or \
            hasattr(texts, "get_asm") or hasattr(getattr(texts, "operation", None), "get_asm"):
        raise TypeError(f"compile_many() takes a sequence (list, tuple) of MLIR texts (str), "
                        f"file paths (os.PathLike) or module objects, got one "
                        f"{type(texts).__name__}: pass [{type(texts).__name__}] for a single "
                        "input, or use compile()")
    if not isinstance(texts, Iterable):
        raise TypeError(f"compile_many() takes a sequence (list, tuple) of MLIR texts (str), "
                        f"file paths (os.PathLike) or module objects, got "
                        f"{type(texts).__name__}")


def compile_many(texts: "Sequence[str | os.PathLike[str] | MlirModule]", *,
                 jobs: int | None = None, load: bool = True, target: str | None = None,
                 opt_level: int = 2, format: str = "auto", disk_cache: bool = True,
                 binaries: dict | None = None,
                 lowering: "LoweringOptions | Mapping | None" = None,
                 passes: str | None = None,
                 isolate: bool | None = None, timeout: float | None = None) -> list:
    """Compile many MLIR modules at once, filling the compile cache.

    Parameters
    ----------
    texts : sequence of str, os.PathLike or MLIR module objects
        MLIR texts, paths of UTF-8 ``.mlir`` files or module objects, as
        :func:`pywave.compile` takes them.
    jobs : int, optional
        Compile worker processes run at once (default ``os.cpu_count()``). Workers above
        ``$PYWAVE_COMPILE_WORKERS`` are stopped when the call returns. With isolation off
        (``isolate=False`` or ``$PYWAVE_ISOLATE=0``) the inputs are compiled one after the
        other in this process: MLIR/LLVM would serialise threads anyway.
    load : bool
        True (default): return a :class:`pywave.CompiledModule` per input (loading needs the
        GPU's driver only at the first call, as ``compile``'s modules do). False: only fill
        the disk cache and return each input's cache key (str); requires ``disk_cache``.
    target, opt_level, format, disk_cache, binaries, lowering, passes, isolate, timeout
        As :func:`pywave.compile`; the same for every input. ``timeout`` bounds each input.

    Returns
    -------
    list
        In input order: CompiledModule (``load=True``) or cache key (``load=False``). An
        input already cached starts no worker.

    Raises
    ------
    CompileManyError
        After every input was tried, when any failed: ``.failures`` lists ``(index, name,
        error)`` of each failed input, ``.results`` the others' results (None where failed).
        A subclass of :class:`CompileError`.
    ArgumentError, TypeError
        ``texts`` one str, bytes or path instead of a sequence of them (TypeError), ``jobs``
        not an int >= 1, ``load=False`` with ``disk_cache=False``, ``isolate`` or
        ``timeout`` invalid.

    Thread-safe; KeyboardInterrupt stops waiting and propagates (a worker interrupted
    mid-compile is discarded).
    """
    outcomes = run(texts, jobs=jobs, load=load, target=target, opt_level=opt_level,
                   format=format, disk_cache=disk_cache, binaries=binaries,
                   lowering=lowering, passes=passes, isolate=isolate, timeout=timeout)
    results: list = [None] * len(outcomes)
    for o in outcomes:
        if o.status != FAILED:
            results[o.index] = _module(o) if load else o.key
    failures = [(o.index, o.name, o.error) for o in outcomes if o.status == FAILED]
    if failures:
        raise CompileManyError(failures, results, len(outcomes))
    return results


def run(texts: "Sequence[str | os.PathLike[str] | MlirModule]", *, jobs: int | None = None,
        load: bool = True, disk_cache: bool = True, isolate: bool | None = None,
        timeout: float | None = None, **options) -> list[Outcome]:
    """:func:`compile_many`'s work, reporting each input as an :class:`Outcome` (in input
    order) instead of raising for a failed one (the ``precompile`` command prints them).
    ``options``: ``target``, ``opt_level``, ``format``, ``binaries``, ``lowering``,
    ``passes``."""
    from .. import isolation
    check_inputs(texts)
    workers = check_jobs(jobs)
    if not load and not disk_cache:
        raise ArgumentError("compile_many(): load=False fills the disk cache, so it needs "
                            "disk_cache=True (got disk_cache=False)")
    validate.isolate(isolate)
    if timeout is not None:
        validate.timeout(timeout)
    if not load:
        root = cache.directory()
        if root is None:
            raise ArgumentError("compile_many(load=False): the disk compile cache is off or "
                                "unusable ($PYWAVE_CACHE / $PYWAVE_CACHE_DIR), so nothing "
                                "would be kept")
        why = cache.unwritable(root)
        if why:
            raise ArgumentError(f"compile_many(load=False): cannot write into the compile "
                                f"cache folder: {why}")
    items = list(texts)
    outcomes, todo = [], []
    for index, item in enumerate(items):
        outcome, compiler = _prepare(index, item, disk_cache, load, options)
        outcomes.append(outcome)
        if compiler is not None:
            todo.append((outcome, compiler))
    if not isolation.enabled(isolate):
        workers = 1
    log.info("compile_many: %d inputs, %d cached, %d to compile with %d workers",
             len(items), sum(o.status == CACHED for o in outcomes), len(todo), workers)

    def compile_one(entry: tuple[Outcome, pipeline.Pipeline]) -> None:
        outcome, compiler = entry
        started = time.perf_counter()
        try:
            outcome.program = lookup.build_program(compiler, isolate=isolate, timeout=timeout,
                                                  workers=workers)
        except Exception as exc:  # noqa: BLE001 - reported per input, the others go on
            outcome.status, outcome.error = FAILED, exc
            return
        finally:
            outcome.seconds = time.perf_counter() - started
        outcome.status = COMPILED
        if disk_cache:
            stored = lookup.keep(outcome.request, outcome.program)
            if stored is not None:   # the program as stored: with its pre-linked host code
                outcome.program = stored
            elif not load:
                # load=False promises cache entries: an entry that was not written is a failure
                outcome.status = FAILED
                outcome.error = Error(f"compiled, but its compile-cache entry could not be "
                                      f"written into {cache.directory()} (see the warning)")
        if not load:
            outcome.program = None

    try:
        if todo:
            _run_threads(compile_one, todo, min(workers, len(todo)))
    finally:
        isolation.trim()
    return outcomes


def _run_threads(work, items: list, threads: int) -> None:
    """``work(item)`` for each item on ``threads`` threads. Ctrl-C (KeyboardInterrupt) drops
    the items not started and returns at once; compiles already running finish on their
    threads and hand their workers back."""
    from concurrent.futures import ThreadPoolExecutor
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="pywave-compile-many")
    try:
        list(pool.map(work, items))
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _name(index: int, item: object) -> str:
    return os.fspath(item) if isinstance(item, os.PathLike) else f"<input {index}>"


def _prepare(index: int, item: object, disk_cache: bool, load: bool,
             options: dict) -> tuple[Outcome, "pipeline.Pipeline | None"]:
    """The input's Outcome, and its Pipeline when it must be compiled (None: a cache hit or
    an input refused before compiling)."""
    outcome = Outcome(index, _name(index, item), COMPILED)
    try:
        text, filename = text_and_name(item)
        compiler = pipeline.Pipeline(text, filename=filename, replacements=options.get("binaries"),
                                     target=options.get("target"),
                                     opt_level=options.get("opt_level", 2),
                                     format=options.get("format", "auto"),
                                     lowering=options_of(options.get("lowering")),
                                     launchers=True, passes=options.get("passes"))
        outcome.request = lookup.request(compiler)
    except Exception as exc:  # noqa: BLE001 - reported per input
        outcome.status, outcome.error = FAILED, exc
        return outcome, None
    if _cached(outcome, disk_cache, load):
        outcome.status = CACHED
        return outcome, None
    return outcome, compiler


def _cached(outcome: Outcome, disk_cache: bool, load: bool) -> bool:
    """Whether the input is served by a cache (then ``outcome.program`` is set for loading)."""
    alive = lookup.live(outcome.request.memo) if load else None
    if alive is not None:
        outcome.program = alive.program
        return True
    if not disk_cache:
        return False
    outcome.program = lookup.stored(outcome.request)    # decoded: a corrupt entry is rebuilt
    if outcome.program is None:
        return False
    if not load:
        outcome.program = None
    return True


def _module(outcome: Outcome) -> "api.CompiledModule":
    """The CompiledModule of a successful input: the live one of the in-memory cache, else a
    new one (registered there, as :func:`pywave.compile` does)."""
    alive = lookup.live(outcome.request.memo)
    return alive if alive is not None else lookup.adopt(outcome.request.memo,
                                                       api.CompiledModule(outcome.program))
