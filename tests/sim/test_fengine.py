"""F-engine simulator: the sign convention of docs/design.md, "Sign and conjugation",
determinism, quantisation."""

from __future__ import annotations

import numpy as np
import pytest

from xengine_block.array import default_array
from xengine_block.frames import frames_to_natural, natural_to_frames, to_complex
from xengine_block.geometry import Geometry
from xengine_block.sim.fengine import C_LIGHT, FEngineSimulator, PointSource, offline_astropy

SYNC = 1.8e9  # 2027-01-15
FS = 48000.0


def make_sim(nant=8, nchan=9, **kw) -> FEngineSimulator:
    arr = default_array(nant)
    g = Geometry(nstream=arr.nstream, nchan=nchan, npacket=2)
    kw.setdefault("freq0_hz", 150e6)
    kw.setdefault("chan_bw_hz", 1e6)
    return FEngineSimulator(arr, g, sync_time=SYNC, fs_hz=FS, **kw)


def test_point_source_phase_is_2pi_f_tau1_minus_tau2():
    alt, az = 35.0, 70.0
    sim = make_sim(sources=[PointSource.altaz(alt, az, amplitude=4.0)], noise_sigma=0.3,
                   gain=4.0, seed=3)
    x = to_complex(sim.samples(0, 8 * 480))  # [S, C, n]
    xx = x[0::2]  # X pol of every antenna
    vis = np.einsum("acn,bcn->abc", xx.conj(), xx) / x.shape[2]  # <conj(x_a) x_b>
    # The expected delays, straight from docs/design.md, "Sign and conjugation" (not from
    # the simulator's code).
    s = np.array([np.cos(np.radians(alt)) * np.sin(np.radians(az)),
                  np.cos(np.radians(alt)) * np.cos(np.radians(az)), np.sin(np.radians(alt))])
    tau = -(sim.array.enu_m @ s) / C_LIGHT
    f = sim.freqs_hz
    expected = 2 * np.pi * f[None, None, :] * (tau[:, None, None] - tau[None, :, None])
    assert np.ptp(expected) > 20  # the test spans many turns of phase
    resid = np.angle(vis * np.exp(-1j * expected))
    assert np.abs(resid).max() < 0.05
    # The opposite convention (x_a conj(x_b)) is far off: the test can fail.
    wrong = np.angle(vis.conj() * np.exp(-1j * expected))
    off = ~np.eye(len(tau), dtype=bool)
    assert np.median(np.abs(wrong[off])) > 0.5


def test_nearer_antenna_hears_source_first():
    sim = make_sim(nant=4, sources=[PointSource.altaz(10.0, 90.0)])  # low in the east
    tau = sim.delays(SYNC)[:, 0]
    east = sim.array.enu_m[:, 0]
    assert np.argmin(tau) == np.argmax(east)


def test_celestial_source_at_zenith():
    offline_astropy()
    from astropy import units as u
    from astropy.time import Time
    sim = make_sim(nant=2)
    lst = Time(SYNC, format="unix").sidereal_time("apparent", sim.array.longitude_deg * u.deg)
    src = PointSource.radec(lst.deg, sim.array.latitude_deg)
    enu = FEngineSimulator(sim.array, sim.geometry, sync_time=SYNC, fs_hz=FS, freq0_hz=1e8,
                           chan_bw_hz=1e6, sources=[src]).source_enu(SYNC)[0]
    assert enu[2] > np.cos(np.radians(1.0))  # within 1 deg (precession since J2000 etc.)


def test_deterministic_and_split_invariant():
    src = [PointSource.radec(30.0, -20.0, 2.0)]
    a = make_sim(sources=src, seed=5).samples(960, 4 * 480)
    b = make_sim(sources=src, seed=5)
    split = np.concatenate([b.samples(960, 480), b.samples(1440, 3 * 480)], axis=2)
    assert np.array_equal(a, split)
    assert not np.array_equal(a, make_sim(sources=src, seed=6).samples(960, 4 * 480))
    frames = b.frames(960, 4)
    assert np.array_equal(frames, natural_to_frames(a, b.geometry))


@pytest.mark.parametrize("bits", [8, 4], ids=["ci8", "ci4"])
def test_quantiser_clips_to_the_sample_range_both_edges(bits):
    """ci8: -128..127 (-128 included); ci4: -8..7; the frames hold the same samples."""
    if bits == 8:
        sim = make_sim(gain=200.0)
    else:
        g = Geometry(nstream=4, nchan=9, npacket=1, sample_bits=4)
        sim = FEngineSimulator(default_array(2), g, sync_time=1.78e9, fs_hz=40e3,
                               freq0_hz=150e6, chan_bw_hz=40e3, noise_sigma=4.0, seed=5)
    x = sim.samples(0, 480)
    lo, hi = (-128, 127) if bits == 8 else (-8, 7)
    assert x.dtype == np.int8 and x.min() == lo and x.max() == hi
    assert np.array_equal(frames_to_natural(sim.frames(0, 1), sim.geometry), x)
    if bits == 8:
        assert x.shape == (16, 9, 480, 2)
        # |gain * n| >= 127.5 clips: P = 2 (1 - Phi(127.5 / 200)) = 0.524 for Gaussian n.
        assert np.mean((x == -128) | (x == 127)) == pytest.approx(0.524, abs=0.01)


def test_noise_level_and_polarisation():
    y = make_sim(gain=10.0).samples(0, 2 * 480).astype(np.float64)
    assert y.std() == pytest.approx(10.0, rel=0.02)
    for polarised, expect in ((False, 0.0), (True, 1.0)):
        sim = make_sim(sources=[PointSource.altaz(60.0, 0.0, 3.0, polarised=polarised)],
                       noise_sigma=0.1, gain=4.0)
        x = to_complex(sim.samples(0, 4 * 480))
        xy = np.mean(x[0::2] * x[1::2].conj())  # X and Y of the same antennas
        xx = np.mean(np.abs(x[0::2]) ** 2)
        assert abs(xy) / xx == pytest.approx(expect, abs=0.05)


def test_argument_checks():
    arr = default_array(2)
    with pytest.raises(ValueError, match="streams"):
        FEngineSimulator(arr, Geometry(nstream=8, npacket=2), sync_time=0, fs_hz=1,
                         freq0_hz=1e8, chan_bw_hz=1e3)
    with pytest.raises(ValueError, match="multiples of 480"):
        make_sim().samples(100, 480)
    with pytest.raises(ValueError, match="frame"):
        PointSource("galactic", 0.0, 0.0)
