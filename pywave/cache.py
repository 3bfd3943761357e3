"""The disk compile cache: compiled programs stored by key, checksummed, read safely.

Compile cache on disk: compiled programs (:class:`pywave.program.Program`) by key. (The
in-memory cache of open modules is in :mod:`pywave.front`.)

An on-disk entry holds everything a call needs (kernel binaries, host object code, the host
functions' signatures, stored by field name), so a warm start in a new process loads it
without importing MLIR.

Location: ``$PYWAVE_CACHE_DIR``, else ``$XDG_CACHE_HOME/pywave`` (when absolute), else
``~/.cache/pywave`` (an empty ``$HOME`` counts as unset: the password database's home);
created 0700, refused (cache disabled, a :class:`~pywave.errors.ConfigWarning`) when group-
or world-writable or not owned by the user; a folder that cannot be written is a
ConfigWarning at the first failed write, saying what fixes it. ``PYWAVE_CACHE=0`` disables
it. ``PYWAVE_CACHE_MAX_BYTES`` bounds its size (default 1 GiB; a byte count such as
``1000000``, ``1e9``, ``512MiB``, ``2GB``: see :func:`max_bytes`); the least recently used
entries are evicted. A value that cannot be read
is a logged warning naming the variable and the default used, never an error.

An entry is one file, ``<key>.pwc``, holding everything of its program: kernel images, host
object code and, when a C compiler linked it, the host code pre-linked into a shared object
(:mod:`pywave.host.sharedobj`), all under one checksum. An entry is bound to its key: the key is
inside the checksummed payload, so a file copied or linked under another key is corrupt, not
another module; and what is ``dlopen``-ed is the checksummed bytes themselves (copied into a
sealed memfd), so no file can be swapped in between the check and the load. Any entry that
does not decode to exactly the fields a :class:`~pywave.program.Program` needs (bad magic or
checksum, a truncated payload, a missing, extra or mistyped field) is logged, removed and
rebuilt.

Every file read from the cache folder (entries here, the ptxas release memo of
:mod:`pywave.kernels.toolkit`) goes through :func:`read_file`: opened without following symbolic
links and without blocking, then checked on the open descriptor to be a regular file owned
by this user and at most :data:`MAX_FILE_BYTES` long. Anything else (a symbolic link, FIFO,
device, folder, another user's file, an oversized file) is corrupt: logged, removed and
rebuilt, never followed, waited on or read into memory.

Writes are atomic (temporary ``.tmp-*`` file + rename); a failed write removes its
temporary, and eviction removes temporaries older than :data:`STALE_TEMP_SECONDS` left by
writers that died.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import json
import logging
import os
import re
import stat
import struct
import sys
import threading
import time
from typing import Any

from .errors import warn_config
from .program import (BACKENDS, FORMATS, HOST, PYWAVE_CONVENTION, WAVE_CONVENTION, Binary,
                      HostSignature, KernelInfo, Param, Program, Target)

try:   # BLAKE2b is built into CPython; hashlib's import loads OpenSSL (~5 ms per process)
    from _blake2 import blake2b
except ImportError:
    from hashlib import blake2b

log = logging.getLogger("pywave.cache")

# 2: BLAKE2b-256 checksum; 3: signatures by field name; 4: the key inside the payload;
# 5: function results (HostSignature.results, Param.memory); 6: the pre-linked shared object
# inside the entry (it was a separate .pwso file, bound to neither key nor entry); 7: each
# binary's per-kernel figures from ptxas (Binary.kernels); 8: HostSignature.convention
MAGIC = b"PYWAVE-CACHE-8\n"
DEFAULT_MAX_BYTES = 1 << 30
#: A temporary file older than this (seconds) belongs to a writer that died: eviction
#: removes it. A write takes milliseconds; the margin covers slow disks and clock skew.
STALE_TEMP_SECONDS = 600
TEMP_PREFIX = ".tmp-"
#: Files of the cache: entries (.pwc), and pre-linked host code (.pwso) that pywave versions
#: before entry format 6 kept beside them: never read, removed by eviction and clear.
SUFFIXES = (".pwc", ".pwso")
#: Largest file read from the cache folder (bytes): a larger one is corrupt, not read.
#: An entry is kernel images plus host code, megabytes at most; one that would encode
#: larger is not stored.
MAX_FILE_BYTES = 1 << 30


class CorruptEntry(ValueError):
    """A cache file that is not what pywave wrote there (the message says why): an entry that
    does not decode to a Program for its key, or a file :func:`read_file` refuses."""


def _digest(data: bytes = b""):
    return blake2b(data, digest_size=32)


def dist_version(dist: str) -> str:
    """Installed version of distribution ``dist`` ("unknown" when not installed).

    Reads the ``<name>-<version>.dist-info`` directory names on ``sys.path`` first: importing
    :mod:`importlib.metadata` costs more than a warm start's whole cache lookup.
    """
    norm = dist.replace("-", "_").replace(".", "_").lower()
    for entry in sys.path:
        try:
            names = _listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                base, _, version = name[:-len(".dist-info")].rpartition("-")
                if base.replace("-", "_").replace(".", "_").lower() == norm and version:
                    return version
    import importlib.metadata   # eggs, editable installs and other layouts
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=None)
def _listdir(path: str) -> tuple[str, ...]:
    return tuple(os.listdir(path)) if os.path.isdir(path) else ()


def described(options: dict[str, Any], versions: dict[str, str]) -> str:
    """A compile's options and tool versions as canonical JSON: with the MLIR text, what
    names the compile (:func:`key`; the in-memory cache of :func:`pywave.compile` keys on the
    pair, without hashing the text)."""
    return json.dumps({"options": options, "versions": versions}, sort_keys=True)


def key(text: str, options: str) -> str:
    """Hex digest naming a compile (its disk-cache entry): ``text`` and ``options``, the
    :func:`described` options and tool versions."""
    h = _digest()
    h.update(options.encode())
    h.update(b"\0")
    h.update(text.encode())
    return h.hexdigest()


def directory() -> str | None:
    """The cache directory (created), or None when disabled or unsafe (a
    :class:`~pywave.errors.ConfigWarning` says why, once per folder and reason). A folder
    this process cannot write into is still returned (its entries can be read); writes then
    fail with a warning (:func:`write_atomic`) and :func:`unwritable` says why beforehand."""
    if not _cache_enabled():
        return None
    path = os.environ.get("PYWAVE_CACHE_DIR") or _default_root()
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


def _default_root() -> str | None:
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
    warn_config(log, message, stacklevel=4)


_OFF = ("0", "false", "no", "off")
_ON = ("", "1", "true", "yes", "on")
_warned: set[tuple[str, str]] = set()


def _warn_once(variable: str, value: str, message: str) -> None:
    """Log ``message`` about ``variable=value`` once per process and value."""
    if (variable, value) not in _warned:
        _warned.add((variable, value))
        log.warning("%s=%r %s", variable, value, message)


def _cache_enabled() -> bool:
    value = os.environ.get("PYWAVE_CACHE", "1")
    if value.strip().lower() in _OFF:
        return False
    if value.strip().lower() not in _ON:
        _warn_once("PYWAVE_CACHE", value, "is not one of 1/true/yes/on or 0/false/no/off; "
                   "using the default: the disk cache is on")
    return True


_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": 1024**2, "mib": 1024**2, "g": 1024**3,
          "gib": 1024**3, "t": 1024**4, "tib": 1024**4, "kb": 1000, "mb": 1000**2,
          "gb": 1000**3, "tb": 1000**4}
_SIZE = r"^\s*([0-9][0-9_]*(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$"


def parse_bytes(text: str) -> int | None:
    """A byte count: a non-negative number (``1000000``, ``1e9``, ``1.5``-style decimals that
    give whole bytes) with an optional unit, case-insensitive: ``B``; ``KiB``/``MiB``/``GiB``/
    ``TiB`` (or ``K``/``M``/``G``/``T``) in powers of 1024; ``kB``/``MB``/``GB``/``TB`` in
    powers of 1000 (as SI and IEC name them). None when ``text`` is not one."""
    m = re.match(_SIZE, text)
    if not m or m.group(2).lower() not in _UNITS:
        return None
    number, unit = m.group(1).replace("_", ""), _UNITS[m.group(2).lower()]
    try:
        if any(c in number for c in ".eE"):
            value = float(number) * unit
            if not value.is_integer() or value > 2**63 - 1:
                return None
            return int(value)
        return int(number) * unit
    except (ValueError, OverflowError):
        return None


def max_bytes() -> int:
    """The size bound from ``PYWAVE_CACHE_MAX_BYTES`` (:func:`parse_bytes`), else
    :data:`DEFAULT_MAX_BYTES`; an unreadable value logs a warning and gives the default."""
    value = os.environ.get("PYWAVE_CACHE_MAX_BYTES")
    if value is None:
        return DEFAULT_MAX_BYTES
    parsed = parse_bytes(value)
    if parsed is None:
        _warn_once("PYWAVE_CACHE_MAX_BYTES", value,
                   "is not a byte count (e.g. 1000000000, 1e9, 512MiB, 2GB); using the "
                   f"default {DEFAULT_MAX_BYTES} bytes (1 GiB)")
        return DEFAULT_MAX_BYTES
    return parsed


def _encode(program: Program, cache_key: str) -> bytes:
    shared = program.shared_object
    blobs = [b.data for b in program.binaries] + [program.object_code, shared or b""]
    meta = {
        "key": cache_key,
        "target": dataclasses.asdict(program.target),
        "binaries": [{"name": b.name, "format": b.format, "size": len(b.data), "chip": b.chip,
                      "kernels": [list(k) for k in b.kernels],
                      "params": [[k, n, list(kept)] for k, n, kept in b.params]}
                     for b in program.binaries],
        "functions": [dataclasses.asdict(f) for f in program.functions],
        "object_size": len(program.object_code),
        "shared_object_size": None if shared is None else len(shared),
    }
    head = json.dumps(meta).encode()
    return sealed(MAGIC, struct.pack("<Q", len(head)) + head + b"".join(blobs))


def sealed(magic: bytes, payload: bytes) -> bytes:
    """``payload`` as a cache file: ``magic`` (the format and its version), the BLAKE2b-256
    of ``payload``, then ``payload``; :func:`unsealed` checks and strips them."""
    return magic + _digest(payload).digest() + payload


def unsealed(magic: bytes, raw: bytes) -> bytes:
    """The payload of :func:`sealed` file bytes ``raw``; CorruptEntry on another magic (another
    format or version) or a checksum mismatch (truncated or corrupt)."""
    if not raw.startswith(magic):
        raise CorruptEntry("bad magic (another version or not a pywave cache file)")
    payload = raw[len(magic) + 32:]
    if _digest(payload).digest() != raw[len(magic):len(magic) + 32]:
        raise CorruptEntry("checksum mismatch (truncated or corrupt)")
    return payload


def _decode(raw: bytes, cache_key: str) -> Program:
    """The Program of entry ``raw`` stored under ``cache_key``; CorruptEntry otherwise."""
    payload = unsealed(MAGIC, raw)
    if len(payload) < 8:
        raise CorruptEntry("payload shorter than its header")
    (n,) = struct.unpack_from("<Q", payload, 0)
    try:
        meta = json.loads(payload[8:8 + n])
    except (ValueError, RecursionError) as exc:
        raise CorruptEntry(f"header is not JSON: {exc}") from None
    _fields(meta, "header", {"key": str, "target": dict, "binaries": list, "functions": list,
                             "object_size": int, "shared_object_size": (int, None)})
    if meta["key"] != cache_key:
        raise CorruptEntry(f"entry of key {meta['key'][:16]}... stored under this key")
    _fields(meta["target"], "target", {"backend": str, "chip": str})
    if meta["target"]["backend"] not in BACKENDS and \
            Target(**meta["target"]) != HOST:
        raise CorruptEntry(f"unknown backend {meta['target']['backend']!r}")
    pos, binaries = 8 + n, []
    for b in meta["binaries"]:
        _fields(b, "binary", {"name": str, "format": str, "size": int, "chip": str,
                              "kernels": list, "params": list})
        if b["format"] not in FORMATS or b["size"] < 0:
            raise CorruptEntry(f"binary record {b!r}")
        binaries.append(Binary(b["name"], b["format"], payload[pos:pos + b["size"]], b["chip"],
                               tuple(_kernel_info(k) for k in b["kernels"]),
                               tuple(_kept_params(k) for k in b["params"])))
        pos += b["size"]
    object_size, shared_size = meta["object_size"], meta["shared_object_size"]
    end = pos + object_size + (shared_size or 0)
    if object_size < 0 or (shared_size is not None and shared_size <= 0) or end != len(payload):
        raise CorruptEntry(f"sizes add up to {end} bytes, the payload has {len(payload)}")
    obj = payload[pos:pos + object_size]
    shared = None if shared_size is None else payload[pos + object_size:]
    functions = tuple(_signature(f) for f in meta["functions"])
    return Program(Target(**meta["target"]), tuple(binaries), functions, obj, shared)


_INT_LIST = "list of int"
_PARAM_FIELDS = {"name": str, "kind": str, "type": str, "scalar": str, "dtype": _INT_LIST,
                 "flags": int, "sizes": _INT_LIST, "strides": (_INT_LIST, None), "offset": int,
                 "written": bool, "memory": str}


def _is(value: Any, kind: Any) -> bool:
    if isinstance(kind, tuple):
        return any(_is(value, k) for k in kind)
    if kind is None:
        return value is None
    if kind == _INT_LIST:
        return isinstance(value, list) and all(_is(v, int) for v in value)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _fields(record: Any, what: str, kinds: dict[str, Any]) -> None:
    """``record`` is a dict with exactly the fields of ``kinds``, each of its kind."""
    if not isinstance(record, dict) or set(record) != set(kinds):
        raise CorruptEntry(f"{what} record {record!r:.200} does not have the fields "
                           f"{sorted(kinds)}")
    for name, kind in kinds.items():
        if not _is(record[name], kind):
            raise CorruptEntry(f"{what} field {name!r} = {record[name]!r:.100} is not a "
                               f"{kind if isinstance(kind, str) else kind}")


def _kernel_info(record: Any) -> KernelInfo:
    """A KernelInfo from its JSON list (two strings, then the int fields in order)."""
    n = len(KernelInfo._fields)
    if not isinstance(record, list) or len(record) != n or \
            not all(isinstance(v, str) for v in record[:2]) or \
            not all(_is(v, int) and v >= 0 for v in record[2:]):
        raise CorruptEntry(f"kernel record {record!r:.200} is not [name, chip, {n - 2} counts]")
    return KernelInfo(*record)


def _kept_params(record: Any) -> tuple[str, int, tuple[int, ...]]:
    """A Binary.params entry from its JSON list [kernel, count, [kept indices ascending]]."""
    if isinstance(record, list) and len(record) == 3 and isinstance(record[0], str) and \
            _is(record[1], int) and isinstance(record[2], list) and \
            all(_is(i, int) for i in record[2]) and \
            all(0 <= a < b for a, b in zip(record[2], record[2][1:] + [record[1]])):
        return record[0], record[1], tuple(record[2])
    raise CorruptEntry(f"kernel parameter record {record!r:.200} is not [kernel, count, "
                       "[kept indices, ascending, below count]]")


def _signature(record: Any) -> HostSignature:
    _fields(record, "function", {"name": str, "params": list, "results": list,
                                 "convention": str})
    if record["convention"] not in (PYWAVE_CONVENTION, WAVE_CONVENTION):
        raise CorruptEntry(f"function record {record!r:.200}")
    return HostSignature(record["name"], _params(record["params"], "parameter"),
                         _params(record["results"], "result"), record["convention"])


def _params(records: list, what: str) -> tuple[Param, ...]:
    params = []
    for p in records:
        _fields(p, what, _PARAM_FIELDS)
        if p["kind"] not in ("memref", "scalar", "object") or len(p["dtype"]) != 3 or \
                (p["strides"] is not None and len(p["strides"]) != len(p["sizes"])) or \
                p["memory"] not in ("", "device"):
            raise CorruptEntry(f"{what} record {p!r:.200}")
        params.append(Param.from_fields(p))
    return tuple(params)


_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_file(path: str, limit: int = MAX_FILE_BYTES, *, touch: bool = False) -> bytes:
    """The bytes of cache file ``path``, read safely: opened without following a symbolic
    link and without blocking (a FIFO), then checked on the open descriptor (no window
    between check and read) to be a regular file owned by this user of at most ``limit``
    bytes. ``touch``: set its modification time, the recency of LRU eviction.

    Raises
    ------
    CorruptEntry
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
            raise CorruptEntry("a symbolic link (not followed)") from None
        if exc.errno == errno.ENXIO:
            raise CorruptEntry("not a regular file (a socket)") from None
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
    """CorruptEntry unless ``st`` is a regular file of this user of at most ``limit`` bytes."""
    if not stat.S_ISREG(st.st_mode):
        raise CorruptEntry(f"not a regular file (mode {st.st_mode:o})")
    if st.st_uid != os.geteuid():
        raise CorruptEntry(f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})")
    if st.st_size > limit:
        raise CorruptEntry(f"{st.st_size} bytes, over the limit of {limit} bytes")
    if st.st_size > 1 << 20 and st.st_blocks * 512 < st.st_size // 2:
        raise CorruptEntry(f"a sparse file ({st.st_size} bytes, {st.st_blocks * 512} "
                           "allocated): not one pywave wrote")


def _read_at_most(fd: int, size: int, limit: int) -> bytes:
    """The rest of ``fd`` (``size`` bytes expected); CorruptEntry past ``limit`` bytes (it
    grew after the check)."""
    parts, total = [], 0
    while True:
        part = os.read(fd, min(max(size - total, 1 << 16), limit + 1 - total))
        if not part:
            return b"".join(parts)
        parts.append(part)
        total += len(part)
        if total > limit:
            raise CorruptEntry(f"grew past the limit of {limit} bytes while read")


def read_entry(root: str, cache_key: str, *, touch: bool = False) -> Program:
    """The Program of entry ``cache_key`` in cache folder ``root``, read with
    :func:`read_file` (``touch``: mark it used) and decoded; removes nothing.

    Raises
    ------
    CorruptEntry
        The file is not an entry of this key (the message says why).
    FileNotFoundError
        There is no entry.
    OSError
        It cannot be read.
    """
    return _decode(read_file(os.path.join(root, cache_key + ".pwc"), touch=touch), cache_key)


def load(cache_key: str) -> Program | None:
    """The entry for ``cache_key`` (with its pre-linked ``shared_object`` when it has one),
    or None: missing, disabled, unreadable (logged) or corrupt (logged and removed)."""
    root = directory()
    if root is None:
        return None
    try:
        return read_entry(root, cache_key, touch=True)
    except FileNotFoundError:
        return None
    except CorruptEntry as exc:
        discard(cache_key, str(exc))
    except OSError as exc:
        log.warning("compile cache: cannot read %s: %s",
                    os.path.join(root, cache_key + ".pwc"), exc)
    return None


def discard(cache_key: str, why: str) -> None:
    """Log and remove the entry of ``cache_key`` (corrupt: ``why``); the caller rebuilds."""
    root = directory()
    if root is None:
        return
    discard_file(os.path.join(root, cache_key + ".pwc"), why)


def discard_file(path: str, why: str) -> None:
    """Log (a warning) and remove cache file ``path``, corrupt because ``why``: a symbolic
    link is removed itself, never its target. The caller rebuilds what it held."""
    log.warning("compile cache: ignoring corrupt %s (%s); it will be rebuilt", path, why)
    _remove(path)


#: Eviction scans the whole directory, so it runs on the first write of a process and then
#: every EVICT_EVERY writes: the bound can be overshot by at most that many entries.
EVICT_EVERY = 32
_writes = 0
_writes_lock = threading.Lock()


def store(cache_key: str, program: Program) -> Program | None:
    """Write the entry of ``program`` atomically, its host code pre-linked into its
    ``shared_object`` first when it has none and a C compiler is present
    (:func:`pywave.host.sharedobj.link`); evict least recently used entries over the bound (on
    the first write of the process and every EVICT_EVERY writes after).

    Returns the program as stored (with its ``shared_object`` when one was linked: the
    caller loads that one), or None when no entry was written: the cache is off, the entry
    is over MAX_FILE_BYTES, or the write failed (disk full, a folder that cannot be written:
    a ConfigWarning, see :func:`write_atomic`); a failed write leaves no temporary file.
    """
    root = directory()
    if root is None:
        return None
    if program.shared_object is None:
        from .host import sharedobj
        shared = sharedobj.link(program.object_code)   # for warm starts without llvmlite
        if shared:
            program = dataclasses.replace(program, shared_object=shared)
    data = _encode(program, cache_key)
    if len(data) > MAX_FILE_BYTES:
        log.warning("compile cache: not storing %s: %d bytes, over the limit of %d bytes",
                    cache_key, len(data), MAX_FILE_BYTES)
        return None
    if not write_atomic(root, cache_key + ".pwc", data):
        return None
    global _writes
    with _writes_lock:
        _writes += 1
        due = (_writes - 1) % EVICT_EVERY == 0
    if due:
        evict(root, max_bytes())
    return program


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
            _remove(tmp)


def evict(root: str, max_bytes: int) -> None:
    """Remove the least recently used entries until the rest fit in ``max_bytes``, and
    temporaries older than STALE_TEMP_SECONDS (their writer died)."""
    entries = []
    stale = time.time() - STALE_TEMP_SECONDS
    for name in os.listdir(root):
        if not name.endswith(SUFFIXES):
            continue
        try:
            st = os.stat(os.path.join(root, name), follow_symlinks=False)
        except FileNotFoundError:
            continue
        if name.startswith(TEMP_PREFIX):
            if st.st_mtime < stale:
                _remove(os.path.join(root, name))
            continue
        entries.append((st.st_mtime, st.st_size, name))
    total = sum(e[1] for e in entries)
    for _, size, name in sorted(entries):
        if total <= max_bytes:
            break
        _remove(os.path.join(root, name))
        total -= size


def _remove(path: str) -> None:
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
