"""The `pywave cache` command: list, size and clear the disk compile cache.

Looking at and clearing the disk compile cache (:mod:`pywave.cache`): ``python -m pywave
cache info|list|clear``. Reads entries without touching them (no recency update, nothing
removed) except :func:`clear`.
"""

from __future__ import annotations

import dataclasses
import os
import stat

from .. import cache
from ..kernels import toolkit
from ..runtime import kernel_api

#: Files of the cache folder: entries, and temporary files of writes in progress (or of
#: writes that failed).
ENTRY_SUFFIX = ".pwc"
TEMP_PREFIX = ".tmp-"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One cache entry: its key (the file name without ``.pwc``), size in bytes, last use
    (seconds since the epoch), and what it holds (``None`` when it cannot be read; then
    ``problem`` says why, e.g. an entry of another pywave version)."""

    key: str
    size: int
    last_used: float
    chip: str | None
    functions: tuple[str, ...] | None
    problem: str | None = None


@dataclasses.dataclass(frozen=True)
class Summary:
    """The cache folder (None when the cache is off or unsafe), its entries' count and total
    bytes, and the size bound in bytes."""

    directory: str | None
    entries: int
    total_bytes: int
    max_bytes: int


def _entry_files(root: str) -> list[str]:
    return sorted(n for n in os.listdir(root)
                  if n.endswith(ENTRY_SUFFIX) and not n.startswith(TEMP_PREFIX))


def entries() -> list[Entry]:
    """Every entry, least recently used first ([] when the cache is off). A file that
    :func:`pywave.cache.read_entry` refuses (corrupt, a symbolic link, FIFO or device,
    another user's, oversized) is listed as unreadable (``chip`` and ``functions`` None) and
    left for :func:`pywave.cache.load` to rebuild; none is followed, waited on or read past
    its bound."""
    root = cache.directory()
    if root is None:
        return []
    out = []
    for name in _entry_files(root):
        try:
            st = os.lstat(os.path.join(root, name))
        except OSError:
            continue
        key = name[:-len(ENTRY_SUFFIX)]
        problem = None
        try:   # read only: cache.load would touch or remove it
            program = cache.read_entry(root, key)
            chip = program.target.chip
            functions = tuple(f.name for f in program.functions
                              if kernel_api.kernel_of(f.name) is None)   # host functions
        except (cache.CorruptEntry, OSError) as exc:
            chip = functions = None
            problem = str(exc) or type(exc).__name__
        out.append(Entry(key, st.st_size, st.st_mtime, chip, functions, problem))
    return sorted(out, key=lambda e: e.last_used)


def summary() -> Summary:
    """Location, entry count, total size and bound of the cache (symbolic links are counted
    by their own size, never followed)."""
    root = cache.directory()
    if root is None:
        return Summary(None, 0, 0, cache.max_bytes())
    count = total = 0
    for name in os.listdir(root):
        if not name.endswith(cache.SUFFIXES) or name.startswith(TEMP_PREFIX):
            continue
        try:
            total += os.lstat(os.path.join(root, name)).st_size
        except OSError:
            continue
        count += name.endswith(ENTRY_SUFFIX)
    return Summary(root, count, total, cache.max_bytes())


@dataclasses.dataclass(frozen=True)
class Cleared:
    """What :func:`clear_all` did: entries and files removed, bytes freed, and each file it
    could not remove as (name, reason) (a read-only folder, another user's file)."""

    entries: int
    files: int
    freed: int
    failed: tuple[tuple[str, str], ...]


def clear() -> tuple[int, int, int]:
    """(entries removed, files removed, bytes freed) of :func:`clear_all`."""
    done = clear_all()
    return done.entries, done.files, done.freed


def clear_all() -> Cleared:
    """Remove every entry, pre-linked ``.pwso`` file of earlier versions, leftover temporary
    file and the ptxas release memo (:data:`pywave.kernels.toolkit.VERSIONS_FILE`, and the
    legacy one). A symbolic link is removed itself, never what it points to (nor counted
    by it); a folder at such a name (never pywave's: it would block that entry for good) is
    removed with what it holds, without following links. What cannot be removed is named
    in ``failed``, with the OS's reason.

    Other processes may keep using the cache: a removed entry is rebuilt on its next compile."""
    root = cache.directory()
    if root is None:
        return Cleared(0, 0, 0, ())
    entries = removed = freed = 0
    failed: list[tuple[str, str]] = []
    for name in sorted(os.listdir(root)):
        if not (name.endswith(cache.SUFFIXES) or name.startswith(TEMP_PREFIX) or
                name in (toolkit.VERSIONS_FILE, toolkit.LEGACY_VERSIONS_FILE)):
            continue
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                size = _remove_tree(path)
            else:
                size = st.st_size
                os.unlink(path)
        except FileNotFoundError:
            continue                # removed by another process meanwhile
        except OSError as exc:
            failed.append((name, exc.strerror or str(exc)))
            continue
        removed += 1
        entries += name.endswith(ENTRY_SUFFIX) and not name.startswith(TEMP_PREFIX)
        freed += size
    return Cleared(entries, removed, freed, tuple(failed))


def _remove_tree(path: str) -> int:
    """Remove folder ``path`` and everything in it (links removed, not followed); its
    files' bytes. Raises OSError for the first thing that cannot be removed."""
    total = 0
    errors: list[OSError] = []
    for parent, dirs, names in os.walk(path, topdown=False):
        for name in names + dirs:
            target = os.path.join(parent, name)
            try:
                st = os.lstat(target)
                if stat.S_ISDIR(st.st_mode):
                    os.rmdir(target)
                else:
                    total += st.st_size
                    os.unlink(target)
            except OSError as exc:
                errors.append(exc)
    if errors:
        raise errors[0]
    os.rmdir(path)
    return total
