"""Physics end to end: one point source through simulator -> X-engine -> integration -> UVH5.

Phasing the file to the source with pyuvdata must leave the cross-correlation phases near zero;
the same data with the conjugation flipped must not. Tolerance: 0.05 rad. The source has SNR
~100 per sample over ~2000 spectra, so thermal phase noise is ~1e-3 rad; quantisation (gain 16)
and direction approximations (the simulator holds the direction for one packet, 10 ms;
pyuvdata's apparent coordinates vs astropy's AltAz differ by ~arcsec, i.e. ~1e-3 rad on these
<= 300 m baselines at 150 MHz) stay well below it, while a flipped conjugation gives errors of
order the geometric phase itself (radians).
"""

import numpy as np
import pytest

from tests.helpers.chain import run_chain_with_header
from xengine_block.array import default_array
from xengine_block.geometry import Geometry
from xengine_block.sim.fengine import FEngineSimulator, PointSource, icrs_at_altaz

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) phases the data")

SYNC = 1780272000.0  # 2026-06-01T00:00:00Z: inside astropy's bundled IERS tables
TOL_RAD = 0.05


def test_point_source_phases_to_zero(tmp_path):
    nant = 8
    array = default_array(nant)
    g = Geometry(nstream=2 * nant, nchan=9, npacket=2)
    fs, freq0, bw = 48000.0, 150e6, 40e3
    src = icrs_at_altaz(array, SYNC, 60, 120)  # altitude 60, azimuth 120: big phases
    sim = FEngineSimulator(array, g, sync_time=SYNC, fs_hz=fs, freq0_hz=freq0, chan_bw_hz=bw,
                           sources=[PointSource.from_skycoord(src, amplitude=1.0)],
                           noise_sigma=0.01, gain=16.0, seed=5)
    frames = sim.frames(0, 4)
    mask = np.ones((4, g.nstream), np.uint8)
    w = run_chain_with_header(tmp_path, g, frames, mask, ninteg=2, array=array, sync_time=SYNC,
                              fs_hz=fs, freq0_hz=freq0, chan_bw_hz=bw)
    uv = pyuvdata.UVData.from_file(w.files[0])
    uv.check()
    cross = uv.ant_1_array != uv.ant_2_array
    raw = np.angle(uv.data_array[cross][..., :2])
    assert np.median(np.abs(raw)) > 0.5  # unphased: the geometric phases are large

    def phased_error(u):
        u.phase(lon=src.ra.rad, lat=src.dec.rad, epoch="J2000", cat_name="src")
        x = u.ant_1_array != u.ant_2_array
        return np.abs(np.angle(u.data_array[x][..., :2]))  # XX, YY

    err = phased_error(uv.copy())
    print(f"max phase after phasing {err.max():.4f} rad, raw median {np.median(np.abs(raw)):.2f}")
    assert err.max() < TOL_RAD, err.max()
    flipped = uv.copy()
    flipped.data_array = np.conj(flipped.data_array)
    assert np.median(phased_error(flipped)) > 10 * TOL_RAD
