"""An unbuilt source tree that defers to an installed pywave.

Python started in the repository root imports ``./pywave`` (the current folder is first on
``sys.path``), the sources without the C extensions. :func:`defer_to_installed` then loads
the pywave found on ``sys.path`` past the tree's folder (the one ``pip install .`` put in
site-packages) in its place, so that ``python3 -c 'import pywave'``, ``python3 -m pywave``
and an interactive prompt work in the root as anywhere else. Only the standard library is
imported before that decision: nothing of the tree's own modules stays loaded.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import os
import sys
from types import ModuleType

log = logging.getLogger("pywave")

_EXTENSIONS = ("_native", "_libwavert")


def is_built(package_name: str) -> bool:
    """Whether the package being imported as ``package_name`` (already in ``sys.modules``, its
    ``__path__`` set) finds its C extensions: beside its sources (a regular install) or through
    an import hook (meson-python's editable install)."""
    return all(importlib.util.find_spec(f"{package_name}.{name}") is not None
               for name in _EXTENSIONS)


def installed_copy(package_name: str, init_file: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of a built ``package_name`` on ``sys.path`` outside the folder holding the
    unbuilt package ``init_file`` belongs to (the repository root), or None."""
    tree = os.path.dirname(os.path.abspath(init_file))
    root = os.path.realpath(os.path.dirname(tree))
    others = [p for p in sys.path if os.path.realpath(p or os.curdir) != root]
    spec = importlib.machinery.PathFinder.find_spec(package_name, others)
    if spec is None or not spec.submodule_search_locations or spec.origin is None:
        return None
    if os.path.realpath(os.path.dirname(spec.origin)) == os.path.realpath(tree):
        return None
    locations = list(spec.submodule_search_locations)
    if any(importlib.machinery.PathFinder.find_spec(name, locations) is None
           for name in _EXTENSIONS):
        return None
    return spec


def defer_to_installed(package_name: str, init_file: str) -> ModuleType | None:
    """Load the installed copy (:func:`installed_copy`) as ``sys.modules[package_name]`` and
    return it; None when there is none (the caller then says how to build). The tree's own
    submodules imported so far are dropped from ``sys.modules``, so every ``pywave.*``
    import afterwards comes from the installed copy."""
    spec = installed_copy(package_name, init_file)
    if spec is None or spec.loader is None:
        return None
    for name in [n for n in sys.modules if n.startswith(package_name + ".")]:
        del sys.modules[name]
    module = importlib.util.module_from_spec(spec)
    sys.modules[package_name] = module
    spec.loader.exec_module(module)
    log.debug("%s is an unbuilt source tree; using the installed pywave at %s",
              os.path.dirname(os.path.abspath(init_file)), os.path.dirname(spec.origin))
    return module
