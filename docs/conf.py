"""Sphinx configuration of pywave's documentation (``python -m sphinx -W -n -b html docs
docs/_build/html``; the ``docs`` extra of pyproject.toml installs what it needs).

Pages are Markdown (MyST). The Python API reference is autodoc + napoleon over the installed
pywave; the C API reference is rendered from libwavert's headers by ``_ext/cheaders.py``.
Code blocks are run as tests by Sybil (``docs/conftest.py``: ``python -m pytest docs``).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_ext"))

import pywave  # noqa: E402  (the installed package: autodoc documents what users import)

project = "pywave + libwavert"
author = "pywave contributors"
copyright = "pywave contributors, Apache License 2.0"
release = pywave.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "cheaders",
    "mlirlexer",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "conftest.py", "README.md"]
# Headings up to ### get anchors that [text](page.md#anchor) links are checked against.
myst_heading_anchors = 3
# A link to a page or anchor that does not exist is a warning (an error under -W): MyST's
# own check of every internal link, with no network (no linkcheck of external URLs).
myst_enable_extensions = ["colon_fence"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False}
napoleon_numpy_docstring = True
napoleon_google_docstring = False
html_theme = "alabaster"
html_title = f"pywave {release}"
html_static_path: list[str] = []
