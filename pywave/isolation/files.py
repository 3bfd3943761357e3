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
    if runtime and os.path.isabs(runtime) and len(runtime) < 60:
        return private_dir(os.path.join(runtime, "pywave"))
    base = tempfile.gettempdir()
    if len(base) > 60:
        base = "/tmp"
    return private_dir(os.path.join(base, f"pywave-{os.getuid()}"))


def create_exclusive(folder: str, name: str, data: bytes) -> str:
    """Write ``data`` to a new file ``folder/name`` (mode 0600), or, when that name is
    taken, ``name`` with ``-1``, ``-2``, ... before its extension; returns the path.
    Never follows a symlink nor overwrites a file."""
    stem, ext = os.path.splitext(name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for n in range(1000):
            candidate = name if n == 0 else f"{stem}-{n}{ext}"
            try:
                fd = os.open(candidate, flags, 0o600, dir_fd=dir_fd)
            except FileExistsError:
                continue
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            return os.path.join(folder, candidate)
    finally:
        os.close(dir_fd)
    raise FileExistsError(f"{folder}: 1000 files named like {name} exist")
