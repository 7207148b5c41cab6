"""The simulator's faults and RFI: each where it is asked for and nowhere else, the same
samples however the time range is split, and every bad description refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

from xengine_block.array import default_array
from xengine_block.geometry import Geometry
from xengine_block.sim.faults import InputFault, RfiSignal, parse_fault, parse_rfi_signal
from xengine_block.sim.fengine import FEngineSimulator


def sim(**kw) -> FEngineSimulator:
    g = Geometry(nstream=8, nchan=9, npacket=2)
    return FEngineSimulator(default_array(4), g, sync_time=1.78e9, fs_hz=4e4, freq0_hz=1.5e8,
                            chan_bw_hz=4e4, seed=7, **kw)


def test_faults_where_asked_and_nowhere_else():
    clean = sim().samples(0, 1920)
    faults = [InputFault("dead", 0, 1, 480, 960), InputFault("stuck", 1, 0, 960),
              InputFault("saturated", 2, 1), InputFault("decorrelated", 3, 0)]
    x = sim(faults=faults).samples(0, 1920)
    assert not x[1, :, 480:960].any() and np.array_equal(x[1, :, :480], clean[1, :, :480])
    assert (x[2, :, 960:] == x[2, :, 960:961]).all()  # held
    assert np.array_equal(x[2, :, :960], clean[2, :, :960])
    assert np.isin(x[5], (-128, 127)).mean() > 0.5
    assert not np.array_equal(x[6], clean[6]) and abs(x[6].std() - clean[6].std()) < 2
    untouched = [0, 3, 4, 7]
    assert np.array_equal(x[untouched], clean[untouched])


def test_same_samples_however_split():
    kw = {"faults": [InputFault("stuck", 1, 0, 700), InputFault("decorrelated", 0, 0)],
          "rfi": [RfiSignal("narrowband", 2.0, 3, 300, 1500, 100),
                  RfiSignal("broadband", 1.0, start=900, stop=1000)]}
    whole = sim(**kw).samples(0, 1920)
    parts = np.concatenate([sim(**kw).samples(t, 480) for t in range(0, 1920, 480)], axis=2)
    assert np.array_equal(whole, parts)


def test_rfi_is_common_and_where_asked():
    clean = sim().samples(0, 960)
    x = sim(rfi=[RfiSignal("narrowband", 5.0, 4, 480)]).samples(0, 960)
    diff = x.astype(int) != clean
    assert not diff[:, :, :480].any() and not diff[:, [0, 1, 2, 3, 5, 6, 7, 8]].any()
    assert diff[:, 4, 480:].mean() > 0.5


@pytest.mark.parametrize("text", ["dead", "dead:1", "dead:1:z", "dead:a:x", "melted:1:x",
                                  "dead:-1:x", "dead:1:x:5:6:7"])
def test_bad_faults(text):
    with pytest.raises(ValueError, match="fault"):
        parse_fault(text)


@pytest.mark.parametrize("text", ["narrowband", "narrowband:1", "narrowband:1:0",
                                  "broadband:1:2", "hum:1:2", "narrowband:x:1",
                                  "narrowband:1:2:0:10:1"])
def test_bad_rfi(text):
    with pytest.raises(ValueError, match="RFI"):
        parse_rfi_signal(text)


def test_parsed_values():
    assert parse_fault("saturated:3:y:480:960") == InputFault("saturated", 3, 1, 480, 960)
    assert parse_rfi_signal("narrowband:4:3:0:960:96") == RfiSignal("narrowband", 3.0, 4, 0,
                                                                    960, 96)
    assert parse_rfi_signal("broadband:10:20:2") == RfiSignal("broadband", 2.0, start=10,
                                                              stop=20)
