"""The docs' generated reference tables (``docs/_ext/reference_tables.py``) list everything the
code's own tables and collectors hold."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reference_tables() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "reference_tables", ROOT / "docs" / "_ext" / "reference_tables.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_metrics_table_names_every_family_the_collector_declares(reference_tables) -> None:
    """Every family ``service/metrics.py`` spells out (``f"{NAMESPACE}_name"``) is a row, the
    SIGHUP outcomes among them."""
    from xengine_block.service import metrics
    from xengine_block.service.config import RELOAD_RESULTS

    source = Path(metrics.__file__).read_text()
    declared = set(re.findall(r'f"\{NAMESPACE\}_(\w+)"', source))
    assert "config_reloads" in declared
    rendered = reference_tables.metrics()
    rows = set(re.findall(r"^\| `xengine_(\w+?)(?:_total)?` \|", rendered, re.MULTILINE))
    assert declared <= rows, f"missing from the metrics reference: {sorted(declared - rows)}"
    reloads = next(line for line in rendered.splitlines() if "config_reloads" in line)
    assert all(result in reloads for result in RELOAD_RESULTS), reloads
