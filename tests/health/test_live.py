"""Flags live: pipelines/fx.py with injected faults and RFI through the health block (capture,
X-engine counting the extremes, integrate, health, writer): each fault named with its dumps in
the summary and flagged in the file, the unflagged visibilities those of the same run without
flags, bit for bit; the [flagging] keys of xengine correlate, each bad value one line naming it,
and a service's metrics with per-input gauges."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import import_or_require
from tests.helpers.service import BASE, merged, write_config
from xengine_block.blocks.chain import Flagging
from xengine_block.health.inputs import Thresholds
from xengine_block.service.config import ConfigError, load_config

pyuvdata = import_or_require("pyuvdata")
ROOT = Path(__file__).resolve().parents[2]
DUMP = 1920  # spectra: 4 packets of 480


def fx(out: Path, *extra: str) -> tuple[object, dict]:
    args = [sys.executable, str(ROOT / "pipelines" / "fx.py"), "--nant", "6", "--nchan", "9",
            "--npacket", "4", "--dumps", "10", "--transport", "inproc", "--monitor", "0",
            "--seed", "4", "--sync-time", "1780272000", "--out", str(out),
            "--fault", "dead:1:x", "--fault", f"saturated:2:y:{3 * DUMP}:{6 * DUMP}",
            "--inject-rfi", f"narrowband:5:3:{4 * DUMP}:{8 * DUMP}", *extra]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    return pyuvdata.UVData.from_file(summary["files"][0]), summary


@pytest.mark.parametrize("bits", [8, pytest.param(4, marks=pytest.mark.slow)],
                         ids=["ci8", "ci4"])
def test_fx_flags_faults_live(tmp_path, bits):
    import_or_require("aoflagger")
    extra = ["--bits", "4"] if bits == 4 else []
    plain, _ = fx(tmp_path / "plain", *extra)
    uv, summary = fx(tmp_path / "flagged", "--flag-inputs", "--rfi", "aoflagger", *extra)
    got = {(b["antenna"], b["pol"], b["reason"]): b["dumps"] for b in summary["bad_inputs"]}
    assert got == {(1, "x", "dead"): list(range(10)), (2, "y", "saturated"): [3, 4, 5]}
    dump = np.searchsorted(np.unique(uv.time_array), uv.time_array)

    def products(ant: int, pol: str) -> list[np.ndarray]:
        """Flags [Ntimes, C] of every product with input (ant, pol)."""
        out = []
        for a in range(6):
            for p in "xy":
                pair = (a, ant, p + pol) if a < ant else (ant, a, pol + p)
                out.append(uv.get_flags(*pair))
        return out

    assert all(f.all() for f in products(1, "x"))
    assert all(f[3:6].all() for f in products(2, "y"))
    rfi = np.isin(dump, range(4, 8))
    # where the RFI is: every product of the inputs never judged bad (a window holding a
    # bad input's flagged dumps sees less of its healthy ones: live, the RFI there may pass)
    never = ~np.isin(uv.ant_1_array, [1, 2]) & ~np.isin(uv.ant_2_array, [1, 2])
    assert uv.flag_array[rfi & never, 5].all()
    assert summary["rfi"]["per_channel"][5] == max(summary["rfi"]["per_channel"])
    keep = ~uv.flag_array
    assert keep.mean() > 0.6
    assert np.array_equal(uv.data_array, plain.data_array)  # only flagged
    assert np.array_equal(uv.nsample_array, plain.nsample_array)
    assert not plain.flag_array.any()


def test_flagging_keys(tmp_path):
    cfg = load_config(write_config(tmp_path / "c.toml", BASE))
    assert cfg.flagging is None  # off unless asked
    on = load_config(write_config(tmp_path / "d.toml", merged(BASE, flagging={
        "inputs": True, "saturated_fraction": 0.1, "rfi_window": 4})))
    assert on.flagging == Flagging(True, None, 4, Thresholds(saturated_fraction=0.1),
                                   judge=True)
    flags = load_config(write_config(tmp_path / "e.toml", BASE), {"health": True})
    assert flags.flagging.judge and not flags.flagging.inputs


@pytest.mark.parametrize("change", [{"inputs": "maybe"}, {"rfi": "sumthreshold"},
                                    {"rfi": "aoflagger:/no/such.lua"}, {"rfi_window": 0},
                                    {"saturated_fraction": 0}, {"saturated_fraction": 2},
                                    {"high_power_factor": 1}, {"low_power_factor": "ten"},
                                    {"decorrelated_sigma": -1}])
def test_bad_flagging_keys_are_named(tmp_path, change):
    key = next(iter(change))
    with pytest.raises(ConfigError) as info:
        load_config(write_config(tmp_path / "c.toml", merged(BASE, flagging=change)))
    assert info.value.key == f"flagging.{key}" and "\n" not in str(info.value)


def test_health_metrics_per_input():
    from types import SimpleNamespace

    from xengine_block.health.monitor import HealthMonitor
    from xengine_block.service.metrics import CorrelatorCollector

    mon = HealthMonitor([4, 9], ["a", "b"])
    tri = np.zeros((2, 10, 2), np.int64)
    tri[:, [0, 2, 9], 0] = 100  # streams 0, 1 and 3 have power; stream 2 (b x) dead
    mon.observe(0, tri, np.full(2, 10))
    chain = SimpleNamespace(health=SimpleNamespace(monitor=mon, rfi=None))
    got = {m.name: m for m in CorrelatorCollector.health_metrics(SimpleNamespace(chain=chain))}
    states = {tuple(s.labels.values()): s.value for s in got["xengine_input_state"].samples}
    assert states[("b", "9", "x")] == 1 and states[("a", "4", "y")] == 0
    assert len(got["xengine_input_power"].samples) == 4
