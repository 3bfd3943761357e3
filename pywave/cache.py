"""Compile cache on disk: compiled programs (:class:`pywave.program.Program`) by key. (The
in-memory cache of open modules is in :mod:`pywave.api`.)

An on-disk entry holds everything a call needs (kernel binaries, host object code, the host
functions' signatures, stored by field name), so a warm start in a new process loads it
without importing MLIR.

Location: ``$PYWAVE_CACHE_DIR``, else ``$XDG_CACHE_HOME/pywave``, else ``~/.cache/pywave``;
created 0700, refused (cache disabled, warning logged) when group- or world-writable or not
owned by the user. ``PYWAVE_CACHE=0`` disables it. ``PYWAVE_CACHE_MAX_BYTES`` bounds its
size (default 1 GiB); the least recently used entries are evicted. Writes are atomic
(temporary file + rename); a corrupt or truncated entry is logged, removed and rebuilt.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import stat
import struct
import sys
import threading
from typing import Any

from .program import Binary, HostSignature, Param, Program, Target

try:   # BLAKE2b is built into CPython; hashlib's import loads OpenSSL (~5 ms per process)
    from _blake2 import blake2b
except ImportError:
    from hashlib import blake2b

log = logging.getLogger("pywave.cache")

MAGIC = b"PYWAVE-CACHE-3\n"   # 2: BLAKE2b-256 checksum; 3: signatures by field name
DEFAULT_MAX_BYTES = 1 << 30


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


def key(text: str, options: dict[str, Any], versions: dict[str, str]) -> str:
    """Hex digest naming a compile: text, options, target chip and tool versions."""
    h = _digest()
    h.update(json.dumps({"options": options, "versions": versions}, sort_keys=True).encode())
    h.update(b"\0")
    h.update(text.encode())
    return h.hexdigest()


def directory() -> str | None:
    """The cache directory (created), or None when disabled or unsafe."""
    if os.environ.get("PYWAVE_CACHE", "1").lower() in ("0", "false", "no", "off"):
        return None
    path = os.environ.get("PYWAVE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "pywave")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as exc:
        log.warning("compile cache disabled: cannot create %s: %s", path, exc)
        return None
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or st.st_uid != os.getuid():
        log.warning("compile cache disabled: %s is writable by others or not owned by this "
                    "user (mode %o); fix with chmod 700", path, stat.S_IMODE(st.st_mode))
        return None
    return path


def _encode(program: Program) -> bytes:
    blobs = [b.data for b in program.binaries] + [program.object_code]
    meta = {
        "target": dataclasses.asdict(program.target),
        "binaries": [{"name": b.name, "format": b.format, "size": len(b.data), "chip": b.chip}
                     for b in program.binaries],
        "functions": [dataclasses.asdict(f) for f in program.functions],
        "object_size": len(program.object_code),
    }
    head = json.dumps(meta).encode()
    payload = struct.pack("<Q", len(head)) + head + b"".join(blobs)
    return MAGIC + _digest(payload).digest() + payload


def _decode(raw: bytes) -> Program:
    if not raw.startswith(MAGIC):
        raise ValueError("bad magic")
    digest = raw[len(MAGIC):len(MAGIC) + 32]
    payload = raw[len(MAGIC) + 32:]
    if _digest(payload).digest() != digest:
        raise ValueError("checksum mismatch (truncated or corrupt)")
    (n,) = struct.unpack_from("<Q", payload, 0)
    meta = json.loads(payload[8:8 + n])
    pos = 8 + n
    binaries = []
    for b in meta["binaries"]:
        binaries.append(Binary(b["name"], b["format"], payload[pos:pos + b["size"]], b["chip"]))
        pos += b["size"]
    obj = payload[pos:pos + meta["object_size"]]
    functions = tuple(HostSignature(f["name"], tuple(Param.from_fields(p) for p in f["params"]))
                      for f in meta["functions"])
    return Program(Target(**meta["target"]), tuple(binaries), functions, obj)


def load(cache_key: str) -> Program | None:
    """The entry for ``cache_key``, or None (missing, disabled, or corrupt — then removed)."""
    root = directory()
    if root is None:
        return None
    path = os.path.join(root, cache_key + ".pwc")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("compile cache: cannot read %s: %s", path, exc)
        return None
    try:
        program = _decode(raw)
    except (ValueError, TypeError, KeyError, IndexError, struct.error) as exc:
        log.warning("compile cache: ignoring corrupt entry %s (%s); it will be rebuilt",
                    path, exc)
        _remove(path)
        return None
    try:
        os.utime(path)   # recency for LRU eviction
    except OSError:
        pass
    return program


#: Eviction scans the whole directory, so it runs on the first write of a process and then
#: every EVICT_EVERY writes: the bound can be overshot by at most that many entries.
EVICT_EVERY = 32
_writes = 0
_writes_lock = threading.Lock()


def store(cache_key: str, program: Program) -> None:
    """Write the entry atomically; evict least recently used entries over the bound (on the
    first write of the process and every EVICT_EVERY writes after)."""
    root = directory()
    if root is None:
        return
    data = _encode(program)
    import tempfile
    try:
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=".pwc")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, os.path.join(root, cache_key + ".pwc"))
    except OSError as exc:
        log.warning("compile cache: cannot write to %s: %s", root, exc)
        return
    from . import sharedobj
    sharedobj.store(root, program.object_code)   # the host code pre-linked, for warm starts
    global _writes
    with _writes_lock:
        _writes += 1
        due = (_writes - 1) % EVICT_EVERY == 0
    if due:
        evict(root, int(os.environ.get("PYWAVE_CACHE_MAX_BYTES", DEFAULT_MAX_BYTES)))


def evict(root: str, max_bytes: int) -> None:
    entries = []
    for name in os.listdir(root):
        if name.endswith((".pwc", ".pwso")) and not name.startswith(".tmp-"):
            try:
                st = os.stat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            entries.append((st.st_mtime, st.st_size, name))
    total = sum(e[1] for e in entries)
    for _, size, name in sorted(entries):
        if total <= max_bytes:
            break
        _remove(os.path.join(root, name))
        total -= size


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
