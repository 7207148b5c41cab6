"""Freezing Python's garbage collector is the application's choice: the programs that own
their process turn it on around their pipelines (``pipelines/fx.py``, ``xengine correlate``,
``xengine reprocess``); importing the package or building and running a pipeline does not
(``tests/runtime/test_pipeline.py``)."""

from __future__ import annotations

import gc
import importlib.util
from pathlib import Path

import pytest

from xengine_block.cli import main
from xengine_block.runtime.pipeline import RunControl

FX = Path(__file__).resolve().parents[2] / "pipelines" / "fx.py"


@pytest.fixture
def freeze_seen_by_pipelines(monkeypatch):
    """The collector's freeze count each time a pipeline runs, in this process."""
    seen = []
    real = RunControl.run

    def run(self):
        seen.append(gc.get_freeze_count())
        return real(self)

    monkeypatch.setattr(RunControl, "run", run)
    assert gc.get_freeze_count() == 0
    yield seen
    assert gc.get_freeze_count() == 0  # thawed again when the program's run ended


def test_fx_runs_its_pipeline_frozen(freeze_seen_by_pipelines, tmp_path):
    spec = importlib.util.spec_from_file_location("fx_gc", FX)
    fx = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fx)
    rc = fx.main(["--nant", "2", "--npacket", "1", "--dumps", "1", "--transport", "pcap",
                  "--backend", "cpu", "--monitor", "0", "--out", str(tmp_path / "out")])
    assert rc == 0
    assert len(freeze_seen_by_pipelines) == 1 and freeze_seen_by_pipelines[0] > 1000


def test_xengine_correlate_runs_the_service_frozen(monkeypatch, tmp_path):
    """The service's run (its pipeline built, about to start) sees the collector frozen."""
    from xengine_block.service import config, live

    seen = []

    class Service:
        def __init__(self, cfg):
            self.cfg = cfg

        def run(self):
            seen.append(gc.get_freeze_count())
            return {}

    monkeypatch.setattr(config, "load_config", lambda path, flags: "cfg")
    monkeypatch.setattr(live, "CorrelatorService", Service)
    assert gc.get_freeze_count() == 0
    assert main(["correlate"]) == 0
    assert len(seen) == 1 and seen[0] > 1000 and gc.get_freeze_count() == 0


def test_xengine_reprocess_asks_its_tasks_to_freeze(monkeypatch, tmp_path):
    from xengine_block.cli import reprocess as cli_reprocess

    given = []
    monkeypatch.setattr(cli_reprocess, "plan_tasks", lambda *a: None)
    monkeypatch.setattr(cli_reprocess, "reprocess",
                        lambda inputs, out, options, **kw: given.append(options) or [])
    monkeypatch.setattr(cli_reprocess, "summarise", lambda results: True)
    rec = tmp_path / "a.pcap"
    rec.write_bytes(b"")
    assert main(["reprocess", str(rec), "-o", str(tmp_path / "out")]) == 0
    assert [o.freeze_gc for o in given] == [True]
