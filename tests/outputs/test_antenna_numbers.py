"""Antennas numbered other than 0..N-1 (gaps, reversed, large): UVH5 files name each baseline by the
antennas' numbers (docs/design.md, "UVH5 conventions"), in the writer, the quick-look, recordings
and reprocessing. Expected values come from the int64 reference correlation of the frames, looked up
by antenna *index* (streams 2 * index + pol), independently of the writer's baseline map."""

import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import random_frames
from xengine_block.array import ArrayDescription, default_array
from xengine_block.capture.recording import read_metadata, write_metadata
from xengine_block.capture.spead import pcap_sender
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import Geometry
from xengine_block.outputs.quicklook_png import last_integration, quicklook_uvh5
from xengine_block.outputs.site import site_info
from xengine_block.outputs.uvh5 import UVH5Writer
from xengine_block.reference import reference_full, reference_triangle
from xengine_block.reprocess.jobs import ReprocessOptions, reprocess
from xengine_block.sim.fengine import FEngineSimulator, PointSource

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads the files")

NUMBERINGS = {
    "gaps": [3, 7, 10, 42, 43],
    "reversed": [4, 3, 2, 1, 0],
    "large": [1000, 1003, 65535, 1001, 2047],  # large and out of order
}
POLS = [(-5, 0, 0), (-6, 1, 1), (-7, 0, 1), (-8, 1, 0)]
SKY = {"sync_time": 1780272000.0, "fs_hz": 40e3, "freq0_hz": 150e6, "chan_bw_hz": 40e3}


def numbered_array(numbers: list[int]) -> ArrayDescription:
    """The first len(numbers) MWA tiles (names Tile001...) numbered ``numbers`` in order."""
    a = default_array(len(numbers))
    return ArrayDescription(a.telescope_name, a.latitude_deg, a.longitude_deg, a.altitude_m,
                            a.antenna_names, numbers, a.enu_m, instrument=a.instrument)


def strict_read(path: Path):
    """pyuvdata reads the file and its strict uvw / antenna-position check passes, warning-free
    (a mislabelled baseline warns of a uvw mismatch)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uv = pyuvdata.UVData.from_file(path)
        uv.check(strict_uvw_antpos_check=True)
    return uv


def assert_named_baselines(uv, array: ArrayDescription, k: np.ndarray, dump: int = 0) -> None:
    """For every pair of antenna numbers (both orders) and polarisation: the file's data equal
    sum conj(x[a1, p1]) x[a2, p2] = K[s2, s1] of the antennas with those numbers; uvw is
    position(a2) - position(a1)."""
    idx = {n: i for i, n in enumerate(array.antenna_numbers)}
    for n1 in array.antenna_numbers:
        for n2 in array.antenna_numbers:
            i1, i2 = idx[n1], idx[n2]
            for pol, p1, p2 in POLS:
                s1, s2 = 2 * i1 + p1, 2 * i2 + p2
                got = uv.get_data(n1, n2, pol)[dump]
                assert np.array_equal(got, k[:, s2, s1]), (n1, n2, pol)
            lo, hi = min(n1, n2), max(n1, n2)
            uvw = uv.uvw_array[(uv.ant_1_array == lo) & (uv.ant_2_array == hi)][dump]
            sign = 1 if n1 <= n2 else -1
            assert np.allclose(sign * uvw, array.enu_m[i2] - array.enu_m[i1], atol=1e-6)


@pytest.mark.parametrize("kind", sorted(NUMBERINGS))
def test_writer_names_baselines_by_antenna_number(tmp_path, kind):
    array = numbered_array(NUMBERINGS[kind])
    g = Geometry(nstream=array.nstream, nchan=9, npacket=2)
    x = frames_to_natural(random_frames(g, 2, seed=7), g)
    re, im = reference_full(x)
    path = tmp_path / "out.uvh5"
    with UVH5Writer(path, site_info(array), 1e8 + 1e4 * np.arange(9), 1e4, 960) as w:
        w.append(reference_triangle(x), np.full((1, g.nbaseline), 960), 960, 1.8e9, 1.0)
    uv = strict_read(path)
    assert sorted(uv.get_antpairs()) == sorted(
        (a, b) for a in array.antenna_numbers for b in array.antenna_numbers if a <= b)
    assert np.all(uv.ant_1_array <= uv.ant_2_array)
    assert_named_baselines(uv, array, re + 1j * im)

    # the quick-look finds baselines by number and labels them by name
    freq, spectra, matrix, _ = last_integration(path)
    c = 9 // 2
    xx = (re + 1j * im)[c, ::2, ::2]  # K[2 i, 2 j] of antenna indices i, j
    assert np.array_equal(matrix, xx.T)  # matrix[i, j] = conj(x_i) x_j = K[2j, 2i]
    for label, v in spectra.items():
        names = label.removeprefix("auto ").split(" ")[0].split("-")
        i1 = array.antenna_names.index(names[0])
        i2 = array.antenna_names.index(names[-1])
        assert np.array_equal(v, (re + 1j * im)[:, 2 * i2, 2 * i1]), label
    assert quicklook_uvh5(path).stat().st_size > 0


def test_sidecar_keeps_numbers_and_reprocess_round_trip(tmp_path):
    """Recording sidecar -> capture header -> UVH5: the numbers travel with the data."""
    array = numbered_array([1000, 7, 42, 3])  # large, gaps, not in order
    g = Geometry(nstream=array.nstream, nchan=9, npacket=4)
    sim = FEngineSimulator(array, g, **SKY, sources=[PointSource.altaz(70, 30, 1.0)], seed=2)
    frames = sim.frames(0, 8)
    pcap = tmp_path / "rec.pcap"
    write_metadata(pcap, array, g, **SKY)
    with pcap_sender(g, pcap) as s:
        s.send_frames(frames, 0)
    assert read_metadata(pcap).array.antenna_numbers == (1000, 7, 42, 3)

    [result] = reprocess([pcap], tmp_path / "out", ReprocessOptions(ninteg=1), progress=None)
    assert result.ok, result.error
    uv = strict_read(result.task.output)
    assert uv.Ntimes == 2  # 8 frames of P=4 packets
    for d in range(2):
        re, im = reference_full(frames_to_natural(frames[4 * d:4 * (d + 1)], g))
        assert_named_baselines(uv, array, re + 1j * im, dump=d)
