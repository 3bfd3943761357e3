"""Install paths a new user takes: importing an unbuilt source tree, and a C program built
against libwavert with `python -m pywave config` flags, the package's pkg-config file and a
`meson install` (each started without LD_LIBRARY_PATH)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pywave import layout

ROOT = Path(__file__).resolve().parent.parent

#: A C program of libwavert's that needs no GPU: the run-time version and a status string.
APP = r"""
#include <stdio.h>
#include <wavert.h>
int main(void) {
  printf("libwavert %d: %s\n", (int)wavert_version(),
         wavert_status_string(WAVERT_ERROR_LIMIT_EXCEEDED));
  return wavert_version() == WAVERT_VERSION_MAJOR * 10000 + WAVERT_VERSION_MINOR * 100 +
         WAVERT_VERSION_PATCH ? 0 : 1;
}
"""


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    return env


def _pywave(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pywave", *args], capture_output=True,
                          text=True, timeout=300, cwd="/", **kwargs)


def _build_and_run(tmp_path: Path, flags: list[str]) -> str:
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip("needs a C compiler (cc)")
    source = tmp_path / "app.c"
    source.write_text(APP)
    exe = tmp_path / "app"
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", str(source), "-o", str(exe), *flags],
                   check=True, capture_output=True, text=True, timeout=120)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60,
                          env=_clean_env())
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_source_tree_without_built_parts_is_a_pywave_error(tmp_path):
    tree = tmp_path / "pywave"
    tree.mkdir()
    source = Path(layout.__file__).parent
    for path in source.rglob("*.py"):
        (tree / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, tree / path.relative_to(source))
    # -S: no site-packages, so no installed pywave (nor an editable install's import hook)
    # can be found before the unbuilt tree in the current directory.
    proc = subprocess.run([sys.executable, "-S", "-c", "import pywave"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("pywave.errors.NotBuiltError: ")
    assert "is not built" in last and "pip install" in last


def test_not_built_error_is_a_pywave_error_and_an_import_error():
    from pywave.errors import Error, NotBuiltError
    assert issubclass(NotBuiltError, Error) and issubclass(NotBuiltError, ImportError)


def test_layout_finds_every_built_part():
    for name in (layout.LIBWAVERT, layout.RUNNER, layout.HEADER, layout.PKGCONFIG):
        assert layout.package_file(name) is not None, name
    assert layout.package_file("no-such-file") is None
    assert Path(layout.include_dir(), "wavert_jit.h").is_file()


def test_layout_answers_as_importlib_resources():
    """The direct lookup of a regular install names the files importlib.resources names."""
    from importlib import resources
    for name in (layout.LIBWAVERT, layout.RUNNER, layout.HEADER, layout.PKGCONFIG,
                 "no-such-file", "include/no-such.h"):
        node = resources.files("pywave").joinpath(*name.split("/"))
        expected = str(node) if isinstance(node, Path) and node.is_file() else None
        assert layout.package_file(name) == expected, name


def test_regular_install_imports_no_importlib_resources():
    """``import pywave`` from a regular install finds libwavert without importlib.resources
    (and the pathlib, zipfile, tempfile it imports). ``-S``: this machine's site may import
    them itself."""
    from pywave.entry import info
    if info.installation()["editable"]:
        pytest.skip("an editable install is asked through importlib.resources")
    code = ("import sys, pywave; heavy = ('importlib.resources', 'pathlib', 'zipfile', "
            "'tempfile'); print(sorted(m for m in heavy if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          timeout=120, cwd="/", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"


def test_c_program_with_config_flags_runs_without_library_path(tmp_path):
    proc = _pywave("config", "--cflags", "--libs")
    assert proc.returncode == 0, proc.stderr
    cflags, libs = proc.stdout.splitlines()
    assert cflags == f"-I{layout.include_dir()}"
    assert f"-Wl,-rpath,{layout.library_dir()}" in libs.split()
    out = _build_and_run(tmp_path, (cflags + " " + libs).split())
    assert out.endswith(": limit exceeded\n")


def test_c_program_with_the_package_pkg_config_file(tmp_path):
    if shutil.which("pkg-config") is None:
        pytest.skip("needs pkg-config")
    proc = _pywave("config", "--pkg-config-path")
    assert proc.returncode == 0, proc.stderr
    env = dict(os.environ, PKG_CONFIG_PATH=proc.stdout.strip())
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libwavert"], env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    assert any(f.startswith("-Wl,-rpath,") for f in flags)
    assert _build_and_run(tmp_path, flags).endswith(": limit exceeded\n")


def test_config_without_a_flag_is_a_usage_error():
    proc = _pywave("config")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--cflags" in proc.stderr and "Traceback" not in proc.stderr


def test_meson_installs_every_file_of_the_package():
    """A regular install holds what ``pywave/meson.build`` lists by hand, while an editable one
    reads the checkout: a module missing from the list imports in development and is missing
    after ``pip install .``."""
    package = ROOT / "pywave"
    listed = (package / "meson.build").read_text()
    shipped = [p.relative_to(package).as_posix() for p in sorted(package.rglob("*"))
               if p.is_file() and p.suffix in (".py", ".typed", ".in")
               and p.parent.name not in ("_native", "__pycache__")]
    assert "kernels/targets.py" in shipped and "py.typed" in shipped
    assert [f for f in shipped if f"'{f}'" not in listed] == []


def test_every_version_number_agrees():
    """pyproject.toml, the Meson project (libwavert.pc), pywave.__version__ and wavert.h's
    WAVERT_VERSION_* macros state one version."""
    import re
    import pywave
    pyproject = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(),
                          re.MULTILINE).group(1)
    meson = re.search(r"project\([^)]*?version:\s*'([^']+)'", (ROOT / "meson.build").read_text())
    header = (ROOT / "libwavert" / "include" / "wavert.h").read_text()
    c = ".".join(re.search(rf"#define WAVERT_VERSION_{part}\s+(\d+)", header).group(1)
                 for part in ("MAJOR", "MINOR", "PATCH"))
    assert {pyproject, meson.group(1), pywave.__version__, c} == {pywave.__version__}


def test_c_program_after_meson_install(tmp_path):
    meson = shutil.which("meson")
    if meson is None or shutil.which("pkg-config") is None:
        pytest.skip("needs meson and pkg-config (pip install '.[test]')")
    build, prefix = tmp_path / "build", tmp_path / "prefix"
    subprocess.run([meson, "setup", str(build), str(ROOT), f"--prefix={prefix}",
                    "--libdir=lib", "-Dtests=false"], check=True, capture_output=True,
                   timeout=300)
    subprocess.run([meson, "install", "-C", str(build)], check=True, capture_output=True,
                   timeout=600)
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libwavert"], env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    assert _build_and_run(tmp_path, flags).endswith(": limit exceeded\n")


def test_c_library_alone_with_python_disabled(tmp_path):
    """`-Dpython=disabled`: Meson builds and installs libwavert (library, headers, pkg-config
    file) into the library folder with nothing of Python's (no cffi binding, no extension),
    and a C program links it through pkg-config."""
    meson = shutil.which("meson")
    if meson is None or shutil.which("pkg-config") is None:
        pytest.skip("needs meson and pkg-config (pip install '.[test]')")
    build, prefix = tmp_path / "build", tmp_path / "prefix"
    setup = subprocess.run([meson, "setup", str(build), str(ROOT), f"--prefix={prefix}",
                            "--libdir=lib", "-Dtests=false", "-Dpython=disabled"],
                           capture_output=True, text=True, timeout=300)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    subprocess.run([meson, "install", "-C", str(build)], check=True, capture_output=True,
                   timeout=600)
    built = {p.name for p in build.rglob("*") if p.is_file()}
    assert "libwavert.so" in built
    assert not [n for n in built if n.startswith(("_native", "_libwavert"))], sorted(built)
    assert (prefix / "lib" / "libwavert.so").is_file()
    assert (prefix / "include" / "wavert.h").is_file()
    assert not list(prefix.rglob("*.py")), "nothing of the Python package is installed"
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libwavert"], env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    assert _build_and_run(tmp_path, flags).endswith(": limit exceeded\n")


def test_example_makefile_builds_against_the_package_pkg_config(tmp_path):
    """libwavert/examples/Makefile reads ``libdir_wavert`` from libwavert.pc for its run path:
    the package's file lacked it (an empty ``-Wl,-rpath,``). Built against the package's
    pkg-config folder, the program starts without LD_LIBRARY_PATH (0 on a GPU, 77 without)."""
    make = shutil.which("make")
    if make is None or shutil.which("pkg-config") is None or shutil.which("cc") is None:
        pytest.skip("needs make, pkg-config and cc")
    pc_dir = _pywave("config", "--pkg-config-path").stdout.strip()
    env = dict(_clean_env(), PKG_CONFIG_PATH=pc_dir)
    variable = subprocess.run(["pkg-config", "--variable=libdir_wavert", "libwavert"], env=env,
                              capture_output=True, text=True, check=True).stdout.strip()
    assert os.path.samefile(variable, layout.library_dir())
    example = shutil.copytree(ROOT / "libwavert" / "examples", tmp_path / "examples")
    build = subprocess.run([make, "-C", str(example), "vector_add"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    assert "-Wl,-rpath, " not in build.stdout and "-Wl,-rpath,-o" not in build.stdout
    proc = subprocess.run([str(example / "vector_add"), str(example / "vector_add.ptx")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 77), proc.stdout + proc.stderr
    assert "error while loading shared libraries" not in proc.stderr


def test_the_session_writes_no_file_of_the_users():
    """The tests wrote into the user's ~/.cache/pywave and /tmp/pywave-<uid>; conftest now
    points the compile cache and the runtime folder into the session's own temporary folder
    (removed at the end), and the pywave of each test resolves them there."""
    import conftest
    from pywave import files
    from pywave.isolation import files as isolation_files
    assert conftest.PRIVATE is not None and conftest.PRIVATE.is_dir()
    assert Path(os.environ["PYWAVE_CACHE_DIR"]) == conftest.PRIVATE / "cache"
    assert Path(isolation_files.runtime_dir()).parent == conftest.PRIVATE / "run"
    assert files.directory() == str(conftest.PRIVATE / "cache")
