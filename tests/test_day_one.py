"""A newcomer's day one (issue 24): the command line and Python surface where a first user
runs into them. Each test reproduces what the issue measured and checks what a user now
gets: one clear line instead of a traceback, a typed error naming the value and the limit,
a warning where something was silently skipped. (Export paths: tests/entry/test_c_export_safety.py.)
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import pywave
from pywave import api, cache, files
from pywave.entry.cli import main
from pywave.frontend import validate
from pywave.kernels import toolkit

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
VECTOR_ADD = ROOT / "examples" / "vector_add.mlir"


def pywave_cli(*args: str, env: dict | None = None, cwd: str | Path = "/",
               stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pywave", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, input=stdin,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(files, "_warned", set())
    return tmp_path / "cache"


# ------------------------------------------------------------- 1: an unbuilt tree, pytest

def _unbuilt_tree(root: Path) -> Path:
    """``root/pywave``: the package's Python sources without anything built."""
    tree = root / "pywave"
    tree.mkdir(parents=True)
    source = Path(pywave.__file__).parent
    for path in source.rglob("*.py"):
        (tree / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, tree / path.relative_to(source))
    return tree


@pytest.mark.parametrize("args", [["--version"], ["compile", "x.mlir", "--target", "sm_90"],
                                  ["config", "--cflags", "--libs"]])
def test_cli_in_an_unbuilt_tree_is_one_error_line(tmp_path, args):
    """`python3 -m pywave ...` in the repository root without a build gave an 8-line
    traceback ending in NotBuiltError; now one `error:` line saying what to run instead."""
    _unbuilt_tree(tmp_path)
    # -S: no site-packages, so no installed pywave (nor an editable install's import hook)
    # is found before the unbuilt tree in the current directory.
    proc = subprocess.run([sys.executable, "-S", "-m", "pywave", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"error: pywave at {tmp_path / 'pywave'} is not built")
    assert "pip install" in line and "Traceback" not in line


def _installed_copy(site: Path) -> Path:
    """A regular install of this pywave emulated in ``site``: the Python sources plus the
    built extensions, libwavert and headers in the package folder, as a wheel lays them out
    (the extensions find libwavert.so through LD_LIBRARY_PATH)."""
    from pywave import layout
    package = _unbuilt_tree(site)
    for module in ("pywave._native", "pywave._libwavert"):
        origin = importlib.util.find_spec(module).origin
        shutil.copy(origin, package / os.path.basename(origin))
    shutil.copy(layout.libwavert(), package / "libwavert.so")
    shutil.copytree(layout.include_dir(), package / "include")
    return package


def _root_with_an_install(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """(repository root with an unbuilt ./pywave, the installed package, the environment
    that puts the install on sys.path): ``pip install .`` run in the root, emulated."""
    installed = _installed_copy(tmp_path / "site")
    repo = tmp_path / "repo"
    _unbuilt_tree(repo)
    site_packages = Path(pytest.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{site_packages}",
           "LD_LIBRARY_PATH": str(installed)}
    return repo, installed, env


#: What pywave imported, and which of its modules came from the current folder.
PROBE = ("import os, sys, pywave; print(pywave.__file__); print(pywave.compile.__module__); "
         "print(sorted(m for m, v in sys.modules.items() if m.startswith('pywave') and "
         "(getattr(v, '__file__', None) or '').startswith(os.getcwd() + os.sep)))")


@pytest.mark.parametrize("how", ["-c", "-m", "prompt"])
def test_python_in_the_repository_root_uses_the_installed_pywave(tmp_path, how):
    """`python3 -c 'import pywave'`, `python3 -m pywave` and an interactive prompt in the
    root imported the unbuilt ./pywave (a NotBuiltError, or one error line); the unbuilt
    tree now loads the installed pywave in its place, nothing of the tree stays imported."""
    repo, installed, env = _root_with_an_install(tmp_path)
    if how == "-m":
        proc = subprocess.run([sys.executable, "-S", "-m", "pywave", "--version"], cwd=repo,
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == f"pywave {pywave.__version__}\n"
        return
    args = ["-c", PROBE] if how == "-c" else ["-i", "-q"]
    proc = subprocess.run([sys.executable, "-S", *args], cwd=repo, env=env,
                          input=None if how == "-c" else PROBE + "\n", capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.replace(">>> ", "").splitlines()[:3] == [
        str(installed / "__init__.py"), "pywave.api", "[]"]


def test_an_unbuilt_tree_ahead_of_nothing_installed_still_says_how_to_build(tmp_path):
    repo, _, env = _root_with_an_install(tmp_path)
    del env["PYTHONPATH"]                    # -S and no PYTHONPATH: no pywave installed
    proc = subprocess.run([sys.executable, "-S", "-c", "import pywave"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1].startswith(
        f"pywave.errors.NotBuiltError: pywave at {repo / 'pywave'} is not built")


@pytest.mark.parametrize("args", [["-c", "import pywave; print(pywave.__file__)"],
                                  ["-m", "pywave", "--version"],
                                  ["tools/mlir_gpu_suite.py", "--help"]])
def test_python_in_this_repository_root(args):
    """The real root of this checkout, as the README's lines run there: the pywave they
    import is the one the tests import (the install, or the editable build)."""
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    if args[0] == "-c":
        assert proc.stdout.strip() == pywave.__file__
    if args[0] == "-m":
        assert proc.stdout == f"pywave {pywave.__version__}\n"


def test_pytest_in_the_repository_root_uses_the_installed_pywave(tmp_path):
    """`python3 -m pytest tests/...` in the root failed on conftest (NotBuiltError: the root's
    unbuilt ./pywave came first); conftest now takes the root off sys.path when an installed
    pywave is found without it."""
    installed = _installed_copy(tmp_path / "site")
    repo = tmp_path / "repo"
    _unbuilt_tree(repo)
    (repo / "tests").mkdir()
    shutil.copy(Path(__file__).parent / "conftest.py", repo / "tests" / "conftest.py")
    (repo / "tests" / "test_probe.py").write_text(
        "import pywave\n\n"
        "def test_probe():\n"
        f"    assert pywave.__file__ == {str(installed / '__init__.py')!r}\n")
    site_packages = Path(pytest.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{site_packages}",
           "LD_LIBRARY_PATH": str(installed)}
    proc = subprocess.run([sys.executable, "-S", "-m", "pytest", "-q", "-p",
                           "no:cacheprovider", "tests/test_probe.py"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout


# ------------------------------------------------------------------------- 3: Ctrl-C

def test_ctrl_c_in_process_is_one_line_and_status_130(monkeypatch, capsys):
    from pywave.entry import cache_admin

    def interrupted():
        raise KeyboardInterrupt
    monkeypatch.setattr(cache_admin, "summary", interrupted)
    try:
        status = main(["cache", "info"])
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main()")
    assert status == 130
    assert capsys.readouterr().err == "pywave: interrupted\n"


def test_ctrl_c_during_a_compile_is_one_line_and_status_130(tmp_path):
    """SIGINT while the compile runs (a 28-line traceback before): one line, status 130."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pywave", "-vv", "compile", str(VECTOR_ADD), "--target",
         "sm_90"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/",
        env={**os.environ, "PYWAVE_CACHE": "0"}, start_new_session=True)
    first = proc.stderr.readline()        # -vv logs as soon as main() runs
    assert first, "no log line before the compile"
    os.killpg(proc.pid, signal.SIGINT)    # the whole group, as a terminal's Ctrl-C does
    _, rest = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the compile finished before the signal arrived")
    assert proc.returncode == 130, rest
    assert "Traceback" not in rest and rest.splitlines()[-1] == "pywave: interrupted"
    assert [line for line in rest.splitlines() if not line.startswith("pywave")] == []


# ------------------------------------------------------------------ 4: pywave run

@pytest.mark.parametrize("path, expected", [
    (VECTOR_ADD, "the entry function @main takes arguments (memref<?xf32>, memref<?xf32>, "
                 "memref<?xf32>); `pywave run` calls an entry without arguments"),
    (ROOT / "examples" / "aot" / "saxpy.mlir",
     "the entry function @main is not defined in the module (it defines: @saxpy); choose "
     "the entry with -e NAME")])
def test_run_on_the_shipped_examples_speaks_mlir(path, expected):
    """Lowered types (ptr, ptr, i64, ...) and internal names (__pywave_launch_0,
    wavert_jit_failed) were in these messages."""
    proc = pywave_cli("run", str(path), "--target", "sm_90", "--compile-only")
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"error: {expected}"), proc.stderr
    for internal in ("ptr", "i64", "__pywave", "wavert_", "_pywave"):
        assert internal not in proc.stderr


def test_run_compile_only_says_what_it_did():
    proc = pywave_cli("run", str(ROOT / "examples" / "hello.mlir"), "--target", "sm_90",
                      "--compile-only")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (f"compiled {ROOT / 'examples' / 'hello.mlir'} for sm_90: entry "
                           "@main returns void; not run (--compile-only)\n")


# ------------------------------------------------------------------ 5: surface details

def test_a_str_naming_a_file_gets_a_pathlib_hint(monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(pywave.CompileError) as info:
        pywave.compile("examples/vector_add.mlir", target="sm_90")
    message = str(info.value)
    assert "custom op 'examples' is unknown" in message
    assert message.endswith("hint: the text 'examples/vector_add.mlir' names an existing "
                            "file, but a str is MLIR text: pass "
                            "pathlib.Path('examples/vector_add.mlir') to compile that file")
    assert info.value.line == 1 and info.value.column == 1
    with pytest.raises(pywave.CompileError) as plain:      # not a file: no hint
        pywave.compile("examples/no_such_file.mlir", target="sm_90")
    assert "hint" not in str(plain.value)


def test_compile_reads_standard_input_from_dash():
    proc = pywave_cli("compile", "-", "--target", "sm_90", "--format", "ptx",
                      stdin=VECTOR_ADD.read_text())
    assert proc.returncode == 0, proc.stderr
    assert "host function @main(a: memref<?xf32>" in proc.stdout


def test_verbose_before_the_subcommand(tmp_path):
    env = {"PYWAVE_CACHE": "0"}
    args = ["compile", str(VECTOR_ADD), "--target", "sm_90", "--format", "ptx"]
    before = pywave_cli("-v", *args, env=env)
    assert before.returncode == 0, before.stderr
    assert "pywave: compiled " in before.stderr
    both = pywave_cli("-v", *args, "-v", env=env)     # they add up: -vv
    assert "pywave: stage parse: " in both.stderr


def test_print_ir_shows_ptx_and_summarises_binaries():
    """--print-ir printed the cubin as 11 KB escaped lines and no PTX."""
    proc = pywave_cli("compile", str(VECTOR_ADD), "--target", "sm_90", "--print-ir")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "// ----- ptx @kernels -----" in lines
    assert any(line.startswith(".entry add(") or line.startswith(".visible .entry add(")
               for line in lines)
    assert max(map(len, lines)) < 1000
    size = next(int(line.split(", ")[1].split()[0]) for line in lines
                if line.startswith("kernel binary @kernels:"))
    assert f'"<{size} bytes elided>"' in proc.stdout     # the image embedded in host code


def test_elide_blobs_counts_bytes():
    from pywave.entry.cli import elide_blobs
    blob = "\\7F" + "ELF" + "\\00" * 600
    assert elide_blobs(f'x = "{blob}" y = "short"') == 'x = "<604 bytes elided>" y = "short"'
    assert elide_blobs('dense<"0x' + "AB" * 300 + '">') == 'dense<"<300 bytes elided>">'


@pytest.mark.parametrize("given, meant", [("SM_90", "sm_90"), ("sm90", "sm_90"),
                                          ("sm-90a", "sm_90a"), ("GFX942", "gfx942")])
def test_misspelt_chip_gets_did_you_mean(given, meant):
    with pytest.raises(pywave.CompileError, match=f"did you mean '{meant}'") as info:
        validate.chip(given)
    assert "valid names" not in str(info.value)        # not the 40-name list


@pytest.mark.parametrize("chip", ["sm_20", "sm_21"])
def test_chips_older_than_the_toolchain_supports_are_refused(chip):
    with pytest.raises(pywave.CompileError, match=f"'{chip}' is older than sm_30"):
        pywave.compile(VECTOR_ADD, target=chip)
    assert validate.chip("sm_30") == "sm_30"


def test_pywave_cuda_path_that_is_no_toolkit_warns(monkeypatch):
    monkeypatch.setenv("PYWAVE_CUDA_PATH", "/nonexistent/cuda")
    toolkit._find_toolkit.cache_clear()
    with pytest.warns(pywave.ConfigWarning, match="PYWAVE_CUDA_PATH='/nonexistent/cuda' does "
                      "not exist, so it is not a CUDA toolkit root"):
        toolkit.find_toolkit()
    toolkit._find_toolkit.cache_clear()


def test_cli_prints_the_pywave_cuda_path_warning_once():
    proc = pywave_cli("info", env={"PYWAVE_CUDA_PATH": "/nonexistent/cuda"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("PYWAVE_CUDA_PATH='/nonexistent/cuda' does not exist") == 1


@pytest.mark.parametrize("home", ["", None])
def test_empty_or_missing_home_uses_the_users_home(monkeypatch, home):
    """HOME="" put the cache at /.cache/pywave."""
    import pwd
    monkeypatch.delenv("PYWAVE_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    if home is None:
        monkeypatch.delenv("HOME", raising=False)
    else:
        monkeypatch.setenv("HOME", home)
    expected = os.path.join(pwd.getpwuid(os.geteuid()).pw_dir, ".cache", "pywave")
    assert files.default_root() == expected


def test_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert files.default_root() == str(tmp_path / ".cache" / "pywave")


# -------------------------------------------------------------- 6: an unwritable cache

def _unwritable_folder(tmp_path: Path) -> Path:
    """A cache folder this process owns but cannot create files in: mode 0500, or, for root
    (whom modes do not stop), /proc/self (owned by the process's user, read-only)."""
    if os.geteuid() == 0:
        return Path("/proc/self")
    folder = tmp_path / "readonly"
    folder.mkdir(mode=0o700)
    folder.chmod(0o500)
    return folder


def test_unwritable_cache_warns_in_python(tmp_path, monkeypatch):
    """Nothing was reported from Python (the log has only a NullHandler)."""
    folder = _unwritable_folder(tmp_path)
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(folder))
    monkeypatch.setattr(files, "_warned", set())
    with pytest.warns(pywave.ConfigWarning, match=f"compile cache: cannot write .* into "
                      f"{folder}: {folder} has mode 5[05][05], which does not let its owner "
                      f"create files; fix with chmod u\\+rwx {folder}"):
        mod = pywave.compile(VECTOR_ADD.read_text() + "// unwritable\n", target="sm_90")
    assert mod.functions == ["main"]                     # compiling still works
    mod.close()


def test_precompile_into_an_unwritable_cache_fails(tmp_path):
    """`precompile` said "2 compiled", exit status 0, and wrote nothing."""
    folder = _unwritable_folder(tmp_path)
    proc = pywave_cli("precompile", str(VECTOR_ADD), "--target", "sm_90",
                      env={"PYWAVE_CACHE_DIR": str(folder)})
    assert proc.returncode == 1
    assert proc.stderr == (f"error: precompile: cannot write into the compile cache folder: "
                           f"{folder} has mode {oct(folder.stat().st_mode & 0o777)[2:]}, "
                           f"which does not let its owner create files; fix with chmod "
                           f"u+rwx {folder}\n")


def test_precompile_reports_an_entry_it_could_not_write(private_cache, monkeypatch):
    from pywave.entry import many
    monkeypatch.setattr(cache, "write_atomic", lambda root, name, data: False)
    [outcome] = many.run([VECTOR_ADD.read_text() + "// store fails\n"], load=False,
                         target="sm_90", isolate=False)
    assert outcome.status == many.FAILED
    assert "could not be written" in str(outcome.error)


def test_cache_folder_of_another_user_hints_at_pywave_cache_dir(tmp_path, monkeypatch):
    """The hint was "fix with chmod 700", which its owner alone can run."""
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    real_stat = os.stat

    class Foreign:            # os.stat of the folder as if another user owned it
        def __init__(self, st):
            self._st = st

        def __getattr__(self, name):
            return os.geteuid() + 1 if name == "st_uid" else getattr(self._st, name)

    monkeypatch.setattr(os, "stat", lambda path, *a, **k: Foreign(real_stat(path, *a, **k))
                        if os.fspath(path) == str(folder) else real_stat(path, *a, **k))
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(folder))
    monkeypatch.setattr(files, "_warned", set())
    with pytest.warns(pywave.ConfigWarning) as caught:
        assert cache.directory() is None
    message = str(caught[0].message)
    assert "not to" in message and "set PYWAVE_CACHE_DIR to a folder of your own" in message
    assert "chmod" not in message


# --------------------------------------------------------- 7: arguments from Python

def test_synchronize_beyond_int32_is_an_argument_error():
    """synchronize(2**31) raised OverflowError from cffi."""
    with pytest.raises(pywave.ArgumentError, match=r"device 2147483648 is out of range; GPU "
                       r"ordinals are at most 2147483647"):
        pywave.synchronize(2**31)


def test_compile_refuses_a_fifo(tmp_path):
    """compile(Path(fifo)) waited for a writer forever (run in a child, so that a hang is a
    failure of this test, not of the session)."""
    fifo = tmp_path / "kernels.mlir"
    os.mkfifo(fifo)
    code = ("import pathlib, sys, pywave\n"
            "for path in sys.argv[1:]:\n"
            "    try:\n"
            "        pywave.compile(pathlib.Path(path), target='sm_90')\n"
            "    except pywave.CompileError as exc:\n"
            "        print(exc)\n")
    try:
        proc = subprocess.run([sys.executable, "-c", code, str(fifo), str(tmp_path)],
                              capture_output=True, text=True, timeout=120, cwd="/")
    except subprocess.TimeoutExpired:
        pytest.fail("compile() of a FIFO still waits for a writer")
    assert proc.stdout.splitlines() == [
        f"cannot read {fifo}: it is a FIFO (named pipe), not a regular file (the command "
        "line reads standard input from '-')",
        f"cannot read {tmp_path}: it is a folder, not a regular file (the command line reads "
        "standard input from '-')"], proc.stderr


def test_compile_many_refuses_one_text():
    """compile_many("text") compiled each character as a module."""
    with pytest.raises(TypeError, match=r"compile_many\(\) takes a sequence \(list, tuple\) "
                       r"of MLIR texts \(str\), file paths \(os.PathLike\) or module objects, "
                       r"got one str"):
        pywave.compile_many(VECTOR_ADD.read_text(), target="sm_90")
    with pytest.raises(TypeError, match="got one PosixPath"):
        pywave.compile_many(VECTOR_ADD, target="sm_90")


# ------------------------------------------------------------------ 8: cache info

@pytest.mark.parametrize("value, shown", [("512MiB", "512.0 MiB"), ("2GB", "1.9 GiB"),
                                          ("1e9", "953.7 MiB")])
def test_cache_info_shows_the_bound_it_uses(private_cache, value, shown):
    """PYWAVE_CACHE_MAX_BYTES=512MiB was shown as the default, 1.0 GiB."""
    proc = pywave_cli("cache", "info", env={"PYWAVE_CACHE_MAX_BYTES": value,
                                            "PYWAVE_CACHE_DIR": str(private_cache)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith(f"size: 0 bytes of {shown}\n")


# ------------------------------------------------------------------ 9: bench scripts

def _without_torch_and_gpu() -> bool:
    return importlib.util.find_spec("torch") is None or not api.device_count()


@pytest.mark.skipif(not _without_torch_and_gpu(), reason="torch with a GPU is present")
def test_bandwidth_bench_without_torch_or_gpu_says_why():
    script = str(ROOT / "bench" / "bandwidth.py")
    usage = subprocess.run([sys.executable, script, "--help"], capture_output=True,
                           text=True, timeout=120)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: bandwidth.py")
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 77 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("bench/bandwidth.py: needs ")


def test_launch_instructions_bench_without_valgrind_says_why(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "launch_instructions.py")],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": str(empty)})
    assert proc.returncode == 77, proc.stderr
    assert proc.stderr == ("bench/launch_instructions.py: needs valgrind (apt-get install "
                           "valgrind), callgrind_annotate (valgrind), a C compiler (cc); "
                           "nothing measured\n")


# ------------------------------------------------------------- 2: the main example

def test_vector_add_example_without_a_gpu_runs_on_the_cpu_device():
    """Without a GPU the main job runs the kernel on the CPU device (NumPy arrays), names it
    and checks c == a + b."""
    if api.device_count():
        pytest.skip("a GPU is present: test_vector_add_example_on_the_gpu runs it")
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "vector_add.py")],
                          capture_output=True, text=True, timeout=300, cwd="/")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first, second, module, last = proc.stdout.splitlines()
    assert first.startswith("device: CPU device") and first.endswith("target cpu")
    assert second == "tensors: NumPy arrays"
    assert module == "<pywave.CompiledModule functions=['main'] target=cpu>"
    assert last == "OK: c == a + b for all 1000003 elements"


def test_device_buffers_example_compiles():
    """What the example runs on without torch or CuPy: its host functions take and return
    what the example passes."""
    mod = pywave.compile(ROOT / "examples" / "device_buffers.mlir", target="sm_90")
    assert mod.functions == ["ramp", "empty", "to_host"]
    mod.close()


@pytest.mark.gpu
@pytest.mark.parametrize("hide", [False, True])
def test_vector_add_example_on_the_gpu(tmp_path, hide):
    """On a GPU the example runs whatever is installed; with torch and CuPy hidden (a
    pip install of pywave alone) it runs on pywave's own device buffers, not "no GPU"."""
    if not api.device_count():
        pytest.skip("needs a GPU")
    env = dict(os.environ)
    if hide:   # modules named torch and cupy that fail to import, as when not installed
        for name in ("torch", "cupy"):
            (tmp_path / name).mkdir()
            (tmp_path / name / "__init__.py").write_text("raise ImportError('hidden')\n")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path),
                                                          env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "vector_add.py")],
                          capture_output=True, text=True, timeout=300, cwd="/", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first, second, *_, last = proc.stdout.splitlines()
    assert first.startswith("device: GPU 0, target sm_") or first.startswith("device: GPU 0, "
                                                                             "target gfx")
    assert second.startswith("tensors: ") and last.startswith("OK: c == a + b")
    if hide:
        assert second == "tensors: pywave device buffers (no tensor framework)"


def test_device_count_without_a_gpu_is_zero_or_the_count():
    count = pywave.device_count()
    assert isinstance(count, int) and count >= 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pywave.device_count() == count


# ---------------------------------------------------------- 1, 10: the README's commands

def _readme_and_docs() -> str:
    """README.md and every page of docs/ (the README's content moved there, issue 36)."""
    return "\n".join(p.read_text() for p in [ROOT / "README.md",
                                             *sorted((ROOT / "docs").glob("*.md"))])


def _readme_commands() -> list[str]:
    """The command lines of README.md's and the docs pages' code: indented lines and ```sh
    blocks."""
    lines, in_sh = [], False
    for line in _readme_and_docs().splitlines():
        if line.startswith("```"):
            in_sh = line.strip() == "```sh"
            continue
        if in_sh or line.startswith("    ") and not line.startswith("     "):
            lines.append(line.strip().removeprefix("$ "))
    return lines


def test_readme_commands_work_in_the_repository_root():
    """The README ran `python3 -m pywave ...` with paths relative to the root, where that
    imports the unbuilt ./pywave. Its commands now use the `pywave` command, and every
    repository path they name exists."""
    import re
    commands = _readme_commands()
    assert any(c.startswith("pywave compile examples/vector_add.mlir") for c in commands)
    assert [c for c in commands if re.search(r"python3? (-\w+ )*-m pywave", c)] == []
    named = {m.group(0) for c in commands
             for m in re.finditer(r"\b(?:examples|bench|tests|libwavert|tools)/[\w./-]*\w", c)}
    assert named and [p for p in sorted(named) if not (ROOT / p).exists()] == []


def test_readme_compile_command_runs_in_the_root():
    script = Path(sys.executable).parent / "pywave"
    if not script.exists():
        pytest.skip("no pywave command next to this Python")
    proc = subprocess.run([str(script), "compile", "examples/vector_add.mlir", "--target",
                           "sm_90"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("target: sm_90 (nvvm)\n")


def test_readme_covers_what_a_newcomer_asks():
    """Item 10: the command table lacked precompile and run, the README compile_many, CUDA
    graphs, torch.compile, cluster launches, TMA/wgmma and the driver pywave needs."""
    text = _readme_and_docs()
    table = text[text.index("| command | does |"):text.index("`-v` logs compile times")]
    for command in ("`compile ", "`run ", "`precompile ", "`export ", "`info ", "`cache ",
                    "`config "):
        assert f"| {command}" in table, command
    for topic in ("pywave.compile_many(", "**CUDA graphs**", "**`torch.compile`**",
                  "**Cluster launches**", "**TMA**", "wgmma", "**CUDA driver**",
                  "CUDA 9.0 or newer", "[LICENSE](LICENSE)"):
        assert topic in text, topic


def test_license_is_the_apache_license_2_0():
    """pyproject.toml says Apache-2.0; there was no LICENSE file."""
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply" in text


@pytest.mark.parametrize("setting", ["PYWAVE_CACHE", "PYWAVE_CACHE_DIR"])
def test_cache_warnings_reach_python_at_the_callers_line(private_cache, monkeypatch, tmp_path,
                                                        setting):
    """`PYWAVE_CACHE=maybe` was logged only (silent in Python without logging set up), and a
    refused cache folder's ConfigWarning named a line of pywave's: both are ConfigWarnings
    now, attributed to the line of the program that compiled."""
    if setting == "PYWAVE_CACHE":
        monkeypatch.setenv("PYWAVE_CACHE", "maybe")
    else:
        shared = tmp_path / "shared"
        shared.mkdir(mode=0o777)
        shared.chmod(0o777)                       # writable by others: refused
        monkeypatch.setenv("PYWAVE_CACHE_DIR", str(shared))
    monkeypatch.setattr(files, "_warned", set())
    text = VECTOR_ADD.read_text() + f"\n// {tmp_path}\n"     # not in the in-memory cache
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pywave.compile(text, target="sm_90")
    ours = [w for w in caught if issubclass(w.category, pywave.ConfigWarning)]
    assert ours, [str(w.message) for w in caught]
    assert setting in str(ours[0].message) or "compile cache" in str(ours[0].message)
    assert ours[0].filename == __file__, (ours[0].filename, ours[0].lineno)
