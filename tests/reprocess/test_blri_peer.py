"""BLRI (COSMIC's correlator of multi-antenna GUPPI RAW into UVH5) as the peer: files written
by its ``blri_input_gen`` with its telinfo YAML reprocess exactly (against the samples as the
``guppi`` library reads them: an independent reader), and BLRI's visibilities are the
conjugate of ours, value for value (``x[a1] conj(x[a2])``, BLRI src/blri/dsp.py
``correlate``); with ``--invert-correlation-conjugation`` its cross-antenna baselines equal
ours (the flag leaves its autocorrelations, cross-pol ones included, as ``x conj(x)``).

Needs BLRI (MydonSolutions/BLRI, which ``.ci/run`` installs; a benchmark and test peer, never a
runtime dependency): skipped with the reason where it is not installed.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.conftest import blri_or_skip
from tests.helpers.recordings import POLS, check_file
from xengine_block.reprocess.jobs import ReprocessOptions, reprocess

blri_or_skip()
pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads the outputs")

SHAPE = (5, 8, 64, 2)  # A, F, T, P per block
NBLOCK = 3


@pytest.fixture(scope="module")
def blri_file(tmp_path_factory):
    import subprocess

    d = tmp_path_factory.mktemp("blri")
    stem = d / "gen"
    code = ("import sys; from blri.entrypoints.guppi_generation import input_gen; "
            "sys.argv = ['blri_input_gen'] + sys.argv[1:]; input_gen()")
    subprocess.run([sys.executable, "-c", code, "-D", *map(str, SHAPE), "-N", str(NBLOCK),
                    "--output-filepath", str(stem)], check=True, cwd=d)
    return d, d / "gen.0000.raw", d / "gen.telinfo.yaml"


def guppi_library_samples(path):
    """The file's samples as BLRI's own reader (MydonSolutions/guppi) gives them:
    ``[A, F, T, P, 2]`` int8."""
    from guppi import GuppiRawHandler

    blocks = [b for _, b in GuppiRawHandler(str(path)).blocks(astype=np.int8)]
    return np.concatenate([np.stack([b["re"], b["im"]], -1) for b in blocks], axis=2)


def run_blri(d, raw, telinfo, name, *extra):
    from blri.entrypoints.correlate import correlate_cli

    out = d / name
    correlate_cli(["-t", str(telinfo), "-u", "1", "-i", "64", "--output-filepath", str(out),
                   *extra, str(raw)])
    return pyuvdata.UVData.from_file(out, run_check=False, fix_old_proj=False)


@pytest.mark.filterwarnings("ignore:This data appears to have been phased-up")
def test_blri_generated_file_is_exact_and_blri_is_our_conjugate(blri_file, tmp_path):
    d, raw, telinfo = blri_file
    (r,) = reprocess([raw], tmp_path / "out", ReprocessOptions(
        array=str(telinfo), integration_spectra=64), progress=None)
    assert r.ok, r.error
    x = guppi_library_samples(raw)
    assert x.shape == (SHAPE[0], SHAPE[1], SHAPE[2] * NBLOCK, 2, 2)
    names = [f"ant{i:03d}" for i in range(SHAPE[0])]
    check_file(r.task.output, x, [(k * 64, (k + 1) * 64) for k in range(NBLOCK)],
               {n: i for i, n in enumerate(names)}, names)
    ours = pyuvdata.UVData.from_file(r.task.output)
    blri = run_blri(d, raw, telinfo, "blri.uvh5")
    flipped = run_blri(d, raw, telinfo, "blri_flip.uvh5", "--invert-correlation-conjugation")
    assert np.allclose(ours.freq_array, blri.freq_array, rtol=0, atol=1e-3)
    assert np.allclose(np.unique(ours.time_array), np.unique(blri.time_array), rtol=0,
                       atol=1e-9)
    assert np.allclose(ours.telescope.antenna_positions, blri.telescope.antenna_positions,
                       rtol=0, atol=1e-6)
    for a1 in range(SHAPE[0]):
        for a2 in range(a1, SHAPE[0]):
            for pol in POLS:
                mine = ours.get_data(a1, a2, pol)
                assert np.array_equal(mine, np.conj(blri.get_data(a1, a2, pol))), (a1, a2, pol)
                # the flag flips crosses only: BLRI's autos stay x conj(x) (dsp.correlate)
                other = flipped.get_data(a1, a2, pol)
                assert np.array_equal(mine, other if a1 != a2 else np.conj(other)), (a1, a2)
                if a1 != a2 or pol in ("xy", "yx"):  # a conjugation that matters: must differ
                    assert not np.array_equal(mine, blri.get_data(a1, a2, pol))
