"""Module layering: no module of pywave imports from the package face (``pywave/__init__.py``);
the face imports the modules, never the other way round."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

import pywave

PACKAGE = Path(pywave.__file__).resolve().parent
MODULES = sorted(p for p in PACKAGE.glob("*.py") if p.name != "__init__.py")


def imports_from_the_face(path: Path) -> list[str]:
    """``from . import X`` / ``from pywave import X`` where X is no submodule (a name of the
    face), and ``import pywave``. Submodule imports are fine."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            face = (node.level == 1 and node.module is None) or \
                (node.level == 0 and node.module == "pywave")
            for alias in node.names if face else ():
                if importlib.util.find_spec(f"pywave.{alias.name}") is None:
                    found.append(f"line {node.lineno}: from {'.' if node.level else 'pywave'} "
                                 f"import {alias.name}")
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import pywave" for a in node.names
                      if a.name == "pywave"]
    return found


def test_the_scan_sees_a_face_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from . import __version__\nfrom pywave import compile\nfrom . import cache\n")
    assert imports_from_the_face(bad) == ["line 1: from . import __version__",
                                          "line 2: from pywave import compile"]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_does_not_import_from_the_package_face(path):
    assert imports_from_the_face(path) == []
