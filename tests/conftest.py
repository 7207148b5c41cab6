"""Shared fixtures: deterministic random frames for any geometry."""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from xengine_block.geometry import Geometry


def needs_proc_udp() -> None:
    """Skip, saying why, where the kernel lists no per-socket UDP drops (not Linux)."""
    from xengine_block.capture.sockets import PROC_UDP

    if not any(os.path.exists(p) for p in PROC_UDP):
        pytest.skip(f"no {' or '.join(PROC_UDP)}: the kernel's per-socket drops are Linux's")


@contextlib.contextmanager
def mounted_tmpfs(where: Path, size: str, inodes: int | None = None) -> Iterator[Path]:
    """A tmpfs of ``size`` (``mount -o size=``: "128k", "1m") and at most ``inodes`` files
    and directories, if given, on the new directory ``where``, unmounted afterwards: a disk
    that really fills. Skips, saying why, unless this runs as root and the mount works (CI and
    the development machines run as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    where.mkdir()
    options = f"size={size}" + (f",nr_inodes={inodes}" if inodes is not None else "")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip() or proc.returncode}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def random_frames(g: Geometry, nframe: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-128, 128, size=(nframe, *g.frame_shape), dtype=np.int8)


@pytest.fixture(autouse=True, scope="session")
def offline_iers() -> None:
    """astropy may not download IERS tables here (docs/design.md, "UVH5 conventions"), and
    pyuvdata's LST check reads them: set the offline configuration once, for every test, so that
    a test reading a file written in a subprocess (the SIGKILL test) passes alone as in the whole
    run, not only after a test whose writer ran in this process."""
    from astropy.utils import iers

    iers.conf.auto_download = False
    iers.conf.auto_max_age = None


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


#: Set (e.g. by .ci/run, where Bifrost is built from the vendored tarball) to make a missing
#: Bifrost a test failure instead of a skip.
REQUIRE_BIFROST_ENV = "XENGINE_REQUIRE_BIFROST"


def bifrost_or_skip():
    """``xengine_block.bifrost`` (real Bifrost), or skip the module with the reason; fail
    instead where ``$XENGINE_REQUIRE_BIFROST`` is set."""
    try:
        import xengine_block.bifrost as xb
    except ImportError as exc:
        if os.environ.get(REQUIRE_BIFROST_ENV):
            pytest.fail(f"{REQUIRE_BIFROST_ENV} is set but Bifrost does not import: {exc}",
                        pytrace=False)
        pytest.skip(str(exc), allow_module_level=True)
    return xb


#: Set by .ci/run's full pass: a comma-separated list of optional peers and tools (``chromium``,
#: ``wsclean``, ``casacore``, ``casatools``, ``aoflagger``, ``lsl``, ``mwalib``, ...) or ``all``,
#: whose absence fails a test instead of skipping it (the newcomer's pass leaves it unset).
REQUIRE_ENV = "XENGINE_REQUIRE"


def require(name: str, missing: str | None) -> None:
    """Nothing when ``missing`` is None; else skip saying ``name`` is absent and why
    (``missing``), or fail instead where ``$XENGINE_REQUIRE`` names ``name`` or says ``all``."""
    if missing is None:
        return
    wanted = {w.strip() for w in os.environ.get(REQUIRE_ENV, "").split(",") if w.strip()}
    if name in wanted or "all" in wanted:
        pytest.fail(f"{REQUIRE_ENV} asks for {name}, but {missing}", pytrace=False)
    pytest.skip(f"{name} is not available here: {missing}", allow_module_level=True)


def import_or_require(module: str, name: str | None = None) -> Any:
    """``import module``, or :func:`require` (skip with the reason, or fail where required)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        require(name or module, f"import {module} failed: {exc}")


#: Set (by .ci/run, which installs BLRI from the vendored tarballs) to make a missing BLRI, the
#: reprocessing peer of the GUPPI tests, a test failure instead of a skip.
REQUIRE_BLRI_ENV = "XENGINE_REQUIRE_BLRI"


def blri_or_skip():
    """The ``blri`` module, or skip the module with the reason; fail instead where
    ``$XENGINE_REQUIRE_BLRI`` is set."""
    try:
        import blri
    except ImportError as exc:
        if os.environ.get(REQUIRE_BLRI_ENV):
            pytest.fail(f"{REQUIRE_BLRI_ENV} is set but BLRI does not import: {exc}",
                        pytrace=False)
        pytest.skip(f"BLRI is not installed (MydonSolutions/BLRI; .ci/run installs it): {exc}",
                    allow_module_level=True)
    return blri


@pytest.fixture(params=["ours", "bifrost"])
def rt(request):
    """Each runtime in turn (tests/helpers/runtimes.py); Bifrost skipped with the reason where it
    does not import."""
    from tests.helpers.runtimes import OURS, bifrost_runtime

    return OURS if request.param == "ours" else bifrost_runtime()
