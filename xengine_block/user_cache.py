"""Where build outputs go: a per-user cache directory, never the installation.

What the package builds at run time (the host-compiled AIE kernel, the C++ NPU ring, xclbins,
numba's compiled capture and pcap loops) is derived from sources that ship inside the package,
so it can always be rebuilt and belongs in a cache:
``$XENGINE_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/xengine_block``, else
``~/.cache/xengine_block`` (the XDG base directory convention). The directory is looked up on
each call, so a change of the environment variable takes effect at once.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Environment variable naming the cache directory (overrides the XDG default).
CACHE_DIR_ENV = "XENGINE_CACHE_DIR"


def cache_dir(*parts: str) -> Path:
    """The cache directory (or ``parts`` below it); not created here, by whoever writes."""
    root = os.environ.get(CACHE_DIR_ENV)
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = os.path.join(xdg, "xengine_block")
    return Path(root).joinpath(*parts)
