"""Folders and files that only this user may touch: crash records and the server's socket.

A folder is used only when it is a real folder (not a symlink), owned by this user and
closed to others (no group/other bits); files in it are created with ``O_EXCL |
O_NOFOLLOW`` relative to the folder's fd, so nothing another user planted is followed or
overwritten (the rule of ``mkstemp``; see open(2) for O_NOFOLLOW, O_EXCL).
"""

from __future__ import annotations

import os
import stat
import tempfile


#: Longest base folder for the runtime folder: a Unix socket path holds at most 107 bytes,
#: and ``/pywave-<uid>/srv-<20 hex>.sock`` (or its temporary name) needs up to 49 of them.
_LONGEST_BASE = 56


class UnsafeFolder(OSError):
    """A folder exists but is not this user's private folder."""


def private_dir(path: str) -> str:
    """``path`` as a private folder: created with mode 0700 (and its parents with the
    default mode) if missing, else checked (a real folder owned by this user with mode
    0700 or stricter). Raises UnsafeFolder (an OSError) naming what is wrong."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeFolder(f"{path} is not a folder (a symlink or a file)")
    if info.st_uid != os.getuid():
        raise UnsafeFolder(f"{path} is owned by uid {info.st_uid}, not by this user "
                           f"(uid {os.getuid()})")
    if info.st_mode & 0o077:
        raise UnsafeFolder(f"{path} has mode {stat.S_IMODE(info.st_mode):o}; others may "
                           "write or read it (0700 expected)")
    return path


def runtime_dir() -> str:
    """This user's private folder for sockets and locks: ``$XDG_RUNTIME_DIR/pywave`` when
    that is set, else ``<temp dir>/pywave-<uid>`` (``/tmp/pywave-<uid>`` when the temp
    folder's path is too long for a Unix socket's 108 bytes)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime) and _fits(runtime) and os.path.isdir(runtime):
        return private_dir(os.path.join(runtime, "pywave"))
    base = tempfile.gettempdir()
    if not _fits(base):
        base = "/tmp"
    return private_dir(os.path.join(base, f"pywave-{os.getuid()}"))


def _fits(base: str) -> bool:
    """Whether socket paths under ``base`` fit (counted in bytes, as the kernel does)."""
    try:
        return len(os.fsencode(base)) <= _LONGEST_BASE
    except UnicodeError:
        return False


def create_pair(folder: str, stem: str, first: tuple[str, bytes],
                second: tuple[str, bytes]) -> str:
    """Write two new files ``folder/<stem><ext>`` (mode 0600) for ``first`` and ``second``
    (extension, bytes), under the first stem of ``stem``, ``stem-1``, ``stem-2``, ... for
    which neither exists; returns the first file's path. Never follows a symlink nor
    overwrites a file (O_EXCL | O_NOFOLLOW, relative to the folder's fd)."""
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for n in range(1000):
            name = stem if n == 0 else f"{stem}-{n}"
            if not _create(dir_fd, name + first[0], first[1]):
                continue
            if _create(dir_fd, name + second[0], second[1]):
                return os.path.join(folder, name + first[0])
            os.unlink(name + first[0], dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    raise FileExistsError(f"{folder}: 1000 files named like {stem} exist")


def _create(dir_fd: int, name: str, data: bytes) -> bool:
    """Create ``name`` in the folder ``dir_fd`` with ``data``; False when the name is taken."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return True
