"""The compiled extension ``xengine_block._native`` (``kernels/cpu/``), loaded on first use.

It is a required part of the package: the native correlator and every host-side hot loop
(the :func:`~xengine_block.sample_layout.gather` layout pass, the ci4 frame unpacking of
:func:`~xengine_block.frames.unpack_frames`, the UVH5 writer's rows) have their one
implementation there. ``pip install`` builds it and fails, saying why, where no C compiler is
found (``setup.py``). A source tree used without that build gets an ImportError saying how to
build it, at the first call that needs it, not at ``import xengine_block``.
"""

from __future__ import annotations

from functools import lru_cache
from types import ModuleType

BUILD_HINT = ("build it with `pip install -e .` (needs a C compiler such as gcc or clang and "
              "the Python headers) or, in a source tree, `python setup.py build_ext --inplace`")


@lru_cache(maxsize=1)
def native() -> ModuleType:
    """The extension module; ImportError naming the cause and how to build it."""
    try:
        from . import _native
    except ImportError as exc:
        raise ImportError(f"the C extension xengine_block._native is not built ({exc}); "
                          f"{BUILD_HINT}") from exc
    return _native
