"""The tree is ruff clean (the project's lint rules are part of the test command)."""

import shutil
import subprocess
from pathlib import Path

import pytest


def test_ruff_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]' brings it)")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([ruff, "check", str(root)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
