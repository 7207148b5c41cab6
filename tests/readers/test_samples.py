"""baseband's real sample files reprocess and equal baseband's own decode correlated in int64:
autos and crosses of the two polarisations (single-station files), every channel. baseband
decodes to complex64 (GUPPI, DADA 8-bit: the integers themselves; VDIF 4-bit: (v - 8) / 2.95,
undone here); our readers never decode."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.recordings import check_file
from tests.helpers.samples import as_x, one_antenna_array
from xengine_block.readers import detect_format
from xengine_block.reprocess.jobs import ReprocessOptions, reprocess

baseband = pytest.importorskip("baseband", reason="baseband (test extra) has the sample files")
pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads the outputs")
from baseband import data as bdata  # noqa: E402


def puppi_decode(fh) -> np.ndarray:
    """baseband's stream, frame by frame: each frame's spectra without its overlap, the last
    frame's with it (what ``GUPPIStreamReader`` defines: ``samples_per_frame`` excludes the
    overlap, ``_get_frame`` appends the last one). One ``read()`` across frames does not give
    that: ``StreamReaderBase.read`` copies ``len(frame)`` samples, overlap included, and then
    skips the next frame's first OVERLAP (baseband 4.3 base/base.py); the two agree only where
    the overlap repeats the next block, which the sample's blocks do not."""
    n, total = fh.samples_per_frame, fh.shape[0]
    nframe = total // n  # the last frame's overlap makes the remainder
    parts = []
    for k in range(nframe):
        fh.seek(k * n)
        parts.append(fh.read(n if k + 1 < nframe else total - k * n))
    return np.concatenate(parts)


def test_arecibo_puppi_sample_with_overlap(tmp_path):
    """4 blocks of 1024 spectra with OVERLAP 64: 3 x 960 + 1024 = 3904 spectra, as baseband."""
    from baseband import guppi

    assert detect_format(bdata.SAMPLE_PUPPI) == "guppi"
    with guppi.open(bdata.SAMPLE_PUPPI, "rs") as fh:
        z = puppi_decode(fh)
        hdr = fh.header0
        fh.seek(0)
        bulk = fh.read()
    assert z.shape == bulk.shape == (3904, 2, 4)
    assert not np.array_equal(z, bulk)  # baseband's bulk read differs (docstring)
    assert np.array_equal(z[:960], bulk[:960]) and np.array_equal(z[-960:], bulk[-960:])
    arr = one_antenna_array(tmp_path, "Arecibo", "Arecibo")
    (r,) = reprocess([bdata.SAMPLE_PUPPI], tmp_path / "out", ReprocessOptions(
        array=str(arr), integration_spectra=976), progress=None)  # windows cut blocks
    assert r.ok, r.error
    bw = float(hdr["OBSBW"]) * 1e6 / 4
    freqs = float(hdr["OBSFREQ"]) * 1e6 - 2 * bw + bw / 2 + bw * np.arange(4)
    check_file(r.task.output, as_x(z), [(k * 976, (k + 1) * 976) for k in range(4)],
               {"Arecibo": 0}, ["Arecibo"], freqs=freqs)
    uv = pyuvdata.UVData.from_file(r.task.output)
    start = hdr.time.unix  # STT_* + PKTIDX * PKTSIZE * 8 / bits per spectrum
    jd = (start + (np.arange(4) * 976 + 488) / 250.0) / 86400 + 2440587.5
    assert np.allclose(np.unique(uv.time_array), jd, rtol=0, atol=1e-8)
