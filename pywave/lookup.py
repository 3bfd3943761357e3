"""The one front to the compiler: the named steps every entry point takes.

:func:`pywave.compile` and :func:`pywave.compile_many` go ``request`` -> :func:`live` (the
in-memory cache) -> :func:`stored` (the disk cache) -> :func:`build_program` (a compile
worker) -> :func:`keep` (into the disk cache) -> :func:`adopt` (the in-memory cache);
:func:`pywave.export`, ``pywave run``, :class:`pywave.ExecutionEngine` and the CLI's
``compile`` and ``opt``, which need the whole :class:`pywave.pipeline.Artifacts` and cache
nothing, take :func:`build_artifacts`.
A compile error of a module given as a path-like string gains a hint that the string was
taken as MLIR text (:func:`pywave.frontend.source.with_path_hint`) on every route.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import weakref
from typing import TYPE_CHECKING, NoReturn, Protocol

from . import cache, pipeline
from .errors import CompileError
from .frontend.source import with_path_hint

if TYPE_CHECKING:
    from .program import Program


class _Live(Protocol):
    @property
    def closed(self) -> bool: ...


#: The live modules, keyed by (MLIR text, described options): a hit hashes no text beyond
#: the str's own cached hash. Weak: a module nobody holds any more is dropped.
_memory: "weakref.WeakValueDictionary[tuple[str, str], _Live]" = weakref.WeakValueDictionary()
_memory_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class Request:
    """One compile as the caches see it.

    ``memo`` is the in-memory key, (MLIR text, the options described as
    :func:`pywave.cache.described` writes them); ``key`` the disk cache's (its hash),
    computed on first use: an in-memory hit hashes no text beyond the str's own hash."""
    compiler: pipeline.Pipeline
    memo: tuple[str, str]

    @functools.cached_property
    def key(self) -> str:
        return cache.key(*self.memo)


def request(compiler: pipeline.Pipeline) -> Request:
    """The cache keys of ``compiler`` (cheap: no MLIR is imported, no text hashed)."""
    return Request(compiler, (compiler.text, cache.described(compiler.options(),
                                                              pipeline.tool_versions())))


def live(memo: tuple[str, str]) -> "_Live | None":
    """The open module made for ``memo`` that is still alive, else None. Thread-safe."""
    with _memory_lock:
        found = _memory.get(memo)
    return found if found is not None and not found.closed else None


def adopt(memo: tuple[str, str], module: "_Live") -> "_Live":
    """Register ``module`` as the live module of ``memo`` and return it; when another thread
    registered an open one first, that one is returned (one module per text and options).
    Thread-safe."""
    with _memory_lock:
        found = _memory.get(memo)
        if found is not None and not found.closed:
            return found
        _memory[memo] = module
    return module


def stored(req: Request) -> "Program | None":
    """The disk cache's program for ``req`` (decoded and checked; None: a miss, the cache
    off, or an unreadable entry, which :mod:`pywave.cache` logs and removes)."""
    return cache.load(req.key)


def keep(req: Request, program: "Program") -> "Program | None":
    """Store ``program`` under ``req``'s key, its host code pre-linked first
    (:func:`prelinked`); the program as stored (with its pre-linked host code, which the
    caller loads), or None when the cache is off or the entry could not be written (logged
    by :mod:`pywave.cache`)."""
    if cache.directory() is None:
        return None
    return cache.store(req.key, prelinked(program))


def prelinked(program: "Program") -> "Program":
    """``program`` with its host object code pre-linked into its ``shared_object`` (for warm
    starts without llvmlite) when it has none and a C compiler is present
    (:func:`pywave.host.sharedobj.link`); else ``program`` itself."""
    if program.shared_object is not None:
        return program
    from .host import sharedobj    # a warm start neither links nor imports it
    shared = sharedobj.link(program.object_code)
    return dataclasses.replace(program, shared_object=shared) if shared else program


def build_program(compiler: pipeline.Pipeline, *, isolate: bool | None = None,
                  timeout: float | None = None, workers: int | None = None) -> "Program":
    """Compile in a worker (:func:`pywave.isolation.program`); CompileError on failure."""
    from . import isolation  # a warm start neither imports it nor starts a worker
    try:
        return isolation.program(compiler, isolate=isolate, timeout=timeout, workers=workers)
    except CompileError as exc:
        _rehint(exc, compiler.text)


def build_artifacts(compiler: pipeline.Pipeline, *, isolate: bool | None = None,
                    timeout: float | None = None) -> pipeline.Artifacts:
    """Compile in a worker, keeping every artifact (:func:`pywave.isolation.artifacts`)."""
    from . import isolation
    try:
        return isolation.artifacts(compiler, isolate=isolate, timeout=timeout)
    except CompileError as exc:
        _rehint(exc, compiler.text)


def _rehint(exc: CompileError, text: str) -> NoReturn:
    hinted = with_path_hint(exc, text)
    if hinted is exc:
        raise exc
    raise hinted from exc
