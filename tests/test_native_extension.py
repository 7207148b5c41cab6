"""The C extension is required: where it cannot be built the install stops, saying why and
what to install (setup.py), and a source tree used without the build says how to build it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_build_without_a_compiler_stops_with_the_reason(tmp_path):
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc")}
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-temp",
                        str(tmp_path / "temp"), "--build-lib", str(tmp_path / "lib")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "xengine_block needs its C extension xengine_block._native" in r.stderr
    assert "no-such-cc" in r.stderr and "Install a C compiler" in r.stderr
    assert not list((tmp_path / "lib").rglob("_native*"))


def test_unbuilt_extension_says_how_to_build(monkeypatch):
    import xengine_block
    from xengine_block import native_extension

    native_extension.native.cache_clear()
    monkeypatch.setitem(sys.modules, "xengine_block._native", None)  # import fails
    monkeypatch.delattr(xengine_block, "_native", raising=False)
    try:
        with pytest.raises(ImportError, match="not built.*pip install -e ."):
            native_extension.native()
    finally:
        native_extension.native.cache_clear()
