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
import os
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from . import cache, pipeline
from .errors import CompileError
from .frontend.source import with_path_hint

if TYPE_CHECKING:
    from .program import Program


class _Live(Protocol):
    @property
    def closed(self) -> bool: ...


#: The live modules, keyed by (MLIR text, described options): a hit hashes no text beyond
#: the str's own cached hash; and by :func:`call_key` (the text and ``compile``'s arguments as
#: passed, with the environment the options read), checked before any option object is
#: built. Weak: a module nobody holds any more is dropped.
_memory: "weakref.WeakValueDictionary[tuple, _Live]" = weakref.WeakValueDictionary()
_memory_lock = threading.Lock()

#: The environment variables that decide what :func:`request` describes for a compile's
#: arguments: ``PYWAVE_DUMP_DIR`` (:func:`pywave.dump.root`: dumping skips the caches),
#: ``PYWAVE_CHECKS`` (:func:`pywave.lowering.with_checks`), and the CUDA toolkit's search
#: (:func:`pywave.kernels.toolkit.find_toolkit`, which also reads ``sys.path``: part of
#: :func:`call_key` too). Any other input of the key is fixed for the process
#: (:func:`pywave.pipeline.tool_versions`, :func:`pywave.llvm.host_cpu`, GPU 0's chip).
CALL_ENV = ("PYWAVE_DUMP_DIR", "PYWAVE_CHECKS", "PYWAVE_CUDA_PATH", "CUDA_HOME", "CUDA_PATH",
            "PATH")
_PLAIN = frozenset((type(None), bool, int, float, str))


class _Unkeyed(Exception):
    """An argument :func:`call_key` does not key on: the call takes the full path."""


def _plain(value: Any) -> Any:
    """``value`` as a hashable key part that tells apart what ``==`` does not (``2``, ``2.0``
    and ``True``; a list and a tuple): plain values with their type, lists, tuples and dicts
    of them, option objects by identity (each kept alive by the key); _Unkeyed otherwise."""
    kind = type(value)
    if kind in _PLAIN:
        return kind, value
    if kind is list or kind is tuple:
        return kind, tuple(_plain(v) for v in value)
    if kind is dict and all(type(k) is str for k in value):
        return kind, tuple(sorted((k, _plain(v)) for k, v in value.items()))
    if dataclasses.is_dataclass(kind) and getattr(kind, "__hash__", None) is not None:
        return kind, id(value), value     # frozen option objects (LoweringOptions)
    raise _Unkeyed


def call_key(text: Any, options: tuple) -> "tuple | None":
    """The in-memory key of a ``compile(text, **options)`` call as made (``options``: the
    keyword arguments' values in a fixed order), with the :data:`CALL_ENV` variables and
    ``sys.path`` it is read under; None when ``text`` is not a str or an argument is not
    plain data (:func:`_plain`): such calls take the full path (:func:`request`). Two calls
    of one key describe the same compile: each argument of the first was validated."""
    if type(text) is not str:
        return None
    try:
        kinds = tuple(map(type, options))
        if _PLAIN.issuperset(kinds):
            parts = (*options, *kinds)
        else:
            parts = tuple(_plain(v) for v in options)
    except _Unkeyed:
        return None
    env = tuple(map(os.environ.get, CALL_ENV))
    return ("call", text, parts, env, tuple(sys.path))


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


def live(memo: tuple) -> "_Live | None":
    """The open module made for ``memo`` (a :class:`Request`'s, or a :func:`call_key`) that
    is still alive, else None. Thread-safe."""
    with _memory_lock:
        found = _memory.get(memo)
    return found if found is not None and not found.closed else None


def adopt(memo: tuple[str, str], module: "_Live", call: "tuple | None" = None) -> "_Live":
    """Register ``module`` as the live module of ``memo`` and return it; when another thread
    registered an open one first, that one is returned (one module per text and options).
    ``call``: also register the module returned under that :func:`call_key`. Thread-safe."""
    with _memory_lock:
        found = _memory.get(memo)
        if found is not None and not found.closed:
            module = found
        else:
            _memory[memo] = module
        if call is not None:
            _memory[call] = module
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
