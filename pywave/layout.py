"""Where pywave's built parts are: libwavert, the runner library, headers, pkg-config file.

Where pywave's built parts are: ``libwavert.so``, ``libwavert_runner.so``, the C headers and
the pkg-config file, for every way pywave can be installed.

A regular install (``pip install .``, a wheel, ``meson install``) puts them inside the package
folder. An editable install (``pip install --no-build-isolation -e .``, meson-python's editable
mode) imports the Python sources from the checkout and the built files from Meson's build folder
(``build/cp3XY/``); meson-python's loader maps each installed name to its real file, and
:func:`importlib.resources.files` gives that mapping. So every lookup here asks for the
*installed* name, and both layouts resolve: when Python's own file loader imported pywave (a
regular install), ``importlib.resources`` would answer the package folder itself, so the name
is looked up there directly (``importlib.resources`` and the pathlib, zipfile, tempfile it
imports cost a fresh process about as much as all of pywave's own modules); any other loader
is asked through ``importlib.resources``. A ground module: imports nothing of pywave but
:mod:`pywave.errors`.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import SourceFileLoader, SourcelessFileLoader

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
    folder = _file_loader_folder()
    if folder is not None:
        path = os.path.join(folder, *name.split("/"))
        return path if os.path.isfile(path) else None
    import pathlib                     # an editable install: its loader's mapping
    from importlib import resources
    node = resources.files(__package__).joinpath(*name.split("/"))
    if isinstance(node, pathlib.Path) and node.is_file():
        return str(node)
    return None


def _file_loader_folder() -> str | None:
    """The package folder when Python's own file loader imported pywave: there
    ``importlib.resources.files("pywave")`` is that folder (its FileReader answers the folder
    of the loader's path). None for any other loader (meson-python's editable loader)."""
    loader = getattr(sys.modules[__package__].__spec__, "loader", None)
    if type(loader) in (SourceFileLoader, SourcelessFileLoader):
        return os.path.dirname(loader.path)
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
