"""The package installs anywhere: what it needs at run time is inside it (package data), build
outputs go to the user's cache directory, and no path climbs out of the package to a checkout.
``scripts/check_wheel.sh`` (run by CI) checks the same on a wheel installed in a fresh venv."""

from __future__ import annotations

import ast
import configparser
import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import xengine_block
from tests.helpers.tree import repository_files
from xengine_block import kernel_sources, user_cache
from xengine_block.npu.design import artifacts
from xengine_block.npu.host import hostkernel, nativering
from xengine_block.service import instances

PACKAGE = Path(xengine_block.__file__).resolve().parent
ROOT = PACKAGE.parent


def test_no_path_climbs_out_of_the_package():
    """``Path(__file__).parents[n]`` / ``.parent.parent`` would find a checkout around the
    package, which an installed wheel does not have."""
    offenders = []
    for path in repository_files(PACKAGE):
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            text = ast.unparse(node) if isinstance(node, (ast.Subscript, ast.Attribute)) else ""
            if "__file__" in text and (".parents" in text or ".parent.parent" in text):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text}")
    assert not offenders, offenders


def setup_source_trees() -> dict[str, str]:
    """setup.py's ``SOURCE_TREES`` (package name -> top-level directory), read from its source
    (setup.py cannot be imported: it runs setup())."""
    for node in ast.parse((ROOT / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SOURCE_TREES":
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no SOURCE_TREES")


def test_setup_maps_the_source_trees_where_the_package_looks():
    """setup.py puts ``kernels/`` and ``aie/`` into the wheel where
    :mod:`xengine_block.kernel_sources` looks for them."""
    assert setup_source_trees() == {f"xengine_block.{inside}": tree
                                    for tree, inside in kernel_sources.TREES.items()}


def test_every_data_file_of_the_package_is_package_data():
    """Each file in the package that is not Python source (the native ring), and each file of
    the top-level source trees (``kernels/``: the AIE kernel and its host header, the CPU
    kernels; ``aie/``: the design's entry point and Makefile), is matched by setup.cfg's
    package_data, so the wheel carries it."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    patterns = {pkg: cfg["options.package_data"][pkg].split()
                for pkg in cfg["options.package_data"]}
    trees = {tree: Path(*pkg.split(".")) for pkg, tree in setup_source_trees().items()}
    tracked = subprocess.run(["git", "ls-files", "xengine_block", *trees], cwd=ROOT,
                             capture_output=True, text=True)
    if tracked.returncode:
        pytest.skip("not a git checkout: the tracked files are unknown")
    data = [Path(f) for f in tracked.stdout.split()
            if not f.endswith(".py") or f.split("/")[0] in trees]
    assert {f.parts[0] for f in data} == {"xengine_block", *trees}, "kernel sources are tracked"
    missing = []
    for f in data:
        inside = trees[f.parts[0]].joinpath(*f.parts[1:]) if f.parts[0] in trees else f
        owners = [(p, inside.relative_to(Path(*p.split(".")))) for p in patterns
                  if inside.is_relative_to(Path(*p.split(".")))]
        if not any(fnmatch.fnmatch(str(rel), pat) for p, rel in owners for pat in patterns[p]):
            missing.append(f"{f} (in the wheel: {inside})")
    assert not missing, f"not in setup.cfg [options.package_data]: {missing}"
    for source in (hostkernel.KERNEL_SOURCE, hostkernel.EMU_HEADER):
        assert source.is_file() and source.is_relative_to(kernel_sources.source_dir("kernels"))
    for source in nativering.SOURCES:
        assert source.is_file() and source.is_relative_to(PACKAGE), source


def test_cache_directory_order(monkeypatch, tmp_path):
    monkeypatch.setenv("XENGINE_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache.cache_dir() == tmp_path / "mine"
    assert user_cache.cache_dir("kernel") == tmp_path / "mine" / "kernel"
    monkeypatch.delenv("XENGINE_CACHE_DIR")
    assert user_cache.cache_dir() == tmp_path / "xdg" / "xengine_block"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_cache.cache_dir() == tmp_path / "home" / ".cache" / "xengine_block"


def test_build_outputs_go_to_the_cache_never_the_installation(monkeypatch, tmp_path):
    monkeypatch.setenv("XENGINE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(artifacts.BUILD_DIR_ENV, raising=False)
    assert hostkernel.build_dir().is_relative_to(tmp_path)
    assert artifacts.default_build_root().is_relative_to(tmp_path)
    assert artifacts.build_roots("explicit") == [Path("explicit"),
                                                 artifacts.default_build_root()]
    monkeypatch.setenv(artifacts.BUILD_DIR_ENV, str(tmp_path / "env"))
    assert artifacts.build_roots() == [tmp_path / "env", artifacts.default_build_root()]
    usable, why = hostkernel.host_kernel_availability()
    if not usable:
        pytest.skip(why)
    lib = hostkernel.build_host_kernel(2, 1, 15)
    assert lib.is_relative_to(tmp_path / "kernel") and lib.is_file()
    assert not lib.is_relative_to(PACKAGE)


NUMBA_CACHES = """
import json, sys
from pathlib import Path
from numba.core.registry import CPUDispatcher
from xengine_block.capture import pcap, placement
mod = Path(sys.argv[1]); mod.mkdir(); (mod / "other_pkg.py").write_text(
    "import numba\\n@numba.njit(cache=True)\\ndef f(x):\\n    return x + 1\\n")
sys.path.insert(0, str(mod))
import other_pkg
placement.spead_chunks(10, 2)  # compiled and saved
ours = {f"{m.__name__}.{k}": v._cache.cache_path for m in (pcap, placement)
        for k, v in vars(m).items() if isinstance(v, CPUDispatcher)}
print(json.dumps({"ours": ours, "other": other_pkg.f._cache.cache_path}))
"""


@pytest.mark.parametrize("numba_cache_dir", [False, True])
def test_numba_caches_our_loops_in_the_user_cache(tmp_path, numba_cache_dir):
    """The capture and pcap loops compiled with ``cache=True`` are cached under
    ``cache_dir("numba")``, not in the ``__pycache__`` beside their source (inside an
    installation); ``NUMBA_CACHE_DIR`` set by the application wins, and other packages'
    functions keep numba's own choice."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["XENGINE_CACHE_DIR"] = str(tmp_path / "cache")
    if numba_cache_dir:
        env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba_dir")
    run = subprocess.run([sys.executable, "-c", NUMBA_CACHES, str(tmp_path / "other")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    paths = json.loads(run.stdout.splitlines()[-1])
    want = tmp_path / ("numba_dir" if numba_cache_dir else "cache/numba")
    assert len(paths["ours"]) >= 5, paths  # the pcap walk's and the placement's loops
    wrong = {k: p for k, p in paths["ours"].items() if not Path(p).is_relative_to(want)}
    assert not wrong, f"cached outside {want}: {wrong}"
    assert list(want.rglob("placement.spead_chunks-*.nbi")), sorted(want.rglob("*"))
    other = tmp_path / ("numba_dir" if numba_cache_dir else "other/__pycache__")
    assert Path(paths["other"]).is_relative_to(other), paths["other"]


def test_instances_run_this_interpreter_with_its_own_environment(monkeypatch, tmp_path):
    """No PYTHONPATH of a checkout (or of site-packages) is added: an instance imports what its
    parent imports."""
    seen = {}

    class Popen:
        def __init__(self, args, **kwargs):
            seen.update(args=args, **kwargs)
            self.stdout, self.stderr = iter(()), iter(())

    monkeypatch.setattr(instances.subprocess, "Popen", Popen)
    instances.CorrelateProcess(tmp_path / "c.toml")
    assert seen["args"][:4] == [sys.executable, "-m", "xengine_block.cli", "correlate"]
    assert seen.get("env") is None  # inherited unchanged
