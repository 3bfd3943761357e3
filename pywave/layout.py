"""Where pywave's built parts are: libwavert, the runner library, headers, pkg-config file.

Where pywave's built parts are: ``libwavert.so``, ``libwavert_runner.so``, the C headers and
the pkg-config file, for every way pywave can be installed.

A regular install (``pip install .``, a wheel, ``meson install``) puts them inside the package
folder. An editable install (``pip install --no-build-isolation -e .``, meson-python's editable
mode) imports the Python sources from the checkout and the built files from Meson's build folder
(``build/cp3XY/``); meson-python's loader maps each installed name to its real file, and
:func:`importlib.resources.files` gives that mapping. So every lookup here asks
``importlib.resources`` for the *installed* name, and both layouts resolve. A ground module:
imports nothing of pywave but :mod:`pywave.errors`.
"""

from __future__ import annotations

import os
import pathlib
from importlib import resources

from .errors import NotBuiltError

#: The installed names (relative to the package folder) this module resolves.
LIBWAVERT = "libwavert.so"
RUNNER = "libwavert_runner.so"
HEADER = "include/wavert.h"
PKGCONFIG = "pkgconfig/libwavert.pc"

REBUILD_HINT = ("install pywave with `python3 -m pip install .`, or for development "
                "`python3 -m pip install meson-python meson ninja cffi && python3 -m pip install "
                "--no-build-isolation -e .`")


def package_file(name: str) -> str | None:
    """The real path of the package file installed as ``name`` (``"libwavert.so"``,
    ``"include/wavert.h"``), or None when this installation has no such file."""
    node = resources.files("pywave").joinpath(*name.split("/"))
    if isinstance(node, pathlib.Path) and node.is_file():
        return str(node)
    return None


def required_file(name: str) -> str:
    """:func:`package_file`, raising :class:`NotBuiltError` (with how to fix it) when absent."""
    path = package_file(name)
    if path is None:
        package = os.path.dirname(os.path.abspath(__file__))
        raise NotBuiltError(f"{name} is missing from the pywave package at {package}: this "
                            f"pywave has not been built; {REBUILD_HINT}")
    return path


def libwavert() -> str:
    """Path of the ``libwavert.so`` this pywave was built with."""
    return required_file(LIBWAVERT)


def runner_library() -> str | None:
    """Path of ``libwavert_runner.so`` (MLIR's runner utilities), None when not built."""
    return package_file(RUNNER)


def include_dir() -> str:
    """Folder holding ``wavert.h`` and ``wavert_jit.h``."""
    return os.path.dirname(required_file(HEADER))


def library_dir() -> str:
    """Folder holding ``libwavert.so`` (a C program's ``-L`` and run path)."""
    return os.path.dirname(libwavert())


def pkgconfig_dir() -> str:
    """Folder holding ``libwavert.pc`` for this installation (relocatable: its paths are
    relative to itself, and its ``Libs`` carry a run path to :func:`library_dir`)."""
    return os.path.dirname(required_file(PKGCONFIG))


def cflags() -> list[str]:
    """Compiler flags of a C program using ``wavert.h``."""
    return [f"-I{include_dir()}"]


def libs() -> list[str]:
    """Linker flags of a C program using libwavert; the run path lets it start without
    ``LD_LIBRARY_PATH``."""
    libdir = library_dir()
    return [f"-L{libdir}", f"-Wl,-rpath,{libdir}", "-lwavert"]
