"""numba's on-disk cache of this package's compiled loops, in the user cache directory.

numba caches a ``cache=True`` function in the ``__pycache__`` beside its source whenever that
directory is writable, which for a package installed into a writable environment is inside the
installation. Build outputs go to the user cache instead (:mod:`xengine_block.user_cache`), so
:func:`install` adds a numba cache locator that claims only this package's source files and
puts their cache in ``cache_dir("numba")``. It ranks after numba's ``NUMBA_CACHE_DIR`` locator
(an application's explicit choice wins) and before the in-tree one; functions of other packages
keep numba's own order. If the user cache cannot be written, numba's order applies to ours too.

The locator classes are numba internals (``numba.core.caching``; renamed without the leading
underscore in numba 0.62), looked up under either name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numba.core.caching as caching

import xengine_block

from ..user_cache import cache_dir

PACKAGE = Path(xengine_block.__file__).resolve().parent
_IMPL: Any = getattr(caching, "CacheImpl", None) or caching._CacheImpl
_USER_PROVIDED: Any = (getattr(caching, "UserProvidedCacheLocator", None)
                       or caching._UserProvidedCacheLocator)


class PackageCacheLocator(_USER_PROVIDED):
    """This package's functions, cached under ``cache_dir("numba")`` (looked up per function,
    so ``XENGINE_CACHE_DIR`` set before a module's import takes effect)."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        super().__init__(py_func, py_file)
        self._cache_path = str(cache_dir("numba", self.get_suitable_cache_subpath(py_file)))

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> PackageCacheLocator | None:
        if not Path(py_file).resolve().is_relative_to(PACKAGE):
            return None
        # the source-file locator's rule (the file exists, the cache path is writable), not
        # the NUMBA_CACHE_DIR test of the class this one extends
        return super(_USER_PROVIDED, cls).from_function(py_func, py_file)


def install() -> None:
    """Rank :class:`PackageCacheLocator` right after numba's ``NUMBA_CACHE_DIR`` locator
    (once; call before the module's ``cache=True`` functions are defined)."""
    classes = _IMPL._locator_classes
    if PackageCacheLocator not in classes:
        classes.insert(classes.index(_USER_PROVIDED) + 1, PackageCacheLocator)
