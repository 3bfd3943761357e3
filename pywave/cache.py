"""The disk compile cache: compiled programs stored by key, checksummed, read safely.

Compile cache on disk: compiled programs (:class:`pywave.program.Program`) by key. (The
in-memory cache of open modules is in :mod:`pywave.lookup`.)

An on-disk entry holds everything a call needs (kernel binaries, host object code, the host
functions' signatures, stored by field name), so a warm start in a new process loads it
without importing MLIR.

The folder (``$PYWAVE_CACHE_DIR``, ...), its checks, and the safe reading and atomic writing
of its files are :mod:`pywave.files`'s. ``PYWAVE_CACHE_MAX_BYTES`` bounds the cache's size
(default 1 GiB; a byte count such as ``1000000``, ``1e9``, ``512MiB``, ``2GB``: see
:func:`max_bytes`); the least recently used entries are evicted. A value that cannot be read
is a logged warning naming the variable and the default used, never an error.

An entry is one file, ``<key>.pwc``, holding everything of its program: kernel images, host
object code and, when the program carries it, the host code pre-linked into a shared object
(``Program.shared_object``: :func:`pywave.lookup.keep` links it before storing; the cache
only stores), all under one checksum. An entry is bound to its key: the key is
inside the checksummed payload, so a file copied or linked under another key is corrupt, not
another module; and what is ``dlopen``-ed is the checksummed bytes themselves (copied into a
sealed memfd), so no file can be swapped in between the check and the load. Any entry that
does not decode to exactly the fields a :class:`~pywave.program.Program` needs (bad magic or
checksum, a truncated payload, a missing, extra or mistyped field) is logged, removed and
rebuilt.

Every entry is read with :func:`pywave.files.read_file` (a symbolic link, FIFO, another
user's file or an oversized file is corrupt: logged, removed and rebuilt).

Writes are atomic (:func:`pywave.files.write_atomic`); eviction removes temporaries older
than :data:`STALE_TEMP_SECONDS`, left by writers that died.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
import struct
import sys
import threading
import time
from typing import Any

# The cache folder and the safe reading and writing of its files: pywave.files, also read as
# pywave.cache.directory, read_file, write_atomic, sealed... by the cache's users.
from .files import (MAX_FILE_BYTES, TEMP_PREFIX, CorruptFile, digest, directory, discard_file,
                    read_file, remove, sealed, unsealed, unwritable, warn_once, write_atomic)
from .program import (BACKENDS, CPU, FORMATS, HOST, PYWAVE_CONVENTION, WAVE_CONVENTION, Binary,
                      HostSignature, KernelInfo, Param, Program, Target)

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
#: Files of the cache: entries (.pwc), and pre-linked host code (.pwso) that pywave versions
#: before entry format 6 kept beside them: never read, removed by eviction and clear.
SUFFIXES = (".pwc", ".pwso")


#: A cache file that is not what pywave wrote there: an entry that does not decode to a
#: Program for its key, or a file :func:`read_file` refuses (one class, its name here).
CorruptEntry = CorruptFile


def dist_version(dist: str) -> str:
    """Installed version of distribution ``dist`` ("unknown" when not installed).

    Reads the ``<name>-<version>.dist-info`` (and ``.egg-info``) directory names on
    ``sys.path``, where importlib.metadata's path finder looks: importing
    :mod:`importlib.metadata` costs more than a warm start's whole cache lookup (30 ms on the
    H200 host), so it is asked only about a metadata directory without a version in its
    name; a distribution with none on ``sys.path`` is not installed.
    """
    norm = dist.replace("-", "_").replace(".", "_").lower()
    unversioned = False
    for entry in sys.path:
        try:
            names = _listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            for suffix in (".dist-info", ".egg-info"):
                if not name.endswith(suffix):
                    continue
                base, _, rest = name[:-len(suffix)].partition("-")
                if base.replace(".", "_").lower() != norm:
                    continue
                version = rest.split("-", 1)[0]     # egg-info: name-version-pyX.Y
                if version:
                    return version
                unversioned = True
    if not unversioned:
        return "unknown"
    import importlib.metadata   # a metadata directory named without its version
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
    h = digest()
    h.update(options.encode())
    h.update(b"\0")
    h.update(text.encode())
    return h.hexdigest()


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
        warn_once("PYWAVE_CACHE_MAX_BYTES", value,
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
    if meta["target"]["backend"] not in BACKENDS and Target(**meta["target"]) not in (HOST, CPU):
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


#: Eviction scans the whole directory, so it runs on the first write of a process and then
#: every EVICT_EVERY writes: the bound can be overshot by at most that many entries.
EVICT_EVERY = 32
_writes = 0
_writes_lock = threading.Lock()


def store(cache_key: str, program: Program) -> Program | None:
    """Write the entry of ``program`` atomically, as it is (its ``shared_object`` included
    when it has one: :func:`pywave.lookup.keep` links it); evict least recently used entries
    over the bound (on the first write of the process and every EVICT_EVERY writes after).

    Returns ``program``, or None when no entry was written: the cache is off, the entry
    is over MAX_FILE_BYTES, or the write failed (disk full, a folder that cannot be written:
    a ConfigWarning, see :func:`write_atomic`); a failed write leaves no temporary file.
    """
    root = directory()
    if root is None:
        return None
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
                remove(os.path.join(root, name))
            continue
        entries.append((st.st_mtime, st.st_size, name))
    total = sum(e[1] for e in entries)
    for _, size, name in sorted(entries):
        if total <= max_bytes:
            break
        remove(os.path.join(root, name))
        total -= size
