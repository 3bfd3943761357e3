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


# --------------------------------------------------------------------------------------------
# The layer order (README "Architecture"): each import goes down a layer or stays in its group
# --------------------------------------------------------------------------------------------
#: pywave's layers, top to bottom. A module may import from its own group and from any layer
#: below; the groups of one layer (what the driver runs: the host and kernels stages, the disk
#: cache, the dump) do not import each other: what two of them share is a ground module. A
#: module is in the group of the longest name that is it or a package holding it.
LAYERS: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("face", (("pywave", "pywave.__main__"),)),
    ("entry points", (("pywave.entry",),)),
    ("api", (("pywave.api",),)),
    ("lookup", (("pywave.lookup",),)),
    ("isolation", (("pywave.isolation",),)),
    ("driver", (("pywave.pipeline",),)),
    ("driver's parts", (("pywave.host",), ("pywave.kernels",), ("pywave.cache",),
                        ("pywave.dump",))),
    ("first stages", (("pywave.frontend",),)),
    ("runtime binding", (("pywave.runtime",),)),
    ("ground", (("pywave.program", "pywave.lowering", "pywave.mlirutil", "pywave.llvm",
                 "pywave.files", "pywave.image_params", "pywave.errors", "pywave.layout",
                 "pywave.sparse", "pywave._version", "pywave._native",
                 "pywave._source_tree"),)),
)


def place(module: str) -> tuple[int, int]:
    """(layer, group) of ``module``: the group of the longest name in :data:`LAYERS` that is
    ``module`` or a package holding it; KeyError when none is."""
    found = [(len(name), layer, group) for layer, (_, groups) in enumerate(LAYERS)
             for group, names in enumerate(groups) for name in names
             if module == name or module.startswith(name + ".")]
    if not found:
        raise KeyError(f"{module} is in no layer of LAYERS")
    return max(found)[1:]


def against_the_layers(graph: dict[str, set[str]]) -> list[str]:
    """The imports of ``graph`` ({module: modules it imports}) that go up a layer or across
    to another group of the same layer."""
    found = []
    for module in sorted(graph):
        here = place(module)
        for target in sorted(graph[module]):
            there = place(target)
            if there[0] < here[0] or (there[0] == here[0] and there[1] != here[1]):
                found.append(f"{module} -> {target} ({LAYERS[here[0]][0]} -> "
                             f"{LAYERS[there[0]][0]})")
    return found


def test_the_layer_check_refuses_an_import_up_and_one_across():
    graph = {"pywave.cache": {"pywave.host.sharedobj", "pywave.files"},
             "pywave.kernels.rocdl": {"pywave.host.jit", "pywave.llvm"},
             "pywave.host.jit": {"pywave.llvm", "pywave.errors"},
             "pywave.runtime": {"pywave.frontend.validate"},
             "pywave.entry.cli": {"pywave.lookup"}}
    assert against_the_layers(graph) == [
        "pywave.cache -> pywave.host.sharedobj (driver's parts -> driver's parts)",
        "pywave.kernels.rocdl -> pywave.host.jit (driver's parts -> driver's parts)",
        "pywave.runtime -> pywave.frontend.validate (runtime binding -> first stages)"]
    assert place("pywave.kernels.rewrites.semantics") == place("pywave.kernels")


def test_every_module_has_a_layer():
    assert [m for m in SOURCES if not _placed(m)] == []


def _placed(module: str) -> bool:
    try:
        place(module)
    except KeyError:
        return False
    return True


def test_imports_go_down_the_layers():
    """Module-level and function-level imports alike (a lazy import is still a dependency)."""
    graph = {m: set(imported_modules(m).values()) - {m} for m in SOURCES}
    assert against_the_layers(graph) == []


# --------------------------------------------------------------------------------------------
# libwavert's units: no circle of calls between its C files
# --------------------------------------------------------------------------------------------
LIBWAVERT_SRC = Path(__file__).resolve().parent.parent / "libwavert" / "src"


def _without_comments(text: str) -> str:
    import re
    return re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)


def unit_calls(sources: dict[str, str]) -> dict[str, set[str]]:
    """{unit: units whose ``wavert*`` functions it calls} of C ``sources`` ({unit: text}),
    each function belonging to the unit that defines it."""
    import re
    texts = {u: _without_comments(t) for u, t in sources.items()}
    defined = {}
    for unit, text in texts.items():
        for m in re.finditer(r"^[A-Za-z_][\w \*]*?\b(wavert\w*)\s*\([^;{]*\)\s*\{", text, re.M):
            defined.setdefault(m.group(1), unit)
    return {unit: {defined[name] for name in re.findall(r"\b(wavert\w*)\s*\(", text)
                   if defined.get(name, unit) != unit} for unit, text in texts.items()}


def test_the_unit_scan_sees_a_circle():
    graph = unit_calls({"a": "int wavert__a(void) { return wavert__b(); }",
                        "b": "/* wavert__a() */\nint wavert__b(void) { return wavert__a(); }",
                        "c": "int wavert_c(void) { return wavert__a(); }"})
    assert graph == {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert cycles(graph) == [["a", "b"]]


@pytest.mark.skipif(not LIBWAVERT_SRC.is_dir(), reason="no libwavert sources beside the tests")
def test_no_call_circle_between_libwavert_units():
    sources = {p.stem: p.read_text() for p in sorted(LIBWAVERT_SRC.glob("*.c"))}
    assert len(sources) > 10
    assert cycles(unit_calls(sources)) == []


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
