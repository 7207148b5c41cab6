"""Shared pieces of the LWA reader tests: LSL's test files, random 4-bit samples, the samples a
reader describes (read back from its runs, frame by frame), and the UVH5 check against an
int64 correlation of given samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from xengine_block.readers.base import Recording

#: LSL's own test files (lwa-project/lsl, GPL-2.0; tests/data/lsl/README.md).
LSL_DATA = Path(__file__).resolve().parents[1] / "data" / "lsl"
#: UVH5 polarization numbers -> (pol of ant 1, pol of ant 2).
POLS = {-5: (0, 0), -6: (1, 1), -7: (0, 1), -8: (1, 0)}


def ci4_values(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random int8 in -8..7 of ``shape``."""
    return np.random.default_rng(seed).integers(-8, 8, shape, dtype=np.int8)


def recorded(rec: Recording) -> tuple[np.ndarray, np.ndarray]:
    """(x int8 ``[stand, chan, spectrum, pol, 2]``, present bool ``[chan, spectrum]``) of every
    recorded spectrum, from the reader's runs (each frame's layout read plainly)."""
    m = rec.meta
    nspec = rec.end - rec.start
    x = np.zeros((m.nant, m.nchan, nspec, 2, 2), np.int8)
    present = np.zeros((m.nchan, nspec), bool)
    for run in rec.runs:
        lay = run.layout
        data = rec.map(run.file)[run.offset:run.offset + (run.nframe - 1) * lay.frame_bytes
                                 + lay.last_byte + 1]
        nat = lay.natural(np.ascontiguousarray(data), run.nframe)  # [S, C, T, 2]
        t = run.time_tag - rec.start
        c = slice(run.chan0, run.chan0 + lay.nchan)
        x[:, c, t:t + nat.shape[2]] = nat.reshape(m.nant, 2, lay.nchan, -1, 2) \
            .transpose(0, 2, 3, 1, 4)
        present[c, t:t + nat.shape[2]] = True
    return x, present


def check_uvh5(path: Path, x: np.ndarray, present: np.ndarray, windows: list[tuple[int, int]],
               numbers: list[int], freqs: np.ndarray) -> None:
    """Every visibility of the UVH5 file ``path`` equals the int64 correlation of ``x``
    (``[stand, chan, spectrum, pol, 2]``, stand k numbered ``numbers[k]``) over the present
    spectra of each window, ``conj(x_1) x_2`` (the UVH5 convention); nsamples the present
    count, flagged where zero; frequencies exactly ``freqs``."""
    import pyuvdata

    uv = pyuvdata.UVData.from_file(path)
    uv.check()
    assert np.array_equal(uv.freq_array.ravel(), freqs), (uv.freq_array, freqs)
    assert uv.Ntimes == len(windows)
    index = {n: k for k, n in enumerate(numbers)}
    assert set(uv.telescope.antenna_numbers) >= set(numbers)
    times = np.unique(uv.time_array)
    xi = x.astype(np.int64)
    for k, (t0, t1) in enumerate(windows):
        rows = np.flatnonzero(uv.time_array == times[k])
        w = present[:, t0:t1]
        a = xi[:, :, t0:t1] * w[None, :, :, None, None]
        re, im = a[..., 0], a[..., 1]  # [stand, chan, t, pol]
        a1 = np.array([index[n] for n in uv.ant_1_array[rows]])
        a2 = np.array([index[n] for n in uv.ant_2_array[rows]])
        for pi, pol in enumerate(uv.polarization_array):
            p1, p2 = POLS[int(pol)]
            r1, i1, r2, i2 = re[a1, ..., p1], im[a1, ..., p1], re[a2, ..., p2], im[a2, ..., p2]
            want_re = np.einsum("bct,bct->bc", r1, r2) + np.einsum("bct,bct->bc", i1, i2)
            want_im = np.einsum("bct,bct->bc", r1, i2) - np.einsum("bct,bct->bc", i1, r2)
            got = uv.data_array[rows, :, pi]
            assert np.array_equal(got.real, want_re), (k, pol)
            assert np.array_equal(got.imag, want_im), (k, pol)
            n = w.sum(axis=1)
            assert np.array_equal(uv.nsample_array[rows, :, pi],
                                  np.broadcast_to((n / (t1 - t0)).astype(np.float32),
                                                  (rows.size, n.size))), k
            assert np.array_equal(uv.flag_array[rows, :, pi],
                                  np.broadcast_to(n == 0, (rows.size, n.size))), k
