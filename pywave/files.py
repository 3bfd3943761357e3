"""Ground: the compile cache folder and the safe reading and writing of its files.

The folder: ``$PYWAVE_CACHE_DIR``, else ``$XDG_CACHE_HOME/pywave`` (when absolute), else
``~/.cache/pywave`` (an empty ``$HOME`` counts as unset: the password database's home);
created 0700, refused (cache disabled, a :class:`~pywave.errors.ConfigWarning`) when group-
or world-writable or not owned by the user; a folder that cannot be written is a
ConfigWarning at the first failed write, saying what fixes it. ``PYWAVE_CACHE=0`` disables
it. A value that cannot be read is a logged warning naming the variable and the default
used, never an error.

Its users: the compile cache's entries (:mod:`pywave.cache`), the ptxas release memo
(:mod:`pywave.kernels.toolkit`) and the compiler's crash reproducers
(:mod:`pywave.isolation.crash`). Every file read from the folder goes through
:func:`read_file`: opened without following symbolic links and without blocking, then
checked on the open descriptor to be a regular file owned by this user and at most
:data:`MAX_FILE_BYTES` long. Anything else (a symbolic link, FIFO, device, folder, another
user's file, an oversized file) is corrupt (:class:`CorruptFile`): logged, removed and
rebuilt, never followed, waited on or read into memory. Writes are atomic (a temporary
``.tmp-*`` file, :data:`TEMP_PREFIX`, then a rename); a failed write removes its temporary.
Sealed files (:func:`sealed`) carry a magic and a BLAKE2b-256 checksum of their payload.

No import of pywave beyond :mod:`pywave.errors`: every stage may use it.
"""

from __future__ import annotations

import errno
import logging
import os
import stat

from .errors import warn_config

try:   # BLAKE2b is built into CPython; hashlib's import loads OpenSSL (~5 ms per process)
    from _blake2 import blake2b
except ImportError:
    from hashlib import blake2b

log = logging.getLogger("pywave.cache")

TEMP_PREFIX = ".tmp-"
#: Largest file read from the cache folder (bytes): a larger one is corrupt, not read.
#: An entry is kernel images plus host code, megabytes at most; one that would encode
#: larger is not stored.
MAX_FILE_BYTES = 1 << 30


class CorruptFile(ValueError):
    """A file of the cache folder that is not what pywave wrote there (the message says why):
    one :func:`read_file` refuses, sealed bytes :func:`unsealed` refuses, or (as
    :class:`pywave.cache.CorruptFile`) an entry that does not decode to a Program for its
    key."""


def digest(data: bytes = b""):
    """A BLAKE2b-256 hash object over ``data`` (the checksum of sealed files and cache keys)."""
    return blake2b(data, digest_size=32)


def directory() -> str | None:
    """The cache directory (created), or None when disabled or unsafe (a
    :class:`~pywave.errors.ConfigWarning` says why, once per folder and reason). A folder
    this process cannot write into is still returned (its entries can be read); writes then
    fail with a warning (:func:`write_atomic`) and :func:`unwritable` says why beforehand."""
    if not _cache_enabled():
        return None
    path = os.environ.get("PYWAVE_CACHE_DIR") or default_root()
    if path is None:
        _warn_config("no-home", "compile cache disabled: no home folder ($HOME is empty or "
                     "unset and the password database has none); set PYWAVE_CACHE_DIR")
        return None
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as exc:
        _warn_config(path, f"compile cache disabled: cannot create {path}: "
                     f"{exc.strerror or exc}")
        return None
    if st.st_uid != os.geteuid():
        _warn_config(path, f"compile cache disabled: {path} belongs to {_user(st.st_uid)}, "
                     f"not to {_user(os.geteuid())} who runs pywave (its owner could plant "
                     "entries to run); set PYWAVE_CACHE_DIR to a folder of your own")
        return None
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        _warn_config(path, f"compile cache disabled: {path} is writable by its group or "
                     f"others (mode {stat.S_IMODE(st.st_mode):o}), who could plant entries "
                     f"to run; fix with chmod go-w {path}")
        return None
    return path


def default_root() -> str | None:
    """``$XDG_CACHE_HOME/pywave`` (an absolute path, as the XDG specification wants), else
    ``<home>/.cache/pywave``: ``$HOME`` when set and not empty, else the password database's
    home of this user; None without either."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return os.path.join(xdg, "pywave")
    home = os.environ.get("HOME", "")
    if not home:
        import pwd
        try:
            home = pwd.getpwuid(os.geteuid()).pw_dir
        except KeyError:
            home = ""
    return os.path.join(home, ".cache", "pywave") if home else None


def _user(uid: int) -> str:
    """``name (uid N)``, or ``uid N`` when the password database does not know it."""
    import pwd
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def unwritable(path: str) -> str | None:
    """Why this process cannot create files in the cache folder ``path``, with what fixes it
    (the owner's mode bits, or another folder when it is not the user's); None when it can."""
    if os.access(path, os.W_OK | os.X_OK):
        return None
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if st.st_uid != os.geteuid():
        return (f"{path} belongs to {_user(st.st_uid)}, not to {_user(os.geteuid())} who "
                "runs pywave; set PYWAVE_CACHE_DIR to a folder of your own")
    if st.st_mode & (stat.S_IWUSR | stat.S_IXUSR) != (stat.S_IWUSR | stat.S_IXUSR):
        return (f"{path} has mode {stat.S_IMODE(st.st_mode):o}, which does not let its owner "
                f"create files; fix with chmod u+rwx {path}")
    return f"{path} is not writable (a read-only file system?)"


def _warn_config(what: str, message: str) -> None:
    """Issue ``message`` as a ConfigWarning once per process and ``what``."""
    if ("config", what) in _warned:
        return
    _warned.add(("config", what))
    warn_config(log, message)


_OFF = ("0", "false", "no", "off")
_ON = ("", "1", "true", "yes", "on")
_warned: set[tuple[str, str]] = set()


def warn_once(variable: str, value: str, message: str) -> None:
    """Issue ``message`` about ``variable=value`` as a ConfigWarning (logged and through
    :mod:`warnings`, so a Python program sees it without logging set up) once per process
    and value."""
    if (variable, value) not in _warned:
        _warned.add((variable, value))
        warn_config(log, f"{variable}={value!r} {message}")


def _cache_enabled() -> bool:
    value = os.environ.get("PYWAVE_CACHE", "1")
    if value.strip().lower() in _OFF:
        return False
    if value.strip().lower() not in _ON:
        warn_once("PYWAVE_CACHE", value, "is not one of 1/true/yes/on or 0/false/no/off; "
                   "using the default: the disk cache is on")
    return True


def sealed(magic: bytes, payload: bytes) -> bytes:
    """``payload`` as a cache file: ``magic`` (the format and its version), the BLAKE2b-256
    of ``payload``, then ``payload``; :func:`unsealed` checks and strips them."""
    return magic + digest(payload).digest() + payload


def unsealed(magic: bytes, raw: bytes) -> bytes:
    """The payload of :func:`sealed` file bytes ``raw``; CorruptFile on another magic (another
    format or version) or a checksum mismatch (truncated or corrupt)."""
    if not raw.startswith(magic):
        raise CorruptFile("bad magic (another version or not a pywave cache file)")
    payload = raw[len(magic) + 32:]
    if digest(payload).digest() != raw[len(magic):len(magic) + 32]:
        raise CorruptFile("checksum mismatch (truncated or corrupt)")
    return payload


_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_file(path: str, limit: int = MAX_FILE_BYTES, *, touch: bool = False) -> bytes:
    """The bytes of cache file ``path``, read safely: opened without following a symbolic
    link and without blocking (a FIFO), then checked on the open descriptor (no window
    between check and read) to be a regular file owned by this user of at most ``limit``
    bytes. ``touch``: set its modification time, the recency of LRU eviction.

    Raises
    ------
    CorruptFile
        A symbolic link, a FIFO, device, socket or folder, another user's file, or a file
        over ``limit`` bytes (the message says which): not what pywave writes there.
    FileNotFoundError
        There is no such file.
    OSError
        It cannot be opened or read (e.g. no permission).
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CorruptFile("a symbolic link (not followed)") from None
        if exc.errno == errno.ENXIO:
            raise CorruptFile("not a regular file (a socket)") from None
        raise
    try:
        st = os.fstat(fd)
        _check_kept(st, limit)
        data = _read_at_most(fd, st.st_size, limit)
        if touch:
            try:
                os.utime(fd)
            except OSError:   # a read-only file system: recency is not kept, the data is good
                pass
        return data
    finally:
        os.close(fd)


def _check_kept(st: os.stat_result, limit: int) -> None:
    """CorruptFile unless ``st`` is a regular file of this user of at most ``limit`` bytes."""
    if not stat.S_ISREG(st.st_mode):
        raise CorruptFile(f"not a regular file (mode {st.st_mode:o})")
    if st.st_uid != os.geteuid():
        raise CorruptFile(f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})")
    if st.st_size > limit:
        raise CorruptFile(f"{st.st_size} bytes, over the limit of {limit} bytes")
    if st.st_size > 1 << 20 and st.st_blocks * 512 < st.st_size // 2:
        raise CorruptFile(f"a sparse file ({st.st_size} bytes, {st.st_blocks * 512} "
                          "allocated): not one pywave wrote")


def _read_at_most(fd: int, size: int, limit: int) -> bytes:
    """The rest of ``fd`` (``size`` bytes expected); CorruptFile past ``limit`` bytes (it
    grew after the check)."""
    parts, total = [], 0
    while True:
        part = os.read(fd, min(max(size - total, 1 << 16), limit + 1 - total))
        if not part:
            return b"".join(parts)
        parts.append(part)
        total += len(part)
        if total > limit:
            raise CorruptFile(f"grew past the limit of {limit} bytes while read")


def discard_file(path: str, why: str) -> None:
    """Log (a warning) and remove cache file ``path``, corrupt because ``why``: a symbolic
    link is removed itself, never its target. The caller rebuilds what it held."""
    log.warning("compile cache: ignoring corrupt %s (%s); it will be rebuilt", path, why)
    remove(path)


def write_atomic(root: str, name: str, data: bytes) -> bool:
    """Write ``root/name`` atomically (a temporary file in ``root``, then a rename); False
    when it fails (disk full, a directory where the file goes, a folder this process cannot
    write into: a ConfigWarning once per folder, with :func:`unwritable`'s hint where it
    applies), leaving no temporary file."""
    import tempfile
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=root, prefix=TEMP_PREFIX, suffix=os.path.splitext(name)[1])
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, os.path.join(root, name))
        tmp = None
        return True
    except OSError as exc:
        hint = unwritable(root) or exc.strerror or str(exc)
        _warn_config(f"write {root}: {hint}", f"compile cache: cannot write {name} into {root}: "
                     f"{hint}; compiled modules are not cached")
        return False
    finally:
        if tmp is not None:
            remove(tmp)


def remove(path: str) -> None:
    """Remove cache file ``path``; a folder there (never pywave's: it would block the entry
    for good, each process recompiling) is removed with what it holds, links not
    followed."""
    try:
        os.unlink(path)
    except IsADirectoryError:
        pass
    except OSError as exc:
        if exc.errno != errno.EPERM:       # EPERM: Linux's unlink() of a folder
            return
    else:
        return
    import shutil
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)     # rmtree never follows a symlink (lstat/O_NOFOLLOW)
    except OSError as exc:
        log.warning("compile cache: cannot remove the folder %s at an entry's name: %s",
                    path, exc.strerror or exc)
