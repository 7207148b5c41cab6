"""Where the sources the package compiles outside its own build live: ``kernels/`` (the AIE
kernel ``aie/xcorr.cc`` and its host emulation header; the CPU C kernels of the extension) and
``aie/`` (the mlir-aie design's entry point and its ``Makefile``).

Both are top-level directories of the checkout. A wheel carries them inside the package, as
its ``_kernels`` and ``_aie`` directories (setup.py maps them there as package data), so an
installation reaches them without a path out of itself; an editable install leaves them in the
source tree, which the installation records (PEP 610 ``direct_url.json``).
"""

from __future__ import annotations

import json
from functools import cache
from importlib import metadata, resources
from pathlib import Path
from urllib.parse import unquote, urlparse

#: Top-level source directory -> its name inside an installed package.
TREES = {"kernels": "_kernels", "aie": "_aie"}


def _editable_root(package: Path) -> Path | None:
    """The source tree of the editable install that ``package`` (this package's directory) was
    imported from, or None. Every xengine_block distribution on the path is asked (a checkout
    on ``sys.path`` may hold an ``*.egg-info`` without the record)."""
    for dist in metadata.distributions(name="xengine_block"):
        text = dist.read_text("direct_url.json")
        if not text:
            continue
        record = json.loads(text)
        url = urlparse(record.get("url", ""))
        if not record.get("dir_info", {}).get("editable") or url.scheme != "file":
            continue
        root = Path(unquote(url.path))
        if (root / package.name).resolve() == package.resolve():
            return root
    return None


@cache
def source_dir(tree: str) -> Path:
    """The directory of ``tree`` (``"kernels"`` or ``"aie"``): the installed package's copy, or
    the editable install's source tree; where neither exists, the package's path (absent:
    callers check the files they need and say which is missing)."""
    if tree not in TREES:
        raise ValueError(f"unknown source tree {tree!r}; one of {sorted(TREES)}")
    package = Path(str(resources.files("xengine_block")))
    packaged = package / TREES[tree]
    root = _editable_root(package)
    if not packaged.is_dir() and root is not None and (root / tree).is_dir():
        return root / tree
    return packaged


def kernel_source(relative: str) -> Path:
    """A file under ``kernels/``, e.g. ``kernel_source("aie/xcorr.cc")``."""
    return source_dir("kernels") / relative
