"""Module layering: no module of pywave imports from the package face (``pywave/__init__.py``);
the face imports the modules, never the other way round."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

import pywave

PACKAGE = Path(pywave.__file__).resolve().parent
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "__init__.py")


def imports_from_the_face(path: Path) -> list[str]:
    """``from <pywave> import X`` (relative or absolute) where X is no submodule (a name of
    the face), and ``import pywave``. Submodule imports, and relative imports within a
    subpackage, are fine."""
    inside = path.resolve().parent.relative_to(PACKAGE).parts if \
        path.resolve().is_relative_to(PACKAGE) else ()
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            face = (node.level == len(inside) + 1 and node.module is None) or \
                (node.level == 0 and node.module == "pywave")
            for alias in node.names if face else ():
                if importlib.util.find_spec(f"pywave.{alias.name}") is None:
                    found.append(f"line {node.lineno}: from {'.' * node.level or 'pywave'} "
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


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_does_not_import_from_the_package_face(path):
    assert imports_from_the_face(path) == []


# --------------------------------------------------------------------------------------------
# The import graph: no circle (module-level and function-level imports alike), no private reach
# --------------------------------------------------------------------------------------------
SOURCES = {  # module name -> path, subpackages included
    ".".join(("pywave",) + p.relative_to(PACKAGE).with_suffix("").parts).removesuffix(
        ".__init__"): p for p in sorted(PACKAGE.rglob("*.py"))}


def _base(module: str, level: int) -> str:
    """The package a relative import of ``level`` in ``module`` starts from."""
    package = module if SOURCES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    for _ in range(level - 1):
        package = package.rsplit(".", 1)[0]
    return package


def imported_modules(module: str, tree: ast.AST | None = None) -> dict[str, str]:
    """What ``module``'s imports (at any depth) bind: {local name: pywave module it names, or
    the pywave module it was taken from}. The C extensions (``_native``, ``_libwavert``) are
    not Python sources and count as none."""
    tree = tree or ast.parse(SOURCES[module].read_text(), str(SOURCES[module]))
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _base(module, node.level) + (f".{node.module}" if node.module else "") \
                if node.level else (node.module or "")
            for alias in node.names:
                name = f"{target}.{alias.name}"
                if alias.name not in ("_native", "_libwavert"):
                    found[alias.asname or alias.name] = name if name in SOURCES else target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in SOURCES:
                    found[alias.asname or alias.name] = alias.name
    return {k: v for k, v in found.items() if v in SOURCES}


def module_aliases(module: str, tree: ast.AST) -> dict[str, str]:
    """{local name: pywave module} for the names ``module``'s imports bind to modules."""
    return {k: v for k, v in imported_modules(module, tree).items()
            if v.rsplit(".", 1)[-1] == k or v == f"pywave.{k}"}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_search_finds_a_circle_through_a_function_level_import():
    a = ast.parse("def f():\n    from . import b\n")
    graph = {"pywave.a": {"pywave.b"}, "pywave.b": {"pywave.a"}, "pywave.c": {"pywave.a"}}
    assert cycles(graph) == [["pywave.a", "pywave.b"]]
    assert "b" in {n.names[0].name for n in ast.walk(a) if isinstance(n, ast.ImportFrom)}


def test_no_import_circle_in_pywave():
    graph = {m: set(imported_modules(m).values()) - {m} for m in SOURCES}
    assert cycles(graph) == []


def private_reach(module: str) -> list[str]:
    """Uses of another pywave module's private names (``_x``, not dunders): ``from .m import
    _x`` and ``m._x`` where ``m`` names an imported pywave module."""
    tree = ast.parse(SOURCES[module].read_text(), str(SOURCES[module]))
    aliases = module_aliases(module, tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or node.module == "pywave"):
            found += [f"line {node.lineno}: import of {a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")
                      and f"{_base(module, node.level)}.{a.name}" not in SOURCES
                      and a.name not in ("_native", "_libwavert", "_version")]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id in aliases and aliases[node.value.id] != module and \
                node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_no_module_reads_another_modules_private_names(module):
    assert private_reach(module) == []


def test_only_kernels_targets_touches_the_targets_attribute():
    """``pywave/kernels/targets.py`` is the one reader and writer of a ``gpu.module``'s
    ``targets`` attribute; any other module goes through it."""
    import re
    touch = re.compile(r"""attributes\[\s*["']targets["']\s*\]|["']targets["']\s+(not\s+)?in\s""")
    owner = PACKAGE / "kernels" / "targets.py"
    found = [f"{p.relative_to(PACKAGE)}:{n}" for p in sorted(PACKAGE.rglob("*.py")) if p != owner
             for n, line in enumerate(p.read_text().splitlines(), 1) if touch.search(line)]
    assert found == []
    assert touch.search(owner.read_text())      # the pattern still sees the owner's accesses


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_docstring_opens_with_a_one_line_summary(path):
    """Each module says in its first line what it owns (README "Architecture" lists them)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first, _, rest = doc.partition("\n")
    assert first.strip() and first.rstrip().endswith((".", ":")) and len(first) <= 100, first
    assert not rest or rest.startswith("\n"), "a blank line follows the summary"
