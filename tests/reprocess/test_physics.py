"""The sign convention of reprocessed recordings, from the sky: a point source simulated with
geometric delays, written as multi-antenna GUPPI RAW, reprocessed, and phased to the source with
pyuvdata, leaves zero phase, both for an upper-sideband band (OBSBW > 0) and for the same sky
recorded spectrally inverted (OBSBW < 0: channels high to low, samples conjugated). The same
files with the visibilities conjugated once more do not phase up (a flipped convention fails).
Tolerance and noise as in test_physics.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from xengine_block.array import default_array
from xengine_block.geometry import Geometry
from xengine_block.readers.guppi import antenna_cards, write_guppi
from xengine_block.reprocess.jobs import ReprocessOptions, reprocess
from xengine_block.sim.fengine import FEngineSimulator, PointSource, icrs_at_altaz

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) phases the data")

SYNC = 1780272000.0
TOL_RAD = 0.05
NANT, NCHAN, FS, FREQ0, BW = 6, 9, 48000.0, 150e6, 40e3


@pytest.fixture(scope="module")
def sky():
    array = default_array(NANT)
    g = Geometry(nstream=2 * NANT, nchan=NCHAN, npacket=2)
    src = icrs_at_altaz(array, SYNC, 60, 120)
    sim = FEngineSimulator(array, g, sync_time=SYNC, fs_hz=FS, freq0_hz=FREQ0, chan_bw_hz=BW,
                           sources=[PointSource.from_skycoord(src, amplitude=1.0)],
                           noise_sigma=0.01, gain=16.0, seed=5)
    nat = sim.samples(0, 4 * 480)  # [S, C, T, 2]
    x = nat.reshape(NANT, 2, NCHAN, -1, 2).transpose(0, 2, 3, 1, 4)  # [A, F, T, P, 2]
    return array, src, np.ascontiguousarray(x)


def write(path, x, array, obsbw_mhz):
    centre = (FREQ0 + BW * (NCHAN - 1) / 2) / 1e6
    cards = {"TELESCOP": "MWA", "OBSFREQ": centre, "OBSBW": obsbw_mhz, "TBIN": 1 / FS,
             "SYNCTIME": int(SYNC), **antenna_cards(array.antenna_names)}
    return write_guppi(path, [x[:, :, i:i + 480] for i in range(0, x.shape[2], 480)], cards)


def phase_errors(uv, src):
    u = uv.copy()
    u.phase(lon=src.ra.rad, lat=src.dec.rad, epoch="J2000", cat_name="src")
    cross = u.ant_1_array != u.ant_2_array
    return np.abs(np.angle(u.data_array[cross][..., :2]))  # XX, YY


@pytest.mark.parametrize("inverted", [False, True], ids=["usb", "lsb"])
def test_point_source_phases_to_zero(tmp_path, sky, inverted):
    array, src, x = sky
    arr = tmp_path / "mwa.toml"
    array.write_toml(arr)
    if inverted:  # the same sky seen through an inverted band
        rec = x[:, ::-1].copy()
        rec[..., 1] = -rec[..., 1]
        rec[rec == -128] = -127  # (no -128 in the simulator's output anyway)
        path = write(tmp_path / "lsb.raw", rec, array, -NCHAN * BW / 1e6)
    else:
        path = write(tmp_path / "usb.raw", x, array, NCHAN * BW / 1e6)
    (r,) = reprocess([path], tmp_path / "out", ReprocessOptions(array=str(arr),
                                                                integration_spectra=960),
                     progress=None)
    assert r.ok, r.error
    uv = pyuvdata.UVData.from_file(r.task.output)
    uv.check()
    freqs = FREQ0 + BW * np.arange(NCHAN)
    assert np.allclose(uv.freq_array, freqs[::-1] if inverted else freqs)
    assert np.all(np.sign(uv.channel_width) == (-1 if inverted else 1))
    raw = np.angle(uv.data_array[uv.ant_1_array != uv.ant_2_array][..., :2])
    assert np.median(np.abs(raw)) > 0.5  # unphased: the geometric phases are large
    err = phase_errors(uv, src)
    assert err.max() < TOL_RAD, err.max()
    flipped = uv.copy()
    flipped.data_array = np.conj(flipped.data_array)
    assert np.median(phase_errors(flipped, src)) > 10 * TOL_RAD
