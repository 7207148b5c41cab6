"""The docs' generated reference tables (``docs/_ext/reference_tables.py``) list everything the
code's own tables and collectors hold."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def reference_tables() -> Iterator[ModuleType]:
    """The extension as Sphinx loads it (``docs/_ext`` on the path, as docs/conf.py puts it)."""
    ext = str(ROOT / "docs" / "_ext")
    sys.path.insert(0, ext)
    try:
        yield importlib.import_module("reference_tables")
    finally:
        sys.path.remove(ext)


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


def test_npu_tables_are_the_model_s_predictions(reference_tables) -> None:
    """docs/npu.md's tables of predicted rates are rendered from the model, one row per case,
    each with the rate ``predicted`` gives (no figure typed in by hand)."""
    from xengine_block.backends.npu import predicted
    from xengine_block.geometry import Geometry

    assert "_generated/npu_model.md" in (ROOT / "docs" / "npu.md").read_text()
    rows = [line.split(" | ") for line in reference_tables.npu_model().splitlines()[2:]]
    cases = [(d, s, b) for d in reference_tables.NPU_DEVICES
             for s, b in reference_tables.NPU_MODEL_CASES]
    assert len(rows) == len(cases)
    for row, (device, nstream, bits) in zip(rows, cases, strict=True):
        msps = predicted(Geometry(nstream=nstream, sample_bits=bits), device).msps
        assert row[:4] == [f"| {nstream}", f"ci{bits}", device, f"{msps:.1f}"], row
    assert "_generated/npu_calibration.md" in (ROOT / "docs" / "npu.md").read_text()
    assert "| rate |" in reference_tables.npu_calibration()
