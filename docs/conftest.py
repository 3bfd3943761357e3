"""The documentation's code blocks as tests (Sybil): ``python3 -m pytest docs``.

Every ```` ```python ```` block of every page runs, in page order, sharing one namespace per
page; a block of ``>>>`` lines is a doctest whose output must match. A block that cannot run
here (it needs a GPU, or stands for code of the reader's own) is preceded by
``<!-- skip: next "why" -->`` and reported as skipped with that reason. Blocks run in the
repository root (the pages' paths, ``examples/...``, are relative to it) with a private
compile cache, removed at the end.
"""

from __future__ import annotations

import doctest
import os
import shutil
import tempfile
from pathlib import Path

from sybil import Sybil
from sybil.parsers.myst import PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parent.parent
_CACHE = tempfile.mkdtemp(prefix="pywave-docs-cache-")


def _setup(namespace: dict) -> None:
    os.environ["PYWAVE_CACHE_DIR"] = _CACHE
    os.chdir(ROOT)


def _teardown(namespace: dict) -> None:
    for value in namespace.values():            # modules a page compiled: unloaded now
        close = getattr(value, "close", None)
        if close is not None and type(value).__name__ == "CompiledModule":
            close()


def pytest_unconfigure(config) -> None:
    shutil.rmtree(_CACHE, ignore_errors=True)


pytest_collect_file = Sybil(
    parsers=[PythonCodeBlockParser(doctest_optionflags=doctest.ELLIPSIS |
                                   doctest.NORMALIZE_WHITESPACE), SkipParser()],
    patterns=["*.md"],
    excludes=["_build/*", "README.md"],
    setup=_setup,
    teardown=_teardown,
).pytest()
