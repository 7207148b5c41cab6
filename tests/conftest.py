"""Shared fixtures: deterministic random frames for any geometry."""

from __future__ import annotations

import contextlib
import importlib
import os
import re
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


#: Set by .ci/run's full pass: a comma-separated list of optional peers and tools (``bifrost``,
#: ``blri``, ``chromium``, ``wsclean``, ``casacore``, ``casatools``, ``aoflagger``, ``lsl``,
#: ``mwalib``, ...) or ``all``, whose absence fails a test instead of skipping it (the
#: newcomer's pass leaves it unset). ``XENGINE_REQUIRE_<NAME>`` (e.g.
#: ``XENGINE_REQUIRE_BIFROST=1``) asks for one of them alone.
REQUIRE_ENV = "XENGINE_REQUIRE"


def required(name: str) -> str | None:
    """The variable that makes a missing ``name`` fail instead of skip
    (:data:`REQUIRE_ENV`), or None."""
    wanted = {w.strip() for w in os.environ.get(REQUIRE_ENV, "").split(",") if w.strip()}
    own = f"{REQUIRE_ENV}_{re.sub(r'[^A-Za-z0-9]', '_', name).upper()}"
    if name in wanted or "all" in wanted:
        return REQUIRE_ENV
    return own if os.environ.get(own) else None


def require(name: str, missing: str | None) -> None:
    """Nothing when ``missing`` is None; else skip saying ``name`` is absent and why
    (``missing``), or fail instead where it is :func:`required`."""
    if missing is None:
        return
    by = required(name)
    if by:
        pytest.fail(f"{by} asks for {name}, but {missing}", pytrace=False)
    pytest.skip(f"{name} is not available here: {missing}", allow_module_level=True)


def import_or_require(module: str, name: str | None = None, hint: str = "") -> Any:
    """``import module``, or :func:`require` (skip with the reason, and ``hint`` on how to get
    it, or fail where required)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        require(name or module, f"import {module} failed: {exc}{hint}")


def bifrost_or_skip():
    """``xengine_block.bifrost`` (real Bifrost), or skip the module with the reason; fail
    instead where Bifrost is required (``XENGINE_REQUIRE_BIFROST=1`` or ``all``)."""
    return import_or_require("xengine_block.bifrost", "bifrost",
                             " (scripts/install_bifrost.sh builds it; .ci/run does)")


def blri_or_skip():
    """The ``blri`` module, the reprocessing peer of the GUPPI tests, or skip the module with
    the reason; fail instead where BLRI is required (``XENGINE_REQUIRE_BLRI=1`` or ``all``)."""
    return import_or_require("blri", "blri",
                             " (MydonSolutions/BLRI; .ci/run installs it)")


@pytest.fixture(params=["ours", "bifrost"])
def rt(request):
    """Each runtime in turn (tests/helpers/runtimes.py); Bifrost skipped with the reason where it
    does not import."""
    from tests.helpers.runtimes import OURS, bifrost_runtime

    return OURS if request.param == "ours" else bifrost_runtime()
