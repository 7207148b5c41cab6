"""Import real Bifrost: find its library without LD_LIBRARY_PATH, and keep it off the network.

``scripts/install_bifrost.sh`` installs ``libbifrost`` into ``PREFIX/lib``, by default the
Python environment's own prefix (``sys.prefix``). Bifrost's ctypes bindings look for the library
on ``LD_LIBRARY_PATH`` (read from ``os.environ`` when they load, so setting it here is enough for
this process and its children); we add the first of ``$XENGINE_BIFROST_PREFIX/lib``,
``sys.prefix/lib``, ``/usr/local/lib`` that holds it. Bifrost reports usage over the network
unless telemetry is disabled: disabled right after import, before anything is sent.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType

#: Environment variable naming a non-default install prefix (``install_bifrost.sh SRC PREFIX``).
PREFIX_ENV = "XENGINE_BIFROST_PREFIX"


def library_dirs() -> list[Path]:
    """Where ``libbifrost.so`` is looked for, in order."""
    dirs = [Path(os.environ[PREFIX_ENV]) / "lib"] if os.environ.get(PREFIX_ENV) else []
    return dirs + [Path(sys.prefix) / "lib", Path("/usr/local/lib")]


def load_bifrost() -> ModuleType:
    """``import bifrost`` with its library found and telemetry disabled; ImportError says how
    to install it when it is absent."""
    paths = os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
    for d in library_dirs():
        if (d / "libbifrost.so").exists():
            if str(d) not in paths:
                os.environ["LD_LIBRARY_PATH"] = os.pathsep.join([str(d), *filter(None, paths)])
            break
    try:
        import bifrost.telemetry
    except (ImportError, OSError) as exc:
        raise ImportError(
            f"real Bifrost is not importable ({exc}); install it CPU-only with "
            f"scripts/install_bifrost.sh BIFROST_TARBALL_OR_SOURCE (README: Bifrost)") from exc
    bifrost.telemetry.disable()
    import bifrost
    import bifrost.pipeline  # noqa: F401 - loaded here so failures surface at import

    return bifrost
