"""Files pywave reads from its compile cache folder, as a user (or another program) may leave
them there: another module's files in place of an entry's, FIFOs, symbolic links (to
/dev/zero, to the user's own files elsewhere), other users' files, oversized files. Each is
discarded (logged) and rebuilt: never the other module's code, never a hang, MemoryError or
raw OSError; ``disk_cache=False`` reads none of them; ``pywave cache list|info|clear`` neither
hang nor follow links out of the folder.

Black-box: every compile runs in a fresh interpreter (a timeout turns a hang into a failure,
a bound on its data memory turns reading /dev/zero or a huge file into one) whose host code
calls the recording driver stand-in (libwavert/tests/fake_cuda.c, built here): its launch
count tells which module's host code ran. CPU only, but for the GPU test at the end.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import pywave
from pywave import cache

pytest.importorskip("pywave._native")

ROOT = Path(__file__).resolve().parent.parent
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")

_LAUNCH = ("    gpu.launch_func @k::@empty blocks in (%c1, %c1, %c1) "
           "threads in (%c1, %c1, %c1)\n")


def _module(name: str, launches: int) -> str:
    """A module whose host function ``name`` launches an empty kernel ``launches`` times."""
    return ("module attributes {gpu.container_module} {\n"
            "  gpu.module @k {\n    gpu.func @empty() kernel { gpu.return }\n  }\n"
            f"  func.func @{name}() {{\n    %c1 = arith.constant 1 : index\n"
            + _LAUNCH * launches + "    return\n  }\n}\n")


#: The module under test, and the ones whose files are swapped into its entry: the same
#: function launching twice (silently wrong results if its code ran), and one without ``main``.
ONE = _module("main", 1)
PARTNERS = {"same-symbols": _module("main", 2), "other-symbols": _module("other", 1)}

#: Child: compile ``argv[1]`` (disk_cache ``argv[2]``), call ``main`` if it has one, print
#: its functions and the stand-in's launch count; warnings of pywave go to stderr.
CHILD = """
import ctypes, logging, os, sys
logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
import pywave
m = pywave.compile(open(sys.argv[1]).read(), target="sm_90", disk_cache=sys.argv[2] == "1")
if "main" in m.functions:
    m.main()
driver = ctypes.CDLL(os.environ["WAVERT_CUDA_LIBRARY"])
print(",".join(m.functions), driver.fake_cuda_launch_count())
m.close()
"""
#: Seconds a child may take: a compile takes a few; a hang on a FIFO never ends.
TIMEOUT = 120
#: Data memory of a child (bytes; thread stacks count, and LLVM starts one per core):
#: reading /dev/zero or an OVERSIZE file is then a MemoryError, not the OOM killer.
CHILD_DATA_BYTES = 8 << 30
#: Size of the oversized file: over any bound pywave reads, and over the child's memory.
OVERSIZE = 2 * CHILD_DATA_BYTES


def _limit_memory() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_DATA, (CHILD_DATA_BYTES, CHILD_DATA_BYTES))


def _env(cache_dir: Path, driver: Path | None) -> dict[str, str]:
    """The child's environment: the cache in ``cache_dir``, the driver stand-in ``driver``
    (None: the real driver)."""
    env = dict(os.environ, PYWAVE_CACHE_DIR=str(cache_dir))
    if driver is not None:
        env["WAVERT_CUDA_LIBRARY"] = str(driver)
    env.pop("PYWAVE_CACHE", None)
    env.pop("PYWAVE_CACHE_MAX_BYTES", None)
    here = str(Path(pywave.__file__).resolve().parent.parent)   # the pywave this run imported
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


def _child(text: str, cache_dir: Path, driver: Path, *, disk_cache: bool = True,
           cwd: Path) -> subprocess.CompletedProcess:
    source = cwd / f"input-{abs(hash(text))}.mlir"
    source.write_text(text)
    return subprocess.run([sys.executable, "-c", CHILD, str(source), "1" if disk_cache else "0"],
                          env=_env(cache_dir, driver), cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT, preexec_fn=_limit_memory)


def _cli(action: str, cache_dir: Path, driver: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pywave", "cache", action],
                          env=_env(cache_dir, driver), cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT, preexec_fn=_limit_memory)


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    """The recording CUDA driver stand-in, built once."""
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler (cc) for the driver stand-in")
    out = tmp_path_factory.mktemp("driver") / "libfake_cuda.so"
    built = subprocess.run(["cc", "-std=c11", "-shared", "-fPIC", "-pthread", "-o", str(out),
                            str(ROOT / "libwavert" / "tests" / "fake_cuda.c")],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return out


@pytest.fixture(scope="module")
def filled(tmp_path_factory, driver) -> dict[str, Path]:
    """Cache folders filled by a compile of ONE and of each partner, to copy from."""
    out = {}
    for name, text in {"one": ONE, **PARTNERS}.items():
        base = tmp_path_factory.mktemp(f"filled-{name}")
        done = _child(text, base / "cache", driver, cwd=base)
        assert done.returncode == 0, done.stderr
        out[name] = base / "cache"
    return out


def _copy(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to, symlinks=True)
    return to


def _kept(folder: Path) -> list[Path]:
    """The files of the cache folder pywave reads: entries and any other (the ptxas memo)."""
    return sorted(p for p in folder.iterdir()
                  if not p.name.startswith(".tmp-") and not p.is_dir())


def _ran(done: subprocess.CompletedProcess) -> tuple[str, int]:
    assert done.returncode == 0, done.stderr[-3000:]
    functions, launches = done.stdout.split()
    return functions, int(launches)


# --- another module's files in place of the entry's ----------------------------------------

@needs_cc
@pytest.mark.parametrize("disk_cache", [True, False], ids=["disk_cache", "no_disk_cache"])
@pytest.mark.parametrize("partner", sorted(PARTNERS))
def test_another_modules_files_in_the_entry_never_run(partner, disk_cache, filled, driver,
                                                      tmp_path):
    """Each file of ONE's entry overwritten by the partner's file of the same kind (its
    entry, its pre-linked host code where a version keeps that apart): ONE's host code runs
    (one launch, ``main``), whatever ``disk_cache`` says."""
    folder = _copy(filled["one"], tmp_path / "cache")
    theirs = {p.suffix: p for p in _kept(filled[partner]) if p.name.endswith(cache.SUFFIXES)}
    swapped = 0
    for mine in _kept(folder):
        if mine.suffix in theirs:
            mine.write_bytes(theirs[mine.suffix].read_bytes())
            swapped += 1
    assert swapped
    done = _child(ONE, folder, driver, disk_cache=disk_cache, cwd=tmp_path)
    assert _ran(done) == ("main", 1)
    if disk_cache:   # the swapped entry was found out, logged and rebuilt
        assert "corrupt" in done.stderr and "stored under this key" in done.stderr
        again = _child(ONE, folder, driver, cwd=tmp_path)
        assert _ran(again) == ("main", 1) and "corrupt" not in again.stderr


# --- files that are not what pywave wrote ---------------------------------------------------

def _fifo(path: Path, outside: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _dev_zero(path: Path, outside: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def _link_out(path: Path, outside: Path) -> None:
    """A symbolic link to the user's own copy of the file, outside the cache folder."""
    target = outside / path.name
    shutil.copyfile(path, target)
    path.unlink()
    path.symlink_to(target)


def _other_user(path: Path, outside: Path) -> None:
    os.chown(path, 65534, 65534)


def _oversize(path: Path, outside: Path) -> None:
    assert OVERSIZE > cache.MAX_FILE_BYTES
    os.truncate(path, OVERSIZE)   # sparse: takes no disk


UNSAFE = {"fifo": _fifo, "symlink-dev-zero": _dev_zero, "symlink-outside": _link_out,
          "other-user": _other_user, "oversize": _oversize}


def _make_unsafe(kind: str, folder: Path, outside: Path) -> list[Path]:
    if kind == "other-user" and os.geteuid() != 0:
        pytest.skip("needs root to give a file to another user")
    outside.mkdir()
    paths = _kept(folder)
    assert any(p.suffix == ".pwc" for p in paths)
    for path in paths:
        UNSAFE[kind](path, outside)
    return paths


def _assert_rebuilt(path: Path) -> None:
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid(), (path, st)
    assert st.st_size < cache.MAX_FILE_BYTES


@pytest.mark.parametrize("kind", sorted(UNSAFE))
def test_unsafe_cache_files_are_discarded_and_rebuilt(kind, filled, driver, tmp_path):
    """Every file of the cache folder (the entry, the ptxas memo) made ``kind``: the compile
    returns promptly with the right module, logs each file as corrupt, and leaves regular
    files of this user in their place; a link's target is never touched."""
    folder = _copy(filled["one"], tmp_path / "cache")
    outside = tmp_path / "outside"
    paths = _make_unsafe(kind, folder, outside)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    done = _child(ONE, folder, driver, cwd=tmp_path)
    assert _ran(done) == ("main", 1)
    assert {p.name for p in paths} <= {p.name for p in _kept(folder)}
    for path in paths:    # the entry, and the ptxas memo where ptxas was found
        assert f"corrupt {path}" in done.stderr, done.stderr
        _assert_rebuilt(path)
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before
    again = _child(ONE, folder, driver, cwd=tmp_path)     # a plain hit now
    assert _ran(again) == ("main", 1) and "corrupt" not in again.stderr


@needs_cc
def test_disk_cache_false_reads_no_cache_file(filled, driver, tmp_path):
    """With disk_cache=False the cache's files (entries; pre-linked host code where a
    version keeps that apart) are not even opened: FIFOs in their place are left as they
    are and nothing waits on them."""
    folder = _copy(filled["one"], tmp_path / "cache")
    entries = [p for p in _kept(folder) if p.name.endswith(cache.SUFFIXES)]
    for path in entries:
        _fifo(path, tmp_path)
    done = _child(ONE, folder, driver, disk_cache=False, cwd=tmp_path)
    assert _ran(done) == ("main", 1)
    assert all(stat.S_ISFIFO(os.lstat(p).st_mode) for p in entries)


@pytest.mark.parametrize("kind", sorted(UNSAFE))
def test_cache_commands_neither_hang_nor_follow_links(kind, filled, driver, tmp_path):
    """``pywave cache info``, ``list`` and ``clear`` with every file of the folder made
    ``kind``: each returns promptly; ``list`` shows the entry as unreadable; ``clear``
    removes the files (links themselves), never what a link points to."""
    folder = _copy(filled["one"], tmp_path / "cache")
    outside = tmp_path / "outside"
    paths = _make_unsafe(kind, folder, outside)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    info = _cli("info", folder, driver, tmp_path)
    assert info.returncode == 0 and "entries: 1\n" in info.stdout, info.stderr
    listed = _cli("list", folder, driver, tmp_path)
    assert listed.returncode == 0, listed.stderr
    (line,) = listed.stdout.splitlines()
    assert " unreadable (" in line and line.endswith(")"), line   # with the reason
    cleared = _cli("clear", folder, driver, tmp_path)
    assert cleared.returncode == 0 and cleared.stdout.startswith("removed 1 entry"), \
        cleared.stderr
    assert not any(os.path.lexists(p) for p in paths if p.suffix == ".pwc")
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before


def test_cache_info_shows_the_bound_eviction_applies(tmp_path, monkeypatch):
    """``pywave cache info`` reads PYWAVE_CACHE_MAX_BYTES as eviction does (with its units)."""
    from pywave.entry import cache_admin
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PYWAVE_CACHE_MAX_BYTES", "512MiB")
    assert cache_admin.summary().max_bytes == cache.max_bytes() == 512 << 20


# --- on a GPU -------------------------------------------------------------------------------

GPU_CHILD = """
import sys, torch, pywave
m = pywave.compile(open(sys.argv[1]).read(), disk_cache=sys.argv[2] == "1")
a = torch.arange(1000, dtype=torch.float32, device="cuda")
b = torch.full((1000,), 3.0, device="cuda")
c = torch.empty_like(a)
m.main(a, b, c)
torch.cuda.synchronize()
print("add" if torch.equal(c, a + b) else "sub" if torch.equal(c, a - b) else "other")
"""


@pytest.mark.gpu
@needs_cc
@pytest.mark.parametrize("disk_cache", [True, False], ids=["disk_cache", "no_disk_cache"])
def test_swapped_files_never_give_another_modules_results_on_a_gpu(disk_cache, torch_cuda,
                                                                   mlir, tmp_path):
    """c = a + b compiled into one cache folder, c = a - b (same signature) into another;
    every file of the first entry overwritten by the second's file of the same kind: a
    fresh process still computes a + b."""
    add = mlir("vector_add.mlir")
    sub = add.replace("arith.addf", "arith.subf")
    env_of = {}
    for name, text in (("add", add), ("sub", sub)):
        folder = tmp_path / name
        source = tmp_path / f"{name}.mlir"
        source.write_text(text)
        env_of[name] = _env(folder, None)
        done = subprocess.run([sys.executable, "-c", GPU_CHILD, str(source), "1"],
                              env=env_of[name], cwd=tmp_path, capture_output=True, text=True,
                              timeout=TIMEOUT)
        assert (done.returncode, done.stdout.strip()) == (0, name), done.stderr[-3000:]
    theirs = {p.suffix: p for p in _kept(tmp_path / "sub") if p.name.endswith(cache.SUFFIXES)}
    for mine in _kept(tmp_path / "add"):
        if mine.suffix in theirs:
            mine.write_bytes(theirs[mine.suffix].read_bytes())
    done = subprocess.run([sys.executable, "-c", GPU_CHILD, str(tmp_path / "add.mlir"),
                           "1" if disk_cache else "0"], env=env_of["add"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert (done.returncode, done.stdout.strip()) == (0, "add"), done.stderr[-3000:]



def test_cache_list_says_why_an_entry_is_unreadable(tmp_path, monkeypatch):
    """An entry of another pywave version (another format magic) is listed as unreadable with
    that reason, not as a bare "unreadable" that reads like corruption."""
    from pywave.entry import cache_admin
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(folder))
    (folder / ("0" * 64 + ".pwc")).write_bytes(b"PWCACHE0" + bytes(64))
    (entry,) = cache_admin.entries()
    assert entry.chip is None and "another version" in entry.problem, entry


# Issue 34: the cache tells the truth ---------------------------------------------------------
def _pywave_cli(*args, env):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "pywave", *args], env=env,
                          capture_output=True, text=True, timeout=240)


def _fill(tmp_path):
    import os
    env = dict(os.environ, PYWAVE_CACHE_DIR=str(tmp_path / "c"))
    import subprocess
    import sys
    data = os.path.join(os.path.dirname(__file__), "data", "vector_add.mlir")
    subprocess.run([sys.executable, "-c", "import pywave, sys; pywave.compile(open(sys.argv[1])"
                    ".read(), target='sm_90', format='ptx')", data], env=env, check=True,
                   timeout=240)
    return env, tmp_path / "c"


def test_cache_clear_of_a_read_only_folder_names_what_is_left_and_exits_1(tmp_path):
    import os
    env, root = _fill(tmp_path)
    if os.geteuid() == 0:
        import pytest
        pytest.skip("root removes files from a read-only folder")
    os.chmod(root, 0o500)
    try:
        done = _pywave_cli("cache", "clear", env=env)
    finally:
        os.chmod(root, 0o700)
    assert done.returncode == 1
    assert "cannot remove" in done.stderr and ".pwc" in done.stderr
    assert any(n.endswith(".pwc") for n in os.listdir(root))


def test_cache_clear_removes_a_folder_at_an_entry_name(tmp_path):
    import os
    env, root = _fill(tmp_path)
    odd = root / ("f" * 64 + ".pwc")
    odd.mkdir()
    (odd / "inside").write_bytes(b"x" * 10)
    done = _pywave_cli("cache", "clear", env=env)
    assert done.returncode == 0, done.stderr
    assert not odd.exists()
    assert not any(n.endswith(".pwc") for n in os.listdir(root))


def test_a_folder_at_an_entry_name_is_removed_and_the_entry_stored(tmp_path):
    import os
    import subprocess
    import sys
    env, root = _fill(tmp_path)
    entry = next(n for n in os.listdir(root) if n.endswith(".pwc"))
    os.unlink(root / entry)
    (root / entry).mkdir()
    (root / entry / "x").write_bytes(b"1")
    data = os.path.join(os.path.dirname(__file__), "data", "vector_add.mlir")
    subprocess.run([sys.executable, "-c", "import pywave, sys; pywave.compile(open(sys.argv[1])"
                    ".read(), target='sm_90', format='ptx')", data], env=env, check=True,
                   timeout=240)
    assert (root / entry).is_file()


def test_a_sparse_entry_is_refused_without_reading_it(tmp_path, monkeypatch):
    import time
    from pywave import cache
    path = tmp_path / "sparse.pwc"
    with open(path, "wb") as fh:
        fh.truncate(1 << 30)
    start = time.monotonic()
    import pytest
    with pytest.raises(cache.CorruptEntry, match="sparse"):
        cache.read_file(str(path))
    assert time.monotonic() - start < 1.0
