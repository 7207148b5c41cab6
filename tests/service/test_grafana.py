"""docs/grafana/xengine-correlate.json, the Grafana dashboard of the service's Prometheus
metrics, queries only metrics the service exports (a renamed metric fails here, not on an
observatory's wall)."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

from xengine_block.service.config import RELOAD_RESULTS
from xengine_block.service.metrics import CorrelatorCollector

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "xengine-correlate.json"


def exported() -> set[str]:
    """Every sample name the collector exports (counters with ``_total``)."""
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))  # the stand-in service the docs collect over
    try:
        stand_in = importlib.import_module("reference_tables")._StandIn
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    collector = CorrelatorCollector(stand_in(), stand_in(), [], dict.fromkeys(RELOAD_RESULTS, 0))
    names = set()
    for family in collector.collect():
        names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names


def queried() -> set[str]:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert exprs, "the dashboard queries nothing"
    return {m for e in exprs for m in re.findall(r"\bxengine_[a-z0-9_]+", e)}


def test_every_metric_the_dashboard_queries_is_exported():
    missing = queried() - exported()
    assert not missing, f"the dashboard queries metrics the service does not export: {missing}"


def test_the_dashboard_covers_loss_rates_writes_disk_and_restarts():
    q = queried()
    for wanted in ("xengine_capture_missing_total", "xengine_block_frames_total",
                   "xengine_write_failures_total", "xengine_output_bytes_written_total",
                   "xengine_capture_restarts_total", "xengine_ring_fill_ratio"):
        assert wanted in q, wanted


def test_the_check_catches_a_metric_that_is_not_exported():
    assert "xengine_capture_heaps" not in exported()  # a counter's family name alone
    assert "xengine_capture_heaps_total" in exported()
