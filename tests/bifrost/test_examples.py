"""docs/bifrost.md's examples run as they are written there (each code block is found by its
first line, ``# example: ...``) and check themselves: exact against numpy, printing
``exact:``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import bifrost_or_skip

bifrost_or_skip()
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(180)


def doc_example(title: str) -> str:
    """The code block of docs/bifrost.md whose first line is ``# example: <title>``."""
    doc = (ROOT / "docs" / "bifrost.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S)
              if b.startswith(f"# example: {title}\n")]
    assert len(blocks) == 1, f"docs/bifrost.md has {len(blocks)} examples '{title}'"
    return blocks[0]


@pytest.mark.parametrize("title", ["your own source block", "bifrost.blocks pipeline",
                                   "LWA capture -> correlator"])
def test_docs_example_runs_and_is_exact(title, tmp_path):
    r = subprocess.run([sys.executable, "-c", doc_example(title)], capture_output=True,
                       text=True, timeout=150, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "exact:" in r.stdout
