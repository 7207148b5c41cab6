"""Sphinx configuration of the xengine_block docs (MyST Markdown, autodoc with napoleon).

Build: ``pip install -e '.[docs]'`` then ``sphinx-build -W -b html docs docs/_build/html``.
The reference tables (configuration keys, metrics, capture counters, command-line help, the
NPU model's tables and figures) are generated from the code's own tables into the pages
themselves, between markers, by ``_ext/reference_tables.py``; the build warns when one is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))  # the package of this checkout, built or not

project = "xengine_block"
author = "xengine_block contributors"
copyright = "2026, xengine_block contributors"  # noqa: A001 (Sphinx's name)

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "reference_tables",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

napoleon_google_docstring = False
napoleon_numpy_docstring = True
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
# Optional dependencies the API pages must not need: the NPU runtime and real Bifrost.
autodoc_mock_imports = ["pyxrt"]

html_theme = "furo"
html_title = "xengine_block"
